"""Audit meters against a real NB ovsdb-server (decision 0050): the
controller's real features on the fake API (tests/lib/controller_fakes.py),
writing through the real NB writer.  Every logged ACL of a scope (a
namespace's NetworkPolicies, a tenant's isolation) names the scope's one
meter, not fair, whatever the number of ACLs; the meters share the node-wide
cap; a meter goes with the last ACL naming it (no Meter or Meter_Band row
left behind).
"""
from __future__ import annotations


import pytest

from controller_fakes import drain, make_controller
from ovsdb_fixtures import controller_on_nb
from pacific import audit, names
from pacific.kube import resources as r

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)
CAP = 30                     # records/s a node: three meters of 20/s get 10/s each


@pytest.fixture
def ctl(tmp_path):
    with controller_on_nb(tmp_path, make_controller, audit_node_cap=CAP) as c:
        for ns in ("a", "b"):
            c.kube.add(r.NAMESPACES, {"metadata": {"name": ns}})
            c.kube.add(r.PODS, {"metadata": {"name": "p", "namespace": ns, "labels": {"app": ns}},
                                "spec": {"nodeName": "node1",
                                         "containers": [{"name": "c", "image": "pause"}]}}, ns)
        yield c


def settle(ctl) -> None:
    """Every feature's keys, then the meters' reconcile (queued with a delay)."""
    drain(ctl)
    ctl.feature("audit").reconcile("*")


def many_rules(ns: str, n: int, ann: dict) -> dict:
    return {"metadata": {"name": "many", "namespace": ns, "annotations": ann},
            "spec": {"podSelector": {}, "ingress": [
                {"from": [{"ipBlock": {"cidr": f"192.0.{i // 250}.{i % 250}/32"}}],
                 "ports": [{"protocol": "TCP", "port": 1000 + i}]} for i in range(n)]}}


def meters(nb) -> dict[str, tuple]:
    """Meter name -> (fair, [(rate, burst)]) of every meter in NB."""
    with nb.ovsdb_connection.lock:
        return {m.name: (list(m.fair), [(b.rate, b.burst_size) for b in m.bands])
                for m in nb.tables["Meter"].rows.values()}


def logging(nb) -> dict[str, int]:
    """Meter name -> how many logging ACLs name it."""
    out: dict[str, int] = {}
    with nb.ovsdb_connection.lock:
        for row in nb.tables["ACL"].rows.values():
            if row.log:
                for m in row.meter:
                    out[m] = out.get(m, 0) + 1
    return out


def test_a_scope_s_acls_share_one_meter_and_all_meters_share_the_cap(ctl):
    ns_a, ns_b = audit.meter_name("ns", "a"), audit.meter_name("ns", "b")
    ctl.kube.add(r.NETWORKPOLICIES, many_rules("a", 60, {names.ANN_AUDIT: "all"}), "a")
    settle(ctl)
    used = logging(ctl.nb)
    assert set(used) == {ns_a} and used[ns_a] > 60          # every rule's allow and the deny
    assert meters(ctl.nb) == {ns_a: ([False], [(names.AUDIT_RATE, names.AUDIT_BURST)])}
    # another namespace's policy and a tenant's isolation: three meters of one third each
    ctl.kube.add(r.NETWORKPOLICIES, many_rules("b", 2, {names.ANN_AUDIT: "deny"}), "b")
    r.patch_merge(ctl.kube, r.NAMESPACES, "a", {"metadata": {"annotations": {
        names.ANN_AUDIT: "deny"}}})
    settle(ctl)
    isolation = audit.meter_name("tenant", "ns:a")
    assert set(logging(ctl.nb)) == {ns_a, ns_b, isolation}
    third = (CAP // 3, names.AUDIT_BURST * (CAP // 3) // names.AUDIT_RATE)
    assert meters(ctl.nb) == {m: ([False], [third]) for m in (ns_a, ns_b, isolation)}


def test_a_meter_goes_with_the_last_acl_naming_it(ctl):
    ctl.kube.add(r.NETWORKPOLICIES, many_rules("a", 3, {names.ANN_AUDIT: "all"}), "a")
    ctl.kube.add(r.NETWORKPOLICIES, many_rules("b", 3, {names.ANN_AUDIT: "deny"}), "b")
    r.patch_merge(ctl.kube, r.NAMESPACES, "b", {"metadata": {"annotations": {
        names.ANN_AUDIT: "deny"}}})
    settle(ctl)
    assert len(meters(ctl.nb)) == 3
    r.patch_merge(ctl.kube, r.NETWORKPOLICIES, "many", {"metadata": {"annotations": {
        names.ANN_AUDIT: "none"}}}, "a")
    r.delete(ctl.kube, r.NETWORKPOLICIES, "many", "b")
    settle(ctl)
    assert set(meters(ctl.nb)) == {audit.meter_name("tenant", "ns:b")}
    # (the one left has the whole rate again)
    assert meters(ctl.nb)[audit.meter_name("tenant", "ns:b")][1] == [
        (names.AUDIT_RATE, names.AUDIT_BURST)]
    r.patch_merge(ctl.kube, r.NAMESPACES, "b", {"metadata": {"annotations": {
        names.ANN_AUDIT: None}}})
    settle(ctl)
    assert meters(ctl.nb) == {} and logging(ctl.nb) == {}
    with ctl.nb.ovsdb_connection.lock:
        assert not ctl.nb.tables["Meter_Band"].rows       # no band left behind either
