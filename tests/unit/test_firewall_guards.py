"""The host firewall's guards (issue 22): OVN central's addresses and ports are
taken from the SB remote (tcp:, ssl:, every RAFT member, host names), the
guard chains drop before the chains that accept, and the sets they use hold
the pod and join networks, every Node's addresses and the host ports."""
from __future__ import annotations

import socket

from node_fakes import context
from pacific import names
from pacific.node import firewall
from pacific.node import main as node_main


class Cache:
    def __init__(self, items=()):
        self.items = list(items)

    def list(self):
        return self.items

    def get(self, name):
        for i in self.items:
            if i["metadata"]["name"] == name:
                return i
        return None


def test_central_from_a_tcp_remote():
    addrs, ports = firewall.ovn_central("tcp:192.168.77.1:6642")
    assert addrs == {"192.168.77.1"}
    assert ports == {6641, 6642, 6643, 6644}


def test_central_from_every_ssl_member_and_their_ports():
    addrs, ports = firewall.ovn_central(
        "ssl:10.0.0.2:16642, ssl:10.0.0.3:16642,ssl:10.0.0.4:16642,unix:/run/ovn/sb.sock")
    assert addrs == {"10.0.0.2", "10.0.0.3", "10.0.0.4"}
    assert ports == {16642, *names.OVN_CENTRAL_PORTS}


def test_central_host_names_are_resolved_and_ipv6_left_to_no_rule():
    def resolve(host, port, family, kind):
        assert family == socket.AF_INET
        if host == "ovn.example":
            return [(family, kind, 6, "", ("10.1.2.3", 0))]
        raise socket.gaierror("no such host")
    addrs, _ = firewall.ovn_central("ssl:ovn.example:6642,ssl:gone.example:6642,"
                                    "ssl:[fd00::1]:6642", resolve=resolve)
    assert addrs == {"10.1.2.3"}


def test_no_remote_no_central():
    assert firewall.ovn_central(None)[0] == set()
    assert firewall.ovn_central("unix:/run/ovn/ovnsb_db.sock")[0] == set()


def host_firewall(subnets, nodes, *argv):
    """The firewall feature of node n1 with flags argv, on these Subnets and Nodes."""
    return firewall.HostFirewall(context(
        *argv, subnets=subnets, node=Cache(n for n in nodes if n["metadata"]["name"] == "n1"),
        nodes=Cache(nodes), services=Cache(), endpointslices=Cache(), pods=Cache(), egressips=Cache()))


def node(name, *addresses):
    return {"metadata": {"name": name, "annotations": {}},
            "status": {"addresses": [{"type": "InternalIP", "address": a} for a in addresses]}}


def _rules(chain):
    return [(c, e) for ch, c, e in firewall.RULES if ch == chain]


def test_guards_run_before_the_chains_that_accept():
    hooks = firewall.CHAINS
    assert hooks["guard-input"]["hook"] == "input"
    assert hooks["guard-input"]["prio"] < hooks["input"]["prio"]
    assert hooks["guard-forward"]["hook"] == "forward"
    assert hooks["guard-forward"]["prio"] < hooks["forward"]["prio"]
    assert hooks["guard-underlay"]["hook"] == "prerouting"
    assert hooks["guard-underlay"]["prio"] <= -300       # before conntrack: no state kept
    for chain in ("guard-input", "guard-forward", "guard-underlay"):
        for _, expr in _rules(chain):
            assert expr[-1] == {"drop": None}


def test_the_underlay_guard_spares_ovns_own_paths():
    rules = _rules("guard-underlay")
    assert [c for c, _ in rules] == ["pacific-underlay-spoof", "pacific-underlay-spoof-6"]
    for _, expr in rules:                 # IPv4 and IPv6 alike
        iif = [m for m in expr if m.get("match", {}).get("left") == {"meta": {"key": "iifname"}}]
        assert iif[0]["match"]["op"] == "!="
        assert set(iif[0]["match"]["right"]["set"]) == {"lo", names.MGMT_PORT, names.EGRESS_PORT,
                                                         names.EGRESS_BRIDGE}


