"""The real Kubernetes control plane and pod runners of a `Sandbox`.

    from pacific.sandbox.k8s import sandbox as k8s
    k8s.control_plane(sb)        # etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
                                 # the forwarder for node namespaces, <sb.dir>/kubeconfig
    k8s.credentials(sb)          # deploy/'s ServiceAccounts and RBAC applied; kubeconfigs with
                                 # their tokens for pacific-controller and pacific-node
    k8s.pod_runners(sb)          # one per node: registers the Node, runs its pods

Files in the sandbox directory:
  kubeconfig             admin (system:masters), https://127.0.0.1:<port>, root namespace;
                         context `pacific-sandbox-underlay` for the underlay URL
  kubeconfig-controller  ServiceAccount pacific-system/pacific-controller, root namespace
  kubeconfig-underlay    ServiceAccount pacific-system/pacific-node, https://<central>:6443
                         (reachable from the node namespaces through the forwarder)
"""
from __future__ import annotations

import base64
import glob
import logging
import os
import sys
import time
from typing import TYPE_CHECKING

import yaml

from pacific import names
from pacific.sandbox import controllers
from pacific.sandbox.k8s import bins
from pacific.sandbox.k8s.controlplane import ControlPlane, ControlPlaneError
from pacific.sandbox.k8s.kubeconfig import write_kubeconfig

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox

log = logging.getLogger(__name__)
DEPLOY_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "deploy"))
# what `credentials` applies of deploy/: identities and permissions (the workloads,
# Deployment and DaemonSet, run as sandbox processes until the kubelet issue)
APPLIED_KINDS = ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                 "RoleBinding", "ConfigMap")


class SandboxSpawner:
    def __init__(self, sb: "Sandbox"):
        self.sb = sb

    def spawn(self, tag, argv):
        return self.sb.spawn(tag, argv)

    def stop(self, tag):
        return self.sb.stop(tag)

    def running(self, tag):
        return self.sb.daemon_pid(tag) is not None

    def log_path(self, tag):
        return os.path.join(self.sb.dir, "services", f"{tag}.log")


EGRESS_TAG = "kube-egress"


def egress_socket(sb: "Sandbox") -> str:
    return os.path.join(sb.dir, "kube", "egress.sock")


def plane(sb: "Sandbox") -> ControlPlane:
    extra = []
    if sb.kubelet:       # the API server reaches the kubelets through pacific.sandbox.k8s.egress
        extra = [f"--egress-selector-config-file={os.path.join(sb.dir, 'kube', 'egress.yaml')}"]
    hosts = [sb.central_ip]
    if sb.deploy:        # in-cluster clients (Pacific's pods) know the API as the Service
        import ipaddress
        hosts.append(str(ipaddress.ip_network(names.SERVICE_CIDR)[1]))
    # --dual-stack: pods' status keeps both families (status.podIPs)
    # and Services get a cluster IP of each family
    gates = bins.gates_flag(bins.dual_stack_gates()) if getattr(sb, "dual_stack", False) else []
    return ControlPlane(os.path.join(sb.dir, "kube"), SandboxSpawner(sb),
                        nodes=[n.name for n in sb.nodes], server_hosts=hosts,
                        apiserver_args=extra + gates, kcm_args=gates,
                        service_cidr=",".join(controllers.service_cidrs(sb)))


def _egress(sb: "Sandbox") -> None:
    from pacific.sandbox.k8s import egress
    path = os.path.join(sb.dir, "kube", "egress.yaml")
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "w") as f:
        f.write(egress.config_yaml(egress_socket(sb)))
    if sb.daemon_pid(EGRESS_TAG) is None:
        sb.spawn(EGRESS_TAG, [sys.executable, "-m", "pacific.sandbox.k8s.egress",
                              "--socket", egress_socket(sb),
                              "--allow", names.SANDBOX_UNDERLAY_CIDR,
                              # the kubelets' IPv6 InternalIP (an --ipv6-only sandbox's only one)
                              *(["--allow", names.SANDBOX_UNDERLAY_CIDR6] if sb.dual_stack else []),
                              # pods and Services (pods/proxy), from node1 as an API
                              # server on a node reaches them
                              "--pods-via", sb.nodes[0].netns, "--pod-net", "10.0.0.0/8",
                              "--pod-net", "100.64.0.0/10"],
                 netns=sb.central_netns, grace=0.3)


def kubeconfig_path(sb: "Sandbox") -> str:
    return os.path.join(sb.dir, names.SANDBOX_KUBECONFIG)


def underlay_url(sb: "Sandbox") -> str:
    return f"https://{sb.central_ip}:{names.KUBE_API_PORT}"


