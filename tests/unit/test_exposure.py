"""pacific.exposure: which external IPs and node ports a Service is granted (the
controller and every node call the same function), and the host firewall rules
a node makes of them (pacific.node.frontends)."""
import pytest

from pacific import exposure as ex
from pacific.node import firewall
from pacific.node.frontends import ServiceFrontends, rule_for

CLUSTER = ["10.16.0.0/16", "100.64.0.0/16", "10.96.0.0/12"]
ANYWHERE = ["0.0.0.0/0"]           # the administrator grants every outside address


def svc(name, created, ports=None, type_="ClusterIP", external_ips=(), local=False,
        cluster_ip="10.96.0.10", ns="ns"):
    spec = {"type": type_, "clusterIP": cluster_ip,
            "ports": ports or [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}],
            "externalIPs": list(external_ips)}
    if local:
        spec["externalTrafficPolicy"] = "Local"
    return {"metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
            "spec": spec}


def test_an_external_ip_and_a_node_port_are_granted():
    grants, refused = ex.exposures([svc("a", "2026-01-01T00:00:00Z", type_="NodePort",
                                       external_ips=["203.0.113.10"])], CLUSTER,
                                   allowed=ANYWHERE)
    assert not refused
    assert [(g.kind, g.ip, g.protocol, g.port, g.cluster_ip, g.service_port) for g in grants] == [
        (ex.EXTERNAL_IP, "203.0.113.10", "tcp", 80, "10.96.0.10", 80),
        (ex.NODE_PORT, None, "tcp", 30080, "10.96.0.10", 80)]


def test_a_cluster_ip_service_has_no_node_port_even_if_one_is_written():
    grants, _ = ex.exposures([svc("a", "t")], CLUSTER)
    assert grants == []


def test_the_older_service_keeps_a_contested_external_ip_whatever_the_order():
    old = svc("old", "2026-01-01T00:00:00Z", external_ips=["203.0.113.10"])
    new = svc("new", "2026-02-01T00:00:00Z", external_ips=["203.0.113.10"], cluster_ip="10.96.0.11")
    for order in ([old, new], [new, old]):
        grants, refused = ex.exposures(order, CLUSTER, allowed=ANYWHERE)
        assert [g.service for g in grants] == ["ns/old"]
        assert refused == {"ns/new": ["externalIP 203.0.113.10 TCP/80 is already used by "
                                      "Service ns/old (older)"]}


def test_the_same_address_on_another_port_or_protocol_is_no_conflict():
    a = svc("a", "1", external_ips=["203.0.113.10"])
    b = svc("b", "2", external_ips=["203.0.113.10"],
            ports=[{"name": "dns", "port": 80, "protocol": "UDP"}])
    grants, refused = ex.exposures([a, b], CLUSTER, allowed=ANYWHERE)
    assert not refused and len(grants) == 2


def test_no_external_ip_is_granted_until_the_administrator_names_ranges():
    for allowed in (None, []):
        grants, refused = ex.exposures([svc("a", "1", external_ips=["203.0.113.10"])], CLUSTER,
                                       allowed=allowed)
        assert grants == []
        assert "the cluster allows no external IPs" in refused["ns/a"][0]


def test_an_external_ip_belongs_to_one_namespace_for_every_port_and_protocol():
    """CVE-2020-8554-style sharing: another namespace may not take the same
    address on another port (it would share the owner's egress identity), and
    is not told who holds it."""
    owner = svc("a", "1", external_ips=["203.0.113.10"], ns="shop")
    other = svc("b", "2", external_ips=["203.0.113.10"], ns="evil",
                ports=[{"name": "x", "port": 8443, "protocol": "UDP"}])
    same_ns = svc("c", "3", external_ips=["203.0.113.10"], ns="shop",
                  ports=[{"name": "y", "port": 443, "protocol": "TCP"}])
    for order in ([owner, other, same_ns], [same_ns, other, owner]):
        grants, refused = ex.exposures(order, CLUSTER, allowed=ANYWHERE)
        assert sorted(g.service for g in grants) == ["shop/a", "shop/c"]
        assert refused == {"evil/b": ["externalIP 203.0.113.10 belongs to another namespace"]}


