"""Real nodes: a containerd and a kubelet (v1.20.2) per sandbox node.

    from pacific.sandbox.k8s import kubelet
    kubelet.start_all(sb)        # per node: containerd, images imported, kubelet
    kubelet.wait_ready(sb)       # every Node registered and Ready (its CNI configuration is there)
    kubelet.cleanup(sb)          # in Sandbox.down(), once the daemons are stopped

Per node (files under `<node rundir>/kubelet/`):

- **containerd** (Debian's 1.6, runc, cgroupfs) with a private root, state, socket
  and runc root, `restrict_oom_score_adj = true` (root lacks CAP_SYS_RESOURCE
  here), the node's CNI configuration: conf_dir is where pacific-node writes its
  conflist, bin_dir holds the `pacific` plugin and a `loopback` that records every
  pod namespace containerd makes (`netns.list`, for `down`).
- **kubelet** with the node's identity (system:node:NAME, through the forwarder at
  the central address), `--node-ip` = the node's underlay address (the Node's
  InternalIP; the API server reaches it through pacific.sandbox.k8s.egress),
  both families' in a `--dual-stack` sandbox (host-network pods get both),
  its own root directory and cgroup root `/pac-<sandbox>-<node>`.

Both run in the node's network namespace and in a mount and a UTS namespace of
their own (`unshare --mount --uts --propagation unchanged`, the kubelet joins
containerd's; the host name is the node's, which host-network pods see): there
/var/log/pods and /var/log/containers are the node's own directories (a kubelet
removes the log directories of pods it does not know, so kubelets sharing one
/var/log/pods delete each other's logs), and every mount they make (the kubelet's
root, volumes, container root file systems) lives and dies with that namespace.
/run/netns stays shared with the root namespace, so pod namespaces are seen by
pacific-node and by `ip netns`.

The kubelet rewrites host sysctls (vm.overcommit_memory, vm.panic_on_oom,
kernel.panic, kernel.panic_on_oops, kernel.keys.root_max*): their values are saved
before the first kubelet of any sandbox starts and restored when the last one goes
(pacific.sandbox.k8s.hoststate, with the nodes' cgroups and mount points).
"""
from __future__ import annotations

import glob
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from pacific.sandbox import netns as sbnetns
from pacific.sandbox.k8s import bins, clusterdns, hoststate, images
from pacific.sandbox.proc import SandboxError, alive, run

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox

log = logging.getLogger(__name__)

KUBELET_PORT = 10250
REGISTRY_PORT = 5000                       # pacific.sandbox.k8s.registry, central address
REGISTRY_TAG = "kube-registry"
HEALTHZ_PORT = 10248
CNI_PLUGINS = "/usr/lib/cni"
SHIM_SOCKET_DIR = "/run/containerd/s"
# host directories a kubelet uses whatever its flags say: each node gets its own,
# bind-mounted over them in its mount namespace (host dir -> dir under <node>/kubelet/)
PRIVATE_DIRS = {"/var/log/pods": "log/pods", "/var/log/containers": "log/containers",
                "/var/lib/kubelet": "var-lib-kubelet"}
NEEDED = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "unshare", "nsenter")


class Paths:
    def __init__(self, sb: "Sandbox", node):
        self.base = os.path.join(node.rundir, "kubelet")
        c = os.path.join(self.base, "containerd")
        self.containerd_dir = c
        self.containerd_config = os.path.join(c, "config.toml")
        self.containerd_root = os.path.join(c, "root")
        self.containerd_state = os.path.join(c, "state")
        self.runc_root = os.path.join(c, "runc")
        self.socket = os.path.join(c, "containerd.sock")
        self.kubelet_root = os.path.join(self.base, "root")
        self.kubelet_config = os.path.join(self.base, "config.yaml")
        self.netns_list = os.path.join(self.base, "netns.list")
        self.cgroup_root = f"/{sb.netns_prefix}{node.name}"
        from pacific.sandbox import nodedaemons
        p = nodedaemons.paths(node)
        self.cni_conf_dir, self.cni_bin_dir = p.conf_dir, p.bin_dir


