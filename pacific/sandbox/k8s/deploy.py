"""Pacific run from its own image and manifests on the sandbox's kubelet nodes
(`pacific sandbox up --deploy`).

    from pacific.sandbox.k8s import deploy
    deploy.start(sb)    # image imported on every node, deploy/ applied, all Ready

Instead of starting pacific-controller and pacific-node as sandbox processes, it
does what a cluster administrator does with `deploy/`:

- imports `make image`'s archive (`_output/pacific-image.tar`, or
  $PACIFIC_IMAGE_ARCHIVE) into every node's containerd as
  `localhost/pacific:<version>`, and points the manifests' image `pacific` at it
  (what deploy/kustomization.yaml's `images:` is for);
- fills in `pacific-config` as its comment asks: the OVN remotes (the central
  address), the userspace datapath (`netdev`), the API server's service CIDR;
- applies the controller Deployment and the node DaemonSet;
- waits until every pacific-node pod is Ready, a controller leads and every Node
  is Ready.

What a node needs on the host the manifests name by host path (/run/openvswitch,
/run/ovn, /run/pacific, /etc/cni/net.d, /opt/cni/bin): in the sandbox they are
each node's own directories, bind-mounted in the node's mount namespace
(pacific.sandbox.k8s.kubelet), so the kubelet's hostPath volumes find that node's
OVS, ovn-controller and CNI directories.  The cluster has no kube-proxy (Pacific
replaces it): as deploy/README.md asks of any such cluster, `pacific-config`
names the API server's address (`api-server-host`, `api-server-port`), which
Pacific's host-network daemons use instead of the `kubernetes` Service.  That
Service gets an Endpoints object naming the same address (the sandbox's API
server runs with no endpoint reconciler), so pods reach the API through
Pacific's load balancers as on any cluster.
"""
from __future__ import annotations

import copy
import glob
import os
import time
from typing import TYPE_CHECKING

import yaml

from pacific import names
from pacific.sandbox.proc import SandboxError

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ARCHIVE_ENV = "PACIFIC_IMAGE_ARCHIVE"
DAEMONSETS_KIND = ("apps", "v1", "daemonsets", True, "DaemonSet")


def archive() -> str:
    path = os.environ.get(ARCHIVE_ENV) or os.path.join(REPO, "_output", "pacific-image.tar")
    if not os.path.exists(path):
        raise SandboxError(f"no Pacific image at {path}: run `make image` first "
                           f"(or set ${ARCHIVE_ENV})")
    return path


def image_name() -> str:
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        for line in f:
            if line.startswith("version"):
                return f"localhost/pacific:{line.split('=')[1].strip().strip(chr(34))}"
    return "localhost/pacific:latest"


# the workloads the sandbox runs from deploy/: OVN central stays the sandbox's own
# (pacific-central's DaemonSet runs on no node here: none is labelled for it)
WORKLOADS = ("pacific-controller", "pacific-node")


def _docs(kinds) -> list[dict]:
    out = []
    for path in sorted(glob.glob(os.path.join(REPO, "deploy", "*.yaml"))):
        with open(path) as f:
            out += [d for d in yaml.safe_load_all(f) if d and d.get("kind") in kinds
                    and d["metadata"]["name"] in WORKLOADS]
    return out


def with_image(doc: dict, image: str) -> dict:
    doc = copy.deepcopy(doc)
    for c in doc["spec"]["template"]["spec"]["containers"]:
        if c["image"].split(":")[0] == "pacific":
            c["image"], c["imagePullPolicy"] = image, "IfNotPresent"
    return doc