def test_a_conflict_with_another_namespace_does_not_name_its_service():
    a = svc("a", "1", type_="NodePort", ns="shop")
    b = svc("b", "2", type_="NodePort", ns="evil", cluster_ip="10.96.0.11")
    _, refused = ex.exposures([a, b], CLUSTER)
    assert refused == {"evil/b": ["nodePort TCP/30080 is already used by a Service of "
                                  "another namespace"]}


def test_endpoints_are_confined_to_the_service_s_namespace():
    owners = {"10.16.0.5": "shop", "10.16.0.6": "victim"}
    slices = [{"metadata": {"namespace": "shop"}, "addressType": "IPv4",
               "ports": [{"name": "http", "port": 80}],
               "endpoints": [{"addresses": ["10.16.0.5"]}, {"addresses": ["10.16.0.6"]},
                             {"addresses": ["192.168.77.1", "10.16.0.5"]}]}]
    kept, ignored = ex.confine(slices, "shop", owners.get)
    assert ex.ready_backends(kept, "http", "TCP") == ["10.16.0.5:80"]
    assert ignored == ["10.16.0.6", "192.168.77.1"]


@pytest.mark.parametrize("ip,why", [
    ("10.16.3.4", "inside the cluster network 10.16.0.0/16"),
    ("10.100.0.1", "inside the cluster network 10.96.0.0/12"),
    ("192.168.77.11", "an infrastructure address"),
    ("not-an-ip", "is not an IP address"),
    ("2001:db8::1", "outside the ranges external IPs may come from (0.0.0.0/0)"),
    # never, whatever the grant: the node would catch traffic that is not the Service's
    ("169.254.169.254", "is a link-local address, which no Service may take"),
    ("127.0.0.1", "is a loopback address"),
    ("224.0.0.251", "is a multicast address"),
    ("0.0.0.0", "is an unspecified address"),
    ("240.0.0.1", "is a reserved address"),
])
def test_refused_external_ips_name_the_reason(ip, why):
    grants, refused = ex.exposures([svc("a", "1", external_ips=[ip])], CLUSTER,
                                   node_ips={"192.168.77.11"}, allowed=ANYWHERE)
    assert grants == []
    assert why in refused["ns/a"][0]


def test_allowed_ranges_limit_external_ips():
    s = svc("a", "1", external_ips=["203.0.113.10", "198.18.0.1"])
    grants, refused = ex.exposures([s], CLUSTER, allowed=["203.0.113.0/24"])
    assert [g.ip for g in grants] == ["203.0.113.10"]
    assert "outside the ranges external IPs may come from (203.0.113.0/24)" in refused["ns/a"][0]


def test_a_node_port_outside_the_range_is_refused():
    s = svc("a", "1", type_="NodePort",
            ports=[{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 40000}])
    grants, refused = ex.exposures([s], CLUSTER)
    assert grants == [] and "nodePort 40000 (TCP) is outside the node port range" in refused["ns/a"][0]


def test_headless_services_expose_nothing():
    s = svc("a", "1", type_="NodePort", cluster_ip="None", external_ips=["203.0.113.10"])
    assert ex.exposures([s], CLUSTER) == ([], {})


