"""NetworkPolicy groups against a real NB ovsdb-server: the controller's real
features on the fake API (tests/lib/controller_fakes.py), writing through the
real NB writer, and the rows NB ends up with checked (decision 0031).

The policies of a namespace with one podSelector share one port group: a pod
relabelled changes one group's membership, not one per policy; the group's
ACLs are exactly those of its policies; an earlier version's per-policy group
is removed only once the new group holds the ACLs.
"""
from __future__ import annotations


import pytest

from controller_fakes import drain, make_controller
from ovsdb_fixtures import controller_on_nb
from pacific import names
from pacific.controller import policy
from pacific.controller.policy_index import set_key
from pacific.controller.policy_model import set_name
from pacific.kube import resources as r
from pacific.ovn import ensure

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(90)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)
ROLE_A = {"matchLabels": {"role": "a"}}


@pytest.fixture
def ctl(tmp_path):
    with controller_on_nb(tmp_path, make_controller) as c:
        c.kube.add(r.NAMESPACES, {"metadata": {"name": "x", "labels": {"team": "x"}}})
        yield c


def pod(name: str, labels: dict) -> dict:
    return {"metadata": {"name": name, "namespace": "x", "labels": labels},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "pause"}]}}


def allow_from_everyone(i: int, selector: dict) -> dict:
    return {"metadata": {"name": f"p{i}", "namespace": "x"},
            "spec": {"podSelector": selector,
                     "ingress": [{"from": [{"namespaceSelector": {}}],
                                  "ports": [{"protocol": "TCP", "port": 1000 + i}]}]}}


def groups(nb) -> dict[str, tuple[set, list]]:
    """Pacific's policy port groups: name -> (member port names, ACL rows)."""
    with nb.ovsdb_connection.lock:
        return {pg.name: ({p.name for p in pg.ports}, list(pg.acls))
                for pg in nb.tables[ensure.PG].rows.values()
                if pg.external_ids.get(names.EXT_OWNER_KIND) == names.OWNER_KIND_POLICY_GROUP}


def test_policies_with_one_selector_share_a_group_and_a_relabel_changes_only_it(ctl):
    for name, role in (("a1", "a"), ("b1", "b")):
        ctl.kube.add(r.PODS, pod(name, {"role": role}), "x")
    for i in range(6):
        ctl.kube.add(r.NETWORKPOLICIES, allow_from_everyone(i, ROLE_A if i % 2 else {}), "x")
    drain(ctl)
    pg_a, pg_all = policy.group_name("x", ROLE_A), policy.group_name("x", {})
    have = groups(ctl.nb)
    assert set(have) == {pg_a, pg_all}
    a1, b1 = names.pod_lsp_name("x", "a1"), names.pod_lsp_name("x", "b1")
    assert have[pg_a][0] == {a1} and have[pg_all][0] == {a1, b1}
    # the ingress drop and the nodes' allow are shared, named after the first
    # policy; so is the one allow its policies' rules (same peers) become, with
    # the others it stands for and the union of their ports
    rules = {(acl_.external_ids[names.EXT_OWNER], acl_.external_ids[names.EXT_RULE]): acl_
             for acl_ in have[pg_a][1]}
    assert set(rules) == {("x/p1", "ingress/deny"), ("x/p1", "ingress/nodes"),
                          ("x/p1", "ingress/0")}
    allow = rules[("x/p1", "ingress/0")]
    assert allow.external_ids[names.EXT_ALSO] == "x/p3:ingress/0,x/p5:ingress/0"
    assert all(f"tcp.dst == {p}" in allow.match for p in (1001, 1003, 1005))
    assert all(policy.programmed(ctl.nb, f"x/p{i}") for i in range(6))

    # b1 relabelled to role=a: one group is woken, one membership changes
    feat = ctl.feature("policy")
    old = r.get(ctl.kube, r.PODS, "b1", "x")
    new = {**old, "metadata": {**old["metadata"], "labels": {"role": "a"}}}
    assert feat._on_pod(old, new) == [f"x/{pg_a}"]
    before = ctl.writer.transactions
    r.patch_merge(ctl.kube, r.PODS, "b1", {"metadata": {"labels": {"role": "a"}}}, "x")
    drain(ctl)
    assert groups(ctl.nb)[pg_a][0] == {a1, b1}
    assert ctl.writer.transactions - before == 1

    # one policy of three deleted: its port goes from the allow, the group stays;
    # all deleted: it goes
    r.delete(ctl.kube, r.NETWORKPOLICIES, "p3", "x")
    drain(ctl)
    (allow,) = [a for a in groups(ctl.nb)[pg_a][1] if a.external_ids[names.EXT_RULE] == "ingress/0"]
    assert "tcp.dst == 1003" not in allow.match and "tcp.dst == 1005" in allow.match
    assert allow.external_ids[names.EXT_ALSO] == "x/p5:ingress/0"
    assert not policy.programmed(ctl.nb, "x/p3")
    for i in (1, 5):
        r.delete(ctl.kube, r.NETWORKPOLICIES, f"p{i}", "x")
    drain(ctl)
    assert set(groups(ctl.nb)) == {pg_all}


