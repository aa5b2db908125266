"""NetworkPolicy compiled for dual-stack pods (alpha, --ipv6-subnets): every
allow rule gets an IPv6 twin naming the peers' IPv6 set, IPv6 blocks and the
destinations' IPv6 addresses for named ports; nothing of IPv6 without it."""
from pacific.controller.policy_model import (PodInfo, World, base_set_name, compile_policy,
                                             merged, set_name)
from pacific.names import family_set_name


def world(families=(4, 6)):
    pods = [PodInfo("x", "a", {"app": "web"}, "10.78.0.2", "pod:x/a", (("http", 80, "TCP"),),
                    "fd00:78::2"),
            PodInfo("x", "b", {"app": "cli"}, "10.78.0.3", "pod:x/b", (), "fd00:78::3"),
            PodInfo("x", "c", {"app": "cli"}, "", "pod:x/c", (), "fd00:81::5"),   # IPv6 only
            PodInfo("x", "d", {"app": "cli"}, "10.16.0.9", "pod:x/d", ())]         # IPv4 only
    return World(pods, {"x": {}}, families=families)


POLICY = {"metadata": {"namespace": "x", "name": "p"},
          "spec": {"podSelector": {"matchLabels": {"app": "web"}},
                   "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "cli"}}},
                                         {"ipBlock": {"cidr": "192.0.2.0/24"}},
                                         {"ipBlock": {"cidr": "2001:db8::/32",
                                                      "except": ["2001:db8:1::/48"]}}],
                                "ports": [{"port": "http"}]}]}}


def test_every_allow_rule_has_an_ipv6_twin_of_its_peers_blocks_and_ports():
    types, rules, ports = compile_policy(POLICY, world())
    assert types == ["ingress"] and ports == ["pod:x/a"]
    v4, v6 = rules
    assert (v4.family, v6.family) == (4, 6)
    name = set_name("x", {"podSelector": {"matchLabels": {"app": "cli"}}})
    assert dict(v4.address_sets) == {name: frozenset({"10.78.0.3", "10.16.0.9"})}
    assert dict(v6.address_sets) == {f"{name}_6": frozenset({"fd00:78::3", "fd00:81::5"})}
    assert f"ip4.src == ${name}" in v4.peers and "192.0.2.0/24" in v4.peers
    assert "2001:db8" not in v4.peers
    assert f"ip6.src == ${name}_6" in v6.peers and "ip6.src == 2001:db8::/32" in v6.peers
    assert "ip6.src != {2001:db8:1::/48}" in v6.peers and "192.0.2" not in v6.peers
    assert "ip4.dst == {10.78.0.2} && tcp.dst == 80" in v4.ports
    assert "ip6.dst == {fd00:78::2} && tcp.dst == 80" in v6.ports


def test_an_ipv4_cluster_compiles_no_ipv6_at_all():
    _, rules, _ = compile_policy(POLICY, world(families=(4,)))
    assert [r.family for r in rules] == [4]


def test_a_rule_whose_peers_are_blocks_of_one_family_has_no_twin_in_the_other():
    pol = {"metadata": {"namespace": "x", "name": "q"},
           "spec": {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}}
    _, rules, _ = compile_policy(pol, world())
    assert [r.family for r in rules] == [4]


def test_merging_keeps_the_families_apart():
    pol = {"metadata": {"namespace": "x", "name": "r"},
           "spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 80}]}, {"ports": [{"port": 81}]}]}}
    _, rules, _ = compile_policy(pol, world())
    out = merged([("x/r", r) for r in rules])
    assert sorted(r.family for _, r in out) == [4, 6]
    assert all("tcp.dst == 80" in r.ports and "tcp.dst == 81" in r.ports for _, r in out)


def test_the_ipv6_set_name_leads_back_to_its_peer():
    assert family_set_name("np_as_0123", 4) == "np_as_0123"
    assert base_set_name(family_set_name("np_as_0123", 6)) == "np_as_0123"
