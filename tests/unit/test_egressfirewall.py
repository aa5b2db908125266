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
    assert [(p, a) for p, _, a in m] == [(names.PRIO_ACL_EFW_TOP, "drop"),
                                         (names.PRIO_ACL_EFW_TOP - 1, "allow"),
                                         (names.PRIO_ACL_EFW_TOP - 2, "drop")]
    src = efw.source_set("blue")
    assert m[0][1] == (f"outport == @exits && ip4.src == ${src} && ip4.dst == "
                       "192.168.77.254/32 && ip4.dst != $cluster && "
                       "(tcp.dst == {80, 443} || udp.dst == {53})")
    assert f"ip4.dst == ${efw.dns_set('example.com')}" in m[1][1]
    assert "ip4.dst == 10.0.0.0/8 &&" in m[2][1]


@pytest.mark.parametrize("rules,name,field", [
    ([], "other", "named 'default'"),
    ([{"type": "Maybe", "to": {"cidrSelector": "1.2.3.0/24"}}], "default", "spec.egress[0].type"),
    ([{"type": "Deny", "to": {}}], "default", "exactly one"),
    ([{"type": "Deny", "to": {"cidrSelector": "1.2.3.0/24", "dnsName": "a.b"}}], "default",
     "exactly one"),
    ([{"type": "Deny", "to": {"cidrSelector": "300.1.2.0/24"}}], "default", "not a CIDR"),
    ([{"type": "Deny", "to": {"cidrSelector": "fd00::/64"}}], "default", "IPv6"),
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
