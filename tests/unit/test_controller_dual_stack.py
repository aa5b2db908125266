"""The controller with a dual-stack default Subnet (alpha --ipv6-subnets): the
pod's record, OVN port, IP object and Subnet status carry both families, a
new leader rebuilds both from the IP objects, and without the switch an IPv6
Subnet stays refused."""
from pacific import contract, names
from pacific.controller import model, rebuild
from pacific.kube import resources as r
from pacific.ovn import acl, ensure

from controller_fakes import drain, make_controller, only_b_group_write, pod_body, record

DUAL = "10.16.0.0/16,fd00:16::/64"


def dual_controller():
    ctl = make_controller(ipv6_subnets=True, default_cidr=DUAL)
    drain(ctl)
    return ctl


def test_a_pod_of_a_dual_stack_subnet_gets_both_families_everywhere():
    ctl = dual_controller()
    spec = ctl.feature("subnet").spec(names.DEFAULT_SUBNET)
    assert spec.cidrs == ("10.16.0.0/16", "fd00:16::/64")
    ctl.kube.add(r.PODS, pod_body("web"), "default")
    drain(ctl)
    rec = record(ctl, "web")
    assert rec.ips == ("10.16.0.2", "fd00:16::2") and rec.ip == "10.16.0.2"
    assert rec.gateways == ("10.16.0.1", "fd00:16::1")
    ports = [c for c in ctl.writer.commands(ensure.EnsurePort) if c.name == rec.port]
    assert ports[-1].addresses == [f"{rec.mac} 10.16.0.2 fd00:16::2"] == ports[-1].port_security
    links = [c for c in ctl.writer.commands(ensure.EnsureRouterPort)
             if c.name == names.router_port_name(names.DEFAULT_SUBNET)]
    assert links[-1].networks == ["10.16.0.1/16", "fd00:16::1/64"]
    ip = r.get(ctl.kube, r.IPS, model.ip_object_name("default", "web"))
    assert ip["spec"]["ipAddress"] == "10.16.0.2"
    assert ip["spec"]["ipAddresses"] == ["10.16.0.2", "fd00:16::2"]
    st = r.get(ctl.kube, r.SUBNETS, names.DEFAULT_SUBNET)["status"]
    assert st["cidrBlock"] == DUAL and st["gateway"] == "10.16.0.1,fd00:16::1"
    assert st["v4availableIPs"] == st["availableIPs"] >= 65536 - 3 - 1
    assert isinstance(st["v6availableIPs"], float) and st["v6availableIPs"] > 2**63
    # the record parses back, and an IPv4-only node view keeps its first family
    assert contract.PodRecord.parse(rec.to_json()) == rec


def test_a_new_leader_rebuilds_both_families_from_the_ip_objects():
    ctl = dual_controller()
    for i in range(3):
        ctl.kube.add(r.PODS, pod_body(f"p{i}"), "default")
    drain(ctl)
    want = {f"default/p{i}": record(ctl, f"p{i}").ips for i in range(3)}
    nxt = make_controller(ipv6_subnets=True, default_cidr=DUAL)
    for ip in ctl.kube.of(r.IPS):
        nxt.kube.add(r.IPS, {k: v for k, v in ip.items() if k != "status"})
    stats = rebuild.restore_pod_addresses(nxt)
    assert stats == {**stats, "ips": 3, "conflicts": 0}
    assert {k: nxt.ipam.lookup(k).ips for k in want} == want


def test_in_a_cluster_without_ipv6_an_ipv6_subnet_is_refused_and_nothing_is_programmed():
    ctl = make_controller()
    drain(ctl)
    ctl.kube.add(r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                             "metadata": {"name": "six"},
                             "spec": {"cidrBlock": "10.17.0.0/24,fd00:17::/64"}})
    drain(ctl)
    assert ctl.feature("subnet").spec("six") is None
    cond = r.get(ctl.kube, r.SUBNETS, "six")["status"]["conditions"][0]
    assert cond["status"] == "False" and "this cluster's networks are IPv4 only" in \
        cond["message"] and "--join-cidr" in cond["message"]
    assert not [c for c in ctl.writer.commands(ensure.EnsureSwitch) if c.name == "six"]


def test_a_network_policy_isolates_and_allows_in_both_families():
    ctl = dual_controller()
    pg, cmds = only_b_group_write(ctl)
    (acls,) = [c for c in cmds if isinstance(c, acl.EnsureACLs)]
    rules = {s.external_ids[names.EXT_RULE]: s for s in acls.specs}
    assert set(rules) == {"ingress/deny", "ingress/deny/ip6", "ingress/nodes", "ingress/0",
                          "ingress/0/ip6"}
    assert rules["ingress/deny/ip6"].match == f"outport == @{pg} && ip6"
    assert rules["ingress/0/ip6"].match.startswith(f"outport == @{pg} && ip6 && (ip6.src == $np_as_")
    b6 = record(ctl, "b", "x").ips[1]
    sets = {c.name: c for c in cmds if isinstance(c, ensure.EnsureAddressSet)}
    assert any(n.endswith("_6") for n in sets), sets
    tenants = [c for c in ctl.writer.commands(acl.EnsureACLs)
               if any("ip6.src == {::, fe80::/10}" in s.match for s in c.specs)]
    assert tenants, "tenant isolation has its IPv6 drops"
    assert b6.startswith("fd00:16::")
