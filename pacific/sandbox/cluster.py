"""`Sandbox`: a real multi-node OVN cluster network on one machine.

    sb = Sandbox("demo", nodes=3)
    sb.up()                      # central + 3 nodes + external host, tunnels warm
    pid = sb.spawn("apiserver", [...], netns=sb.central_netns)
    sb.down()                    # nothing of it remains

Everything a sandbox makes is named after it (netns `pac-<name>-...`, directory
`<PACIFIC_SANDBOX_DIR or /run/pacific-sandbox>/<name>/`) and recorded in its state
file, so two sandboxes with different names coexist and `down()` works from any
process.  See docs/architecture.md, section "Sandbox".
"""
from __future__ import annotations

import ipaddress
import logging
import os
import re
import shutil
import subprocess
import time
from typing import Callable, Iterable, Sequence

from pacific import names, ovsinstall
from pacific.sandbox import bringup, daemons, netns, pods, proc
from pacific.sandbox.daemons import Started
from pacific.sandbox.node import SandboxNode
from pacific.sandbox.proc import (SandboxError, alive, netns_argv, read_pidfile, run,
                                  start_time, stop_pid)
from pacific.sandbox.state import StateFile

log = logging.getLogger(__name__)

Service = Callable[["Sandbox"], None]
_NAME_RE = re.compile(r"^[a-z0-9]{1,24}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,80}$")
MAX_NODES = 64


def base_dir() -> str:
    return os.environ.get(names.SANDBOX_DIR_ENV) or names.SANDBOX_DIR


def default_pods() -> str:
    """How a new sandbox runs its pods: "kubelet" (containerd + kubelet per node)
    or "runner" (pacific.sandbox.k8s.podrunner)."""
    v = os.environ.get(names.SANDBOX_PODS_ENV) or names.SANDBOX_PODS_DEFAULT
    if v not in ("kubelet", "runner"):
        raise SandboxError(f"${names.SANDBOX_PODS_ENV} must be kubelet or runner, not {v!r}")
    return v


