"""OVN central as pacific-central pods (`pacific sandbox up --central-pods`).

    from pacific.sandbox.k8s import central
    central.start(sb)      # members labelled, TLS made, DaemonSet Ready, chassis in

Instead of the sandbox's own ovsdb-servers and ovn-northd in the central
namespace, OVN central runs as an administrator installs it from deploy/:

- the first three nodes (one, with fewer than three) are labelled
  `pacific.io/role=central`;
- `pacific tls init` (the product's command) makes the CA, central's and the
  controller's certificates as Secrets and each node's as files, which are put
  where deploy/node.yaml mounts them from (the node's /etc/pacific/ovn-tls);
- deploy/central.yaml's DaemonSet runs from `make image`'s image on the
  labelled nodes, on their network (the node's namespace) with their databases
  and sockets in the node's /var/lib/pacific/central and /run/pacific/central;
- each node's ovn-controller is started in the node's host view (its
  containerd's mount namespace, where those host paths are the node's own), so
  that the TLS files pacific-node names in the Open_vSwitch SSL row are the
  node's.

The sandbox and its tools reach NB and SB through the members' unix sockets
(`Sandbox.nb_remote`), Pacific's daemons through their TLS listeners at the
nodes' addresses (`Sandbox.nb_tcp_remote`).
"""
from __future__ import annotations

import logging
import os
import shutil
from typing import TYPE_CHECKING

import yaml

from pacific import names
from pacific.sandbox import bringup, daemons, nodedaemons, ovnha
from pacific.sandbox.proc import SandboxError, wait_for

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox
    from pacific.sandbox.node import SandboxNode

log = logging.getLogger(__name__)

WORKLOAD = "pacific-central"
VSWITCH = "pacific-vswitch"          # deploy/vswitch.yaml's, with --ovs-pods
DB_DIR = nodedaemons.CENTRAL_DB_DIR       # deploy/central.yaml's host paths
RUN_DIR = "/run/pacific/central"


def members(sb: "Sandbox") -> list["SandboxNode"]:
    """The nodes labelled for central: three, or one in a sandbox of fewer nodes."""
    return sb.nodes[:3] if len(sb.nodes) >= 3 else sb.nodes[:1]


def host_dirs(node: "SandboxNode") -> dict[str, str]:
    """deploy/central.yaml's host paths -> this node's directories, as the node's
    kubelet binds them (nodedaemons.deploy_host_dirs): the sockets' lies in the
    node's /run/pacific."""
    binds = nodedaemons.deploy_host_dirs(node)
    return {DB_DIR: binds[DB_DIR],
            RUN_DIR: os.path.join(binds[os.path.dirname(RUN_DIR)], os.path.basename(RUN_DIR))}


def socket(node: "SandboxNode", db: str) -> str:
    return os.path.join(host_dirs(node)[RUN_DIR], f"{db}.sock")


def ctl(node: "SandboxNode", db: str) -> str:
    return os.path.join(host_dirs(node)[RUN_DIR], f"{db}.ctl")


def db_file(node: "SandboxNode", db: str) -> str:
    return os.path.join(host_dirs(node)[DB_DIR], f"{db}.db")


def remotes(sb: "Sandbox") -> dict[str, str]:
    """nb_remote, sb_remote (unix, for the sandbox's tools), nb_tcp_remote,
    sb_tcp_remote (TLS, for Pacific and ovn-controller)."""
    ms = members(sb)
    ports = {"nb": names.OVN_NB_PORT, "sb": names.OVN_SB_PORT}
    out = {}
    for db in ("nb", "sb"):
        out[f"{db}_remote"] = ",".join(f"unix:{socket(n, db)}" for n in ms)
        out[f"{db}_tcp_remote"] = ",".join(f"ssl:{n.underlay_ip}:{ports[db]}" for n in ms)
    return out


def tls_files(node: "SandboxNode") -> dict[str, str]:
    """The node's own TLS files, where the node's host keeps them
    (names.OVN_TLS_DIR) as seen from outside its mount namespace."""
    d = os.path.join(node.rundir, "ovn-tls")
    return {k: os.path.join(d, k) for k in ("tls.key", "tls.crt", "ca.crt")}


def cluster_status(node: "SandboxNode", db: str) -> str:
    """`cluster/status` of the member on `node` ("" if it does not answer)."""
    return ovnha.status_at(ctl(node, db), db)


def leader(sb: "Sandbox", db: str) -> "SandboxNode | None":
    for n in members(sb):
        if "Role: leader" in cluster_status(n, db):
            return n
    return None


def _api(sb: "Sandbox"):
    from pacific.kube import client
    from pacific.sandbox.k8s import sandbox as k8s
    return client.load(k8s.kubeconfig_path(sb))


