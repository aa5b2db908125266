"""Real packets through what the controller programmed: a 3-node sandbox.

The controller (a real process) programs the sandbox's NB from Pod/Subnet
objects in kube-apiserver; each allocated pod is then plumbed as a sandbox
test pod bound to the controller's switch port with the controller's MAC/IP
(what the node daemon does from the same annotations).  Pods in two namespaces
bound to two subnets, on three nodes, all ping each other; a fixed address is
honoured; a StatefulSet pod re-created on another node keeps its address and is
reachable there.  (Pod <-> node ovn0 is covered with the node daemon in the
`pacific demo` / node tests.)
"""
from __future__ import annotations

import itertools

import pytest

from controller_fixtures import ControlPlane, wait_until
from pacific import contract, names
from pacific.kube import resources as r

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)

SUBNETS = {"blue": ("10.17.0.0/24", "ns-a"), "green": ("10.18.0.0/24", "ns-b")}


@pytest.fixture
def env(sandbox_factory, tmp_path):
    sb = sandbox_factory(nodes=3, services=())
    try:
        with ControlPlane(tmp_path, nb_remote=sb.nb_remote) as cp:
            cp.start_controller("c1", leader_elect=False)
            for subnet, (cidr, ns) in SUBNETS.items():
                # one tenant: pods of both subnets are to talk
                r.create(cp.kube, r.NAMESPACES, {"metadata": {
                    "name": ns, "labels": {names.LABEL_TENANT: "blue-green"}}})
                r.create(cp.kube, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                              "metadata": {"name": subnet},
                                              "spec": {"cidrBlock": cidr, "namespaces": [ns]}})
            try:
                yield sb, cp
            except BaseException:
                print(cp.log("c1")[-3000:])
                raise
    finally:
        sb.down()


def add_pod(sb, cp, ns, name, node, ann=None, sts=None):
    meta = {"name": name, "namespace": ns, "annotations": ann or {}}
    if sts:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts,
                                    "uid": "u", "controller": True}]
    r.create(cp.kube, r.PODS, {"metadata": meta, "spec": {
        "nodeName": node, "containers": [{"name": "c", "image": "pause"}]}}, ns)

    a = wait_until(lambda: contract.own_record(r.get(cp.kube, r.PODS, name, ns)), 30,
                   what=f"allocation of {ns}/{name}")
    return sb.add_test_pod(node, f"{name}", a.port, a.mac, a.ip_cidr, a.gateway)


def test_pods_across_nodes_and_subnets_talk(env):
    sb, cp = env
    pods = [add_pod(sb, cp, "ns-a", "a1", "node1"), add_pod(sb, cp, "ns-a", "a2", "node2"),
            add_pod(sb, cp, "ns-b", "b1", "node3"),
            add_pod(sb, cp, "ns-b", "bfix", "node1", ann={names.ANN_IP_ADDRESS: "10.18.0.77"})]
    assert pods[3].ip == "10.18.0.77"
    assert pods[0].ip.startswith("10.17.0.") and pods[2].ip.startswith("10.18.0.")
    for p in pods:
        wait_until(p.installed, 30, what=f"{p.name} installed")
    failed = [(a.name, b.name) for a, b in itertools.permutations(pods, 2) if not a.ping(b.ip, wait=5)]
    assert not failed, f"no reply for {failed}"


def test_statefulset_pod_moves_node_keeps_address(env):
    sb, cp = env
    r.create(cp.kube, r.STATEFULSETS, {"metadata": {"name": "db", "namespace": "ns-a"},
                                       "spec": {"replicas": 1, "serviceName": "db",
                                                "selector": {"matchLabels": {"app": "db"}},
                                                "template": {"metadata": {"labels": {"app": "db"}},
                                                             "spec": {"containers": [
                                                                 {"name": "db", "image": "db"}]}}}},
             "ns-a")
    peer = add_pod(sb, cp, "ns-b", "peer", "node3")
    db = add_pod(sb, cp, "ns-a", "db-0", "node1", sts="db")
    wait_until(db.installed, 30, what="db-0 installed")
    assert peer.ping(db.ip, wait=5)
    first = db.ip
    sb.delete_test_pod(db)
    r.delete(cp.kube, r.PODS, "db-0", "ns-a", grace_period=0)
    wait_until(lambda: cp.nb.lookup("Logical_Switch_Port", names.pod_lsp_name("ns-a", "db-0"), default=None) is None, 20,
               what="old port removed")
    db2 = add_pod(sb, cp, "ns-a", "db-0", "node2", sts="db")
    assert db2.ip == first
    wait_until(db2.installed, 30, what="db-0 installed on node2")
    assert peer.ping(db2.ip, wait=5)