def test_no_pod_or_join_source_reaches_a_tunnel_or_bfd_port_at_any_address():
    """Issue 51 (decision 0051): Geneve, VXLAN, STT and BFD ports dropped from
    @internal_cidrs (IPv4 and IPv6) into this node and through it, towards
    every destination: no rule names one, so no masquerade or unknown
    tunnel endpoint address lets one through."""
    want = {("udp", p) for p in (6081, 4789, 3784, 3785, 4784)} | {("tcp", 7471)}
    for chain, internal in (("guard-input", "@internal_cidrs"),
                            ("guard-forward", "@internal_cidrs"),
                            ("guard-input", "@internal_cidrs6"),
                            ("guard-forward", "@internal_cidrs6")):
        got = set()
        for comment, expr in _rules(chain):
            if not comment.startswith("pacific-underlay-"):
                continue
            fields = {m["match"]["left"].get("payload", {}).get("field"): m["match"]
                      for m in expr if "match" in m}
            if fields["saddr"]["right"] != internal:
                continue
            assert "daddr" not in fields and expr[-1] == {"drop": None}, comment
            dport = fields["dport"]
            got |= {(dport["left"]["payload"]["protocol"], p) for p in dport["right"]["set"]}
        assert got == want, (chain, internal, got)


def test_wanted_sets():
    subnets = Cache([{"metadata": {"name": "a"}, "status": {"cidrBlock": "10.16.0.0/16"},
                      "spec": {}}])
    fw = host_firewall(subnets, [node("n1", "192.168.77.11", "fd00::11")],
                       "--service-cidr", "10.96.0.0/12",
                       "--ovn-remote", "ssl:192.168.77.2:6642,ssl:192.168.77.3:6642",
                       "--metrics-address", "127.0.0.1:9477", "--host-only-ports", "9476")
    w = fw.wanted()
    assert w["internal_cidrs"] == {"10.16.0.0/16"}       # + the join network once recorded
    assert w["ovn_central"] == {"192.168.77.2/32", "192.168.77.3/32"}
    assert w["ovn_ports"] == {"6641", "6642", "6643", "6644"}
    # every infrastructure address, IPv4 only: the Nodes' and OVN central's
    assert w["node_addrs"] == {"192.168.77.11/32", "192.168.77.2/32", "192.168.77.3/32"}
    assert w["node_addrs6"] == {"fd00::11/128"}          # ... and the Nodes' IPv6 apart
    assert w["host_ports"] == {"9476", "9477"}
    cmds = firewall.full_commands(w)
    port_sets = [c["add"]["set"] for c in cmds if "set" in c.get("add", {})
                 and c["add"]["set"]["name"] in firewall.PORT_SETS]
    assert all(s["type"] == "inet_service" for s in port_sets) and len(port_sets) == 2
    elems = {c["add"]["element"]["name"]: c["add"]["element"]["elem"] for c in cmds
             if "element" in c.get("add", {})}
    assert elems["host_ports"] == [9476, 9477]


def test_read_back_sets_compare_equal():
    listing = {"nftables": [
        {"set": {"name": "host_ports", "elem": [9476, 9477]}},
        {"set": {"name": "node_addrs", "elem": ["192.168.77.11"]}}]}
    _, sets = firewall.read_state(listing)
    assert firewall._normal("host_ports", sets["host_ports"]) == {"9476", "9477"}
    assert firewall._normal("node_addrs", sets["node_addrs"]) == \
        firewall._normal("node_addrs", {"192.168.77.11/32"})


def test_host_ports_from_the_flags():
    p = node_main.build_parser()
    assert firewall.host_ports(p.parse_args([])) == [names.NODE_METRICS_PORT,
                                                    names.CONTROLLER_METRICS_PORT]
    assert firewall.host_ports(p.parse_args(["--metrics-address", ":9999",
                                             "--host-only-ports", ""])) == [9999]
    assert firewall.host_ports(p.parse_args(["--metrics-address", ""])) == [
        names.CONTROLLER_METRICS_PORT]


def test_a_subnet_holding_a_node_or_central_address_is_no_pod_network_here():
    """Else the underlay guard dropped the underlay itself, the API server's
    answers included, and the node never learnt that the Subnet was gone."""
    subnets = Cache([{"metadata": {"name": n}, "status": {"cidrBlock": c}, "spec": {}}
                     for n, c in (("a", "10.16.0.0/16"), ("underlay", "192.168.77.0/24"),
                                  ("central", "192.168.78.0/24"))])
    fw = host_firewall(subnets, [node("n2", "192.168.77.11")], "--service-cidr", "10.96.0.0/12",
                       "--ovn-remote", "tcp:192.168.78.1:6642")
    w = fw.wanted()
    assert w["pod_cidrs"] == {"10.16.0.0/16"} and w["internal_cidrs"] == {"10.16.0.0/16"}


