"""Egress SNAT to a Service's IPv6 external IP on the controller fakes
(controller/egress_snat.py): one gateway per Service, whose port gets the
IPv6 transit network, the IPv6 endpoints in the IPv6 twin of the members'
set and an ip6.src reroute; only the Service's own namespace's pods."""
from controller_fakes import drain, make_controller
from pacific import contract, names, servicesnat
from pacific.kube import resources as r
from pacific.ovn import ensure
from pacific.ovn import gateway as gw

DUAL = dict(ipv6_subnets=True, join_cidr="100.64.0.0/16,fd00:64::/64",
            default_cidr="10.16.0.0/16,fd00:16::/64", service_cidr="10.96.0.0/16,fd00:96::/108",
            external_ip_cidrs="192.168.77.192/27,2001:db8:200::/64")
KEY = "web/svc"


def setup(**cfg):
    ctl = make_controller(**{**DUAL, **cfg})
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1", "labels": {
        names.LABEL_EGRESS_GATEWAY: "true"}}, "status": {"addresses": [
            {"type": "InternalIP", "address": "192.168.77.11"}]}})
    for ns in ("web", "other"):
        ctl.kube.add(r.NAMESPACES, {"metadata": {"name": ns}})
        ctl.kube.add(r.PODS, {"metadata": {"name": "p"},
                              "spec": {"nodeName": "node1", "containers": []}}, ns)
    drain(ctl)
    recs = {ns: contract.own_record(r.get(ctl.kube, r.PODS, "p", ns)) for ns in ("web", "other")}
    ctl.kube.add(r.SERVICES, {"metadata": {"name": "svc"}, "spec": {
        "clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50", "fd00:96::50"],
        "ipFamilies": ["IPv4", "IPv6"], "externalIPs": ["192.168.77.200", "2001:db8:200::20"],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}, "web")
    for fam in (4, 6):      # the other namespace's pod named in a hand-written slice
        ctl.kube.add(r.ENDPOINTSLICES, {
            "metadata": {"name": f"svc-{fam}", "labels": {"kubernetes.io/service-name": "svc"}},
            "addressType": f"IPv{fam}", "ports": [{"name": "http", "port": 8080,
                                                  "protocol": "TCP"}],
            "endpoints": [{"addresses": [rec.address(fam)], "conditions": {"ready": True}}
                          for rec in recs.values()]}, "web")
    drain(ctl)
    return ctl, recs


def members(ctl, name):
    added = [c for c in ctl.writer.commands(ensure.AddressSetAddAddresses) if c.name == name]
    return set(added[-1].members) if added else set()


def test_the_ipv6_endpoints_leave_with_the_ipv6_external_ip():
    ctl, recs = setup()
    lrp = names.router_port_name(names.egress_switch_name(names.SNAT_GATEWAY_PREFIX + KEY))
    as4, as6 = servicesnat.set_name(KEY), servicesnat.set_name(KEY + servicesnat.V6)
    assert members(ctl, as4) == {recs["web"].address(4)}
    assert members(ctl, as6) == {recs["web"].address(6)}      # never the other namespace's
    port = [c for c in ctl.writer.commands(ensure.EnsureRouterPort) if c.name == lrp][-1]
    assert port.networks[1].startswith("fd00:65:")
    specs = [c.specs for c in ctl.writer.commands(ensure.EnsureRouterPolicies)
             if c.owner_ids.get(names.EXT_OWNER) == KEY][-1]
    host6 = port.networks[1].replace("::1/64", "::2")
    assert specs[(names.PRIO_POLICY_SNAT_EGRESS, f"ip6.src == ${as6}")] == ("reroute", [host6])
    assert ("reroute", ) == specs[(names.PRIO_POLICY_SNAT_EGRESS, f"ip4.src == ${as4}")][:1]
    assert [c.bindings for c in ctl.writer.commands(gw.EnsureStaticMacBindings)
            if c.port == lrp][-1] == {port.networks[0].replace(".1/24", ".2"): names.EGRESS_PORT_MAC,
                                      host6: names.EGRESS_PORT_MAC}


def test_without_an_ipv6_join_network_the_ipv6_half_is_left_out():
    ctl, recs = setup(join_cidr="100.64.0.0/16")
    as6 = servicesnat.set_name(KEY + servicesnat.V6)
    assert not members(ctl, as6)
    specs = [c.specs for c in ctl.writer.commands(ensure.EnsureRouterPolicies)
             if c.owner_ids.get(names.EXT_OWNER) == KEY][-1]
    assert all("ip6" not in m for _, m in specs) and len(specs) == 1
