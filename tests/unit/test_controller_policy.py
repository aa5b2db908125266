"""NetworkPolicy semantics -> OVN matches (controller/policy_model.py), and the
feature on the fake API (controller_fakes.py)."""
from __future__ import annotations

import pytest

from controller_fakes import drain, make_controller, only_b_group_write
from controller_fakes import pod_body as fake_pod_body
from pacific import names
from pacific.controller import policy
from pacific.controller.policy_index import set_key
from pacific.controller.policy_model import (PodInfo, PolicyError, World, compile_policy,
                                             merged, pod_matters, policy_types,
                                             selector_matches, set_name)
from pacific.kube import resources as r
from pacific.ovn import acl, ensure


def world():
    pods = [PodInfo("x", "a", {"pod": "a"}, "10.16.0.2", "pod:x/a", (("http", 80, "TCP"),)),
            PodInfo("x", "b", {"pod": "b"}, "10.16.0.3", "pod:x/b", (("http", 8080, "TCP"),)),
            PodInfo("y", "a", {"pod": "a"}, "10.16.0.4", "pod:y/a", ()),
            PodInfo("z", "c", {"pod": "c"}, "10.16.0.5", "pod:z/c", (("dns", 53, "UDP"),))]
    return World(pods, {"x": {"ns": "x"}, "y": {"ns": "y"}, "z": {"ns": "z"}})


def np(spec, ns="x", name="p"):
    return {"metadata": {"namespace": ns, "name": name}, "spec": spec}


