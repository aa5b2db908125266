"""Sandbox life cycle: down leaves nothing, crash recovery, two sandboxes at once,
spawn of a daemon in a namespace, and the CLI from separate processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from pacific.sandbox import netns, proc
from pacific.sandbox.cluster import Sandbox
from pacific.sandbox.proc import SandboxError, alive, wait_for

pytestmark = pytest.mark.e2e
# its own sandboxes, nothing timed: runs on the other worker (tests/conftest.py)
BESIDE_THE_DATAPATH = True


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                         check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def processes_mentioning(text: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read() and alive(int(pid)):
                    found.append(int(pid))
        except OSError:
            pass
    return found


def pod_pair(sb: Sandbox, tag: str = "p"):
    """Two pods on one switch on node1/node2 (LSPs via ovn-nbctl: setup only)."""
    sb.nbctl("--may-exist", "ls-add", "ls-t")
    pods = []
    for i, node in enumerate(sb.nodes[:2], start=1):
        mac, ip = f"0a:00:00:00:00:0{i}", f"10.80.0.{i}"
        sb.nbctl("--may-exist", "lsp-add", "ls-t", f"{tag}{i}", "--",
                 "lsp-set-addresses", f"{tag}{i}", f"{mac} {ip}")
        pods.append(sb.add_test_pod(node, f"{tag}{i}", f"{tag}{i}", mac, f"{ip}/24"))
    for p in pods:
        p.wait_installed(15)
    return pods


def reaches(a, b, **kw) -> bool:
    """a.ping(b.ip); when it fails, the test's error says what each side had: a
    suite run once saw two freshly installed ports on two nodes not answer for
    10 s, with nothing left to look at afterwards."""
    if a.ping(b.ip, **kw):
        return True
    def ask(fn, *args) -> str:
        try:
            return fn(*args)
        except Exception as e:     # a diagnostic must not hide the failure
            return f"({e})"

    sb = a.sandbox
    parts = [f"{a.name} on {a.node.name} -> {b.name} {b.ip} on {b.node.name}: no answer",
             ask(sb.sbctl, "--columns=logical_port,chassis,up", "list", "Port_Binding")]
    for node in (a.node, b.node):
        parts += [f"--- {node.name}: interfaces, tunnel neighbours",
                  ask(node.vsctl, "--columns=name,type,options,ofport", "list", "Interface"),
                  ask(node.appctl, "tnl/neigh/show"),
                  f"--- {node.name} ovn-controller.log", proc.tail(node.log("ovn-controller"), 1500, "(no log)"),
                  f"--- {node.name} ovs-vswitchd.log", proc.tail(node.log("ovs-vswitchd"), 1500, "(no log)")]
    pytest.fail("\n".join(parts))


def test_down_leaves_nothing(sandbox_factory):
    before = root_links()
    sb = sandbox_factory(nodes=2)
    a, b = pod_pair(sb)
    assert reaches(a, b, wait=10)
    b.spawn("sleeper", ["sleep", "600"])
    sb.spawn("rootsleeper", ["sleep", "600"])
    pids = [d["pid"] for d in sb.state.read()["daemons"].values()]
    # per node ovsdb-server, ovs-vswitchd, ovn-controller; central 3; the two
    # spawned here; one node guard per node
    assert len(pids) == 2 * 3 + 3 + 2 + 2
    sb.down()
    assert [p for p in pids if alive(p)] == []
    assert netns.list_with_prefix(sb.netns_prefix) == []
    assert not os.path.exists(sb.dir)
    assert processes_mentioning(sb.dir) == []
    assert root_links() - before == set()
    sb.down()  # idempotent


def test_up_after_kill9_of_every_daemon(sandbox_factory):
    sb = sandbox_factory(nodes=2)
    old = [d["pid"] for d in sb.state.read()["daemons"].values()]
    for pid in old:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not any(alive(p) for p in old), 5, "killed daemons to die")
    assert not sb.healthy()
    sb.up(services=())
    assert sb.healthy()
    a, b = pod_pair(sb)
    assert reaches(a, b, wait=10)
    sb.down()


def test_up_after_half_crash_without_state_file(sandbox_factory):
    """Some daemons killed -9, the rest still running, state file lost: up() finds
    the leftovers by pidfile and namespace name, stops them and comes up."""
    sb = sandbox_factory(nodes=2)
    daemons = sb.state.read()["daemons"]
    survivors = [d["pid"] for t, d in daemons.items() if not t.endswith(("controller", "northd"))]
    for t, d in daemons.items():
        if t.endswith(("controller", "northd")):
            os.kill(d["pid"], signal.SIGKILL)
    os.unlink(sb.state.path)
    fresh = Sandbox(sb.name, nodes=2)
    fresh.up(services=())
    assert fresh.healthy()
    assert [p for p in survivors if alive(p)] == []
    a, b = pod_pair(fresh)
    assert reaches(a, b, wait=10)
    fresh.down()


def test_two_sandboxes_at_once(sandbox_factory):
    """Same addresses in both (they live in separate namespaces); downing one
    leaves the other working."""
    one, two = sandbox_factory(nodes=2), sandbox_factory(nodes=2)
    p1, p2 = pod_pair(one), pod_pair(two)
    assert reaches(p1[0], p1[1], wait=10)
    assert reaches(p2[0], p2[1], wait=10)
    one.down()
    assert two.healthy()
    assert reaches(p2[1], p2[0], wait=10)
    two.down()


def test_spawn_records_the_daemons_own_pid_in_its_namespace(sandbox_factory):
    sandbox = sandbox_factory(nodes=1)
    node = sandbox.nodes[0]
    pid = sandbox.spawn("t-sleeper", ["sleep", "600"], netns=node.netns,
                        env={"PACIFIC_TEST": "1"})
    try:
        with open(f"/proc/{pid}/comm") as f:
            assert f.read().strip() == "sleep"
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{node.netns}").st_ino
        with open(f"/proc/{pid}/environ", "rb") as f:
            assert b"PACIFIC_TEST=1" in f.read()
        assert sandbox.daemon_pid("t-sleeper") == pid
        with pytest.raises(SandboxError, match="already runs"):
            sandbox.spawn("t-sleeper", ["sleep", "600"])
    finally:
        assert sandbox.stop("t-sleeper")
    assert not alive(pid)
    assert sandbox.daemon_pid("t-sleeper") is None
    assert not sandbox.stop("t-sleeper")
    # a daemon that dies at once is reported with its log, and not recorded
    with pytest.raises(SandboxError, match="t-bad exited at once"):
        sandbox.spawn("t-bad", ["sh", "-c", "echo broken config >&2; exit 2"], netns=node.netns)
    assert sandbox.daemon_pid("t-bad") is None


def test_cli_up_status_down_from_separate_processes(sandbox_factory):  # (skips without root)
    name = f"c{os.getpid()}"
    cli = [sys.executable, "-m", "pacific.cli.main", "sandbox"]
    try:
        up = subprocess.run(cli + ["up", "--name", name, "--nodes", "1"], capture_output=True,
                            text=True, timeout=60)
        assert up.returncode == 0, up.stderr
        assert f"/{name}/central/nb.sock" in up.stdout
        st = subprocess.run(cli + ["status", "--name", name, "--json"], capture_output=True,
                            text=True, timeout=30)
        assert st.returncode == 0, st.stderr
        status = json.loads(st.stdout)
        assert status["ready"] and [c["name"] for c in status["chassis"]] == ["node1"]
        assert all(d["alive"] for d in status["daemons"].values())
    finally:
        down = subprocess.run(cli + ["down", "--name", name], capture_output=True, text=True,
                              timeout=60)
    assert down.returncode == 0, down.stderr
    assert netns.list_with_prefix(f"pac-{name}-") == []
    st = subprocess.run(cli + ["status", "--name", name], capture_output=True, text=True)
    assert st.returncode == 3 and "not up" in st.stdout


def test_services_hook_runs_after_the_network_is_ready(sandbox_factory):
    seen = []

    def start_sleeper(sb):      # idempotent, as every service starter must be
        seen.append(sb.healthy())
        if sb.daemon_pid("svc-sleeper") is None:
            sb.spawn("svc-sleeper", ["sleep", "600"], netns=sb.central_netns)

    def broken(sb):
        raise RuntimeError("no config")

    sb = sandbox_factory(nodes=1, services=[start_sleeper])
    first = sb.daemon_pid("svc-sleeper")
    assert seen == [True] and first
    sb.up(services=[start_sleeper])  # healthy: network kept, running service kept
    assert seen == [True, True] and sb.daemon_pid("svc-sleeper") == first
    sb.stop("svc-sleeper")           # a service that died is started again by up()
    sb.up(services=[start_sleeper])
    assert sb.daemon_pid("svc-sleeper") not in (None, first)
    sb.down()
    with pytest.raises(SandboxError, match="service broken failed to start: no config"):
        sandbox_factory(nodes=1, services=[broken])


def test_a_crashed_ovs_vswitchd_comes_back_with_the_underlay(sandbox_factory):
    """An aborted ovs-vswitchd (as Debian 12's 3.1.0 does in its userspace
    conntrack) is restarted by --monitor, as systemd would, and the node guard
    restores the underlay on its new tap device."""
    sb = sandbox_factory(nodes=2)
    a, b = pod_pair(sb)
    assert reaches(a, b, wait=10)
    node = sb.node(b.node.name)
    tag = f"{node.name}/ovs-vswitchd"
    old = sb.state.read()["daemons"][tag]["pid"]
    os.kill(old, signal.SIGABRT)           # what a failed assertion does
    assert reaches(a, b, count=1, wait=15)  # back within seconds
    new = sb.state.read()["daemons"][tag]["pid"]
    assert new != old and alive(new)
    assert sb.healthy()
    sb.down()


def test_a_crashed_ovn_northd_comes_back_and_programs_new_ports(sandbox_factory):
    """An aborted ovn-northd (OVN 26.03.1's once failed an assertion in
    ods_assign_array_index while switches came and went) is restarted by --monitor,
    as ovn-ctl and systemd do: ports added after the crash still get a datapath."""
    sb = sandbox_factory(nodes=2)
    old = sb.state.read()["daemons"]["central/northd"]["pid"]
    os.kill(old, signal.SIGABRT)                 # what a failed assertion does
    wait_for(lambda: not alive(old), 5, "the aborted northd to die")
    a, b = pod_pair(sb)                          # their ports installed: northd is back
    assert reaches(a, b, wait=10)
    assert sb.healthy()
    new = sb.state.read()["daemons"]["central/northd"]["pid"]
    assert new != old and alive(new)
    sb.down()
