"""pacific.egressfirewall: parsing with errors that name the field, and the
ACL matches in rule order."""
import pytest

from pacific import egressfirewall as efw, names


def fw(rules, name="default"):
    return {"metadata": {"name": name, "namespace": "blue"}, "spec": {"egress": rules}}


def test_rules_compile_in_order_with_ports_and_dns_sets():
    f = efw.parse(fw([
        {"type": "Deny", "to": {"cidrSelector": "192.168.77.254/32"},
         "ports": [{"protocol": "TCP", "port": 80}, {"protocol": "udp", "port": 53},
                   {"protocol": "TCP", "port": 443}]},
        {"type": "Allow", "to": {"dnsName": "Example.COM."}},
        {"type": "Deny", "to": {"cidrSelector": "10.1.2.3/8"}}]))
    assert f.dns_names == ["example.com"]
    m = efw.matches(f, "exits", "cluster")
    assert [(p, a, rule) for p, _, a, rule in m] == [(names.PRIO_ACL_EFW_TOP, "drop", "0"),
                                                     (names.PRIO_ACL_EFW_TOP - 1, "allow", "1"),
                                                     (names.PRIO_ACL_EFW_TOP - 2, "drop", "2")]
    src = efw.source_set("blue")
    assert m[0][1] == (f"outport == @exits && ip4.src == ${src} && ip4.dst == "
                       "192.168.77.254/32 && ip4.dst != $cluster && "
                       "(tcp.dst == {80, 443} || udp.dst == {53})")
    assert f"ip4.dst == ${efw.dns_set('example.com')}" in m[1][1]
    assert "ip4.dst == 10.0.0.0/8 &&" in m[2][1]
    assert not f.decides_ipv6 and efw.matches(f, "exits", "cluster") == m   # an IPv4 cluster


def test_an_ipv6_cidr_rule_matches_ipv6_against_the_sets_ipv6_twins():
    f = efw.parse(fw([
        {"type": "Allow", "to": {"cidrSelector": "2001:DB8:100::1/128"},
         "ports": [{"protocol": "TCP", "port": 443}]},
        {"type": "Deny", "to": {"cidrSelector": "0.0.0.0/0"}},
        {"type": "Deny", "to": {"cidrSelector": "::/0"}}]))
    assert f.decides_ipv6
    m = efw.matches(f, "exits", "cluster", ipv6=True)
    src6 = efw.source_set("blue", 6)
    assert src6 == efw.source_set("blue") + "_6"
    assert m[0] == (names.PRIO_ACL_EFW_TOP, f"outport == @exits && ip6.src == ${src6} && "
                    "ip6.dst == 2001:db8:100::1/128 && ip6.dst != $cluster_6 && tcp.dst == {443}",
                    "allow", "0")
    assert m[1][1].count("ip4") == 3 and "ip6" not in m[1][1]
    assert "ip6.dst == ::/0 &&" in m[2][1]
    assert len(m) == 3           # it decides IPv6 itself: no implicit rule


def test_a_firewall_naming_no_ipv6_cidr_denies_ipv6_last_in_a_cluster_with_ipv6():
    f = efw.parse(fw([{"type": "Allow", "to": {"cidrSelector": "0.0.0.0/0"}},
                      {"type": "Allow", "to": {"dnsName": "example.com"}}]))
    assert not f.decides_ipv6
    *rules, last = efw.matches(f, "exits", "cluster", ipv6=True)
    # the CIDR rule in IPv4 only; the dnsName rule for its A and its AAAA records
    assert [(p, r, "ip6" in m) for p, m, _, r in rules] == [
        (names.PRIO_ACL_EFW_TOP, "0", False), (names.PRIO_ACL_EFW_TOP - 1, "1", False),
        (names.PRIO_ACL_EFW_TOP - 1, "1", True)]
    assert f"ip6.dst == ${efw.dns_set('example.com')}_6" in rules[2][1]
    assert last == (names.PRIO_ACL_EFW_TOP - 2, f"outport == @exits && ip6.src == "
                    f"${efw.source_set('blue', 6)} && ip6.dst != $cluster_6", "drop",
                    names.EFW_RULE_IPV6_DEFAULT)


@pytest.mark.parametrize("rules,name,field", [
    ([], "other", "named 'default'"),
    ([{"type": "Maybe", "to": {"cidrSelector": "1.2.3.0/24"}}], "default", "spec.egress[0].type"),
    ([{"type": "Deny", "to": {}}], "default", "exactly one"),
    ([{"type": "Deny", "to": {"cidrSelector": "1.2.3.0/24", "dnsName": "a.b"}}], "default",
     "exactly one"),
    ([{"type": "Deny", "to": {"cidrSelector": "300.1.2.0/24"}}], "default", "not a CIDR"),
    ([{"type": "Deny", "to": {"cidrSelector": "fd00::/129"}}], "default", "not a CIDR"),
    ([{"type": "Deny", "to": {"dnsName": "*.example.com"}}], "default", "wildcards"),
    ([{"type": "Deny", "to": {"dnsName": "bad name"}}], "default", "not a DNS name"),
    ([{"type": "Deny", "to": {"cidrSelector": "1.2.3.0/24"},
       "ports": [{"protocol": "ICMP", "port": 1}]}], "default", "ports[0].protocol"),
    ([{"type": "Deny", "to": {"cidrSelector": "1.2.3.0/24"},
       "ports": [{"protocol": "TCP", "port": 70000}]}], "default", "ports[0].port"),
])
def test_bad_firewalls_are_refused_naming_the_field(rules, name, field):
    with pytest.raises(efw.FirewallError) as e:
        efw.parse(fw(rules, name))
    assert field in str(e.value)


def test_a_dnsname_rule_matches_a_records_only_in_an_ipv4_cluster():
    f = efw.parse(fw([{"type": "Deny", "to": {"dnsName": "example.com"}}]))
    assert [("ip6" in m) for _, m, _, _ in efw.matches(f, "exits", "cluster")] == [False]