@pytest.mark.parametrize("sel,labels,want", [
    ({}, {"a": "1"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
    ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
    ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
    ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
    ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
])
def test_selectors(sel, labels, want):
    assert selector_matches(sel, labels) is want


def test_policy_types_default_and_bad():
    assert policy_types({}) == ["Ingress"]
    assert policy_types({"egress": [{}]}) == ["Ingress", "Egress"]
    assert policy_types({"policyTypes": ["Egress"]}) == ["Egress"]
    with pytest.raises(PolicyError, match="Sideways"):
        policy_types({"policyTypes": ["Sideways"]})


def test_deny_all_selects_the_namespace_and_allows_nothing():
    types, rules, ports = compile_policy(np({"podSelector": {}}), world())
    assert types == ["ingress"] and rules == [] and ports == ["pod:x/a", "pod:x/b"]


def test_peers_and_ports():
    spec = {"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{
        "from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}},
                 {"podSelector": {"matchLabels": {"pod": "b"}}},
                 {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.16.0.0/16"]}}],
        "ports": [{"protocol": "TCP", "port": 80}, {"protocol": "UDP", "port": 53, "endPort": 60}]}]}
    types, (rule,), ports = compile_policy(np(spec), world())
    assert ports == ["pod:x/a"] and rule.direction == "ingress" and rule.index == 0
    sets = dict(rule.address_sets)
    assert sets[set_name("x", {"namespaceSelector": {"matchLabels": {"ns": "y"}}})] == {"10.16.0.4"}
    assert sets[set_name("x", {"podSelector": {"matchLabels": {"pod": "b"}}})] == {"10.16.0.3"}
    assert "(ip4.src == 10.0.0.0/8 && ip4.src != {10.16.0.0/16})" in rule.match
    assert "(tcp.dst == 80)" in rule.match and "(udp.dst >= 53 && udp.dst <= 60)" in rule.match


def test_namespace_and_pod_selector_in_one_peer_is_an_and():
    spec = {"podSelector": {}, "ingress": [{"from": [{
        "namespaceSelector": {}, "podSelector": {"matchLabels": {"pod": "a"}}}]}]}
    _, (rule,), _ = compile_policy(np(spec), world())
    (ips,) = dict(rule.address_sets).values()
    assert ips == {"10.16.0.2", "10.16.0.4"}     # pod=a in every namespace


def test_named_ports_resolve_on_the_destination_pods():
    ingress = {"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]}
    _, (rule,), _ = compile_policy(np(ingress), world())
    assert "ip4.dst == {10.16.0.2} && tcp.dst == 80" in rule.match
    assert "ip4.dst == {10.16.0.3} && tcp.dst == 8080" in rule.match
    egress = {"podSelector": {}, "policyTypes": ["Egress"],
              "egress": [{"to": [{"namespaceSelector": {}}], "ports": [{"protocol": "UDP", "port": "dns"}]}]}
    _, (rule,), _ = compile_policy(np(egress), world())
    assert "ip4.dst == {10.16.0.5} && udp.dst == 53" in rule.match
    nothing = {"podSelector": {}, "ingress": [{"ports": [{"port": "nope"}]}]}
    assert compile_policy(np(nothing), world())[1] == []      # resolves to nothing: no allow


def test_bad_protocol_is_named():
    with pytest.raises(PolicyError, match="ICMP"):
        compile_policy(np({"podSelector": {}, "ingress": [{"ports": [{"protocol": "ICMP"}]}]}), world())


# --- the feature ---------------------------------------------------------------------

def pod_body(name, ns, labels):
    return fake_pod_body(name, ns, labels=labels)


def test_feature_writes_group_members_sets_and_acls_in_one_transaction():
    ctl = make_controller()
    pg, cmds = only_b_group_write(ctl)
    added = [c for c in cmds if isinstance(c, ensure.PortGroupAddPorts)]
    assert added[0].name == pg and added[0].members == [names.pod_lsp_name("x", "a")]
    (acls,) = [c for c in cmds if isinstance(c, acl.EnsureACLs)]
    rules = {s.external_ids[names.EXT_RULE]: s for s in acls.specs}
    assert set(rules) == {"ingress/deny", "ingress/nodes", "ingress/0"}
    assert rules["ingress/deny"].priority == names.PRIO_ACL_NP_DENY < rules["ingress/0"].priority
    assert rules["ingress/0"].action == "allow-related"
    assert rules["ingress/0"].external_ids[names.EXT_OWNER] == "x/only-b"
    # a new pod the policy selects joins its group in its port's own transaction
    ctl.kube.add(r.PODS, pod_body("a2", "x", {"pod": "a"}), "x")
    drain(ctl)
    port = names.pod_lsp_name("x", "a2")
    first = [c for w, c in ctl.writer.writes if w == f"pod port {port}"][0]
    assert any(isinstance(c, ensure.PortGroupAddPorts) and c.name == pg and c.members == [port]
               for c in first)
    # the policy gone: its group goes
    r.delete(ctl.kube, r.NETWORKPOLICIES, "only-b", "x")
    ctl.nb.owned.append(type("Row", (), {"table": ensure.PG, "name": pg, "external_ids": {
        names.EXT_OWNER_KIND: names.OWNER_KIND_POLICY_GROUP, names.EXT_OWNER: f"x/{pg}"}})())
    drain(ctl)
    assert any(isinstance(c, ensure.DeletePortGroup) and c.name == pg
               for _, cs in ctl.writer.writes for c in cs)


def test_rules_with_the_same_peers_merge_into_one_with_the_union_of_their_ports():
    w = world()
    peer = {"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}
    rules = [(f"x/p{i}", r_) for i, spec in enumerate([
        {"ingress": [{**peer, "ports": [{"port": 80}]}]},
        {"ingress": [{**peer, "ports": [{"port": 81}]}]},
        {"ingress": [{**peer, "ports": [{"port": 80}]}]},                 # a repeat
        {"ingress": [{"from": [{"podSelector": {}}], "ports": [{"port": 9}]}]},   # other peers
        {"egress": [{**peer, "ports": [{"port": 80}]}], "policyTypes": ["Egress"]}])
        for r_ in compile_policy(np(spec, name=f"p{i}"), w)[1]]
    out = merged(rules)
    assert [(k, r_.direction) for k, r_ in out] == \
        [("x/p0", "ingress"), ("x/p3", "ingress"), ("x/p4", "egress")]
    (k, both), other, egress = out
    assert both.match == f"{rules[0][1].peers} && ({rules[0][1].ports} || {rules[1][1].ports})"
    assert both.address_sets == rules[0][1].address_sets
    assert other[1] == rules[3][1] and egress[1] == rules[4][1]     # alone: unchanged
    # a rule of any port absorbs the others of its peers
    anyport = compile_policy(np({"ingress": [peer]}, name="all"), w)[1][0]
    (_, r_), = merged(rules[:2] + [("x/all", anyport)])
    assert r_.match == rules[0][1].peers


def test_a_group_holds_one_allow_for_policies_opening_ports_to_the_same_peers():
    """A relabel costs OVN one ACL, not one per policy; a policy whose allows are
    audited keeps its own (its records name it)."""
    ctl = make_controller()
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "x", "labels": {"ns": "x"}}})
    ctl.kube.add(r.PODS, pod_body("a", "x", {"pod": "a"}), "x")
    drain(ctl)
    for i in range(5):
        ctl.kube.add(r.NETWORKPOLICIES, {"metadata": {
            "name": f"p{i}", "namespace": "x",
            "annotations": {names.ANN_AUDIT: "allow"} if i == 4 else {}}, "spec": {
            "podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}],
                                            "ports": [{"port": 1000 + i}]}]}}, "x")
    drain(ctl)
    pg = policy.group_name("x", {})
    cmds = [c for w, c in ctl.writer.writes if w == f"NetworkPolicy group x/{pg}"][-1]
    (acls,) = [c for c in cmds if isinstance(c, acl.EnsureACLs)]
    allows = [s for s in acls.specs if s.priority == names.PRIO_ACL_NP_ALLOW
              and "ip4.src ==" in s.match and "$" in s.match]
    assert len(allows) == 2, [s.match for s in allows]
    pooled, audited = sorted(allows, key=lambda s: s.log)
    assert all(f"tcp.dst == {1000 + i}" in pooled.match for i in range(4))
    assert "1004" not in pooled.match and not pooled.log
    assert pooled.external_ids[names.EXT_OWNER] == "x/p0"       # the trace names them all
    assert pooled.external_ids[names.EXT_ALSO] == "x/p1:ingress/0,x/p2:ingress/0,x/p3:ingress/0"
    assert audited.log and "tcp.dst == 1004" in audited.match
    assert audited.external_ids[names.EXT_OWNER] == "x/p4"