def containerd_tag(node) -> str:
    return f"{node.name}-containerd"


def kubelet_tag(node) -> str:
    return f"{node.name}-kubelet"


def check_host() -> None:
    missing = [b for b in NEEDED if not shutil.which(b)]
    if missing:
        raise SandboxError(f"kubelet nodes need {', '.join(missing)}: run `make setup` "
                           "(Debian's containerd, runc, util-linux)")
    bins.path("kubelet")


# ---------------------------------------------------------------------- config
def containerd_config(p: Paths, registry: str) -> str:
    return f"""version = 2
root = "{p.containerd_root}"
state = "{p.containerd_state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.opt", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{p.socket}"
[ttrpc]
  address = "{p.socket}.ttrpc"
[debug]
  address = "{p.socket}.debug"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{images.PAUSE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{p.runc_root}"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."localhost"]
    endpoint = ["http://{registry}"]
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{p.cni_bin_dir}"
    conf_dir = "{p.cni_conf_dir}"
    max_conf_num = 1
"""


def kubelet_config(sb: "Sandbox", node, p: Paths, ca: str) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": node.underlay_ip, "port": KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": HEALTHZ_PORT,
        "cgroupDriver": "cgroupfs", "cgroupRoot": p.cgroup_root, "cgroupsPerQOS": True,
        "failSwapOn": False,
        "oomScoreAdj": 0,                 # -999 needs CAP_SYS_RESOURCE
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": ca}},
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDomain": "cluster.local", "resolvConf": "/etc/resolv.conf",
        "clusterDNS": [clusterdns.address(sb)],     # pacific.sandbox.k8s.clusterdns
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "maxPods": 110, "serializeImagePulls": False,
        "syncFrequency": "10s", "nodeStatusUpdateFrequency": "2s",
        "fileCheckFrequency": "20s", "httpCheckFrequency": "20s",
        "volumeStatsAggPeriod": "0s",
        # --dual-stack: the kubelet reports both families of a pod (status.podIPs)
        **({"featureGates": bins.dual_stack_gates()}
           if getattr(sb, "dual_stack", False) and bins.dual_stack_gates() else {}),
    }


def loopback_wrapper(p: Paths) -> str:
    """containerd runs `loopback` first for every pod: record the namespace, then
    run Debian's loopback plugin."""
    return f"""#!/bin/sh
# written by pacific.sandbox.k8s.kubelet: pod namespaces this node's containerd made
if [ "$CNI_COMMAND" = ADD ] && [ -n "$CNI_NETNS" ]; then
  echo "$CNI_NETNS" >> {p.netns_list}
fi
exec {CNI_PLUGINS}/loopback
"""


def _ctr(p: Paths, *args: str, timeout: float = 60) -> str:
    return run(["ctr", "--address", p.socket, "--namespace", "k8s.io", *args],
               timeout=timeout).stdout


def ctr(sb: "Sandbox", node, *args: str, timeout: float = 60) -> str:
    """`ctr` against `node`'s containerd (namespace k8s.io)."""
    return _ctr(Paths(sb, node), *args, timeout=timeout)


def registry_address(sb: "Sandbox") -> str:
    return f"{sb.central_ip}:{REGISTRY_PORT}"


def start_registry(sb: "Sandbox", image_paths: dict) -> None:
    if sb.daemon_pid(REGISTRY_TAG) is None:
        sb.spawn(REGISTRY_TAG, [sys.executable, "-m", "pacific.sandbox.k8s.registry",
                                "--netns", sb.central_netns, "--listen", registry_address(sb),
                                *image_paths.values()], grace=0.3)


