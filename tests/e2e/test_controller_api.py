"""pacific-controller against a real NB ovsdb-server and etcd + kube-apiserver (no nodes).

Covers the controller's contract: allocation and annotations, fixed addresses,
conflicts and bad input (Events, status, error annotations), Subnet lifecycle,
StatefulSet address keeping, restart after SIGKILL (rebuild, stale cleanup) and
leader failover.  Packets are tested in test_controller_sandbox.py.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import signal
import time

import pytest

from controller_fixtures import (QUARANTINE, subnet_condition, allocated, ann, cp, events_for, lsp,  # noqa: F401
                                 make_pod, make_subnet, record, refused, subnet_ready, wait_until)
import nb_commands
from pacific import names
from pacific.kube import resources as r
from pacific.ovn import Owner

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)
def test_topology_node_and_pod_allocation(cp):
    r.create(cp.kube, r.NODES, {"metadata": {"name": "node1"}})
    node = wait_until(lambda: (r.get(cp.kube, r.NODES, "node1")["metadata"].get("annotations") or {})
                      .get(names.ANN_NODE_JOIN_IP), 20, what="node annotation")
    assert ipaddress.ip_interface(node).network == ipaddress.ip_network(names.JOIN_CIDR)
    assert cp.nb.lookup("Logical_Router", names.CLUSTER_ROUTER, default=None) is not None
    assert lsp(cp, names.node_lsp_name("node1")) is not None

    make_pod(cp, "web-0")
    a = allocated(cp, "web-0")
    assert a.subnet == names.DEFAULT_SUBNET
    assert ipaddress.ip_address(a.ip) in ipaddress.ip_network(names.DEFAULT_CIDR)
    assert a.cidr == names.DEFAULT_CIDR and a.gateway == "10.16.0.1"
    port = lsp(cp, a.port)
    want = f"{a.mac} {a.ip}"
    assert port.addresses == [want] and port.port_security == [want]
    # only the pod's node may bind it (chassis name = node name)
    assert port.options == {names.LSP_OPT_REQUESTED_CHASSIS: "node1"}
    ip = r.get(cp.kube, r.IPS, "web-0.default")
    assert ip["spec"]["ipAddress"] == a.ip and ip["spec"]["nodeName"] == "node1"
    # host-network pods get nothing
    r.create(cp.kube, r.PODS, {"metadata": {"name": "host", "namespace": "default"},
                               "spec": {"nodeName": "node1", "hostNetwork": True,
                                        "containers": [{"name": "c", "image": "x"}]}}, "default")
    # deletion releases everything
    r.delete(cp.kube, r.PODS, "web-0", "default", grace_period=0)
    wait_until(lambda: lsp(cp, names.pod_lsp_name("default", "web-0")) is None and r.get(cp.kube, r.IPS, "web-0.default") is None,
               20, what="release of web-0")
    assert names.ANN_ALLOCATION not in ann(cp, "host")


def test_fixed_address_and_conflicts(cp):
    # a pod may ask for a Subnet bound to its namespace only (test_attacks tries others)
    r.create(cp.kube, r.NAMESPACES, {"metadata": {"name": "fx"}})
    make_subnet(cp, "blue", "10.17.0.0/24", excludeIps=["10.17.0.100..10.17.0.110"],
                namespaces=["fx"])
    wait_until(lambda: subnet_ready(cp.kube, "blue"), 20, what="blue ready")
    make_pod(cp, "fixed", ns="fx", ann={names.ANN_LOGICAL_SWITCH: "blue", names.ANN_IP_ADDRESS: "10.17.0.50",
                               names.ANN_MAC_ADDRESS: "0a:00:00:00:00:50"})
    a = allocated(cp, "fixed", "fx")
    assert a.ip == "10.17.0.50" and a.mac == "0a:00:00:00:00:50"
    cases = {
        "taken": ("10.17.0.50", "10.17.0.50 in subnet blue is already in use"),
        "outside": ("10.99.0.5", "10.99.0.5"),
        "excluded": ("10.17.0.105", "10.17.0.105"),
    }
    for name, (ip, _) in cases.items():
        make_pod(cp, name, ns="fx", ann={names.ANN_LOGICAL_SWITCH: "blue", names.ANN_IP_ADDRESS: ip})
    make_pod(cp, "nosubnet", ns="fx", ann={names.ANN_LOGICAL_SWITCH: "does-not-exist"})
    for name, (ip, text) in cases.items():
        msg = refused(cp, name, "fx")
        assert text in msg, msg
        assert names.ANN_ALLOCATION not in ann(cp, name, "fx")
        assert lsp(cp, names.pod_lsp_name("fx", f"{name}")) is None
        wait_until(lambda: events_for(cp, name, "fx"), 10, what=f"event on {name}")
    assert "does-not-exist" in refused(cp, "nosubnet", "fx")
    # nothing else broke: the fixed pod still has its port, a new pod still allocates
    assert lsp(cp, names.pod_lsp_name("fx", "fixed")) is not None
    make_pod(cp, "ok", ns="fx", ann={names.ANN_LOGICAL_SWITCH: "blue"})
    assert allocated(cp, "ok", "fx").ip != "10.17.0.50"
    # the holder goes away: the waiting pod is told the address rests (never who
    # held it), then gets it once the quarantine is over
    r.delete(cp.kube, r.PODS, "fixed", "fx", grace_period=0)
    error = lambda: ann(cp, "taken", "fx").get(names.ANN_ALLOCATION_ERROR) or ""  # noqa: E731
    msg = wait_until(lambda: "quarantined until" in error() and error(), QUARANTINE,
                     what="the waiting pod told the freed address is quarantined")
    assert "10.17.0.50" in msg and "fixed" not in msg, msg
    assert allocated(cp, "taken", "fx").ip == "10.17.0.50"
    assert names.ANN_ALLOCATION_ERROR not in ann(cp, "taken", "fx")


def test_subnet_validation_and_lifecycle(cp):
    make_subnet(cp, "bad", "10.20.0.0/33")
    make_subnet(cp, "overlap", "10.16.128.0/24")
    make_subnet(cp, "joinish", "100.64.5.0/24")
    wait_until(lambda: subnet_condition(cp, "bad").get("status") == "False", 20, what="bad refused")
    assert "10.20.0.0/33" in subnet_condition(cp, "bad")["message"]
    wait_until(lambda: subnet_condition(cp, "overlap").get("status") == "False", 20, what="overlap refused")
    assert names.DEFAULT_SUBNET in subnet_condition(cp, "overlap")["message"]
    wait_until(lambda: subnet_condition(cp, "joinish").get("status") == "False", 20, what="join overlap refused")
    assert cp.nb.lookup("Logical_Switch", "overlap", default=None) is None
    assert cp.nb.lookup("Logical_Switch", "bad", default=None) is None
    # a namespace bound through Subnet.spec.namespaces
    r.create(cp.kube, r.NAMESPACES, {"metadata": {"name": "team"}})
    make_subnet(cp, "green", "10.21.0.0/16", namespaces=["team"])
    wait_until(lambda: subnet_ready(cp.kube, "green"), 20, what="green ready")
    assert cp.nb.lookup("Logical_Router_Port", names.router_port_name("green")).networks == ["10.21.0.1/16"]
    make_pod(cp, "t1", ns="team")
    assert allocated(cp, "t1", "team").subnet == "green"
    wait_until(lambda: (r.get(cp.kube, r.SUBNETS, "green").get("status") or {}).get("usedIPs") == 1,
               20, what="usedIPs")
    # deleting a subnet in use is refused with the reason; it goes once unused
    r.delete(cp.kube, r.SUBNETS, "green")
    wait_until(lambda: subnet_condition(cp, "green").get("reason") == "SubnetInUse", 20, what="in-use refusal")
    assert "team/t1" in subnet_condition(cp, "green")["message"]
    assert cp.nb.lookup("Logical_Switch", "green", default=None) is not None
    # while it is being deleted, its pods keep their addresses but new pods get none
    make_pod(cp, "t2", ns="team")
    wait_until(lambda: "being deleted" in ann(cp, "t2", "team").get(names.ANN_ALLOCATION_ERROR, ""),
               20, what="SubnetTerminating refusal")
    assert record(cp, "t1", "team") is not None
    r.delete(cp.kube, r.PODS, "t2", "team", grace_period=0)
    r.delete(cp.kube, r.PODS, "t1", "team", grace_period=0)
    wait_until(lambda: r.get(cp.kube, r.SUBNETS, "green") is None, 20, what="green deleted")
    wait_until(lambda: cp.nb.lookup("Logical_Switch", "green", default=None) is None, 10, what="switch gone")
    # the malformed subnet fixed by the user becomes ready
    r.patch_merge(cp.kube, r.SUBNETS, "bad", {"spec": {"cidrBlock": "10.20.0.0/16"}})
    wait_until(lambda: subnet_ready(cp.kube, "bad"), 20, what="fixed subnet ready")


def test_statefulset_pod_keeps_address(cp):
    r.create(cp.kube, r.STATEFULSETS, {"metadata": {"name": "db", "namespace": "default"},
                                       "spec": {"replicas": 2, "serviceName": "db",
                                                "selector": {"matchLabels": {"app": "db"}},
                                                "template": {"metadata": {"labels": {"app": "db"}},
                                                             "spec": {"containers": [
                                                                 {"name": "db", "image": "db"}]}}}},
             "default")
    make_pod(cp, "db-1", node="node1", sts="db")
    first = allocated(cp, "db-1").ip
    r.delete(cp.kube, r.PODS, "db-1", "default", grace_period=0)
    wait_until(lambda: lsp(cp, names.pod_lsp_name("default", "db-1")) is None, 20, what="port removed")
    assert r.get(cp.kube, r.IPS, "db-1.default") is not None
    make_pod(cp, "other", node="node2")           # must not get db-1's address
    assert allocated(cp, "other").ip != first
    make_pod(cp, "db-1", node="node2", sts="db")
    assert allocated(cp, "db-1").ip == first
    wait_until(lambda: r.get(cp.kube, r.IPS, "db-1.default")["spec"]["nodeName"] == "node2", 20,
               what="IP object follows the node")
    # the StatefulSet shrinks below the ordinal: the address goes
    r.delete(cp.kube, r.PODS, "db-1", "default", grace_period=0)
    r.patch_merge(cp.kube, r.STATEFULSETS, "db", {"spec": {"replicas": 1}}, "default")
    wait_until(lambda: r.get(cp.kube, r.IPS, "db-1.default") is None, 20, what="IP released")


def test_restart_rebuilds_and_cleans_stale(cp):
    for i in range(20):
        make_pod(cp, f"p{i}")
    before = {i: allocated(cp, f"p{i}").ip for i in range(20)}
    cp.kill_controller("c1", signal.SIGKILL)
    # while it is down: pods come and go, someone leaves a stale NB port
    for i in range(10):
        r.delete(cp.kube, r.PODS, f"p{i}", "default", grace_period=0)
    for i in range(20, 30):
        make_pod(cp, f"p{i}")
    cp.nb.commit(nb_commands.add_switch_port(cp.nb, names.DEFAULT_SUBNET, "ghost.default",
                                       owner=Owner(names.OWNER_KIND_POD, "default/ghost"),
                                       addresses=["0a:58:0a:10:ff:01 10.16.255.1"]))
    cp.start_controller("c2")
    for i in range(10, 20):
        assert allocated(cp, f"p{i}").ip == before[i]
    now = {i: allocated(cp, f"p{i}").ip for i in range(10, 30)}
    assert len(set(now.values())) == 20, "an address was handed out twice"
    wait_until(lambda: lsp(cp, names.pod_lsp_name("default", "ghost")) is None, 30, what="stale port removed")
    wait_until(lambda: all(r.get(cp.kube, r.IPS, f"p{i}.default") is None for i in range(10)), 30,
               what="stale IP objects removed")
    assert all(lsp(cp, names.pod_lsp_name("default", f"p{i}")) is None for i in range(10))


def test_leader_failover(cp):
    cp.start_controller("c2")
    make_pod(cp, "before")
    allocated(cp, "before")
    assert cp.leader() == "c1"
    # c2 watches the Lease before c1 dies (a candidate waits a lease duration
    # from its first sight of the holder: started late on a loaded machine, it
    # would measure its own start-up, not the failover)
    wait_until(lambda: "c2 is a candidate" in cp.log("c2"), 30, what="c2 a candidate")
    t0 = time.monotonic()
    cp.kill_controller("c1", signal.SIGKILL)
    make_pod(cp, "after")            # created while nobody leads
    a = allocated(cp, "after", timeout=30)
    # the fixture's --lease-duration is 3 s: the address comes within lease + 2 s
    took = time.monotonic() - t0
    timeline = [ln for ln in cp.log("c2").splitlines()
                if any(w in ln for w in ("taking over", "became the leader", "caches synced",
                                         "IPAM rebuilt", "default/after", "controller ready in"))]
    assert took <= 3 + 2, f"{took:.1f} s after c1's kill; c2: " + " | ".join(timeline)
    assert cp.leader() == "c2"
    assert a.ip != record(cp, "before").ip
    # a clean stop releases the Lease at once
    cp.start_controller("c3")
    cp.kill_controller("c2", signal.SIGTERM)
    wait_until(lambda: cp.leader() == "c3", 10, what="c3 takes over after SIGTERM")


def test_churn_with_sigkill_restarts(cp):
    """Hundreds of pods created/deleted while the controller is SIGKILLed and
    restarted: no duplicate address, no leaked IP object or NB port, every live
    pod allocated with a matching port."""
    import random
    rng = random.Random(7)
    live: set[str] = set()
    n = 0
    tags = iter(f"c{i}" for i in range(2, 10))
    current = "c1"
    for rnd in range(4):
        for _ in range(80):
            make_pod(cp, f"ch{n}", node=f"node{n % 3 + 1}")
            live.add(f"ch{n}")
            n += 1
        for name in rng.sample(sorted(live), 30):
            r.delete(cp.kube, r.PODS, name, "default", grace_period=0)
            live.discard(name)
        cp.kill_controller(current, signal.SIGKILL)   # mid-flight
        current = next(tags)
        cp.start_controller(current)
    # and a standby, as a Deployment's second replica: a leader that cannot renew
    # its 3 s lease on a loaded machine steps down and exits, the standby goes on
    standby = next(tags)
    cp.start_controller(standby)
    wait_until(lambda: cp.leader() in (current, standby), 30, what="a new controller leading")
    addrs = {name: allocated(cp, name, timeout=60).ip for name in sorted(live)}
    assert len(set(addrs.values())) == len(addrs), "duplicate address"

    def converged():
        items, _ = r.list_(cp.kube, r.IPS)
        ips = {i["spec"]["pod"]: i["spec"]["ipAddress"] for i in items if i["spec"]["namespace"] == "default"}
        ports = {row.name: row.addresses for row in cp.nb.rows_owned("Logical_Switch_Port", names.OWNER_KIND_POD)}
        return ips if set(ips) == live and set(ports) == {names.pod_lsp_name("default", p) for p in live} else None
    ips = wait_until(converged, 60, interval=0.5, what="no leaked IP objects / ports")
    assert ips == addrs
    for name, ip in addrs.items():
        assert lsp(cp, names.pod_lsp_name("default", f"{name}")).addresses[0].endswith(" " + ip)


def test_a_leader_that_loses_its_lease_stops_writing_and_exits(cp):
    """Another holder takes the Lease (a partition healed the other way, a
    replica that renewed first): the old leader must not campaign again in the
    same process, nor commit anything after; it exits with status 1."""
    make_pod(cp, "held")
    allocated(cp, "held")
    p = cp.controllers["c1"]
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    r.patch_merge(cp.kube, r.LEASES, names.CONTROLLER_NAME, {"spec": {
        "holderIdentity": "intruder", "leaseDurationSeconds": 3600, "renewTime": now,
        "acquireTime": now}}, names.CONTROLLER_LEASE_NAMESPACE)
    assert p.wait(15) == 1
    assert "leadership lost; exiting" in cp.log("c1")
    ports_before = {row.name for row in cp.nb.rows_owned("Logical_Switch_Port", names.OWNER_KIND_POD)}
    # no leader: nobody may program it (the only controller has exited, so no
    # write can still come: nothing to wait for)
    make_pod(cp, "orphan")
    assert {row.name for row in cp.nb.rows_owned("Logical_Switch_Port", names.OWNER_KIND_POD)} \
        == ports_before
    assert record(cp, "orphan") is None


def test_a_leader_whose_nb_writes_keep_failing_gives_up(cp):
    """NB wedged (its server stopped, transactions hang): after --nb-failure-exit
    seconds without a successful write the leader releases the Lease and exits
    with status 1, instead of holding the cluster for an hour; a standby leads
    and, once NB answers, programs what was waiting."""
    cp.start_controller("c2", extra=("--nb-failure-exit", "3"))
    cp.kill_controller("c1", signal.SIGTERM)
    wait_until(lambda: cp.leader() == "c2", 15, what="c2 leading")
    make_pod(cp, "before")
    allocated(cp, "before")
    p = cp.controllers["c2"]
    cp.start_controller("c3")                      # a standby, connected to NB
    wait_until(lambda: "pacific-controller c3 starting" in cp.log("c3"), 30, what="c3 up")
    os.kill(cp.nbdb.proc.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        make_pod(cp, "during")
        # 3 s of failing writes, then the Lease is released and c3 takes it:
        # bounded, not the 30 s transaction timeout nor forever
        wait_until(lambda: cp.leader() == "c3", 12, what="c3 leading after c2 gave up")
        assert time.monotonic() - t0 < 12
    finally:
        os.kill(cp.nbdb.proc.pid, signal.SIGCONT)
    assert p.wait(40) == 1
    assert "NB writes have failed for" in cp.log("c2")
    assert allocated(cp, "during", timeout=40).ip != allocated(cp, "before").ip