def test_a_pod_event_wakes_only_the_groups_that_can_select_the_pod():
    """Cost follows change: a pod without an address (pending, refused) wakes
    nothing; a pod of namespace x wakes x's groups that select it and the
    address sets of the peers that take it (no other policy is compiled), not
    every group of the cluster."""
    ctl = make_controller()
    feat = ctl.feature("policy")
    for ns, name, spec in (
            ("x", "own", {"podSelector": {}}),
            ("y", "local", {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}),
            ("z", "wide", {"podSelector": {},
                           "egress": [{"to": [{"namespaceSelector": {}}]}]})):
        feat._on_policy(None, np(spec, ns, name))
    refused = pod_body("r", "x", {"pod": "r"})
    assert feat._on_pod(None, refused) == ()
    relabelled = dict(refused, metadata={**refused["metadata"], "labels": {"pod": "s"}})
    assert feat._on_pod(refused, relabelled) == ()
    running = ctl.kube.add(r.PODS, pod_body("a", "x", {"pod": "a"}), "x")
    drain(ctl)
    allocated = r.get(ctl.kube, r.PODS, "a", "x")
    own = f"x/{policy.group_name('x', {})}"
    # queued in the turn of the namespace whose policy names the set
    wide_peer = set_key(set_name("z", {"namespaceSelector": {}}), "z")
    assert wide_peer.startswith("z/$np_as_")
    assert feat._on_pod(running, allocated) == [own, wide_peer]
    feat._on_policy(np({}, "z", "wide"), None)
    assert feat._on_pod(allocated, None) == [own]


