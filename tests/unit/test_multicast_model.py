"""Multicast: which namespaces enabled it (pure), the gate's ACLs, the Subnet
switches' snooping and the router's relay, and the feature on the controller
fakes (a new port joins its group in its own transaction; a namespace's ports
move in one)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from controller_fakes import drain, make_controller
from pacific import multicast, names
from pacific.controller.multicast import GROUPS, gate_acls
from pacific.kube import resources as r
from pacific.ovn import acl, ensure
from pacific.tools.mtrace import group_mac, is_group


def ns(name, ann=None, label=None):
    md = {"name": name, "annotations": {}, "labels": {}}
    if ann is not None:
        md["annotations"][names.ANN_MULTICAST] = ann
    if label is not None:
        md["labels"][names.ANN_MULTICAST] = label
    return {"metadata": md}


@pytest.mark.parametrize("obj,want", [
    (ns("a"), (False, None)), (None, (False, None)),
    (ns("a", "true"), (True, None)), (ns("a", label="true"), (True, None)),
    (ns("a", "false"), (False, None)), (ns("a", "true", "true"), (True, None)),
])
def test_enabled(obj, want):
    assert multicast.enabled(obj) == want


@pytest.mark.parametrize("obj,words", [
    (ns("a", "yes"), "'yes' is neither"), (ns("a", "True"), "'True' is neither"),
    (ns("a", "true", "false"), "on the other"),
])
def test_anything_but_true_or_false_is_off_and_named(obj, words):
    on, problem = multicast.enabled(obj)
    assert not on and words in problem and "stays off" in problem


def test_the_gate_drops_above_networkpolicy_and_below_isolation_and_lets_igmp_pass():
    on, off = gate_acls(names.PG_MCAST), gate_acls(names.PG_MCAST_OFF)
    assert {a.match for a in off} == {f"inport == @{names.PG_MCAST_OFF} && ip4.mcast",
                                      f"outport == @{names.PG_MCAST_OFF} && ip4.mcast"}
    assert all(a.action == "drop" and a.priority == names.PRIO_ACL_MCAST_GATE for a in off)
    drops = [a for a in on if a.action == "drop"]
    assert [a.match for a in drops] == [
        f"outport == @{names.PG_MCAST} && ip4.mcast && ip4.src != ${names.PG_MCAST}_ip4"]
    assert {(a.direction, a.action, a.priority) for a in on if "igmp" in a.match} == {
        ("from-lport", "allow", names.PRIO_ACL_MCAST_IGMP),
        ("to-lport", "allow", names.PRIO_ACL_MCAST_IGMP)}
    assert names.PRIO_ACL_NP_ALLOW < names.PRIO_ACL_MCAST_GATE < names.PRIO_ACL_MCAST_IGMP \
        < names.PRIO_ACL_ISOLATION_DROP
    # in the stage of the policies' egress ACLs (decision 0042)
    assert all(a.after_lb == (a.direction == "from-lport") for a in on + off)
    # OVN refuses `!igmp` (a nominal predicate): no match of ours negates one
    assert not any("!igmp" in a.match for a in on + off)


def test_the_querier_speaks_from_the_gateway_and_memberships_age_after_two_queries():
    cfg = multicast.switch_config("10.16.0.1", "0e:00:0a:10:00:01", 30)
    assert cfg["mcast_snoop"] == cfg["mcast_querier"] == "true"
    assert cfg["mcast_flood_unregistered"] == "false"
    assert (cfg["mcast_ip4_src"], cfg["mcast_eth_src"]) == ("10.16.0.1", "0e:00:0a:10:00:01")
    assert (cfg["mcast_query_interval"], cfg["mcast_idle_timeout"]) == ("30", "65")
    assert "mcast_ip6_src" not in cfg


def test_an_ipv6_subnets_mld_querier_speaks_from_its_router_ports_link_local_address():
    dual = multicast.switch_config("10.16.0.1", "0e:00:0a:10:00:01", 30, ipv6=True)
    assert dual["mcast_ip6_src"] == "fe80::c00:aff:fe10:1" and dual["mcast_ip4_src"] == "10.16.0.1"
    six = multicast.switch_config(None, "0e:00:00:00:00:01", 30, ipv6=True)
    assert "mcast_ip4_src" not in six and six["mcast_querier"] == "true"
    assert multicast.link_local("02:42:ac:11:00:02") == "fe80::42:acff:fe11:2"


@pytest.mark.parametrize("group,mac", [("239.1.1.1", "01:00:5e:01:01:01"),
                                       ("224.128.0.1", "01:00:5e:00:00:01"),
                                       ("239.255.255.250", "01:00:5e:7f:ff:fa"),
                                       ("ff0e::db8:77", "33:33:0d:b8:00:77"),
                                       ("ff02::1:ff00:2", "33:33:ff:00:00:02")])
def test_group_mac(group, mac):
    assert is_group(group) and group_mac(group) == mac


def test_an_address_or_a_name_is_not_a_group():
    assert not is_group("10.16.0.1") and not is_group("a/b") and not is_group("")


def _pod(name, ns_):
    return {"metadata": {"name": name, "namespace": ns_},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "pause"}]}}


def test_a_new_pod_joins_its_group_in_the_transaction_of_its_port():
    ctl = make_controller()
    ctl.kube.add(r.NAMESPACES, ns("on", "true"))
    ctl.kube.add(r.NAMESPACES, ns("off"))
    drain(ctl)
    for n in ("on", "off"):
        ctl.kube.add(r.PODS, _pod("p", n), n)
    drain(ctl)
    for n, group in (("on", names.PG_MCAST), ("off", names.PG_MCAST_OFF)):
        port = names.pod_lsp_name(n, "p")
        cmds = [c for w, c in ctl.writer.writes if w == f"pod port {port}"][0]
        joined = {c.name for c in cmds if isinstance(c, ensure.PortGroupAddPorts)
                  and c.name in GROUPS}
        assert joined == {group}
        gate = [c for c in cmds if isinstance(c, acl.EnsureACLs) and c.group == group]
        assert gate and gate[0].specs == gate_acls(group)


def test_switching_a_namespace_moves_every_port_in_one_transaction():
    ctl = make_controller()
    ctl.kube.add(r.NAMESPACES, ns("team"))
    for i in range(3):
        ctl.kube.add(r.PODS, _pod(f"p{i}", "team"), "team")
    drain(ctl)
    ports = {names.pod_lsp_name("team", f"p{i}") for i in range(3)}
    ctl.nb.owned += [SimpleNamespace(table=ensure.LSP, name=p, external_ids={}) for p in ports]
    before = len(ctl.writer.writes)
    r.patch_merge(ctl.kube, r.NAMESPACES, "team",
                  {"metadata": {"annotations": {names.ANN_MULTICAST: "true"}}})
    drain(ctl)
    writes = [cmds for w, cmds in ctl.writer.writes[before:] if w == "multicast of namespace team"]
    assert len(writes) == 1
    added = {m for c in writes[0] if isinstance(c, ensure.PortGroupAddPorts)
             and c.name == names.PG_MCAST for m in c.members}
    assert added == ports


def test_an_invalid_value_is_an_event_once():
    ctl = make_controller()
    ctl.kube.add(r.NAMESPACES, ns("odd", "yes"))
    drain(ctl)
    ctl.resync()
    drain(ctl)
    evs = [e for e in ctl.kube.of(r.EVENTS) if e.get("reason") == "InvalidMulticast"]
    assert len(evs) == 1 and "'yes'" in evs[0]["message"]


def test_off_means_no_groups_no_snooping_no_relay():
    ctl = make_controller(multicast=False)
    ctl.nb.owned += [SimpleNamespace(table=ensure.PG, name=g, external_ids={
        names.EXT_OWNER_KIND: names.OWNER_KIND_MULTICAST}) for g in GROUPS]
    ctl.kube.add(r.NAMESPACES, ns("on", "true"))
    ctl.kube.add(r.PODS, _pod("p", "on"), "on")
    drain(ctl)
    cmds = [c for _, cs in ctl.writer.writes for c in cs]
    assert {c.name for c in cmds if isinstance(c, ensure.DeletePortGroup)} == set(GROUPS)
    assert not [c for c in cmds if isinstance(c, ensure.PortGroupAddPorts) and c.name in GROUPS]
    switches = [c for c in cmds if isinstance(c, ensure.EnsureSwitch)
                and c.name == names.DEFAULT_SUBNET]
    assert switches and all("mcast_snoop" not in c.columns.get("other_config", {})
                            for c in switches)
    on = make_controller()
    on.kube.add(r.NAMESPACES, ns("x"))
    drain(on)
    snoop = [c for _, cs in on.writer.writes for c in cs if isinstance(c, ensure.EnsureSwitch)
             and c.name == names.DEFAULT_SUBNET]
    assert snoop and snoop[-1].columns["other_config"]["mcast_snoop"] == "true"


def test_a_cluster_with_ipv6_gates_ipv6_multicast_too():
    ipv4 = gate_acls(names.PG_MCAST_OFF)
    both = gate_acls(names.PG_MCAST_OFF, ipv6=True)
    assert both[:len(ipv4)] == ipv4 and all("ip6" not in a.match for a in ipv4)
    assert {a.match for a in both[len(ipv4):]} == {
        f"inport == @{names.PG_MCAST_OFF} && ip6.mcast",
        f"outport == @{names.PG_MCAST_OFF} && ip6.mcast"}
    foreign, = [a for a in gate_acls(names.PG_MCAST, ipv6=True) if "ip6" in a.match]
    assert foreign.match == (f"outport == @{names.PG_MCAST} && ip6.mcast && "
                             f"ip6.src != ${names.PG_MCAST}_ip6 && ip6.src != fe80::/10")
    assert foreign.name == "mcast-foreign-source" + names.RULE_SUFFIX_IP6
    assert multicast.why_dropped(foreign.name) == multicast.why_dropped("mcast-foreign-source")
    # the controller of a cluster with IPv6 Subnets writes them
    ctl = make_controller(ipv6_subnets=True, default_cidr="10.16.0.0/16,fd00:16::/64")
    drain(ctl)
    gates = {c.group: c.specs for c in ctl.writer.commands(acl.EnsureACLs) if c.group in GROUPS}
    assert gates[names.PG_MCAST_OFF] == both
