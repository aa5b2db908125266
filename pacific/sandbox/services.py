"""The one hook for starting services at the end of `Sandbox.up()`.

`Sandbox.up(services=None)` runs, in order, every callable in DEFAULT_SERVICES once
the network is ready (chassis registered, tunnels warm).  Each callable receives
the sandbox and should start its daemon with `sandbox.spawn(tag, argv, netns=...)`
(so `down()` stops it) and wait until it answers.  The default stack, in
order: the Kubernetes API emulator, the Node objects (what kubelets would
register), two leader-elected controller replicas, one pacific-node per node.
Every starter is idempotent: a daemon that already runs is left alone.

Tests that want the bare network pass `services=()`.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from pacific import names

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox


def apiserver(sb: "Sandbox") -> None:
    from pacific.sandbox.apiserver import sandbox as api_launch
    if sb.daemon_pid(names.SANDBOX_APISERVER_TAG) is None:
        api_launch.start_for_sandbox(sb)


def register_nodes(sb: "Sandbox") -> None:
    """Create a Node object per sandbox node and report it Ready, as its kubelet would."""
    import time

    from pacific.kube import client, errors
    from pacific.kube import resources as r
    from pacific.sandbox.apiserver import kubeconfig_path
    api = client.load(kubeconfig_path(sb))
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for n in sb.nodes:
        try:
            r.create(api, r.NODES, {"metadata": {
                "name": n.name, "labels": {"kubernetes.io/hostname": n.name,
                                           "kubernetes.io/os": "linux"}}})
        except errors.AlreadyExists:
            pass
        r.patch_merge(api, r.NODES, n.name, {"status": {
            "addresses": [{"type": "InternalIP", "address": n.underlay_ip},
                          {"type": "Hostname", "address": n.name}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "sandbox node is up", "lastHeartbeatTime": now,
                            "lastTransitionTime": now}],
            "nodeInfo": {"kubeletVersion": "v1.32.0-pacific-sandbox", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "pacific-sandbox"}}},
            subresource="status")


def controllers(sb: "Sandbox") -> None:
    from pacific.sandbox import controllers as controller_launch
    controller_launch.service(sb)


def node_daemons(sb: "Sandbox") -> None:
    from pacific.sandbox import nodedaemons as node_launch
    kubeconfig = os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_UNDERLAY)
    missing = [n for n in sb.nodes if sb.daemon_pid(node_launch.tag(n)) is None]
    for n in missing:
        node_launch.start(sb, n, kubeconfig, wait=False)
    for n in missing:
        node_launch.wait_ready(sb, n)


DEFAULT_SERVICES: list[Callable[["Sandbox"], None]] = [
    apiserver, register_nodes, controllers, node_daemons]
