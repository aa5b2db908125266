"""pacific-vswitch with real ovsdb-server, ovs-vswitchd and ovn-controller in a
network namespace of its own (a node) wired to another (its underlay
neighbour): it takes the node's underlay address onto br-phy and forwards,
leaves the daemons running when it stops and a new one adopts them, replaces
them replaying the saved OpenFlow tables, restarts a crashed ovs-vswitchd with
the address back, gives the address back on --stop, refuses an interface that
does not exist, and leaves no daemon behind (decision 0049)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from controller_fixtures import wait_until
from pacific import names, ovsinstall
from pacific.sandbox import daemons
from pacific.sandbox.proc import read_pidfile, run

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
BESIDE_THE_DATAPATH = True
NODE_IP, PEER_IP = "10.231.7.2", "10.231.7.1"
HEALTH_PORT = 29479
MARK = "cookie=0x5a11,priority=333,tcp,tp_dst=7"


class Node:
    """A node namespace with eth0 (NODE_IP), its neighbour's namespace (PEER_IP)."""

    def __init__(self, tmp):
        tag = f"pvs{os.getpid()}"
        self.ns, self.peer = f"{tag}-node", f"{tag}-peer"
        self.dir = str(tmp)
        self.run_dir = os.path.join(self.dir, "run")
        self.log = os.path.join(self.dir, "vswitch.log")
        self.proc: subprocess.Popen | None = None
        install = daemons.default_install()
        ovsinstall.activate(install)
        self.env = {**os.environ, "OVS_RUNDIR": self.run_dir}
        for ns in (self.ns, self.peer):
            run(["ip", "netns", "add", ns])
            run(["ip", "link", "set", "lo", "up"], netns=ns)
        run(["ip", "link", "add", "eth0", "netns", self.ns, "type", "veth", "peer", "name",
             "up0", "netns", self.peer])
        for ns, dev, ip in ((self.ns, "eth0", NODE_IP), (self.peer, "up0", PEER_IP)):
            run(["ip", "addr", "add", f"{ip}/24", "dev", dev], netns=ns)
            run(["ip", "link", "set", dev, "up"], netns=ns)
            run(["ethtool", "-K", dev, "tx", "off"], netns=ns)
        run(["ip", "route", "add", "default", "via", PEER_IP], netns=self.ns)

    def start(self, *extra: str, env: dict | None = None) -> subprocess.Popen:
        argv = ["ip", "netns", "exec", self.ns, sys.executable, "-m", "pacific.vswitch.main",
                f"--run-dir={self.run_dir}", f"--ovn-run-dir={self.run_dir}",
                f"--db-dir={os.path.join(self.dir, 'db')}", f"--log-dir={self.dir}",
                f"--ovn-log-dir={self.dir}", f"--health-address=127.0.0.1:{HEALTH_PORT}",
                f"--log-file={self.log}", *extra]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env)
        return self.proc

    def started(self, *extra: str, env: dict | None = None) -> None:
        self.start("--underlay-interface=eth0", *extra, env=env)
        wait_until(lambda: self.ready()[0] == 200, 30, what=f"/readyz (see {self.log})")

    def ready(self) -> tuple[int, str]:
        p = run(["curl", "-s", "-o", "/dev/stdout", "-w", "\n%{http_code}",
                 f"http://127.0.0.1:{HEALTH_PORT}/readyz"], netns=self.ns, check=False)
        body, _, code = p.stdout.rpartition("\n")
        return (int(code) if code.isdigit() else 0), body

    def stop(self, sig=signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    def pid(self, daemon: str) -> int | None:
        return read_pidfile(os.path.join(self.run_dir, f"{daemon}.pid"))

    def pids(self) -> list[int | None]:
        return [self.pid(d) for d in ("ovsdb-server", "ovs-vswitchd", "ovn-controller")]

    def addresses(self, dev: str) -> str:
        return run(["ip", "-o", "-4", "addr", "show", "dev", dev], netns=self.ns,
                   check=False).stdout

    def reachable(self) -> bool:
        return run(["ping", "-c1", "-W1", NODE_IP], netns=self.peer, check=False).returncode == 0

    def ofctl(self, *args: str) -> str:
        return subprocess.run(["ovs-ofctl", *args], env=self.env, capture_output=True,
                              text=True, check=True).stdout

    def vsctl(self, *args: str) -> str:
        return subprocess.run(["ovs-vsctl", f"--db=unix:{self.run_dir}/db.sock", *args],
                              env=self.env, capture_output=True, text=True, check=True).stdout

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        self.start("--stop")           # the daemons outlive pacific-vswitch
        self.proc.wait(60)
        for ns in (self.ns, self.peer):
            run(["ip", "netns", "del", ns], check=False)


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.close()


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_takes_the_underlay_forwards_and_stop_gives_it_back(node):
    node.started()
    assert NODE_IP in node.addresses("br-phy") and NODE_IP not in node.addresses("eth0")
    assert node.reachable(), "the node's address answers through br-phy"
    code, text = node.ready()
    assert "ovn-remote" in text, text         # ovn-controller runs, told nothing yet
    pids = node.pids()
    assert all(alive(p) for p in pids), pids
    assert node.stop() == 0
    assert all(alive(p) for p in pids), "the daemons outlive pacific-vswitch"
    assert node.reachable()
    node.started()                     # a running one lets `--stop` stop them
    running = node.proc
    stopper = node.start("--stop")
    assert stopper.wait(60) == 0
    node.proc = running
    assert NODE_IP in node.addresses("eth0"), "the address went back to the interface"
    assert node.reachable()
    assert not any(alive(p) for p in pids), "--stop stops every daemon"
    wait_until(lambda: "not starting it again" in open(node.log).read(), 10,
               what="the running pacific-vswitch to see the stop")
    code, text = node.ready()
    assert code != 200 and not any(alive(node.pid(d)) for d in ("ovsdb-server", "ovs-vswitchd")), \
        "the running pacific-vswitch did not start them again"


def test_a_new_pacific_vswitch_adopts_the_running_daemons(node):
    """A restart of the pod (same image): nothing is restarted, nothing lost."""
    node.started()
    pids = node.pids()
    node.ofctl("add-flow", "br-phy", f"{MARK},actions=drop")
    assert node.stop() == 0
    node.started()
    assert node.pids() == pids
    assert "cookie=0x5a11" in node.ofctl("dump-flows", "br-phy")
    with open(node.log) as f:
        assert "ovs-vswitchd adopted" in f.read()


def test_replaced_daemons_replay_the_saved_flows_before_forwarding(node):
    """An upgrade (another version, or --replace-daemons): each daemon replaced,
    ovs-vswitchd's flows saved and replayed under flow-restore-wait."""
    node.started()
    old = node.pids()
    node.ofctl("add-flow", "br-phy", f"{MARK},actions=drop")
    assert node.stop() == 0
    node.started("--replace-daemons")
    assert not set(node.pids()) & set(old), "every daemon is a new process"
    assert not any(alive(p) for p in old)
    assert "cookie=0x5a11" in node.ofctl("dump-flows", "br-phy"), \
        "the flow the previous ovs-vswitchd had is back"
    assert "flow-restore-wait" not in node.vsctl("get", "open_vswitch", ".", "other_config"), \
        "flow-restore-wait cleared"
    assert node.vsctl("get", "open_vswitch", ".",
                      "external_ids:ovn-ofctrl-wait-before-clear").strip().strip('"') == "3000"
    assert node.reachable()
    assert not os.listdir(os.path.join(node.run_dir, "pacific-vswitch-flows")), \
        "the saved tables are replayed once"


def test_an_open_vswitch_of_another_version_is_upgraded_in_place(node):
    """Daemons of Debian's Open vSwitch 3.1 running, a pacific-vswitch of the
    4.0 build starts: it sees the other version, converts conf.db to its
    schema, and replaces each daemon, ovs-vswitchd with its flows."""
    new = ovsinstall.Install(os.environ[ovsinstall.PREFIX_ENV])
    if new.prefix == ovsinstall.SYSTEM_PREFIX or not os.path.exists("/usr/sbin/ovs-vswitchd"):
        pytest.skip("needs Debian's Open vSwitch beside the build")
    old_env = {**os.environ, ovsinstall.PREFIX_ENV: ovsinstall.SYSTEM_PREFIX,
               "PATH": os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                                       if d not in new.dirs)}
    node.started("--no-ovn-controller", env=old_env)
    assert "3.1" in subprocess.run(["ovs-appctl", "-t", f"{node.run_dir}/ovs-vswitchd.ctl",
                                    "version"], env=node.env, capture_output=True,
                                   text=True).stdout
    node.ofctl("add-flow", "br-phy", f"{MARK},actions=drop")
    assert node.stop() == 0
    node.started("--no-ovn-controller")
    with open(node.log) as f:
        text = f.read()
    assert "replacing ovs-vswitchd" in text and "3.1.0, this image has" in text, text
    version = subprocess.run(["ovs-appctl", "-t", f"{node.run_dir}/ovs-vswitchd.ctl",
                              "version"], env=node.env, capture_output=True, text=True).stdout
    assert "3.1" not in version and version, version
    assert subprocess.run([new.program("ovsdb-tool"), "needs-conversion",
                           os.path.join(node.dir, "db", "conf.db"), new.schema("vswitch")],
                          capture_output=True, text=True).stdout.strip() == "no"
    assert "cookie=0x5a11" in node.ofctl("dump-flows", "br-phy")
    assert node.reachable()