def control_plane(sb: "Sandbox") -> ControlPlane:
    if sb.kubelet:
        _egress(sb)
    cp = plane(sb).start()
    # the central address of each family the cluster has (an IPv6-only
    # cluster's `kubernetes` Service can only have an IPv6 endpoint)
    for tag, ip in ((names.SANDBOX_FORWARD_TAG, sb.central_ip),
                    (names.SANDBOX_FORWARD_TAG + "-6", sb.central_ip6 if sb.ipv6_only else "")):
        if ip and sb.daemon_pid(tag) is None:
            sb.spawn(tag, [sys.executable, "-m", "pacific.sandbox.k8s.forward",
                           "--netns", sb.central_netns,
                           "--listen", f"[{ip}]:{names.KUBE_API_PORT}",
                           "--to", f"127.0.0.1:{cp.ports['apiserver']}"], grace=0.3)
    write_kubeconfig(kubeconfig_path(sb), cp.url, cp.tokens["admin"], cp.pki.ca_crt,
                     extra={"pacific-sandbox-underlay": underlay_url(sb)})
    return cp


def apply_deploy(api, deploy_dir: str = DEPLOY_DIR, kinds=APPLIED_KINDS) -> list[str]:
    """Create or update the objects of `kinds` in deploy/*.yaml; returns 'Kind/name's."""
    from pacific.kube import errors
    from pacific.kube import resources as r
    done, docs = [], []
    for path in sorted(glob.glob(os.path.join(deploy_dir, "*.yaml"))):
        with open(path) as f:
            docs += [d for d in yaml.safe_load_all(f) if d and d.get("kind") in kinds]
    for doc in sorted(docs, key=lambda d: d["kind"] != "Namespace"):
        res = r.for_kind(doc["apiVersion"], doc["kind"])
        ns = doc["metadata"].get("namespace") if res.namespaced else None
        try:
            r.create(api, res, doc, namespace=ns)
        except errors.AlreadyExists:
            cur = r.get(api, res, doc["metadata"]["name"], ns)
            doc["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
            r.replace(api, res, doc, namespace=ns)
        done.append(f"{doc['kind']}/{doc['metadata']['name']}")
    return done


def service_account_token(api, namespace: str, name: str, timeout: float = 60.0) -> str:
    """The token of a ServiceAccount (the Secret kube-controller-manager makes for it)."""
    from pacific.kube import resources as r
    deadline = time.monotonic() + timeout
    while True:
        sa = r.get(api, r.SERVICEACCOUNTS, name, namespace) or {}
        for ref in sa.get("secrets") or []:
            sec = r.get(api, r.SECRETS, ref["name"], namespace) or {}
            tok = (sec.get("data") or {}).get("token")
            if tok:
                return base64.b64decode(tok).decode()
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"no token for ServiceAccount {namespace}/{name} after "
                                    f"{timeout:.0f} s (is kube-controller-manager running?)")
        time.sleep(0.1)


def credentials(sb: "Sandbox") -> None:
    from pacific.kube import client
    cp = plane(sb)
    api = client.load(kubeconfig_path(sb))
    apply_deploy(api)
    ns = names.PACIFIC_NAMESPACE
    write_kubeconfig(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_CONTROLLER), cp.url,
                     service_account_token(api, ns, "pacific-controller"), cp.pki.ca_crt)
    write_kubeconfig(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_UNDERLAY), underlay_url(sb),
                     service_account_token(api, ns, "pacific-node"), cp.pki.ca_crt)


def runner_tag(node) -> str:
    return f"{node.name}-podrunner"


def pod_state_dir(sb: "Sandbox", node_name: str) -> str:
    """One node's pod records: a node's runner never reads another's (a pod
    re-created on another node under the same name is two records)."""
    return os.path.join(sb.dir, "pods", node_name)


def pod_netns_prefix(sb: "Sandbox") -> str:
    return f"{sb.netns_prefix}pod-"


def start_pod_runner(sb: "Sandbox", node) -> int:
    from pacific.sandbox import nodedaemons
    cp = plane(sb)
    p = nodedaemons.paths(node)
    return sb.spawn(runner_tag(node), [
        sys.executable, "-m", "pacific.sandbox.k8s.podrunner",
        "--kubeconfig", cp.node_kubeconfig(node.name), "--node", node.name,
        "--node-netns", node.netns, "--node-ip", node.node_ip, "--conflist", p.conflist,
        "--cni-bin-dir", p.bin_dir, "--state-dir", pod_state_dir(sb, node.name),
        "--netns-prefix", pod_netns_prefix(sb)])


def pod_runners(sb: "Sandbox", timeout: float = 30.0) -> None:
    """A pod runner per node; returns once every Node is registered."""
    from pacific.kube import client
    from pacific.kube import resources as r
    for n in sb.nodes:
        if sb.daemon_pid(runner_tag(n)) is None:
            start_pod_runner(sb, n)
    api = client.load(kubeconfig_path(sb))
    deadline = time.monotonic() + timeout
    for n in sb.nodes:
        while r.get(api, r.NODES, n.name) is None:
            if sb.daemon_pid(runner_tag(n)) is None or time.monotonic() > deadline:
                raise ControlPlaneError(f"pod runner of {n.name} did not register its Node; log "
                                        f"{os.path.join(sb.dir, 'services', runner_tag(n) + '.log')}")
            time.sleep(0.1)
