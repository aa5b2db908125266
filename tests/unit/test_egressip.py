"""pacific.egressip: which pods leave with which EgressIP address."""
from pacific import egressip

NS = {"blue": {"team": "blue"}, "red": {"team": "red"}}
ALLOWED = ["192.168.77.0/24"]
CLUSTER = ["10.16.0.0/16", "100.64.0.0/16"]


def eip(name, ips, ns_sel=None, pod_sel=None, created="2026-11-26T00:00:00Z"):
    spec = {"egressIPs": ips, "namespaceSelector": ns_sel or {"matchLabels": {"team": "blue"}}}
    if pod_sel is not None:
        spec["podSelector"] = pod_sel
    return {"metadata": {"name": name, "creationTimestamp": created}, "spec": spec}


PODS = [("blue", {"app": "web"}, "10.16.0.5"), ("blue", {"app": "db"}, "10.16.0.6"),
        ("red", {"app": "web"}, "10.16.0.7")]


def decide(objs, pods=PODS, reserved=("192.168.77.10",)):
    return egressip.decide(objs, pods, NS, ALLOWED, reserved, CLUSTER)


def test_selected_pods_of_selected_namespaces_leave_with_the_address():
    d = decide([eip("a", ["192.168.77.50"])])
    assert d.grants == {"a/192.168.77.50": egressip.Grant(
        "a/192.168.77.50", "a", "192.168.77.50", 0, ("10.16.0.5", "10.16.0.6"))}
    d = decide([eip("a", ["192.168.77.50"], pod_sel={"matchLabels": {"app": "web"}})])
    assert d.grants["a/192.168.77.50"].sources == ("10.16.0.5",)


def test_no_namespace_selector_selects_nothing():
    obj = eip("a", ["192.168.77.50"])
    del obj["spec"]["namespaceSelector"]
    assert decide([obj]).grants["a/192.168.77.50"].sources == ()


def test_bad_addresses_are_refused_with_a_reason():
    d = decide([eip("a", ["192.168.77.10", "10.16.0.9", "203.0.113.5", "fd00::5", "nope",
                          "192.168.77.255", "192.168.77.51"])])         # no IPv6 range granted
    assert list(d.grants) == ["a/192.168.77.51"]
    why = d.refused["a"]
    assert "infrastructure" in why["192.168.77.10"]
    assert "cluster" in why["10.16.0.9"]
    assert "--egress-ip-cidrs" in why["203.0.113.5"]
    assert "--egress-ip-cidrs" in why["fd00::5"]
    assert "not an IP" in why["nope"]
    assert "broadcast" in why["192.168.77.255"]


def test_nothing_is_granted_without_egress_ip_cidrs():
    d = egressip.decide([eip("a", ["192.168.77.50"])], PODS, NS, [], (), CLUSTER)
    assert d.grants == {} and "empty" in d.refused["a"]["192.168.77.50"]


def test_the_older_egressip_keeps_an_address_and_a_pod():
    old = eip("old", ["192.168.77.50"], created="2026-11-26T00:00:00Z")
    new = eip("new", ["192.168.77.50", "192.168.77.60"], created="2026-11-26T01:00:00Z")
    d = decide([new, old])
    assert "older EgressIP old" in d.refused["new"]["192.168.77.50"]
    assert d.grants["old/192.168.77.50"].sources == ("10.16.0.5", "10.16.0.6")
    assert d.grants["new/192.168.77.60"].sources == ()
    assert any("10.16.0.5" in n and "old" in n for n in d.notes["new"])


def test_pods_spread_over_addresses_and_stay_put():
    pods = [("blue", {}, f"10.16.1.{i}") for i in range(1, 101)]
    d = decide([eip("a", ["192.168.77.50", "192.168.77.51"])], pods)
    a, b = (d.grants[f"a/192.168.77.5{i}"].sources for i in (0, 1))
    assert set(a) | set(b) == {p[2] for p in pods} and not set(a) & set(b)
    assert 25 < len(a) < 75
    fewer = decide([eip("a", ["192.168.77.50", "192.168.77.51"])], pods[:50])
    assert set(fewer.grants["a/192.168.77.50"].sources) == set(a) & {p[2] for p in pods[:50]}