def start_containerd(sb: "Sandbox", node, image_paths: dict) -> None:
    p = Paths(sb, node)
    for d in (p.containerd_root, p.containerd_state, p.runc_root, p.kubelet_root,
              p.cni_conf_dir, p.cni_bin_dir, *(os.path.join(p.base, x)
                                              for x in PRIVATE_DIRS.values())):
        os.makedirs(d, exist_ok=True)
    hoststate.write_file(p.containerd_config, containerd_config(p, registry_address(sb)))
    hoststate.write_file(os.path.join(p.cni_bin_dir, "loopback"), loopback_wrapper(p), 0o755)
    if sb.daemon_pid(containerd_tag(node)) is None:
        binds = {d: os.path.join(p.base, sub) for d, sub in PRIVATE_DIRS.items()}
        if getattr(sb, "deploy", False):     # deploy/node.yaml's hostPaths: this node's dirs
            from pacific.sandbox import nodedaemons
            binds.update(nodedaemons.deploy_host_dirs(node))
        hoststate.make_mountpoints(os.path.dirname(sb.dir), binds)
        mounts = " && ".join(f"mount --bind {src} {d}" for d, src in binds.items())
        # `/` shared in this namespace only (root's stays private): containerd refuses
        # mountPropagation HostToContainer on a path whose mount is neither shared
        # nor slave (deploy/node.yaml's /var/run/netns; /var/run is a symlink)
        mounts += " && mount --make-shared /"
        # its own UTS namespace named after the node: host-network pods see the
        # node's name as their hostname, as on a real node (upstream's tests ask it)
        mounts += f" && hostname {node.name}"
        sb.spawn(containerd_tag(node), [
            "unshare", "--mount", "--uts", "--propagation", "unchanged", "--",
            "nsenter", f"--net=/run/netns/{node.netns}", "--",
            "sh", "-c", f"{mounts} && exec containerd --config {p.containerd_config}"])
    deadline = time.monotonic() + 30
    while True:
        if os.path.exists(p.socket):
            try:
                _ctr(p, "version", timeout=5)
                break
            except SandboxError:
                pass
        if sb.daemon_pid(containerd_tag(node)) is None or time.monotonic() > deadline:
            raise SandboxError(f"containerd of {node.name} did not answer; log "
                               f"{os.path.join(sb.dir, 'services', containerd_tag(node) + '.log')}")
        time.sleep(0.05)
    have = _ctr(p, "images", "ls", "-q")
    for name, path in image_paths.items():
        ref = images.BUSYBOX if name == "busybox" else images.PAUSE
        if ref not in have.split():
            _ctr(p, "images", "import", path)


def host_view(sb: "Sandbox", node) -> list[str]:
    """A command prefix that runs its command in the node's host view: its
    containerd's mount namespace, where the host paths of deploy/'s manifests are
    the node's own directories."""
    cpid = sb.daemon_pid(containerd_tag(node))
    if cpid is None:
        raise SandboxError(f"containerd of {node.name} is not running")
    return ["nsenter", f"--mount=/proc/{cpid}/ns/mnt", "--"]


def import_image(sb: "Sandbox", path: str, name: str) -> None:
    """The OCI archive `path` (image `name`) into every node's containerd, where
    it is not there yet."""
    for n in sb.nodes:
        p = Paths(sb, n)
        if name not in _ctr(p, "images", "ls", "-q", timeout=30).split():
            _ctr(p, "images", "import", path, timeout=300)


def start_kubelet(sb: "Sandbox", node) -> None:
    from pacific.sandbox.k8s import sandbox as k8s
    if sb.daemon_pid(kubelet_tag(node)) is not None:
        return
    p = Paths(sb, node)
    cp = k8s.plane(sb)
    kubeconfig = cp.kubeconfig(f"kubelet-{node.name}", f"system:node:{node.name}",
                               server=k8s.underlay_url(sb))
    import yaml
    hoststate.write_file(p.kubelet_config, yaml.safe_dump(kubelet_config(sb, node, p, cp.pki.ca_crt)))
    hoststate.make_cgroups(p.cgroup_root)
    cpid = sb.daemon_pid(containerd_tag(node))
    if cpid is None:
        raise SandboxError(f"containerd of {node.name} is not running")
    sb.spawn(kubelet_tag(node), [
        "nsenter", f"--mount=/proc/{cpid}/ns/mnt", f"--uts=/proc/{cpid}/ns/uts",
        f"--net=/run/netns/{node.netns}", "--",
        bins.path("kubelet"), f"--config={p.kubelet_config}", f"--kubeconfig={kubeconfig}",
        f"--root-dir={p.kubelet_root}", f"--cert-dir={os.path.join(p.base, 'pki')}",
        "--container-runtime=remote",
        f"--container-runtime-endpoint=unix://{p.socket}",
        f"--hostname-override={node.name}", f"--node-ip={node.node_ip}",
        "--v=2"])     # a pod's sync loop (ADD/DELETE/REMOVE, kills): what a slow deletion did


