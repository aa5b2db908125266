"""The one hook for starting services at the end of `Sandbox.up()`.

`Sandbox.up(services=None)` runs, in order, every callable in DEFAULT_SERVICES once
the network is ready (chassis registered, tunnels warm).  Each callable receives
the sandbox and should start its daemon with `sandbox.spawn(tag, argv, netns=...)`
(so `down()` stops it) and wait until it answers.  The default stack, in
order: the real Kubernetes control plane (pacific.sandbox.k8s), deploy/'s
ServiceAccounts and RBAC, with kubelets a cluster DNS, a containerd and a real
kubelet per node (or, with `Sandbox(kubelet=False)`, a pod runner that registers
the Node as a kubelet would), with --central-pods OVN central as pods, two
leader-elected controller replicas, one pacific-node per node.
Every starter is idempotent: a daemon that already runs is left alone.

Tests that want the bare network pass `services=()`.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from pacific import names

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox


def kube_control_plane(sb: "Sandbox") -> None:
    """etcd, kube-apiserver, kube-controller-manager, kube-scheduler (all idempotent)."""
    from pacific.sandbox.k8s import sandbox as k8s
    k8s.control_plane(sb)


def pacific_credentials(sb: "Sandbox") -> None:
    """deploy/'s ServiceAccounts and RBAC; kubeconfigs with their tokens."""
    from pacific.sandbox.k8s import sandbox as k8s
    k8s.credentials(sb)


def pod_runners(sb: "Sandbox") -> None:
    """One pod runner per node (registers the Node, as its kubelet would), or, in a
    sandbox with kubelets, a containerd and a kubelet per node."""
    if sb.kubelet:
        from pacific.sandbox.k8s import kubelet
        kubelet.start_all(sb)
        return
    from pacific.sandbox.k8s import sandbox as k8s
    k8s.pod_runners(sb)


def cluster_dns(sb: "Sandbox") -> None:
    """With kubelets: the cluster DNS their pods ask (pacific.sandbox.k8s.clusterdns)."""
    if sb.kubelet:
        from pacific.sandbox.k8s import clusterdns
        clusterdns.start(sb)


def ovn_central(sb: "Sandbox") -> None:
    """With --central-pods: OVN central from deploy/central.yaml on the first
    nodes, then every node's ovn-controller (pacific.sandbox.k8s.central); with
    --ovs-pods, Open vSwitch and ovn-controller from deploy/vswitch.yaml."""
    if sb.central_pods:
        from pacific.sandbox.k8s import central
        central.start(sb)


def controllers(sb: "Sandbox") -> None:
    if sb.deploy:          # deploy/'s Deployment runs them (node_daemons applies it)
        return
    from pacific.sandbox import controllers as controller_launch
    controller_launch.service(sb)


def node_daemons(sb: "Sandbox") -> None:
    if sb.deploy:          # Pacific from its image and deploy/, under the kubelets
        from pacific.sandbox.k8s import deploy
        deploy.start(sb)
        if sb.ovs_pods:    # chassis from pacific-node's settings, then the sandbox's tunnels
            from pacific.sandbox import bringup
            bringup.wait_ready(sb, 120)
            bringup.warm_tunnels(sb, 60)
        return
    from pacific.sandbox import nodedaemons as node_launch
    kubeconfig = os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_UNDERLAY)
    missing = [n for n in sb.nodes if sb.daemon_pid(node_launch.tag(n)) is None]
    for n in missing:
        node_launch.start(sb, n, kubeconfig, wait=False)
    for n in missing:
        node_launch.wait_ready(sb, n)
    if sb.kubelet:          # the kubelets report Ready once they see Pacific's conflist
        from pacific.sandbox.k8s import kubelet
        kubelet.wait_ready(sb)


DEFAULT_SERVICES: list[Callable[["Sandbox"], None]] = [
    kube_control_plane, pacific_credentials, cluster_dns, pod_runners, ovn_central, controllers,
    node_daemons]