def test_claimed_and_keys():
    assert egressip.claimed([eip("a", ["192.168.77.50", "bad"])]) == {"192.168.77.50"}
    assert egressip.ip_of_key("a/192.168.77.50") == "192.168.77.50"
    assert egressip.ip_of_key("a/x") is None
    assert egressip.address_set_name("a/1.2.3.4") != egressip.address_set_name("x/y")


def test_a_bad_selector_is_a_note_not_a_crash():
    d = decide([eip("a", ["192.168.77.50"], pod_sel={"matchExpressions": [
        {"key": "app", "operator": "Like"}]})])
    assert d.grants["a/192.168.77.50"].sources == ()
    assert "Like" in d.notes["a"][0]


ALLOWED6 = ALLOWED + ["fd00:77::/64"]
CLUSTER6 = CLUSTER + ["fd00:16::/64"]
PODS6 = [("blue", {"app": "web"}, "10.16.0.5"), ("blue", {"app": "web"}, "fd00:16::5"),
         ("blue", {"app": "web"}, "fd00:16::6"), ("red", {"app": "web"}, "fd00:16::7")]


def decide6(objs, pods=PODS6):
    return egressip.decide(objs, pods, NS, ALLOWED6, ("fd00:77::10",), CLUSTER6)


def test_ipv6_addresses_carry_the_pods_ipv6_and_ipv4_ones_their_ipv4():
    d = decide6([eip("a", ["192.168.77.50", "fd00:77::50"])])
    assert d.grants["a/192.168.77.50"].sources == ("10.16.0.5",)
    assert d.grants["a/fd00:77::50"].sources == ("fd00:16::5", "fd00:16::6")
    assert d.grants["a/fd00:77::50"].version == 6 and d.grants["a/fd00:77::50"].index == 1
    # only IPv6: the pods' IPv4 is decided by nothing here (leaves as without it)
    d = decide6([eip("a", ["fd00:77::50"])])
    assert [g.sources for g in d.grants.values()] == [("fd00:16::5", "fd00:16::6")]


def test_ipv6_addresses_are_checked_in_their_canonical_spelling():
    d = decide6([eip("a", ["FD00:77:0::50", "fd00:77::10", "fd00:16::9", "2001:db8::5",
                          "fd00:77::"]),
                 eip("b", ["fd00:77::50"], created="2026-11-27T00:00:00Z")])
    assert list(d.grants) == ["a/fd00:77::50"]
    why = d.refused["a"]
    assert "infrastructure" in why["fd00:77::10"]
    assert "cluster" in why["fd00:16::9"]
    assert "--egress-ip-cidrs" in why["2001:db8::5"]
    assert "anycast" in why["fd00:77::"]
    assert "older EgressIP a" in d.refused["b"]["fd00:77::50"]
    assert "fd00:77::50" in egressip.claimed([eip("a", ["FD00:77:0::50"])])
    assert egressip.ip_of_key("a/fd00:77::50") == "fd00:77::50"


def test_ipv6_pods_spread_over_the_ipv6_addresses_only():
    pods = [("blue", {}, f"fd00:16::{i:x}") for i in range(1, 40)]
    d = decide6([eip("a", ["192.168.77.50", "fd00:77::50", "fd00:77::51"])], pods)
    six = [d.grants["a/fd00:77::50"].sources, d.grants["a/fd00:77::51"].sources]
    assert d.grants["a/192.168.77.50"].sources == ()
    assert all(six) and sorted(six[0] + six[1], key=lambda a: int(a.rsplit(":", 1)[1], 16)) == \
        [p[2] for p in pods]