def start_all(sb: "Sandbox") -> None:
    """containerd and kubelet on every node (idempotent); returns once they run,
    without waiting for the kubelets to register their Nodes (about 10 s): the
    controllers and node daemons start meanwhile, and `wait_ready` (the last
    step of the default services) waits for every Node Ready."""
    check_host()
    hoststate.write_file(os.path.join(sb.dir, hoststate.MARKER), "kubelet nodes\n")
    hoststate.save_sysctls(os.path.dirname(sb.dir))
    paths = images.build(os.path.join(sb.dir, "images"))
    start_registry(sb, paths)
    with ThreadPoolExecutor(len(sb.nodes)) as pool:     # each waits for its socket
        list(pool.map(lambda n: start_containerd(sb, n, paths), sb.nodes))
    for n in sb.nodes:
        start_kubelet(sb, n)


def node_ready(node_obj: dict, since: float = 0.0) -> bool:
    for c in (node_obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def wait_ready(sb: "Sandbox", timeout: float = 90.0) -> None:
    """Until every Node is registered and Ready (the kubelet sees the CNI
    configuration)."""
    from pacific.kube import client
    from pacific.kube import resources as r
    from pacific.sandbox.k8s import sandbox as k8s
    api = client.load(k8s.kubeconfig_path(sb))
    deadline = time.monotonic() + timeout
    for n in sb.nodes:
        while not node_ready(r.get(api, r.NODES, n.name) or {}):
            if sb.daemon_pid(kubelet_tag(n)) is None:
                raise SandboxError(f"kubelet of {n.name} exited; log "
                                   f"{os.path.join(sb.dir, 'services', kubelet_tag(n) + '.log')}")
            if time.monotonic() > deadline:
                raise SandboxError(f"Node {n.name} not Ready after {timeout:.0f} s; log "
                                   f"{os.path.join(sb.dir, 'services', kubelet_tag(n) + '.log')}")
            time.sleep(0.1)


# ---------------------------------------------------------------------- pods
def pod_pids(sb: "Sandbox", node_name: str, uid: str) -> list[int]:
    """Processes of a pod (the pause process first when it can be told)."""
    p = Paths(sb, sb.node(node_name))
    for h in hoststate.hierarchies():
        top = h + p.cgroup_root
        for d in glob.glob(os.path.join(top, "kubepods", f"pod{uid}")) + \
                glob.glob(os.path.join(top, "kubepods", "*", f"pod{uid}")):
            pids = []
            try:
                subs = sorted(os.listdir(d))
            except OSError:
                continue          # removed since the glob: no process left in it
            for sub in subs:
                try:
                    with open(os.path.join(d, sub, "cgroup.procs")) as f:
                        pids += [int(x) for x in f.read().split()]
                except OSError:
                    pass          # not a cgroup, or being removed (ENOENT, ENODEV)
            if pids:
                return pids
    return []


def pod_sandbox_id(sb: "Sandbox", node_name: str, uid: str, containers=()) -> str | None:
    """The pod sandbox's id (what containerd gives CNI as CNI_CONTAINERID): the
    container cgroup of the pod that is none of its containers."""
    p = Paths(sb, sb.node(node_name))
    known = {c.split("://", 1)[-1] for c in containers}
    for h in hoststate.hierarchies():
        top = h + p.cgroup_root
        for d in glob.glob(os.path.join(top, "kubepods", f"pod{uid}")) + \
                glob.glob(os.path.join(top, "kubepods", "*", f"pod{uid}")):
            ids = [e for e in os.listdir(d) if os.path.isdir(os.path.join(d, e))
                   and e not in known]
            if len(ids) == 1:
                return ids[0]
    return None


def pod_netns(sb: "Sandbox", node_name: str, uid: str) -> str | None:
    """The /run/netns name of a running pod's network namespace."""
    for pid in pod_pids(sb, node_name, uid):
        try:
            ino = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            continue
        for name in os.listdir(sbnetns.NETNS_DIR):
            try:
                if os.stat(os.path.join(sbnetns.NETNS_DIR, name)).st_ino == ino:
                    return name
            except OSError:
                pass
    return None


# ---------------------------------------------------------------------- down
def _shim_pids(sockets: set[str]) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and \
                any(s.encode() in argv for s in sockets):
            out.append(int(d))
    return out


def _kill_all(pids) -> int:
    pids = [p for p in pids if alive(p)]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        for p in pids:
            try:
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.02)
    return len(pids)