def _label_members(api, sb: "Sandbox", timeout: float) -> None:
    """Every node registered (tls init issues a certificate to each Node there
    is), the members labelled."""
    from pacific.kube import resources as r
    for n in sb.nodes:
        wait_for(lambda n=n: r.get(api, r.NODES, n.name), timeout,
                 f"node {n.name} to register (its kubelet's log under {sb.dir}/services)")
    for n in members(sb):
        r.patch_merge(api, r.NODES, n.name, {"metadata": {"labels": {
            names.CENTRAL_ROLE_LABEL: names.CENTRAL_ROLE}}})


def certificates(api, sb: "Sandbox", renew: bool = False) -> None:
    """`pacific tls init` (`--renew`: new certificates of the same CA), and each
    node's files on its host; the daemons read the new ones once restarted."""
    import io
    import tempfile

    from pacific.cli import tls
    out = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="ovn-ca-", dir=sb.dir) as work:
        tls.init(api, names.PACIFIC_NAMESPACE, os.path.join(work, "ca"),
                 node_certs=os.path.join(sb.dir, "node-certs"), renew=renew, out=out)
    for line in out.getvalue().splitlines():
        log.info("tls init: %s", line)
    for n in sb.nodes:
        src = os.path.join(sb.dir, "node-certs", n.name)
        for name, dst in tls_files(n).items():
            os.makedirs(os.path.dirname(dst), mode=0o700, exist_ok=True)
            shutil.copyfile(os.path.join(src, name), dst)
            os.chmod(dst, 0o600 if name == "tls.key" else 0o644)


def _docs(manifest: str = "central.yaml") -> list[dict]:
    from pacific.sandbox.k8s import deploy
    with open(os.path.join(deploy.REPO, "deploy", manifest)) as f:
        return [d for d in yaml.safe_load_all(f) if d and d["kind"] in ("Service", "DaemonSet")]


def _ready_pods(api, workload: str = WORKLOAD) -> list[dict]:
    from pacific.kube import resources as r
    from pacific.sandbox.k8s import deploy
    pods = r.list_(api, r.PODS, names.PACIFIC_NAMESPACE,
                   label_selector=f"app.kubernetes.io/name={workload}")[0]
    return [p for p in pods if deploy.pod_ready(p)]


def start_controllers(sb: "Sandbox") -> None:
    """Each node's ovn-controller, in the node's host view, with its TLS files
    (the same paths pacific-node writes into the SSL row)."""
    from pacific.sandbox.k8s import kubelet
    for n in sb.nodes:
        tag = f"{n.name}/ovn-controller"
        if sb.daemon_pid(tag) is not None:
            continue
        n.vsctl("set-ssl", *(os.path.join(names.OVN_TLS_DIR, k)
                             for k in ("tls.key", "tls.crt", "ca.crt")))
        st = daemons.ovn_controller(n.ovs_remote, n.netns, n.rundir,
                                    wrap=kubelet.host_view(sb, n))
        sb._record_daemon(tag, st, n.netns)


def start(sb: "Sandbox", timeout: float = 180.0) -> None:
    """Members labelled, certificates made, central's pods Ready, every node's
    ovn-controller in, tunnels warm (idempotent)."""
    from pacific.sandbox.k8s import deploy, kubelet
    api = _api(sb)
    deploy.configure(api, sb)            # the API server's address, the remotes
    _label_members(api, sb, timeout)
    certificates(api, sb)
    image = deploy.image_name()
    kubelet.import_image(sb, deploy.archive(), image)
    for doc in _docs() + (_docs("vswitch.yaml") if sb.ovs_pods else []):
        deploy.apply_doc(api, deploy.with_image(doc, image) if doc["kind"] == "DaemonSet"
                         else doc)
    want = len(members(sb))
    try:
        wait_for(lambda: len(_ready_pods(api)) == want, timeout,
                 f"{want} {WORKLOAD} pods Ready")
    except SandboxError as e:
        raise SandboxError(f"{e}; kubectl -n {names.PACIFIC_NAMESPACE} logs -l "
                           f"app.kubernetes.io/name={WORKLOAD}; the members' logs are in "
                           f"{', '.join(host_dirs(n)[RUN_DIR] for n in members(sb))}") from e
    sb.nbctl("init")
    log.info("OVN central: %d pacific-central pods Ready (NB %s)", want, sb.nb_tcp_remote)
    if sb.ovs_pods:
        # chassis and tunnels once pacific-node has configured them (services.node_daemons)
        wait_for(lambda: len(_ready_pods(api, VSWITCH)) == len(sb.nodes), timeout,
                 f"{len(sb.nodes)} {VSWITCH} pods Ready (kubectl -n {names.PACIFIC_NAMESPACE} "
                 f"logs -l app.kubernetes.io/name={VSWITCH})")
        log.info("Open vSwitch: %d %s pods Ready", len(sb.nodes), VSWITCH)
        return
    start_controllers(sb)
    bringup.wait_ready(sb, timeout)
    bringup.warm_tunnels(sb, timeout)