def test_a_hosts_own_open_vswitch_is_left_alone(node):
    """Daemons no pacific-vswitch started (the host's, under systemd: here,
    ours with the ownership mark taken away) are neither adopted, replaced nor
    stopped: pacific-vswitch and `--stop` refuse, naming the label to set."""
    node.started()
    pids = node.pids()
    assert node.stop() == 0
    os.unlink(os.path.join(node.run_dir, "pacific-vswitch.owner"))
    for extra in ((), ("--stop",)):
        node.start("--underlay-interface=eth0", *extra)
        assert node.proc.wait(60) == 1
        with open(node.log) as f:
            assert "no pacific-vswitch started them" in f.read()
        assert node.pids() == pids and all(alive(p) for p in pids), extra
        assert NODE_IP in node.addresses("br-phy")
    with open(node.log) as f:
        assert f"{names.HOST_OVS_LABEL}=true" in f.read()
    with open(os.path.join(node.run_dir, "pacific-vswitch.owner"), "w") as f:
        f.write("given back for the fixture's --stop\n")


def test_a_crashed_ovs_vswitchd_is_restarted_with_the_underlay(node):
    node.started()
    old = node.pid("ovs-vswitchd")
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: node.pid("ovs-vswitchd") not in (None, old)
               and alive(node.pid("ovs-vswitchd")), 30, what="a new ovs-vswitchd")
    wait_until(lambda: NODE_IP in node.addresses("br-phy"), 30, what="the address on br-phy")
    wait_until(node.reachable, 30, what="the node reachable again")
    wait_until(lambda: node.ready()[0] == 200, 30, what="ready again")


def test_an_interface_that_does_not_exist_is_refused_by_name(node):
    node.start("--underlay-interface=nosuch0")
    assert node.proc.wait(60) == 1
    with open(node.log) as f:
        text = f.read()
    assert "underlay interface nosuch0 does not exist" in text, text
    assert not any(alive(node.pid(d)) for d in ("ovsdb-server", "ovs-vswitchd")), \
        "nothing left running"
    assert NODE_IP in node.addresses("eth0"), "the node's own address untouched"
