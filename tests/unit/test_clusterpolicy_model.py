"""ClusterNetworkPolicy: the spec checked as the upstream CRD's validation says
(the API server here has no CEL), its precedence in OVN's ACL tiers, and the
feature on the controller fakes (rows, tiers, status)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from controller_fakes import drain, make_controller
from pacific import clusterpolicy as cp
from pacific import contract, names
from pacific.controller.cluster_policy import group_name, node_addresses, set_name
from pacific.kube import resources as r
from pacific.ovn import acl, ensure


def cnp(name="p", tier="Admin", priority=10, subject=None, ingress=None, egress=None):
    spec = {"tier": tier, "priority": priority,
            "subject": subject or {"namespaces": {"matchLabels": {"team": "a"}}}}
    if ingress is not None:
        spec["ingress"] = ingress
    if egress is not None:
        spec["egress"] = egress
    return {"apiVersion": f"{cp.GROUP}/{cp.VERSION}", "kind": cp.KIND,
            "metadata": {"name": name, "generation": 1}, "spec": spec}


def test_a_full_policy_parses_in_order():
    pol = cp.parse(cnp(ingress=[
        {"name": "mon", "action": "Accept", "from": [{"namespaces": {}}],
         "protocols": [{"tcp": {"destinationPort": {"number": 9100}}},
                       {"udp": {"destinationPort": {"range": {"start": 1000, "end": 2000}}}}]},
        {"action": "Deny", "from": [{"pods": {"namespaceSelector": {}, "podSelector": {}}}]}],
        egress=[{"action": "Pass", "to": [{"networks": ["10.0.0.0/8", "192.168.1.5"]},
                                          {"nodes": {}}]}]))
    assert [(x.direction, x.index, x.action) for x in pol.rules] == [
        ("ingress", 0, "Accept"), ("ingress", 1, "Deny"), ("egress", 0, "Pass")]
    assert pol.rules[0].ports == (cp.Port("tcp", 9100, 9100), cp.Port("udp", 1000, 2000))
    assert pol.rules[2].peers[0].values == ("10.0.0.0/8", "192.168.1.5/32")


@pytest.mark.parametrize("spec_change,words", [
    ({"tier": "Gold"}, "spec.tier: 'Gold'"),
    ({"priority": 1001}, "spec.priority: 0-1000"),
    ({"subject": {}}, "spec.subject: exactly one of namespaces, pods"),
    ({"subject": {"namespaces": {}, "pods": {"podSelector": {}}}}, "(namespaces, pods set)"),
    ({"subject": {"pods": {"namespaceSelector": {}}}}, "spec.subject.pods: podSelector is required"),
    ({"ingress": [{"action": "Allow", "from": [{"namespaces": {}}]}]}, "spec.ingress[0].action"),
    ({"ingress": [{"action": "Deny", "from": []}]}, "spec.ingress[0].from: 1 to 25"),
    ({"ingress": [{"action": "Deny", "from": [{"networks": ["1.2.3.0/24"]}]}]},
     "spec.ingress[0].from[0]: unknown field(s) networks"),
    ({"egress": [{"action": "Deny", "to": [{"networks": ["10.0.0.300/8"]}]}]},
     "spec.egress[0].to[0].networks[0]: '10.0.0.300/8' is not a CIDR"),
    ({"egress": [{"action": "Deny", "to": [{"domainNames": ["a.example"]}]}]},
     "domainNames: only in Accept rules"),
    ({"egress": [{"action": "Accept", "to": [{"nodes": {}}],
                  "protocols": [{"destinationNamedPort": "http"}]}]},
     "destinationNamedPort cannot go with networks, nodes"),
    ({"ingress": [{"action": "Deny", "from": [{"namespaces": {}}],
                   "protocols": [{"tcp": {"destinationPort": {"range": {"start": 9, "end": 9}}}}]}]},
     "start (9) must be less than end (9)"),
    ({"ingress": [{"action": "Deny", "from": [{"namespaces": {}}],
                   "protocols": [{"tcp": {}, "udp": {}}]}]}, "exactly one of tcp, udp, sctp"),
    ({"ingress": [{"action": "Deny", "from": [{"namespaces": {"matchExpressions": [
        {"key": "a", "operator": "Near"}]}}]}]}, "spec.ingress[0].from[0].namespaces"),
    ({"ingress": [{"action": "Deny", "from": [{"namespaces": {}}]}] * 26}, "at most 25 rules"),
])
def test_invalid_specs_are_named_with_their_path(spec_change, words):
    obj = cnp()
    obj["spec"].update(spec_change)
    with pytest.raises(cp.PolicyError) as e:
        cp.parse(obj)
    assert words in str(e.value)


def test_precedence_admin_above_isolation_then_by_priority_then_rule_order():
    assert cp.acl_priority(1000, 24) > names.PRIO_ACL_ISOLATION_DROP > names.PRIO_ACL_MCAST_IGMP
    assert cp.acl_priority(0, 0) > cp.acl_priority(0, 1) > cp.acl_priority(1, 0) \
        > cp.acl_priority(1000, 0)
    assert cp.acl_priority(0, 0) <= 32767
    assert (cp.OVN_TIER[cp.ADMIN], cp.NP_TIER, cp.OVN_TIER[cp.BASELINE]) == (0, 1, 2)
    assert cp.ACTIONS == {"Accept": "allow-related", "Deny": "drop", "Pass": "pass"}


def test_port_clauses_numbers_ranges_and_named_ports():
    ports = (cp.Port("tcp", 80, 80), cp.Port("udp", 5, 9), cp.Port("sctp"), cp.Port(None, named="web"))
    named = {"10.16.0.5": (("web", 8080, "TCP"),), "10.16.0.6": (("web", 8081, "TCP"),),
             "10.16.0.7": (("other", 1, "UDP"),)}
    assert cp.port_clauses(ports, named, "ip4.dst") == [
        "tcp && tcp.dst == 80", "udp && udp.dst >= 5 && udp.dst <= 9", "sctp",
        "ip4.dst == {10.16.0.5} && tcp && tcp.dst == 8080",
        "ip4.dst == {10.16.0.6} && tcp && tcp.dst == 8081"]
    assert cp.port_clauses((), named, "ip4.dst") is None
    assert cp.port_clauses((cp.Port(None, named="none"),), named, "ip4.dst") == []


def test_node_addresses_are_its_status_ipv4_and_its_join_address():
    join = contract.NodeRecord("100.64.0.2/16", "0a:58:64:40:00:02", "100.64.0.1", "node:n1")
    node = {"metadata": {"name": "n1", "annotations": join.annotations()},
            "status": {"addresses": [{"type": "InternalIP", "address": "192.168.77.11"},
                                     {"type": "InternalIP", "address": "fd00::11"},
                                     {"type": "Hostname", "address": "n1"}]}}
    assert node_addresses(node) == {"192.168.77.11", "100.64.0.2"}
    # IPv6: its status IPv6 addresses, and ovn0's IPv6 with a dual-stack join network
    assert node_addresses(node, 6) == {"fd00::11"}
    dual = contract.NodeRecord("100.64.0.2/16", "0a:58:64:40:00:02", "100.64.0.1", "node:n1",
                               ip6_cidr="fd00:64::2/64", gateway6="fd00:64::1")
    node["metadata"]["annotations"] = dual.annotations()
    assert node_addresses(node, 6) == {"fd00::11", "fd00:64::2"}
    assert node_addresses(node) == {"192.168.77.11", "100.64.0.2"}


def test_a_nodes_peer_has_an_ipv6_rule_of_the_nodes_ipv6_addresses():
    ctl = make_controller(ipv6_subnets=True, join_cidr="100.64.0.0/16,fd00:64::/64")
    ctl.nb.acl_tier = True
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "a1", "labels": {"team": "a"}}})
    ctl.kube.add(r.NODES, {"metadata": {"name": "n1"}, "status": {"addresses": [
        {"type": "InternalIP", "address": "192.168.77.11"},
        {"type": "InternalIP", "address": "fd00::11"}]}})
    drain(ctl)
    ctl.kube.add(r.CLUSTERNETWORKPOLICIES, cnp("nodes", egress=[
        {"action": "Deny", "to": [{"nodes": {}}]}]))
    drain(ctl)
    rec = contract.NodeRecord.of(r.get(ctl.kube, r.NODES, "n1"))
    specs, cmds = _acls(ctl, "nodes")
    rules = {s.external_ids[names.EXT_RULE]: s.match for s in specs}
    sets = {c.name: set(c.members) for c in cmds if isinstance(c, ensure.AddressSetAddAddresses)}
    v4, v6 = set_name("nodes", "egress", 0), set_name("nodes", "egress", 0) + "_6"
    assert sets[v4] == {"192.168.77.11", rec.ip}
    assert sets[v6] == {"fd00::11", rec.ip6}
    assert f"ip6.dst == ${v6}" in rules["egress/0" + names.RULE_SUFFIX_IP6]


# --- the feature on the fakes ---------------------------------------------------------

def _pod(name, ns, labels=None, ports=()):
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"nodeName": "node1", "containers": [
                {"name": "c", "image": "pause",
                 "ports": [{"name": n, "containerPort": p} for n, p in ports]}]}}


def setup(acl_tier=True):
    ctl = make_controller()
    ctl.nb.acl_tier = acl_tier
    for ns, team in (("a1", "a"), ("b1", "b")):
        ctl.kube.add(r.NAMESPACES, {"metadata": {"name": ns, "labels": {"team": team}}})
        ctl.kube.add(r.PODS, _pod("web", ns, {"app": "web"}, [("http", 8080)]), ns)
        ctl.kube.add(r.PODS, _pod("db", ns, {"app": "db"}), ns)
    drain(ctl)
    for p in ctl.kube.of(r.PODS):     # their ports are in NB (FakeNB holds what a test adds)
        rec = contract.own_record(p)
        ctl.nb.owned.append(SimpleNamespace(table=ensure.LSP, name=rec.port, external_ids={}))
    return ctl


def _ip(ctl, ns, name):
    return contract.own_record(r.get(ctl.kube, r.PODS, name, ns)).ip


def _acls(ctl, name):
    cmds = [c for w, cs in ctl.writer.writes if w == f"ClusterNetworkPolicy {name}" for c in cs]
    return [s for c in cmds if isinstance(c, acl.EnsureACLs) for s in c.specs], cmds


def test_admin_rules_become_tier_0_acls_on_the_subject_with_peer_sets_and_status():
    ctl = setup()
    ctl.kube.add(r.CLUSTERNETWORKPOLICIES, cnp("mon", ingress=[
        {"action": "Accept", "from": [{"namespaces": {"matchLabels": {"team": "b"}}}],
         "protocols": [{"destinationNamedPort": "http"}]},
        {"action": "Deny", "from": [{"pods": {"namespaceSelector": {}, "podSelector": {
            "matchLabels": {"app": "db"}}}}]}],
        egress=[{"action": "Pass", "to": [{"networks": ["8.8.8.0/24"]}]}]))
    drain(ctl)
    specs, cmds = _acls(ctl, "mon")
    pg = group_name("mon")
    # ARP between the subject and the pod peers of the Accept (not of the Deny):
    # tenant isolation would drop it
    arp = [s for s in specs if s.external_ids[names.EXT_RULE].endswith("/arp")]
    assert [s.external_ids[names.EXT_RULE] for s in arp] == ["ingress/0/arp"]
    assert arp[0].action == "allow" and f"arp.spa == ${pg}_ip4" in arp[0].match
    specs = [s for s in specs if s not in arp]
    assert {(s.direction, s.action, s.tier, s.after_lb) for s in specs} == {
        ("to-lport", "allow-related", 0, False), ("to-lport", "drop", 0, False),
        ("from-lport", "pass", 0, True)}      # egress judged on the endpoint (decision 0042)
    accept = next(s for s in specs if s.action == "allow-related")
    assert accept.match == (f"outport == @{pg} && ip4 && (ip4.src == ${set_name('mon', 'ingress', 0)})"
                            f" && ((ip4.dst == {{{_ip(ctl, 'a1', 'web')}}} && tcp && tcp.dst == 8080))")
    assert accept.priority == cp.acl_priority(10, 0)
    members = {m for c in cmds if isinstance(c, ensure.PortGroupAddPorts) for m in c.members}
    assert members == {names.pod_lsp_name("a1", "web"), names.pod_lsp_name("a1", "db")}
    sets = {c.name: set(c.members) for c in cmds if isinstance(c, ensure.AddressSetAddAddresses)}
    assert sets[set_name("mon", "ingress", 0)] == {_ip(ctl, "b1", "web"), _ip(ctl, "b1", "db")}
    assert sets[set_name("mon", "ingress", 1)] == {_ip(ctl, "a1", "db"), _ip(ctl, "b1", "db")}
    conds = {c["type"]: c for c in r.get(ctl.kube, r.CLUSTERNETWORKPOLICIES, "mon")["status"]["conditions"]}
    assert conds["Accepted"]["status"] == "True"
    assert conds["Enforced"]["status"] != "True"      # no chassis in the fakes to say so


def test_networkpolicy_moves_to_tier_1_and_baseline_is_tier_2():
    ctl = setup()
    ctl.kube.add(r.NETWORKPOLICIES, {"metadata": {"name": "deny", "namespace": "a1"},
                                     "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}, "a1")
    ctl.kube.add(r.CLUSTERNETWORKPOLICIES, cnp("base", tier="Baseline", ingress=[
        {"action": "Deny", "from": [{"namespaces": {}}]}]))
    drain(ctl)
    np_specs = [s for _, cs in ctl.writer.writes for c in cs if isinstance(c, acl.EnsureACLs)
                and c.group.startswith("np_") for s in c.specs]
    assert np_specs and {s.tier for s in np_specs} == {cp.NP_TIER}
    assert {s.tier for s in _acls(ctl, "base")[0]} == {2}


def test_without_acl_tiers_nothing_is_applied_and_status_says_why():
    ctl = setup(acl_tier=False)
    ctl.kube.add(r.CLUSTERNETWORKPOLICIES, cnp("x", ingress=[
        {"action": "Deny", "from": [{"namespaces": {}}]}]))
    drain(ctl)
    assert not _acls(ctl, "x")[1]
    (acc,) = [c for c in r.get(ctl.kube, r.CLUSTERNETWORKPOLICIES, "x")["status"]["conditions"]
              if c["type"] == "Accepted"]
    assert acc["status"] == "False" and acc["reason"] == "ACLTiersUnavailable"


def test_an_invalid_policy_is_refused_in_status_and_a_deleted_one_leaves_nothing():
    ctl = setup()
    ctl.kube.add(r.CLUSTERNETWORKPOLICIES, cnp("bad", priority=5000))
    drain(ctl)
    (acc,) = [c for c in r.get(ctl.kube, r.CLUSTERNETWORKPOLICIES, "bad")["status"]["conditions"]
              if c["type"] == "Accepted"]
    assert acc["reason"] == "InvalidSpec" and "spec.priority" in acc["message"]
    ctl.nb.owned += [SimpleNamespace(table=ensure.PG, name=group_name("gone"), external_ids=
                                     {names.EXT_OWNER_KIND: names.OWNER_KIND_CLUSTER_POLICY,
                                      names.EXT_OWNER: "gone"}),
                     SimpleNamespace(table=ensure.AS, name=set_name("gone", "ingress", 0),
                                     external_ids={names.EXT_OWNER_KIND: names.OWNER_KIND_CLUSTER_POLICY,
                                                   names.EXT_OWNER: "gone"})]
    ctl.resync()
    drain(ctl)
    cmds = [c for w, cs in ctl.writer.writes if w == "ClusterNetworkPolicy gone removed" for c in cs]
    assert [type(c).__name__ for c in cmds] == ["DeletePortGroup", "DeleteAddressSet"]


def test_a_new_pod_joins_the_subject_in_its_own_transaction():
    ctl = setup()
    ctl.kube.add(r.CLUSTERNETWORKPOLICIES, cnp("s", ingress=[
        {"action": "Deny", "from": [{"namespaces": {}}]}]))
    drain(ctl)
    ctl.kube.add(r.PODS, _pod("late", "a1"), "a1")
    drain(ctl)
    port = names.pod_lsp_name("a1", "late")
    cmds = [c for w, c in ctl.writer.writes if w == f"pod port {port}"][0]
    assert group_name("s") in {c.name for c in cmds if isinstance(c, ensure.PortGroupAddPorts)}


def test_a_pod_event_wakes_only_the_policies_whose_selection_of_it_changes():
    ctl = setup()
    ctl.kube.add(r.CLUSTERNETWORKPOLICIES, cnp("web-only", subject={"pods": {
        "namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "web"}}}},
        ingress=[{"action": "Deny", "from": [{"namespaces": {"matchLabels": {"team": "b"}}}]}]))
    ctl.kube.add(r.CLUSTERNETWORKPOLICIES, cnp("team-a", ingress=[
        {"action": "Deny", "from": [{"pods": {"namespaceSelector": {},
                                              "podSelector": {"matchLabels": {"app": "db"}}}}]}]))
    drain(ctl)
    feat = next(f for f in ctl.features if f.name == "cluster-policy")
    db = r.get(ctl.kube, r.PODS, "db", "a1")
    relabel = lambda pod, labels: {**pod, "metadata": {**pod["metadata"], "labels": labels}}  # noqa: E731
    # a1/db: subject of team-a (namespace team=a) and its peer (app=db); not web-only's
    assert feat._on_pod(db, relabel(db, {"app": "db", "tier": "x"})) == []    # nothing moves
    assert feat._on_pod(db, relabel(db, {"app": "cache"})) == ["team-a"]      # leaves the peer
    assert sorted(feat._on_pod(db, relabel(db, {"app": "web"}))) == ["team-a", "web-only"]
    # b1/db (team b): web-only's peer by its namespace, team-a's peer by its label
    b_db = r.get(ctl.kube, r.PODS, "db", "b1")
    assert sorted(feat._on_pod(b_db, None)) == ["team-a", "web-only"]         # deleted
    assert feat._on_pod(None, relabel(b_db, {"app": "x"})) == ["web-only"]    # added: a new address
