"""Pure logic of pacific.sandbox: naming, addressing, validation, state file, and
process identity (pid + start time, zombies count as dead)."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading

import pytest

from pacific import names
from pacific.sandbox import pods
from pacific.sandbox.cluster import Sandbox
from pacific.sandbox.proc import SandboxError, alive, start_time, stop_pid, wait_for
from pacific.sandbox.state import StateFile


@pytest.fixture(autouse=True)
def sandbox_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(names.SANDBOX_DIR_ENV, str(tmp_path))
    return tmp_path


def test_names_and_addresses(sandbox_dir):
    sb = Sandbox("ab1", nodes=3)
    assert sb.dir == os.path.join(sandbox_dir, "ab1")
    assert (sb.central_netns, sb.external_netns) == ("pac-ab1-central", "pac-ab1-ext")
    assert [n.name for n in sb.nodes] == ["node1", "node2", "node3"]
    assert [n.netns for n in sb.nodes] == ["pac-ab1-node1", "pac-ab1-node2", "pac-ab1-node3"]
    assert [n.underlay_ip for n in sb.nodes] == ["192.168.77.11", "192.168.77.12", "192.168.77.13"]
    assert (sb.central_ip, sb.external_ip) == ("192.168.77.1", "192.168.77.254")
    assert sb.nb_remote == f"unix:{sb.dir}/central/nb.sock"
    assert sb.sb_tcp_remote == "tcp:192.168.77.1:6642"
    assert sb.nodes[0].ovs_remote == f"unix:{sb.dir}/node1/db.sock"
    assert sb.nodes[0].mtu == names.SANDBOX_UNDERLAY_MTU - names.POD_MTU_OVERHEAD
    assert sb.node("node2") is sb.node(2) is sb.nodes[1]
    with pytest.raises(SandboxError, match="no node 'node9'"):
        sb.node("node9")


def test_the_three_families_of_a_sandboxs_cluster(sandbox_dir):
    """What the controllers, the API server and the Nodes get: IPv4, both
    (--dual-stack, IPv4 first), IPv6 only (--ipv6-only, on a dual-stack
    underlay)."""
    from pacific.sandbox import controllers
    from pacific.sandbox.k8s import clusterdns
    v4, dual, six = (Sandbox(n, nodes=1, **kw) for n, kw in (
        ("f4", {}), ("fd", {"dual_stack": True}), ("f6", {"ipv6_only": True})))
    assert controllers.dual_stack_args(v4) == [] and controllers.service_cidrs(v4) == [
        names.SERVICE_CIDR]
    assert controllers.service_cidrs(dual) == [names.SERVICE_CIDR, names.SANDBOX_SERVICE_CIDR6]
    args = controllers.dual_stack_args(six)
    assert args == ["--default-cidr", names.SANDBOX_DEFAULT_CIDR6,
                    "--service-cidr", names.SANDBOX_SERVICE_CIDR6,
                    "--join-cidr", names.SANDBOX_JOIN_CIDR6]
    assert six.dual_stack and six.central_ip6      # the underlay keeps both families
    assert (v4.nodes[0].node_ip, dual.nodes[0].node_ip, six.nodes[0].node_ip) == (
        "192.168.77.11", "192.168.77.11,fd00:77::b", "fd00:77::b")
    assert (clusterdns.address(v4), clusterdns.address(six)) == ("10.96.0.10", "fd00:96::a")
    assert (clusterdns.listen_address(v4), clusterdns.listen_address(six)) == (
        v4.central_ip, six.central_ip6)


@pytest.mark.parametrize("bad", ["", "A", "a-b", "a_b", "x" * 25, "../x"])
def test_invalid_sandbox_names_are_refused(bad):
    with pytest.raises(SandboxError, match="invalid sandbox name"):
        Sandbox(bad)


def test_node_count_and_mtu_bounds():
    with pytest.raises(SandboxError, match="nodes must be between"):
        Sandbox("x", nodes=0)
    with pytest.raises(SandboxError, match="too small"):
        Sandbox("x", nodes=1, underlay_mtu=1000)
    assert Sandbox("x", nodes=2, underlay_mtu=9000).nodes[0].mtu == 8900


def test_node_count_comes_from_the_state_file():
    with Sandbox("s1", nodes=5).state.update() as st:
        st["nodes"] = 5
    assert len(Sandbox("s1").nodes) == 5
    assert len(Sandbox("s2").nodes) == 3


def test_too_long_directory_is_refused(monkeypatch, tmp_path):
    from pacific.sandbox import bringup
    monkeypatch.setenv(names.SANDBOX_DIR_ENV, str(tmp_path / ("d" * 90)))
    with pytest.raises(SandboxError, match="too long for unix socket paths"):
        bringup.check_paths(Sandbox("x"))


def test_state_file_updates_are_not_lost_between_threads(sandbox_dir):
    sf = StateFile(str(sandbox_dir / "s"), "s")
    assert sf.read()["daemons"] == {}

    def bump(i):
        for j in range(20):
            with sf.update() as st:
                st["daemons"][f"d{i}.{j}"] = {"pid": i}
    threads = [threading.Thread(target=bump, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(sf.read()["daemons"]) == 80


def test_unreadable_state_file_reads_as_empty(sandbox_dir):
    sf = StateFile(str(sandbox_dir), "s")
    with open(sf.path, "w") as f:
        f.write("{truncated")
    assert sf.read()["netns"] == []


def test_pod_host_ifname_fits_in_15_characters():
    assert pods.host_ifname("web") == "tp-web"
    long = pods.host_ifname("a-very-long-pod-name")
    assert len(long) <= 15 and long.startswith("tp-")
    assert long != pods.host_ifname("a-very-long-pod-namf")


@pytest.mark.parametrize("args,match", [
    (("Bad_Pod", "0a:00:00:00:00:01", "10.0.0.2/24", None), "invalid test pod name"),
    (("p", "0A:00:00:00:00:01", "10.0.0.2/24", None), "invalid MAC"),
    (("p", "0a:00:00:00:00:01", "10.0.0.2", None), "needs a prefix length"),
    (("p", "0a:00:00:00:00:01", "10.0.0.300/24", None), "invalid address"),
    (("p", "0a:00:00:00:00:01", "10.0.0.2/24", "10.0.1.1"), "outside 10.0.0.0/24"),
])
def test_test_pod_input_is_validated(args, match):
    with pytest.raises(SandboxError, match=match):
        pods._validate(*args)


def test_stop_pid_handles_zombies_and_reused_pids():
    p = subprocess.Popen(["sleep", "60"])
    started = start_time(p.pid)
    assert alive(p.pid, started)
    assert not alive(p.pid, started + 1)          # same pid, other start time: not ours
    assert not stop_pid(p.pid, started + 1)       # so it is left alone
    assert alive(p.pid)
    assert stop_pid(p.pid, started, what="sleep")
    assert not alive(p.pid)
    q = subprocess.Popen(["true"])
    wait_for(lambda: not alive(q.pid), 5, "true to exit")  # a zombie until reaped
    assert not stop_pid(q.pid)
    q.wait()


def test_stop_pid_escalates_to_sigkill(caplog):
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    start = start_time(p.pid)
    with caplog.at_level(logging.WARNING, logger="pacific.sandbox.proc"):
        assert stop_pid(p.pid, start, what="stubborn", timeout=0.2)
    assert "stubborn" in caplog.text and "sending SIGKILL" in caplog.text
    assert not alive(p.pid, start)
    # stop_pid reaps its own children: when it got there first, Popen finds no
    # status left and says 0 (that race failed one suite run)
    assert p.wait(5) in (-9, 0)
    p.stdout.close()


def test_wait_for_names_what_timed_out():
    with pytest.raises(SandboxError, match="waiting for the moon.*last error: boom"):
        wait_for(lambda: (_ for _ in ()).throw(ValueError("boom")), 0.05, "the moon")
    assert wait_for(lambda: 42, 1, "answer") == 42


def test_sandbox_exec_options_before_the_double_dash_are_options():
    from pacific.cli.main import parse_args
    a = parse_args(["sandbox", "exec", "default/web", "--name", "t1", "--", "ping", "-c1", "10.0.0.1"])
    assert (a.pod, a.name, a.argv) == ("default/web", "t1", ["ping", "-c1", "10.0.0.1"])
    a = parse_args(["sandbox", "exec", "--name", "t1", "ns/p", "--", "ls", "--name", "--"])
    assert (a.pod, a.name, a.argv) == ("ns/p", "t1", ["ls", "--name", "--"])
    a = parse_args(["sandbox", "exec", "ns/p", "true"])
    assert (a.name, a.argv) == ("default", ["true"])
    with pytest.raises(SystemExit):
        parse_args(["tenant", "list", "--", "x"])


def test_a_rollout_is_done_when_every_pod_runs_the_current_template():
    from pacific.sandbox.k8s.rollout import rolled

    def ds(gen, observed, **st):
        return {"kind": "DaemonSet", "metadata": {"generation": gen},
                "status": {"observedGeneration": observed, **st}}
    done = dict(desiredNumberScheduled=3, updatedNumberScheduled=3, numberAvailable=3,
                numberReady=3)
    assert rolled(ds(2, 2, **done))
    assert not rolled(ds(3, 2, **done))          # the new template not seen yet
    assert not rolled(ds(2, 2, **{**done, "updatedNumberScheduled": 2}))
    assert not rolled(ds(2, 2, **{**done, "numberAvailable": 2}))
    dep = {"kind": "Deployment", "metadata": {"generation": 4}, "spec": {"replicas": 2},
           "status": {"observedGeneration": 4, "updatedReplicas": 2, "availableReplicas": 2,
                      "replicas": 2}}
    assert rolled(dep)
    assert not rolled({**dep, "status": {**dep["status"], "replicas": 3}})   # an old one left


def test_central_pods_members_remotes_and_host_dirs(sandbox_dir):
    """--central-pods: OVN central on the first three nodes (one with fewer),
    Pacific over TLS to their addresses, the tools through their sockets in each
    node's /run/pacific/central, the databases in its /var/lib/pacific/central."""
    from pacific.sandbox import nodedaemons
    from pacific.sandbox.k8s import central
    sb = Sandbox("cp1", nodes=4, central_pods=True)
    assert sb.deploy and sb.kubelet
    assert [n.name for n in central.members(sb)] == ["node1", "node2", "node3"]
    assert sb.nb_tcp_remote == ",".join(f"ssl:192.168.77.{i}:{names.OVN_NB_PORT}"
                                        for i in (11, 12, 13))
    assert sb.sb_tcp_remote.count("ssl:") == 3 and "192.168.77.14" not in sb.sb_tcp_remote
    n1 = sb.nodes[0]
    binds = nodedaemons.deploy_host_dirs(n1)
    run_dir = os.path.join(binds["/run/pacific"], "central")
    assert central.host_dirs(n1) == {central.DB_DIR: binds[central.DB_DIR],
                                     central.RUN_DIR: run_dir}
    assert sb.nb_remote.split(",")[0] == f"unix:{run_dir}/nb.sock"
    assert central.db_file(n1, "sb") == os.path.join(binds[central.DB_DIR], "sb.db")
    assert [n.name for n in central.members(Sandbox("cp2", nodes=2, central_pods=True))] \
        == ["node1"]
    with pytest.raises(SandboxError, match="choose one"):
        Sandbox("cp3", nodes=3, central_pods=True, ha=True)