class Sandbox:
    """A named sandbox.  `nodes=None` takes the node count from an existing state
    file (so `Sandbox(name).down()` / `.status()` work from a new process), else 3."""

    def __init__(self, name: str = names.SANDBOX_DEFAULT_NAME, nodes: int | None = None,
                 underlay_mtu: int = names.SANDBOX_UNDERLAY_MTU, ha: bool | None = None,
                 kubelet: bool | None = None, deploy: bool | None = None,
                 ovs_prefix: str | None = None, central_pods: bool | None = None,
                 ovs_pods: bool | None = None, dual_stack: bool | None = None,
                 ipv6_only: bool | None = None):
        if not _NAME_RE.match(name):
            raise SandboxError(f"invalid sandbox name {name!r}: use 1-24 lower-case letters "
                               "and digits (it prefixes namespace names)")
        self.name = name
        self.dir = os.path.join(base_dir(), name)
        self.state = StateFile(self.dir, name)
        saved = self.state.read()
        if nodes is None:
            nodes = saved.get("nodes") or 3
            underlay_mtu = saved.get("underlay_mtu") or underlay_mtu
        # --ha: OVN NB and SB as 3-member RAFT clusters (pacific.sandbox.ovnha)
        self.ha = bool(saved.get("ha")) if ha is None else ha
        # --kubelet: a containerd and a kubelet per node run the pods
        # (pacific.sandbox.k8s.kubelet) instead of the pod runners
        # (a new sandbox: $PACIFIC_SANDBOX_PODS, kubelet or runner)
        if kubelet is None:
            kubelet = saved["kubelet"] if "kubelet" in saved else default_pods() == "kubelet"
        # --deploy: Pacific runs from its image and deploy/ on kubelet nodes
        # (pacific.sandbox.k8s.deploy) instead of as sandbox processes
        # --central-pods: OVN central too, as deploy/central.yaml's pods on the
        # first three nodes (pacific.sandbox.k8s.central); implies --deploy
        # --ovs-pods: Open vSwitch and ovn-controller too, as deploy/vswitch.yaml's
        # pods: the nodes run only a kubelet and containerd; implies --central-pods
        self.ovs_pods = bool(saved.get("ovs_pods")) if ovs_pods is None else ovs_pods
        self.central_pods = (bool(saved.get("central_pods")) if central_pods is None
                             else central_pods) or self.ovs_pods
        if self.central_pods and self.ha:
            raise SandboxError("--central-pods and --ha are two ways to run OVN central: "
                               "choose one")
        self.deploy = (bool(saved.get("deploy")) if deploy is None else deploy) \
            or self.central_pods
        self.kubelet = bool(kubelet) or self.deploy
        # --dual-stack: the cluster's networks (join network, service CIDR,
        # default Subnet) of both families (controllers.dual_stack_args)
        self.dual_stack = bool(saved.get("dual_stack")) if dual_stack is None else dual_stack
        # --ipv6-only: the cluster's networks (default Subnet, join network,
        # service CIDR, the Nodes' addresses) IPv6 only; the underlay stays
        # dual-stack (OVN's tunnels and databases keep IPv4), so it implies
        # --dual-stack's underlay and controllers' switch
        self.ipv6_only = bool(saved.get("ipv6_only")) if ipv6_only is None else ipv6_only
        self.dual_stack = self.dual_stack or self.ipv6_only
        if self.dual_stack and self.deploy:
            raise SandboxError("--dual-stack runs the sandbox's own controllers: not with "
                               "--deploy yet")
        # which OVS/OVN runs the sandbox: the one it was built with, else the
        # default (hack/build-ovs-ovn.sh's, or Debian's); its programs go first on
        # PATH so every command and daemon started from here uses the same one
        self.ovs = ovsinstall.Install(ovs_prefix or saved.get("ovs_prefix")
                                      or daemons.default_install().prefix)
        ovsinstall.activate(self.ovs)
        if not 1 <= nodes <= MAX_NODES:
            raise SandboxError(f"nodes must be between 1 and {MAX_NODES}, got {nodes}")
        if underlay_mtu < 1280:
            raise SandboxError(f"underlay MTU {underlay_mtu} too small (minimum 1280)")
        self.underlay_mtu = underlay_mtu
        net = ipaddress.ip_network(names.SANDBOX_UNDERLAY_CIDR)
        self.underlay_prefixlen = net.prefixlen
        self.central_ip = str(net[1])
        self.external_ip = str(net[-2])
        self.external_remote_ip = names.SANDBOX_EXTERNAL_REMOTE_CIDR.split("/")[0]
        # --dual-stack: the underlay and the outside speak IPv6 too ("" otherwise)
        net6 = ipaddress.ip_network(names.SANDBOX_UNDERLAY_CIDR6)
        self.central_ip6 = str(net6[1]) if self.dual_stack else ""
        self.external_ip6 = str(net6[254]) if self.dual_stack else ""
        self.external_remote_ip6 = names.SANDBOX_EXTERNAL_REMOTE_CIDR6.split("/")[0] \
            if self.dual_stack else ""
        prefix = f"{names.SANDBOX_NETNS_PREFIX}-{name}-"
        self.netns_prefix = prefix
        self.central_netns = f"{prefix}central"
        self.external_netns = f"{prefix}ext"
        self.central_dir = os.path.join(self.dir, "central")
        self.nb_remote = f"unix:{self.central_dir}/nb.sock"
        self.sb_remote = f"unix:{self.central_dir}/sb.sock"
        self.nb_tcp_remote = f"tcp:{self.central_ip}:{names.OVN_NB_PORT}"
        self.sb_tcp_remote = f"tcp:{self.central_ip}:{names.OVN_SB_PORT}"
        self.nodes: list[SandboxNode] = [
            SandboxNode(name=names.sandbox_node_name(i), index=i, netns=f"{prefix}node{i}",
                        rundir=os.path.join(self.dir, names.sandbox_node_name(i)),
                        underlay_ip=str(net[10 + i]), underlay_prefixlen=net.prefixlen,
                        underlay_mtu=underlay_mtu, mtu=underlay_mtu - names.POD_MTU_OVERHEAD,
                        underlay_ip6=str(net6[10 + i]) if self.dual_stack else "",
                        ipv6_only=self.ipv6_only)
            for i in range(1, nodes + 1)]
        if self.ha:
            from pacific.sandbox import ovnha
            for k, v in ovnha.remotes(self).items():
                setattr(self, k, v)
        if self.central_pods:
            from pacific.sandbox.k8s import central
            for k, v in central.remotes(self).items():
                setattr(self, k, v)

    def __repr__(self) -> str:
        return f"Sandbox({self.name!r}, nodes={len(self.nodes)}, dir={self.dir!r})"

    # ------------------------------------------------------------------ lookup
    def node(self, which: "str | int | SandboxNode") -> SandboxNode:
        """A node by name ("node2"), 1-based index, or the node itself."""
        if isinstance(which, SandboxNode):
            return which
        for n in self.nodes:
            if which in (n.name, n.index):
                return n
        raise SandboxError(f"sandbox {self.name} has no node {which!r} "
                           f"(nodes: {', '.join(n.name for n in self.nodes)})")

    def nbctl(self, *args: str, timeout: float = 30) -> str:
        """ovn-nbctl against NB (setup and tests only; Pacific itself uses pacific.ovn)."""
        return run(["ovn-nbctl", f"--db={self.nb_remote}", f"--timeout={int(timeout)}", *args],
                   timeout=timeout + 5).stdout

    def sbctl(self, *args: str, timeout: float = 30) -> str:
        return run(["ovn-sbctl", f"--db={self.sb_remote}", f"--timeout={int(timeout)}", *args],
                   timeout=timeout + 5).stdout

    def exec(self, netns: str | None, argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
        """Run a command to completion in `netns` (None: root namespace).  Keyword
        arguments as `pacific.sandbox.proc.run` (check, timeout, env, input)."""
        return run(argv, netns=netns, **kw)

    # ------------------------------------------------------------------ up
    def up(self, services: Iterable[Service] | None = None, timeout: float = 60) -> "Sandbox":
        """Bring the sandbox up (idempotent).  A healthy network of this name is kept;
        leftovers of a crashed one are cleaned first.  `services` are idempotent
        callables `f(sandbox)` run in order once the network is ready (the hook to
        start the control plane, controllers, node daemons); None means
        `pacific.sandbox.services.DEFAULT_SERVICES`.  They run on a healthy
        sandbox too, so `up` restarts a service that died and adds the services to
        a sandbox brought up bare; a failing service raises SandboxError.  On failure the half-built
        sandbox is left for inspection: its logs are under `self.dir`, and `down()`
        (or the next `up()`) removes it."""
        if self.healthy():
            log.info("sandbox %s: network already up (%s)", self.name, self.dir)
            return self._start_services(services)
        if self._leftovers():
            saved = self.state.read()
            if saved.get("ready") and (saved.get("nodes") != len(self.nodes)
                                       or bool(saved.get("ha")) != self.ha
                                       or bool(saved.get("kubelet")) != self.kubelet
                                       or bool(saved.get("deploy")) != self.deploy
                                       or bool(saved.get("central_pods")) != self.central_pods
                                       or bool(saved.get("ovs_pods")) != self.ovs_pods
                                       or bool(saved.get("dual_stack")) != self.dual_stack
                                       or bool(saved.get("ipv6_only")) != self.ipv6_only
                                       or saved.get("ovs_prefix") != self.ovs.prefix):
                log.info("sandbox %s has %s nodes%s, %d%s wanted: rebuilding it", self.name,
                         saved.get("nodes"), " (ha)" if saved.get("ha") else "", len(self.nodes),
                         " (ha)" if self.ha else "")
            else:
                log.info("sandbox %s: cleaning leftovers of an earlier run", self.name)
            self.down()
        bringup.check_paths(self)
        t0 = time.monotonic()
        log.info("sandbox %s: bringing up central + %d nodes under %s", self.name,
                 len(self.nodes), self.dir)
        os.makedirs(self.dir, exist_ok=True)
        with self.state.update() as st:
            st.update(nodes=len(self.nodes), underlay_mtu=self.underlay_mtu, ha=self.ha,
                      kubelet=self.kubelet, deploy=self.deploy, ovs_prefix=self.ovs.prefix,
                      central_pods=self.central_pods, ovs_pods=self.ovs_pods,
                      dual_stack=self.dual_stack, ipv6_only=self.ipv6_only, ready=False)
        try:
            bringup.central_up(self)
            bringup.external_up(self)
            for node in self.nodes:
                bringup.node_up(self, node)
            if not self.central_pods:    # else once central's pods run (its service)
                bringup.wait_ready(self, timeout)
                bringup.warm_tunnels(self, timeout)
        except Exception as e:
            raise SandboxError(f"sandbox {self.name} failed to come up: {e}; logs under "
                               f"{self.dir}; `pacific sandbox down --name {self.name}` "
                               "cleans up") from e
        with self.state.update() as st:
            st["ready"] = True
        log.info("sandbox %s: network ready in %.2f s", self.name, time.monotonic() - t0)
        return self._start_services(services)

    def _start_services(self, services: Iterable[Service] | None) -> "Sandbox":
        bringup.start_guards(self)       # the underlay survives an ovs-vswitchd crash
        if services is None:
            from pacific.sandbox.services import DEFAULT_SERVICES
            services = DEFAULT_SERVICES
        for svc in services:
            svc_name = getattr(svc, "__name__", repr(svc))
            log.info("sandbox %s: starting service %s", self.name, svc_name)
            try:
                svc(self)
            except SandboxError:
                raise
            except Exception as e:
                raise SandboxError(f"sandbox {self.name}: service {svc_name} failed to start: "
                                   f"{e}; logs under {self.dir}/services") from e
        return self

    def healthy(self) -> bool:
        """True if the state file says ready, with this node count, every OVS/OVN
        daemon alive and every recorded namespace present (spawned services are
        not checked: their owners restart them)."""
        st = self.state.read()
        if not st.get("ready") or st.get("nodes") != len(self.nodes) \
                or bool(st.get("ha")) != self.ha or bool(st.get("kubelet")) != self.kubelet \
                or bool(st.get("deploy")) != self.deploy \
                or bool(st.get("central_pods")) != self.central_pods \
                or bool(st.get("ovs_pods")) != self.ovs_pods \
                or bool(st.get("dual_stack")) != self.dual_stack \
                or bool(st.get("ipv6_only")) != self.ipv6_only \
                or st.get("ovs_prefix") != self.ovs.prefix:
            return False
        return (all(alive(d["pid"], d["start"]) or self.adopt_restarted(tag)
                    for tag, d in st["daemons"].items() if d.get("kind") == "ovs")
                and all(netns.exists(n) for n in st["netns"]))

    def adopt_restarted(self, tag: str) -> int | None:
        """The pid of daemon `tag` after its `--monitor` restarted it following a
        crash (ovs-vswitchd, ovn-northd: as systemd restarts them), recorded in
        the state file; None if its pidfile names no other live process, or one
        whose command line does not name that pidfile (a stale pidfile's pid taken
        by a stranger, whom down() would then stop: the rule of _stop_unrecorded)."""
        d = self.state.read()["daemons"].get(tag)
        if not d:
            return None
        pid = read_pidfile(d["pidfile"])
        started = start_time(pid) if pid else None
        if not pid or not started or (pid, started) == (d["pid"], d["start"]) \
                or d["pidfile"] not in _cmdline(pid):
            return None
        self._record_daemon(tag, Started(pid, started, d["pidfile"], d["log"], d.get("ctl")),
                            d.get("netns"))
        log.warning("%s restarted after a crash (pid %d); see %s", tag, pid, d["log"])
        return pid

    def _leftovers(self) -> bool:
        return os.path.exists(self.dir) or bool(netns.list_with_prefix(self.netns_prefix))

    # ------------------------------------------------------------------ records
    def _record_netns(self, ns: str) -> None:
        with self.state.update() as st:
            if ns not in st["netns"]:
                st["netns"].append(ns)

    def _record_daemon(self, tag: str, started: Started, ns: str | None,
                       kind: str = "ovs", argv: Sequence[str] = ()) -> None:
        with self.state.update() as st:
            st["seq"] += 1
            st["daemons"][tag] = {"pid": started.pid, "start": started.start, "netns": ns,
                                  "pidfile": started.pidfile, "log": started.log,
                                  "ctl": started.ctl, "kind": kind, "seq": st["seq"],
                                  "argv": list(argv)}
        log.debug("started %s (pid %d), log %s", tag, started.pid, started.log)

    # ------------------------------------------------------------------ spawn
    def spawn(self, tag: str, argv: Sequence[str], netns: str | None = None,
              env: dict[str, str] | None = None, grace: float = 0.1) -> int:
        """Start a long-running component (kube-apiserver, controller, node daemon)
        detached, in `netns` if given, with log `<dir>/services/<tag>.log` and pidfile
        `<tag>.pid`; `env` is added to the current environment.  Returns the
        daemon's own pid.  A daemon that exits within `grace` seconds raises
        SandboxError with its log tail.  `down()` stops spawned daemons first."""
        if not _TAG_RE.match(tag):
            raise SandboxError(f"invalid daemon tag {tag!r} (letters, digits, _ . -)")
        cur = self.state.read()["daemons"].get(tag)
        if cur and alive(cur["pid"], cur["start"]):
            raise SandboxError(f"{tag} already runs (pid {cur['pid']}); stop({tag!r}) first")
        if not os.path.isdir(self.dir):
            raise SandboxError(f"sandbox {self.name} is not up ({self.dir} missing)")
        d = os.path.join(self.dir, "services")
        os.makedirs(d, exist_ok=True)
        logfile, pidfile = os.path.join(d, f"{tag}.log"), os.path.join(d, f"{tag}.pid")
        penv = dict(os.environ)
        penv.update(env or {})
        with open(logfile, "ab") as out:
            p = subprocess.Popen(netns_argv(netns, argv), stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, env=penv,
                                 start_new_session=True, close_fds=True)
        started = start_time(p.pid)
        deadline = time.monotonic() + grace
        while p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if started is None or p.returncode is not None:
            raise SandboxError(f"{tag} exited at once (status {p.returncode}): "
                               f"{proc.tail(logfile, 400).strip()!r}; log {logfile}")
        with open(pidfile, "w") as f:
            f.write(f"{p.pid}\n")
        self._record_daemon(tag, Started(p.pid, started, pidfile, logfile, None), netns,
                            kind="spawn", argv=argv)
        log.info("spawned %s (pid %d) %s, log %s", tag, p.pid,
                 f"in {netns}" if netns else "in the root namespace", logfile)
        return p.pid

    def stop(self, tag: str) -> bool:
        """Stop a daemon by tag (zombie-aware).  Returns True if it was running."""
        d = self.state.read()["daemons"].get(tag)
        if not d:
            return False
        was = stop_pid(d["pid"], d["start"], what=tag)
        with self.state.update() as st:
            st["daemons"].pop(tag, None)
        if d.get("kind") == "spawn" and d.get("pidfile"):
            _unlink(d["pidfile"])
        return was

    def daemon_pid(self, tag: str) -> int | None:
        """Pid of a running recorded daemon, else None."""
        d = self.state.read()["daemons"].get(tag)
        return d["pid"] if d and alive(d["pid"], d["start"]) else None

    # ------------------------------------------------------------------ pods
    def add_test_pod(self, node, name: str, lsp: str, mac: str, ip_cidr: str,
                     gateway: str | None = None) -> "pods.TestPod":
        """Pod-like netns `pac-<sandbox>-<node>-<name>` with eth0 (MAC, address,
        MTU underlay-100, tx offload off, default route via `gateway`) and a veth
        into the node's br-int bound to logical switch port `lsp` (iface-id).
        The LSP itself is the caller's (create it in NB)."""
        return pods.add(self, self.node(node), name, lsp, mac, ip_cidr, gateway)

    def delete_test_pod(self, pod: "pods.TestPod | str", node=None) -> None:
        """Remove a test pod (its processes, OVS port, netns).  Idempotent."""
        pods.delete(self, pod, None if node is None else self.node(node))

    # ------------------------------------------------------------------ down
    def down(self) -> None:
        """Stop every daemon this sandbox started, delete its namespaces, links and
        files.  Works from any process and after a crash; idempotent."""
        t0 = time.monotonic()
        st = self.state.read()
        order = sorted(st["daemons"].items(),
                       key=lambda kv: (kv[1].get("kind") != "spawn", -kv[1].get("seq", 0)))
        stopped = sum(stop_pid(d["pid"], d["start"], what=tag) for tag, d in order)
        stopped += self._stop_unrecorded()
        from pacific.sandbox.k8s import kubelet
        stopped += kubelet.cleanup(self)   # shims, pods, their namespaces, cgroups, sysctls
        spaces = set(st["netns"]) | set(netns.list_with_prefix(self.netns_prefix))
        for ns in spaces:  # safety net: anything else still running in our namespaces
            for pid in netns.pids(ns):
                log.warning("down: stopping leftover pid %d (%s) in %s", pid, _comm(pid), ns)
                stopped += stop_pid(pid, start_time(pid), what=f"pid {pid} in {ns}")
        # pods first, the central namespace (holding the underlay bridge) last
        for ns in sorted(spaces, key=lambda n: (n == self.central_netns, -n.count("-"), n)):
            netns.delete(ns)
        shutil.rmtree(self.dir, ignore_errors=True)
        try:
            os.rmdir(base_dir())  # only if no other sandbox lives there
        except OSError:
            pass
        log.info("sandbox %s down: %d processes stopped, %d namespaces deleted, %s removed "
                 "(%.2f s)", self.name, stopped, len(spaces), self.dir, time.monotonic() - t0)

    def _stop_unrecorded(self) -> int:
        """Daemons whose pidfile exists but which a crash kept out of the state file:
        stopped only if their command line names that pidfile (so never a stranger)."""
        n = 0
        for root, _dirs, files in os.walk(self.dir):
            for f in files:
                if not f.endswith(".pid"):
                    continue
                path = os.path.join(root, f)
                pid = read_pidfile(path)
                if pid and alive(pid) and path in _cmdline(pid):
                    n += stop_pid(pid, start_time(pid), what=path)
        return n

    # ------------------------------------------------------------------ status
    def status(self) -> dict:
        from pacific.sandbox.status import collect
        return collect(self)


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