def test_service_frontends_serve_arriving_traffic_and_the_host_s_own_but_not_loopback():
    """upstream's "node-Service": a host connects to a node port on its own address."""
    assert firewall.CHAINS[firewall.SERVICES] == {}           # a regular chain, jumped to
    assert firewall.CHAINS["services-in"]["hook"] == "prerouting"
    assert firewall.CHAINS["services-out"]["hook"] == "output"
    for chain in ("services-in", "services-out"):
        (_, expr), = _rules(chain)
        assert expr[-1] == {"jump": {"target": firewall.SERVICES}}
    (_, out), = _rules("services-out")
    assert out[0]["match"]["op"] == "!=" and out[0]["match"]["right"]["prefix"]["addr"] == "127.0.0.0"


def test_the_node_s_service_connections_leave_with_its_service_source():
    assert firewall.source_rules("") == []     # an older controller: the masquerade stays
    (c1, into), (c2, out) = firewall.source_rules("100.64.0.9")
    assert into[-1] == {"snat": {"family": "ip", "addr": "100.64.0.9"}}
    assert {"match": {"op": "==", "left": {"meta": {"key": "oifname"}}, "right": names.MGMT_PORT}} \
        in into
    assert out[-1] == {"masquerade": None} and out[0]["match"]["right"] == "100.64.0.9"
    # the IPv6 twin (a dual-stack join network): into the IPv6 service CIDR
    rules6 = firewall.source_rules("100.64.0.9", "fd00:64::9")
    assert [c for c, _ in rules6] == [c1, c2, "pacific-service-source-6 fd00:64::9",
                                      "pacific-service-source-out-6 fd00:64::9"]
    (_, into6), (_, out6) = rules6[2:]
    assert into6[-1] == {"snat": {"family": "ip6", "addr": "fd00:64::9"}}
    assert into6[1]["match"]["right"] == "@service_cidrs6" and out6[-1] == {"masquerade": None}
    # before the postrouting chain, whose masquerade would otherwise take them
    assert firewall.CHAINS[firewall.SERVICE_SOURCE]["prio"] < firewall.CHAINS["postrouting"]["prio"]


def test_ipv6_sets_of_a_dual_stack_cluster_and_every_guard_has_an_ipv6_twin():
    subnets = Cache([{"metadata": {"name": "a"}, "status": {"cidrBlock": "10.16.0.0/16,fd00:16::/64"},
                      "spec": {"natOutgoing": True}}])
    n1 = node("n1", "192.168.77.11")
    n1["metadata"]["annotations"] = {
        names.ANN_NODE_JOIN_IP: "100.64.0.2/16", names.ANN_NODE_JOIN_MAC: "0a:58:64:40:00:02",
        names.ANN_NODE_JOIN_GW: "100.64.0.1", names.ANN_NODE_LSP: "node:n1",
        names.ANN_NODE_JOIN_IP6: "fd00:64::2/64", names.ANN_NODE_JOIN_GW6: "fd00:64::1"}
    fw = host_firewall(subnets, [n1], "--service-cidr", "10.96.0.0/12,fd00:96::/108")
    w = fw.wanted()
    assert w["pod_cidrs"] == {"10.16.0.0/16"} and w["pod_cidrs6"] == {"fd00:16::/64"}
    assert w["internal_cidrs6"] == {"fd00:16::/64", "fd00:64::/64"}
    assert w["cluster_cidrs6"] == {"fd00:16::/64", "fd00:64::/64", "fd00:96::/108"}
    assert w["service_cidrs6"] == {"fd00:96::/108"} and w["nat_cidrs6"] == {"fd00:16::/64"}
    assert w["service_cidrs"] == {"10.96.0.0/12"}
    cmds = firewall.full_commands(w)
    types = {c["add"]["set"]["name"]: c["add"]["set"]["type"] for c in cmds
             if "set" in c.get("add", {})}
    assert all(types[s] == "ipv6_addr" for s in firewall.SETS6)
    comments = {c for _, c, _ in firewall.RULES}
    for chain in ("guard-input", "guard-forward", "guard-underlay"):
        for comment, _ in _rules(chain):
            assert comment.endswith("-6") or f"{comment}-6" in comments, comment
    # read back: one IPv6 address is a /128
    _, sets = firewall.read_state({"nftables": [{"set": {"name": "pod_cidrs6",
                                                         "elem": ["fd00::5"]}}]})
    assert sets["pod_cidrs6"] == {"fd00::5/128"}
