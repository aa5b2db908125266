"""EgressFirewall in both families (controller/egress_firewall.py): every
address set it writes holds one family (OVN drops a flow whose set mixes
them, so a mixed set would leave a firewall without a rule in force), an IPv6
CIDR's rule matches IPv6, and a firewall written for IPv4 denies its pods'
IPv6 in a cluster with IPv6 instead of letting it out unfiltered."""
from __future__ import annotations

from controller_fakes import drain, make_controller
from pacific import contract, egressfirewall as efw, names
from pacific.controller.egress import v6_set_name
from pacific.kube import resources as r
from pacific.ovn import acl, ensure

DUAL = dict(ipv6_subnets=True, join_cidr="100.64.0.0/16,fd00:64::/64",
            default_cidr="10.16.0.0/16,fd00:16::/64",
            service_cidr="10.96.0.0/16,fd00:96::/108")
CLUSTER6 = names.family_set_name(names.EFW_CLUSTER_SET, 6)


def _cluster(**cfg):
    ctl = make_controller(**cfg)
    # a dual-stack node: an InternalIP of each family
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1"}, "status": {"addresses": [
        {"type": "InternalIP", "address": "192.168.1.5"},
        {"type": "InternalIP", "address": "fd00:77::5"}]}})
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "walled"}})
    ctl.kube.add(r.PODS, {"metadata": {"name": "p", "namespace": "walled"},
                          "spec": {"nodeName": "node1", "containers": [{"name": "c"}]}}, "walled")
    return ctl


def _firewall(ctl, *rules):
    ctl.kube.add(r.EGRESSFIREWALLS, {"metadata": {"name": "default", "namespace": "walled"},
                                     "spec": {"egress": list(rules)}}, "walled")
    drain(ctl)


def _sets(ctl) -> dict[str, set]:
    out: dict[str, set] = {}
    for c in ctl.writer.commands(ensure.AddressSetAddAddresses):
        out.setdefault(c.name, set()).update(c.members)
    return out


def _acls(ctl) -> list:
    return [c for c in ctl.writer.commands(acl.EnsureACLs)
            if c.group == names.EFW_EXITS_GROUP and c.specs][-1].specs


def _pod(ctl):
    return contract.own_record(r.get(ctl.kube, r.PODS, "p", "walled"))


def test_every_set_holds_one_family_and_an_ipv4_firewall_denies_ipv6_last():
    ctl = _cluster(**DUAL)
    _firewall(ctl, {"type": "Deny", "to": {"cidrSelector": "0.0.0.0/0"}})
    sets = _sets(ctl)
    for name, members in sets.items():
        assert len({":" in a for a in members}) == 1, (name, members)
    assert sets[names.EFW_CLUSTER_SET] == {"10.16.0.0/16", "10.96.0.0/16", "100.64.0.0/16",
                                           "192.168.1.5"}
    assert sets[CLUSTER6] == {"fd00:16::/64", "fd00:64::/64", "fd00:96::/108", "fd00:77::5"}
    pod = _pod(ctl)
    assert sets[efw.source_set("walled", 6)] == {pod.ips[1]}
    specs = _acls(ctl)
    assert [(s.priority, s.action, s.name) for s in specs] == [
        (names.PRIO_ACL_EFW_TOP, "drop", "efw:walled:0"),
        (names.PRIO_ACL_EFW_TOP - 1, "drop", f"efw:walled:{names.EFW_RULE_IPV6_DEFAULT}")]
    assert specs[1].match.startswith(f"outport == @{names.EFW_EXITS_GROUP} && ip6.src == "
                                     f"${efw.source_set('walled', 6)}")
    # the firewall decides its pods' IPv6 itself: no hold, it reaches the exits
    egress6 = {a for c in ctl.writer.commands(ensure.AddressSetAddAddresses)
               if c.name == v6_set_name("node1") for a in c.members}
    assert pod.ips[1] in egress6


def test_an_ipv6_cidr_rule_replaces_the_implicit_deny():
    ctl = _cluster(**DUAL)
    _firewall(ctl, {"type": "Allow", "to": {"cidrSelector": "2001:db8:100::/64"}},
              {"type": "Deny", "to": {"cidrSelector": "::/0"}})
    specs = _acls(ctl)
    assert [s.name for s in specs] == ["efw:walled:0", "efw:walled:1"]
    assert all(f"ip6.dst != ${CLUSTER6}" in s.match and "ip4" not in s.match for s in specs)


def test_an_ipv4_cluster_writes_nothing_of_ipv6_though_a_node_has_an_ipv6_address():
    ctl = _cluster()
    _firewall(ctl, {"type": "Deny", "to": {"cidrSelector": "0.0.0.0/0"}})
    sets = _sets(ctl)
    assert sets[names.EFW_CLUSTER_SET] == {"10.16.0.0/16", "10.96.0.0/12", "100.64.0.0/16",
                                           "192.168.1.5"}
    assert not [n for n in sets if n.endswith(names.SET_SUFFIX_IP6)]
    assert [s.name for s in _acls(ctl)] == ["efw:walled:0"]