def test_a_relabel_wakes_only_the_policies_whose_selection_of_the_pod_changes():
    before, after = {"app": "web", "role": "a"}, {"app": "web", "role": "b"}
    ns_labels = {"team": "x"}
    everyone = np({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]})
    role_subject = np({"podSelector": {"matchLabels": {"role": "a"}}})
    role_peer_other_ns = np({"podSelector": {}, "ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"team": "x"}},
         "podSelector": {"matchLabels": {"role": "b"}}}]}]}, ns="y")
    unmatched_ns = np({"podSelector": {}, "ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"team": "z"}},
         "podSelector": {"matchLabels": {"role": "b"}}}]}]}, ns="y")
    whole_namespaces = np({"podSelector": {}, "egress": [{"to": [{"namespaceSelector": {}}]}]},
                          ns="y")
    assert not pod_matters(everyone, "x", ns_labels, before, after)
    assert pod_matters(role_subject, "x", ns_labels, before, after)
    assert pod_matters(role_peer_other_ns, "x", ns_labels, before, after)
    assert not pod_matters(unmatched_ns, "x", ns_labels, before, after)
    assert not pod_matters(whole_namespaces, "x", ns_labels, before, after)


def test_a_new_or_deleted_pod_matters_only_where_a_selector_takes_it():
    """bench_policy part 3: 1,000 policies with namespaceSelector peers must not
    all wake for every pod of the cluster, only where a peer or the subject
    selector takes the pod."""
    team_b = np({"podSelector": {"matchLabels": {"app": "a"}}, "ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"team": "b"}},
         "podSelector": {"matchLabels": {"app": "b"}}}]}]}, ns="y")
    assert pod_matters(team_b, "x", {"team": "b"}, None, {"app": "b"})       # a new peer
    assert pod_matters(team_b, "x", {"team": "b"}, {"app": "b"}, None)       # a peer gone
    assert not pod_matters(team_b, "x", {"team": "b"}, None, {"app": "c"})   # not a peer
    assert not pod_matters(team_b, "x", {"team": "c"}, None, {"app": "b"})   # other team
    assert pod_matters(team_b, "y", {}, None, {"app": "a"})                  # a new subject
    assert not pod_matters(team_b, "y", {}, None, {"app": "z"})
    whole = np({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}]}]}, ns="y")
    assert pod_matters(whole, "x", {}, None, {"any": "thing"})
    assert not pod_matters(whole, "x", {}, {"a": "1"}, {"a": "2"})           # relabel: no move
    named = np({"podSelector": {"matchLabels": {"app": "a"}}, "egress": [
        {"ports": [{"protocol": "TCP", "port": "http"}]}]}, ns="y")
    assert pod_matters(named, "x", {}, None, {"app": "q"})    # its named port may resolve on it


def test_attack_a_tenant_sharing_a_peer_set_neither_owns_its_turn_nor_removes_it():
    """A tenant naming the same namespaceSelector peer as another tenant shares
    its address set; the set is still reconciled in the victim's own turn of
    the fair work queue (not one queue slot that the attacker's many sets
    crowd), and the attacker deleting its policy leaves the victim's set."""
    from pacific.controller.policy_index import PolicyIndex
    index = PolicyIndex(policy.group_key)
    peer = {"namespaceSelector": {"matchLabels": {"team": "shared"}}}
    index.update("vic/allow", np({"podSelector": {}, "ingress": [{"from": [peer]}]}, "vic", "allow"))
    for i in range(50):
        index.update(f"atk/p{i}", np({"podSelector": {}, "ingress": [{"from": [
            {"namespaceSelector": {"matchLabels": {"n": str(i)}}}, peer]}]}, "atk", f"p{i}"))
    shared = set_name("vic", peer)
    keys = {name: index.keys_of(name) for name, _, _ in index.sets()}
    assert keys[shared] == [set_key(shared, "atk"), set_key(shared, "vic")]
    assert all(k.startswith("atk/") for name, ks in keys.items() if name != shared for k in ks)
    for i in range(50):
        index.update(f"atk/p{i}", None)
    assert index.set_def(shared) == ("", peer)
    assert [index.keys_of(name) for name, _, _ in index.sets()] == [[set_key(shared, "vic")]]
    index.update("vic/allow", None)
    assert index.sets() == [] and index.set_keys() == []