def apply_doc(api, doc: dict) -> None:
    from pacific.kube import errors
    from pacific.kube import resources as r
    res = (r.Resource(*DAEMONSETS_KIND) if doc["kind"] == "DaemonSet"
           else r.for_kind(doc["apiVersion"], doc["kind"]))
    ns = doc["metadata"].get("namespace")
    try:
        r.create(api, res, doc, namespace=ns)
    except errors.AlreadyExists:
        cur = r.get(api, res, doc["metadata"]["name"], ns)
        doc["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        r.replace(api, res, doc, namespace=ns)


def configure(api, sb: "Sandbox") -> None:
    from pacific.kube import resources as r
    r.patch_merge(api, r.CONFIGMAPS, names.CONFIG_MAP, {"data": {
        "nb-remote": sb.nb_tcp_remote, "sb-remote": sb.sb_tcp_remote,
        "datapath-type": "netdev", "service-cidr": names.SERVICE_CIDR,
        "api-server-host": sb.central_ip, "api-server-port": str(names.KUBE_API_PORT),
        # the sandbox's own central (not --ha) speaks plain TCP: no TLS files;
        # pacific-central's pods speak TLS: deploy/config.yaml's files, made by
        # `pacific tls init` (pacific.sandbox.k8s.central)
        **({} if sb.central_pods else {"ovn-ssl-key": "", "ovn-ssl-cert": "", "ovn-ssl-ca": ""}),
        # --ovs-pods: pacific-vswitch moves the node's address from eth0 to br-phy
        "underlay-interface": "eth0" if sb.ovs_pods else "",
        "external-ip-cidrs": names.SANDBOX_EXTERNAL_IP_CIDRS,
        "egress-ip-cidrs": names.SANDBOX_EGRESS_IP_CIDRS,
        "infrastructure-ips": f"{sb.central_ip},{sb.external_ip}"}},
        namespace=names.PACIFIC_NAMESPACE)


def _kube_endpoints(api, sb: "Sandbox") -> None:
    """Endpoints of `kubernetes`: what a real API server's endpoint reconciler
    writes (the sandbox's runs without one)."""
    from pacific.kube import errors
    from pacific.kube import resources as r
    body = {"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "subsets": [{"addresses": [{"ip": sb.central_ip}],
                         "ports": [{"name": "https", "port": names.KUBE_API_PORT,
                                    "protocol": "TCP"}]}]}
    try:
        r.create(api, r.ENDPOINTS, body, namespace="default")
    except errors.AlreadyExists:
        r.replace(api, r.ENDPOINTS, {**body, "metadata": {
            **body["metadata"], "resourceVersion": r.get(api, r.ENDPOINTS, "kubernetes",
                                                         "default")["metadata"]["resourceVersion"]}},
            namespace="default")


def pod_ready(p: dict) -> bool:
    """The pod's Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (p.get("status") or {}).get("conditions") or [])


def _wait(api, sb: "Sandbox", timeout: float) -> None:
    from pacific.kube import resources as r
    from pacific.sandbox.k8s import kubelet
    deadline = time.monotonic() + timeout
    ns = names.PACIFIC_NAMESPACE
    while True:
        pods = r.list_(api, r.PODS, ns)[0]
        node_pods = [p for p in pods if p["metadata"]["name"].startswith("pacific-node-")]
        ctl = [p for p in pods if p["metadata"]["name"].startswith("pacific-controller-")]
        nodes_ready = all(kubelet.node_ready(r.get(api, r.NODES, n.name) or {})
                          for n in sb.nodes)
        if len([p for p in node_pods if pod_ready(p)]) == len(sb.nodes) and \
                any(pod_ready(p) for p in ctl) and nodes_ready:
            return
        if time.monotonic() > deadline:
            raise SandboxError(
                f"Pacific from deploy/ not ready after {timeout:.0f} s: pacific-node "
                f"{[(p['metadata']['name'], (p.get('status') or {}).get('phase')) for p in node_pods]}"
                f", controller {[(p['metadata']['name'], (p.get('status') or {}).get('phase')) for p in ctl]}"
                f", Nodes Ready {nodes_ready} (kubectl -n {ns} describe pods / logs)")
        time.sleep(0.5)


def start(sb: "Sandbox", timeout: float = 180.0) -> None:
    from pacific.kube import client
    from pacific.sandbox.k8s import kubelet
    from pacific.sandbox.k8s import sandbox as k8s
    api = client.load(k8s.kubeconfig_path(sb))
    image = image_name()
    kubelet.import_image(sb, archive(), image)
    configure(api, sb)
    _kube_endpoints(api, sb)
    for doc in _docs(("Deployment", "DaemonSet")):
        apply_doc(api, with_image(doc, image))
    _wait(api, sb, timeout)