def _mounts_under(prefix: str) -> list[str]:
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = line.split()[4].replace("\\040", " ")
            if mnt == prefix or mnt.startswith(prefix.rstrip("/") + "/"):
                out.append(mnt)
    return out


def _shim_socket(containerd_socket: str, namespace: str, task_id: str) -> str:
    # containerd 1.6 runtime/v2/shim: sha256 of <address>/<namespace>/<id> under /run/containerd/s
    return os.path.join(SHIM_SOCKET_DIR, hashlib.sha256(
        os.path.join(containerd_socket, namespace, task_id).encode()).hexdigest())


def cleanup(sb: "Sandbox") -> int:
    """After the sandbox's daemons are stopped: what containerd and the kubelets
    left (shims, pod processes, pod namespaces, shim sockets, cgroups, mounts)
    goes, and the host sysctls come back once no kubelet sandbox is left.
    Returns how many processes it stopped."""
    if not os.path.exists(os.path.join(sb.dir, hoststate.MARKER)):
        return 0
    stopped = 0
    all_paths = [Paths(sb, n) for n in sb.nodes]
    sockets = {p.socket for p in all_paths}
    for _ in range(3):          # a shim may start a container while we kill
        pids = set(_shim_pids(sockets))
        for p in all_paths:
            pids |= hoststate.cgroup_pids(p.cgroup_root)
        if not pids:
            break
        stopped += _kill_all(pids)
    for p in all_paths:
        netns_paths = set()
        try:
            with open(p.netns_list) as f:
                netns_paths = {line.strip() for line in f if line.strip()}
        except FileNotFoundError:
            pass
        for path in netns_paths:
            name = os.path.basename(path)
            if os.path.dirname(os.path.realpath(path)) == sbnetns.NETNS_DIR and \
                    sbnetns.exists(name):
                sbnetns.delete(name)
        task_dir = os.path.join(p.containerd_state, "io.containerd.runtime.v2.task", "k8s.io")
        if os.path.isdir(task_dir):
            for tid in os.listdir(task_dir):
                try:
                    os.unlink(_shim_socket(p.socket, "k8s.io", tid))
                except FileNotFoundError:
                    pass
        left = hoststate.remove_cgroups(p.cgroup_root)
        if left:
            log.warning("cgroups left: %s", "; ".join(left[:5]))
    for mnt in sorted(_mounts_under(sb.dir), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], capture_output=True)
    if _mounts_under(sb.dir):
        raise SandboxError(f"mounts left under {sb.dir}: {_mounts_under(sb.dir)[:5]}")
    os.unlink(os.path.join(sb.dir, hoststate.MARKER))
    base = os.path.dirname(sb.dir)
    if not glob.glob(os.path.join(base, "*", hoststate.MARKER)):
        for d in (SHIM_SOCKET_DIR, os.path.dirname(SHIM_SOCKET_DIR)):
            try:
                os.rmdir(d)
            except OSError:
                pass
        hoststate.remove_mountpoints(base)
    hoststate.restore_sysctls(base)
    return stopped