def test_the_index_follows_a_policy_moving_between_groups():
    from pacific.controller.policy_index import PolicyIndex
    index = PolicyIndex(policy.group_key)
    a, b = {"matchLabels": {"a": "1"}}, {"matchLabels": {"b": "1"}}
    ga, gb = f"x/{policy.group_name('x', a)}", f"x/{policy.group_name('x', b)}"
    assert index.update("x/p", np({"podSelector": a})) == (None, ga)
    assert index.update("x/p", np({"podSelector": b})) == (ga, gb)
    assert index.groups_in("x") == [(gb, b)] and index.policies_of(ga) == []
    assert index.update("x/p", None) == (gb, None)
    assert index.groups_in("x") == [] and index.candidates("x") == []


def test_egress_acls_judge_a_service_connection_by_its_endpoint():
    """Every egress ACL of a policy (its deny and its rules) is evaluated after
    load balancing: a connection to a Service's cluster IP meets the rule
    naming its endpoint (upstream's "Ingress,Egress specified together" failed
    before, decision 0042); the ingress side is after it anyway."""
    ctl = make_controller()
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "x", "labels": {"ns": "x"}}})
    ctl.kube.add(r.PODS, pod_body("a", "x", {"pod": "a"}), "x")
    drain(ctl)
    ctl.kube.add(r.NETWORKPOLICIES, {"metadata": {"name": "both", "namespace": "x"}, "spec": {
        "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"ports": [{"port": 80}]}],
        "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]}}, "x")
    drain(ctl)
    (acls,) = [c for w, cmds in ctl.writer.writes if w.startswith("NetworkPolicy group x/")
               for c in cmds if isinstance(c, acl.EnsureACLs)]
    by_rule = {s.external_ids[names.EXT_RULE]: (s.direction, s.after_lb) for s in acls.specs}
    assert by_rule["egress/deny"] == ("from-lport", True)
    assert by_rule["egress/0"] == ("from-lport", True)
    assert by_rule["ingress/deny"] == ("to-lport", False)
    assert by_rule["egress/replies"] == ("to-lport", False)


def test_a_peers_set_name_does_not_depend_on_key_order_or_the_name_cache():
    from pacific.controller import policy_model
    a = {"podSelector": {"matchLabels": {"role": "a", "tier": "web"}}, "namespaceSelector": {}}
    b = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"tier": "web", "role": "a"}}}
    name = set_name("x", a)
    assert set_name("x", b) == name                    # another key order: the same set
    assert set_name("y", a) == name                    # namespace-wide: any policy namespace
    assert set_name("x", {"podSelector": {}}) != set_name("y", {"podSelector": {}})
    assert set_name("x", {"podSelector": {"matchLabels": {"n": 1}}}) != \
        set_name("x", {"podSelector": {"matchLabels": {"n": "1"}}})
    policy_model._SET_NAMES.clear()                   # computed again: the same name
    assert set_name("x", b) == name
    saved = policy_model._SET_NAMES_MAX
    policy_model._SET_NAMES_MAX = 2
    try:                                              # bounded: cleared when full
        for k in range(5):
            set_name("x", {"podSelector": {"matchLabels": {"k": str(k)}}})
        assert len(policy_model._SET_NAMES) <= 2
    finally:
        policy_model._SET_NAMES_MAX = saved
    assert set_name("x", a) == name