def test_a_policy_changing_its_selector_moves_between_groups(ctl):
    ctl.kube.add(r.PODS, pod("a1", {"role": "a"}), "x")
    ctl.kube.add(r.NETWORKPOLICIES, allow_from_everyone(0, {}), "x")
    drain(ctl)
    r.patch_merge(ctl.kube, r.NETWORKPOLICIES, "p0", {"spec": {"podSelector": ROLE_A}}, "x")
    drain(ctl)
    assert set(groups(ctl.nb)) == {policy.group_name("x", ROLE_A)}


def test_a_per_policy_group_of_an_earlier_version_goes_once_the_group_holds_the_acls(ctl):
    ctl.kube.add(r.PODS, pod("a1", {"role": "a"}), "x")
    drain(ctl)
    old_pg = "np_0123456789abcdef"          # what an earlier controller wrote for x/p0
    ctl.writer.run([lambda api: ensure.EnsurePortGroup(api, old_pg, {
        names.EXT_OWNER_KIND: names.OWNER_KIND_POLICY, names.EXT_OWNER: "x/p0"})])
    ctl.kube.add(r.NETWORKPOLICIES, allow_from_everyone(0, ROLE_A), "x")
    feat = ctl.feature("policy")
    feat.reconcile("*")          # the new group is not there yet: the old one stays
    assert ctl.nb.lookup(ensure.PG, old_pg, default=None) is not None
    assert feat.queue.pending()   # "*" comes back later, by itself
    drain(ctl)                   # the group is written
    feat.reconcile("*")          # (what the queued "*" does when it is due)
    assert ctl.nb.lookup(ensure.PG, old_pg, default=None) is None
    assert policy.programmed(ctl.nb, "x/p0")


def test_two_identical_policies_share_their_acls_and_both_are_in_force(ctl):
    ctl.kube.add(r.PODS, pod("a1", {"role": "a"}), "x")
    for name in ("twin1", "twin2"):
        ctl.kube.add(r.NETWORKPOLICIES, {**allow_from_everyone(0, ROLE_A),
                                         "metadata": {"name": name, "namespace": "x"}}, "x")
    drain(ctl)
    (members, acls), = groups(ctl.nb).values()
    assert len(acls) == 3            # deny, nodes, the rule: once, named after twin1
    assert {a.external_ids[names.EXT_OWNER] for a in acls} == {"x/twin1"}
    assert policy.programmed(ctl.nb, "x/twin1") and policy.programmed(ctl.nb, "x/twin2")
    r.delete(ctl.kube, r.NETWORKPOLICIES, "twin1", "x")
    drain(ctl)
    (members, acls), = groups(ctl.nb).values()
    assert {a.external_ids[names.EXT_OWNER] for a in acls} == {"x/twin2"}
    assert not policy.programmed(ctl.nb, "x/twin1") and policy.programmed(ctl.nb, "x/twin2")


def test_a_pod_of_another_namespace_changes_only_the_shared_peer_set(ctl):
    """Policies of two namespaces naming `namespaceSelector: {}` share one
    address set; a pod coming and going elsewhere changes only that set."""
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "y"}})
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "z"}})
    ctl.kube.add(r.PODS, pod("a1", {"role": "a"}), "x")
    ctl.kube.add(r.NETWORKPOLICIES, allow_from_everyone(0, {}), "x")
    ctl.kube.add(r.NETWORKPOLICIES, {**allow_from_everyone(1, {}),
                                     "metadata": {"name": "p1", "namespace": "y"}}, "y")
    drain(ctl)
    shared = set_name("x", {"namespaceSelector": {}})
    assert shared == set_name("y", {"namespaceSelector": {}})

    def members():
        return ensure.address_set_addresses(ctl.nb, shared)
    assert len(members()) == 1
    feat = ctl.feature("policy")
    newcomer = {**pod("n1", {}), "metadata": {"name": "n1", "namespace": "z", "labels": {}}}
    ctl.kube.add(r.PODS, newcomer, "z")
    drain(ctl)
    allocated = r.get(ctl.kube, r.PODS, "n1", "z")
    # queued once per namespace naming it: each tenant's turn of the fair queue
    assert feat._on_pod(None, allocated) == [set_key(shared, "x"), set_key(shared, "y")]
    assert len(members()) == 2
    r.delete(ctl.kube, r.PODS, "n1", "z")
    drain(ctl)
    assert len(members()) == 1