def test_a_node_port_is_served_in_each_family_the_service_has_a_cluster_ip_of():
    six = svc("six", "1", type_="NodePort", cluster_ip="fd00:96::a")
    dual = svc("dual", "2", type_="NodePort", ports=[
        {"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30081}])
    dual["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::b"]
    grants, refused = ex.exposures([six, dual], CLUSTER)
    assert not refused
    assert [(g.service, g.cluster_ip, g.cluster_ip6, g.versions) for g in grants] == [
        ("ns/dual", "10.96.0.10", "fd00:96::b", (4, 6)), ("ns/six", None, "fd00:96::a", (6,))]
    rules = frontends([six, dual]).rules()
    assert [c.split(" #")[0] for c, _ in rules] == [
        "ns/dual node:tcp/30081", "ns/dual node:tcp/30081 ipv6", "ns/six node:tcp/30080 ipv6"]
    _, six_expr = rules[2]
    assert six_expr[0] == {"match": {"op": "==", "left": {"meta": {"key": "nfproto"}},
                                     "right": "ipv6"}}
    assert six_expr[-1] == {"dnat": {"family": "ip6", "addr": "fd00:96::a", "port": 80}}
    assert rules[0][1][-1] == {"dnat": {"family": "ip", "addr": "10.96.0.10", "port": 80}}
    assert ex.exposures([svc("c", "3", cluster_ip="fd00:96::b")], CLUSTER) == ([], {})


def test_an_ipv6_only_services_ipv4_external_ip_is_refused_naming_why():
    six = svc("six", "1", cluster_ip="fd00:96::a", external_ips=["203.0.113.10"])
    grants, refused = ex.exposures([six], CLUSTER, allowed=ANYWHERE)
    assert grants == []
    assert refused["ns/six"] == ["externalIP 203.0.113.10 is IPv4 and the Service has no IPv4 "
                                 "cluster IP to send it to"]


def test_an_ipv6_external_ip_is_served_in_its_canonical_spelling_and_checked_as_ipv4s_are():
    both = ["0.0.0.0/0", "::/0"]
    dual = svc("dual", "1", external_ips=["2001:DB8:0::10", "203.0.113.10"])
    dual["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::a"]
    grants, refused = ex.exposures([dual], CLUSTER + ["fd00:16::/64"], allowed=both)
    assert not refused
    assert [(g.ip, g.versions) for g in grants] == [("2001:db8::10", (6,)),
                                                     ("203.0.113.10", (4,))]
    (_, six), (_, four) = [rule_for(g, [], g.versions[0]) for g in grants]
    assert six[0] == {"match": {"op": "==", "left": {"payload": {"protocol": "ip6",
                                                                 "field": "daddr"}},
                                "right": "2001:db8::10"}}
    assert six[-1] == {"dnat": {"family": "ip6", "addr": "fd00:96::a", "port": 80}}
    assert four[-1] == {"dnat": {"family": "ip", "addr": "10.96.0.10", "port": 80}}
    # another spelling of a taken or a node's address is the same address
    other = svc("other", "2", ns="ns2", external_ips=["2001:db8::0:10", "FD00:77::5",
                                                       "fd00:16::9"])
    other["spec"]["clusterIPs"] = ["10.96.0.11", "fd00:96::b"]
    grants, refused = ex.exposures([dual, other], CLUSTER + ["fd00:16::/64"],
                                   node_ips={"fd00:77::5"}, allowed=both)
    assert {g.service for g in grants} == {"ns/dual"}
    assert refused["ns2/other"] == [
        "externalIP FD00:77::5 is an infrastructure address (a node's, OVN central's or "
        "otherwise reserved)",
        "externalIP fd00:16::9 is inside the cluster network fd00:16::/64",
        "externalIP 2001:db8::10 belongs to another namespace"]
    for special, kind in (("fe80::1", "link-local"), ("::1", "loopback"), ("ff05::2", "multicast"),
                          ("::", "unspecified")):
        grants, refused = ex.exposures([svc("odd", "4", external_ips=[special])], CLUSTER,
                                       allowed=both)
        assert grants == [] and f" {kind} address, which no Service may take" in \
            refused["ns/odd"][0]
    # an IPv4-only Service: its IPv6 external IP has nowhere to go
    grants, refused = ex.exposures([svc("four", "3", external_ips=["2001:db8::11"])], CLUSTER,
                                   allowed=both)
    assert grants == [] and "is IPv6 and the Service has no IPv6 cluster IP" in \
        refused["ns/four"][0]


def test_local_policy_over_ipv6_is_sent_to_this_node_s_ipv6_endpoints():
    from pacific import contract
    rec = contract.PodRecord(uid="u1", port="pod:ns/p1", ip="10.16.0.5", mac="0a:58:0a:10:00:05",
                             cidr="10.16.0.0/16", gateway="10.16.0.1", subnet="s",
                             ips=("10.16.0.5", "fd00:16::5"), cidrs=("10.16.0.0/16", "fd00:16::/64"),
                             gateways=("10.16.0.1", "fd00:16::1"))
    pods = [{"metadata": {"name": "p1", "namespace": "ns", "uid": "u1",
                          "annotations": rec.annotations()}}]
    port = [{"name": "http", "port": 8080, "protocol": "TCP"}]
    slices = [{"metadata": {"namespace": "ns", "labels": {ex.SERVICE_NAME_LABEL: "a"}},
               "addressType": family, "ports": port,
               "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}]}
              for family, ip in (("IPv4", "10.16.0.5"), ("IPv6", "fd00:16::5"))]
    s = svc("a", "1", type_="NodePort", local=True)
    s["spec"]["clusterIPs"] = ["10.96.0.10", "fd00:96::a"]
    (_, four), (_, six) = frontends([s], slices, pods).rules()
    assert four[-1] == {"dnat": {"family": "ip", "addr": "10.16.0.5", "port": 8080}}
    assert six[-1] == {"dnat": {"family": "ip6", "addr": "fd00:16::5", "port": 8080}}


def test_backends_and_vips_spell_ipv6_in_brackets():
    assert ex.host_port("fd00::5", 80) == "[fd00::5]:80" and ex.host_port("10.0.0.5", 80) == \
        "10.0.0.5:80"
    assert ex.split_host_port("[fd00::5]:80") == ("fd00::5", 80)
    slices = [{"addressType": "IPv6", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
               "endpoints": [{"addresses": ["fd00::10"]}, {"addresses": ["fd00::9"]}]},
              {"addressType": "IPv4", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
               "endpoints": [{"addresses": ["10.0.0.9"]}]}]
    assert ex.ready_backends(slices, "http", "TCP", 6) == ["[fd00::9]:80", "[fd00::10]:80"]
    assert ex.ready_backends(slices, "http", "TCP") == ["10.0.0.9:80"]


@pytest.mark.parametrize("text", ["1-", "x-y", "20-10", "0-5", "1-70000", "30000"])
def test_bad_port_ranges_are_named(text):
    with pytest.raises(ValueError, match=repr(text).replace("-", r"\-")):
        ex.parse_port_range(text)


def test_cidr_lists():
    assert ex.parse_cidrs("") == [] and ex.parse_cidrs(None) == []
    assert ex.parse_cidrs("203.0.113.7/24, 198.51.100.0/24") == ["203.0.113.0/24", "198.51.100.0/24"]
    with pytest.raises(ValueError, match="'nope' is not a CIDR"):
        ex.parse_cidrs("203.0.113.0/24,nope")


# -- the node's rules ---------------------------------------------------------------
class Cache:
    def __init__(self, items):
        self.items = items

    def list(self):
        return list(self.items)


def frontends(services, slices=(), pods=()):
    return ServiceFrontends(Cache(services), Cache(slices), Cache([]), Cache([]), Cache(pods),
                            join_cidrs=lambda: ["100.64.0.0/16"], service_cidr="10.96.0.0/12",
                            allowed=ANYWHERE)


def test_cluster_policy_is_sent_to_the_cluster_ip():
    (comment, expr), = frontends([svc("a", "1", external_ips=["203.0.113.10"])]).rules()
    assert comment.startswith("ns/a 203.0.113.10:tcp/80 #")
    assert expr[-1] == {"dnat": {"family": "ip", "addr": "10.96.0.10", "port": 80}}


def test_local_policy_is_sent_to_this_node_s_endpoints_only():
    pods = [{"metadata": {"name": "p1", "namespace": "ns", "uid": "u1",
                          "annotations": {}}}]            # no record: not a local endpoint
    s = svc("a", "1", type_="NodePort", local=True)
    (_, expr), = frontends([s], pods=pods).rules()
    assert expr[-1] == {"drop": None}                    # no local endpoint: dropped


def test_a_changed_rule_gets_another_comment():
    a = rule_for(ex.Frontend("ns/a", ex.NODE_PORT, "tcp", None, 30080, "10.96.0.10", 80, "", False), [])
    b = rule_for(ex.Frontend("ns/a", ex.NODE_PORT, "tcp", None, 30080, "10.96.0.11", 80, "", False), [])
    assert a[0] != b[0] and a[0].split(" #")[0] == b[0].split(" #")[0]


def test_several_local_endpoints_are_chosen_at_random():
    fe = ex.Frontend("ns/a", ex.NODE_PORT, "tcp", None, 30080, "10.96.0.10", 80, "http", True)
    _, expr = rule_for(fe, [("10.16.0.5", 8080), ("10.16.0.6", 8081)])
    m = expr[-1]["dnat"]["addr"]["map"]
    assert m["key"] == {"numgen": {"mode": "random", "mod": 2, "offset": 0}}
    assert m["data"]["set"][1] == [1, {"concat": ["10.16.0.6", 8081]}]


def test_the_firewall_rewrites_only_the_services_chain_when_frontends_change():
    listing = {"nftables": [{"chain": {"name": c}} for c in firewall.CHAINS]
               + [{"rule": {"chain": c, "comment": m}} for c, m, _ in firewall.RULES]
               + [{"rule": {"chain": firewall.SERVICES, "comment": "ns/old x #1"}}]}
    comments, _ = firewall.read_state(listing)
    assert firewall._static_intact(comments)
    cmds = firewall._chain_commands(firewall.SERVICES, [("ns/a y #2", [{"accept": None}])])
    assert cmds[0] == {"flush": {"chain": {"family": "inet", "table": "pacific",
                                           "name": firewall.SERVICES}}}
    assert cmds[1]["add"]["rule"]["comment"] == "ns/a y #2"


def test_a_service_labelled_for_another_proxy_exposes_nothing_on_the_nodes():
    s = svc("a", "2026-01-01T00:00:00Z", type_="NodePort", external_ips=["203.0.113.10"])
    s["metadata"]["labels"] = {"service.kubernetes.io/service-proxy-name": "other"}
    assert ex.exposures([s], CLUSTER, allowed=ANYWHERE) == ([], {})
    s["metadata"]["labels"] = {"service.kubernetes.io/headless": ""}
    assert ex.exposures([s], CLUSTER, allowed=ANYWHERE) == ([], {})


def test_a_namespace_holds_at_most_its_bound_of_external_ips_its_oldest_services_first():
    """Issue 51 (shared pools are fair): a tenant granted a range cannot take
    every address in it; the same address on more ports counts once, another
    namespace still gets one, and 0 lifts the bound."""
    greedy = [svc(f"g{i}", f"2026-01-01T00:00:{i:02d}Z", external_ips=[f"203.0.113.{i}"],
                  ns="greedy") for i in range(1, 6)]
    again = svc("g1-tls", "2026-01-01T00:01:00Z", external_ips=["203.0.113.1"], ns="greedy",
                ports=[{"name": "tls", "port": 443, "protocol": "TCP"}])
    fair = svc("f", "2026-01-01T00:02:00Z", external_ips=["203.0.113.50"], ns="fair")
    services = [fair, again, *reversed(greedy)]
    grants, refused = ex.exposures(services, CLUSTER, allowed=ANYWHERE, per_namespace=3)
    assert sorted({(g.service, g.ip) for g in grants}) == [
        ("fair/f", "203.0.113.50"), ("greedy/g1", "203.0.113.1"),
        ("greedy/g1-tls", "203.0.113.1"), ("greedy/g2", "203.0.113.2"),
        ("greedy/g3", "203.0.113.3")]
    assert refused == {f"greedy/g{i}": [
        f"externalIP 203.0.113.{i}: the namespace holds its 3 external IPs already (an "
        "administrator sets --external-ips-per-namespace)"] for i in (4, 5)}
    grants, refused = ex.exposures(services, CLUSTER, allowed=ANYWHERE, per_namespace=0)
    assert not refused and len({g.ip for g in grants}) == 6
