"""Tenant model, the tenant feature on the fakes, and private Subnets' ACL."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from controller_fakes import drain, make_controller
from pacific import names
from pacific.controller import model
from pacific.controller.subnet import private_acls
from pacific.controller.tenant import (isolation_acls, isolation_frame_match,
                                       isolation_local_match, isolation_match)
from pacific.tenancy import GLOBAL, group_name, own_tenant, tenant_of
from pacific.kube import resources as r
from pacific.ovn import acl, ensure

GLOBALS = frozenset(names.DEFAULT_GLOBAL_NAMESPACES)


def ns(name, tenant=None):
    labels = {} if tenant is None else {names.LABEL_TENANT: tenant}
    return {"metadata": {"name": name, "labels": labels}}


@pytest.mark.parametrize("obj,name,want", [
    (ns("a"), "a", ("ns:a", None)),
    (ns("b", "a"), "b", ("a", None)),
    (ns("c", "global"), "c", (GLOBAL, None)),
    (ns("kube-system"), "kube-system", (GLOBAL, None)),
    (ns("kube-system", "ops"), "kube-system", ("ops", None)),
    (None, "gone", ("ns:gone", None)),
])
def test_tenant_of(obj, name, want):
    assert tenant_of(obj, name, GLOBALS) == want


def test_an_empty_label_names_no_tenant():
    t, problem = tenant_of(ns("x", ""), "x", GLOBALS)
    assert t == own_tenant("x") and names.LABEL_TENANT in problem


def test_a_namespaces_name_grants_nothing():
    # named `global`: not global; named like a tenant label: not that tenant
    assert tenant_of(ns("global"), "global", GLOBALS) == ("ns:global", None)
    acme = tenant_of(ns("acme"), "acme", GLOBALS)[0]
    assert acme != tenant_of(ns("acme-web", "acme"), "acme-web", GLOBALS)[0] == "acme"
    # no label value spells an own tenant: values hold no ':' (and ours are refused)
    t, problem = tenant_of(ns("x", "ns:acme"), "x", GLOBALS)
    assert t == own_tenant("x") and problem
    assert group_name(acme) != group_name("acme")


def test_group_names_are_ovn_identifiers_and_differ():
    a, b = group_name("team-a"), group_name("team.a")
    assert a != b and a.replace("_", "").isalnum()
    m = isolation_match("team-a")
    assert f"@{a}" in m and f"${a}_ip4" in m and f"${names.PG_ISOLATED}_ip4" in m


def test_isolation_drops_arp_of_another_isolated_tenant_by_its_sender_address():
    a = group_name("team-a")
    assert isolation_frame_match("team-a") == (
        f"outport == @{a} && arp && arp.spa == ${names.PG_ISOLATED}_ip4 && arp.spa != ${a}_ip4")
    specs = isolation_acls("team-a")
    assert [s.match for s in specs] == [isolation_match("team-a"), isolation_frame_match("team-a")]
    specs = isolation_acls("team-a", ipv6=True)          # where pods may have IPv6
    assert [s.match for s in specs] == [isolation_match("team-a"), isolation_frame_match("team-a"),
                                        isolation_match("team-a", 6),
                                        isolation_local_match("team-a")]
    assert "ip6.src == $pacific_isolated_ip6 && ip6.src != $pt_" in specs[2].match
    assert specs[3].match.endswith("ip6 && ip6.src == {::, fe80::/10}")
    assert {(s.direction, s.priority, s.action) for s in specs} == {
        ("to-lport", names.PRIO_ACL_ISOLATION_DROP, "drop")}
    # OVN installs no flow for `!ip4`, `eth.type !=` or `inport != @group`, and
    # expands a to-lport `inport == @group` to the receiving chassis' ports only
    assert not any(w in s.match for s in specs for w in ("!ip4", "eth.type", "inport"))


def pod_body(name, ns_="default"):
    return {"metadata": {"name": name, "namespace": ns_},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "pause"}]}}


def test_a_new_pod_joins_its_tenant_in_the_transaction_of_its_port():
    ctl = make_controller()
    ctl.kube.add(r.NAMESPACES, ns("team-a", "team-a"))
    drain(ctl)
    ctl.kube.add(r.PODS, pod_body("web", "team-a"), "team-a")
    drain(ctl)
    port = names.pod_lsp_name("team-a", "web")
    cmds = [c for w, c in ctl.writer.writes if w == f"pod port {port}"][0]   # the first write
    kinds = [type(c).__name__ for c in cmds]
    assert kinds.index("EnsurePort") < kinds.index("PortGroupAddPorts")
    joined = {c.name for c in cmds if isinstance(c, ensure.PortGroupAddPorts) and c.members == [port]}
    assert joined == {names.PG_ISOLATED, group_name("team-a"), names.PG_MCAST_OFF}
    isolation = [c for c in cmds if isinstance(c, acl.EnsureACLs)]
    assert isolation and isolation[0].specs == isolation_acls("team-a")


def test_a_global_namespaces_pod_joins_no_group():
    ctl = make_controller()
    ctl.kube.add(r.NAMESPACES, ns("kube-system"))
    ctl.kube.add(r.PODS, pod_body("dns", "kube-system"), "kube-system")
    drain(ctl)
    port = names.pod_lsp_name("kube-system", "dns")
    cmds = [c for w, cs in ctl.writer.writes if w == f"pod port {port}" for c in cs]
    # (multicast's group, which every pod joins, is not a tenant's)
    assert cmds and [c.name for c in cmds if isinstance(c, ensure.PortGroupAddPorts)] == [
        names.PG_MCAST_OFF]


def test_a_tenant_change_moves_every_pod_in_one_transaction():
    ctl = make_controller()
    ctl.kube.add(r.NAMESPACES, ns("team-b"))
    for i in range(3):
        ctl.kube.add(r.PODS, pod_body(f"p{i}", "team-b"), "team-b")
    drain(ctl)
    for i in range(3):      # the ports are in NB (FakeNB holds what a test adds)
        ctl.nb.owned.append(SimpleNamespace(table=ensure.LSP, name=names.pod_lsp_name("team-b", f"p{i}"),
                                            external_ids={}))
    before = len(ctl.writer.writes)
    r.patch_merge(ctl.kube, r.NAMESPACES, "team-b",
                  {"metadata": {"labels": {names.LABEL_TENANT: "team-a"}}})
    drain(ctl)
    writes = [(w, c) for w, c in ctl.writer.writes[before:] if w == "tenant of namespace team-b"]
    assert len(writes) == 1
    adds = {c.members[0] for c in writes[0][1] if isinstance(c, ensure.PortGroupAddPorts)
            and c.name == group_name("team-a")}
    assert adds == {names.pod_lsp_name("team-b", f"p{i}") for i in range(3)}


def test_private_subnet_acl_allows_itself_its_allowed_subnets_and_nodes():
    spec = model.parse_subnet({"metadata": {"name": "vault"}, "spec": {
        "cidrBlock": "10.50.0.0/24", "private": True, "allowSubnets": ["10.51.0.0/24"]}})
    (a,) = private_acls(spec, ["100.64.0.0/16"])
    assert a.action == "drop" and a.priority == names.PRIO_ACL_ISOLATION_DROP
    assert a.match == ("ip4 && ip4.dst == 10.50.0.0/24 && "
                       "ip4.src != {10.50.0.0/24, 10.51.0.0/24, 100.64.0.0/16}")
    spec = model.parse_subnet({"metadata": {"name": "open"}, "spec": {"cidrBlock": "10.52.0.0/24"}})
    assert private_acls(spec, ["100.64.0.0/16"]) == []


def test_allow_subnets_must_be_cidrs():
    with pytest.raises(model.SubnetSpecError, match="allowSubnets entry 'nope'"):
        model.parse_subnet({"metadata": {"name": "x"}, "spec": {
            "cidrBlock": "10.50.0.0/24", "private": True, "allowSubnets": ["nope"]}})


def test_ports_not_in_nb_are_left_to_the_pod_feature():
    """A restart on an emptied NB: the pods have their records, their ports are
    not there yet.  The namespace's reconcile names none of them (a membership
    command for a missing port fails the whole transaction); each joins its
    groups in the transaction that re-creates it."""
    ctl = make_controller()
    ctl.kube.add(r.NAMESPACES, ns("team-c"))
    for i in range(3):
        ctl.kube.add(r.PODS, pod_body(f"p{i}", "team-c"), "team-c")
    drain(ctl)
    there = names.pod_lsp_name("team-c", "p0")
    ctl.nb.owned.append(SimpleNamespace(table=ensure.LSP, name=there, external_ids={}))
    before = len(ctl.writer.writes)
    r.patch_merge(ctl.kube, r.NAMESPACES, "team-c", {"metadata": {"labels": {names.LABEL_TENANT: "team-a"}}})
    drain(ctl)
    named = {m for w, cmds in ctl.writer.writes[before:] if w == "tenant of namespace team-c"
             for c in cmds if isinstance(c, (ensure.PortGroupAddPorts, ensure.PortGroupRemovePorts))
             for m in c.members}
    assert named == {there}
