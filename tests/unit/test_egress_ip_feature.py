"""The EgressIP feature on the controller fakes: the rows each granted address
gets (its members, its reroute, its HA chassis group rotated by the address's
place), the status, and the refusals."""
from controller_fakes import drain, make_controller
from pacific import contract, egressip, names
from pacific.controller.egress_ip import EgressIPFeature
from pacific.kube import resources as r
from pacific.ovn import ensure
from pacific.ovn import gateway as gw

A, B = "192.168.77.150", "192.168.77.151"


def setup():
    ctl = make_controller(egress_ip_cidrs="192.168.77.0/24")
    for n, labels in (("node1", {names.LABEL_EGRESS_ASSIGNABLE: ""}),
                      ("node2", {names.LABEL_EGRESS_ASSIGNABLE: ""}), ("node3", {})):
        ctl.kube.add(r.NODES, {"metadata": {"name": n, "labels": labels}, "status": {
            "addresses": [{"type": "InternalIP", "address": f"192.168.77.{10 + int(n[-1])}"}]}})
    for ns, labels in (("blue", {"team": "blue"}), ("red", {"team": "red"})):
        ctl.kube.add(r.NAMESPACES, {"metadata": {"name": ns, "labels": labels}})
        for i in range(4):
            ctl.kube.add(r.PODS, {"metadata": {"name": f"p{i}", "labels": {"app": "web"}},
                                  "spec": {"nodeName": f"node{1 + i % 3}", "containers": []}},
                         ns)
    drain(ctl)
    return ctl


def pod_ips(ctl, ns):
    return {contract.PodRecord.of(p).ip for p in ctl.kube.of(r.PODS)
            if p["metadata"]["namespace"] == ns}


def members(ctl, key):
    name = egressip.address_set_name(key)
    added = [c for c in ctl.writer.commands(ensure.AddressSetAddAddresses) if c.name == name]
    return set(added[-1].members) if added else set()


def test_each_address_gets_its_members_reroute_and_rotated_group_and_status():
    ctl = setup()
    ctl.kube.add(r.EGRESSIPS, {"metadata": {"name": "web"}, "spec": {
        "egressIPs": [A, B, "192.168.77.11", "10.16.0.9"],
        "namespaceSelector": {"matchLabels": {"team": "blue"}}}})
    drain(ctl)
    got = members(ctl, f"web/{A}") | members(ctl, f"web/{B}")
    assert got == pod_ips(ctl, "blue") and not got & pod_ips(ctl, "red")
    policies = [c for c in ctl.writer.commands(ensure.EnsureRouterPolicies)
                if c.owner_ids.get(names.EXT_OWNER_KIND) == names.OWNER_KIND_EGRESS_IP]
    assert {m for c in policies for (p, m) in c.specs if p == names.PRIO_POLICY_EGRESS_IP} == {
        f"ip4.src == ${egressip.address_set_name(k)}" for k in (f"web/{A}", f"web/{B}")}
    groups = {c.name: c.priorities for c in ctl.writer.commands(gw.EnsureHAChassisGroup)}
    first = {ip: max(p, key=p.get) for ip in (A, B) for name, p in groups.items()
             if name == names.egress_switch_name(egressip.gateway_name(f"web/{ip}"))}
    assert first == {A: "node1", B: "node2"}          # node3 is not assignable
    st = r.get(ctl.kube, r.EGRESSIPS, "web")["status"]
    assert [i["egressIP"] for i in st["items"]] == [A, B]
    assert sum(i["pods"] for i in st["items"]) == 4
    assert {x["egressIP"] for x in st["refused"]} == {"192.168.77.11", "10.16.0.9"}


def test_a_pod_joining_the_namespace_joins_and_a_deleted_egressip_leaves_nothing():
    ctl = setup()
    ctl.kube.add(r.EGRESSIPS, {"metadata": {"name": "web"}, "spec": {
        "egressIPs": [A], "namespaceSelector": {"matchLabels": {"team": "red"}},
        "podSelector": {"matchLabels": {"app": "web"}}}})
    drain(ctl)
    assert members(ctl, f"web/{A}") == pod_ips(ctl, "red")
    ctl.kube.add(r.PODS, {"metadata": {"name": "late", "labels": {"app": "web"}},
                          "spec": {"nodeName": "node3", "containers": []}}, "red")
    drain(ctl)
    assert members(ctl, f"web/{A}") == pod_ips(ctl, "red") and len(pod_ips(ctl, "red")) == 5
    feature = next(f for f in ctl.features if isinstance(f, EgressIPFeature))
    ctl.nb.owned.append(type("Row", (), {"table": ensure.LS, "name": "x", "external_ids": {
        names.EXT_OWNER_KIND: names.OWNER_KIND_EGRESS_IP, names.EXT_OWNER: f"web/{A}",
        names.EXT_RULE: "egress-ip"}})())
    r.delete(ctl.kube, r.EGRESSIPS, "web")
    drain(ctl)
    deleted = [c for c in ctl.writer.commands(ensure.DeleteAddressSet)
               if c.name == egressip.address_set_name(f"web/{A}")]
    assert deleted and feature.queue.pending() == 0


def test_a_service_cannot_take_an_egressip_address():
    from pacific.controller.service import taken_ips
    ctl = setup()
    ctl.kube.add(r.EGRESSIPS, {"metadata": {"name": "web"}, "spec": {
        "egressIPs": [A], "namespaceSelector": {}}})
    drain(ctl)
    assert A in taken_ips(ctl)


DUAL = dict(ipv6_subnets=True, join_cidr="100.64.0.0/16,fd00:64::/64",
            default_cidr="10.16.0.0/16,fd00:16::/64", service_cidr="10.96.0.0/16,fd00:96::/108",
            egress_ip_cidrs="192.168.77.0/24,fd00:77::/64")


def test_an_ipv6_address_reroutes_the_pods_ipv6_through_an_ipv6_transit_network():
    """Dual-stack pods: the IPv6 address's set holds their IPv6 addresses, its
    policy matches ip6.src and reroutes to the IPv6 transit host, its gateway
    port has both transit networks; the IPv4 address's stays IPv4."""
    ctl = make_controller(**DUAL)
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1", "labels": {
        names.LABEL_EGRESS_ASSIGNABLE: ""}}, "status": {"addresses": [
            {"type": "InternalIP", "address": "192.168.77.11"},
            {"type": "InternalIP", "address": "fd00:77::11"}]}})
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "blue", "labels": {"team": "blue"}}})
    for i in range(3):
        ctl.kube.add(r.PODS, {"metadata": {"name": f"p{i}"},
                              "spec": {"nodeName": "node1", "containers": []}}, "blue")
    ctl.kube.add(r.EGRESSIPS, {"metadata": {"name": "web"}, "spec": {
        "egressIPs": [A, "fd00:77::150", "fd00:77::11"],
        "namespaceSelector": {"matchLabels": {"team": "blue"}}}})
    drain(ctl)
    recs = [contract.PodRecord.of(p) for p in ctl.kube.of(r.PODS)]
    assert members(ctl, f"web/{A}") == {rec.address(4) for rec in recs}
    assert members(ctl, "web/fd00:77::150") == {rec.address(6) for rec in recs}
    assert all(rec.address(6) for rec in recs)
    six = egressip.address_set_name("web/fd00:77::150")
    policies = {m: hops for c in ctl.writer.commands(ensure.EnsureRouterPolicies)
                for (p, m), (_, hops) in c.specs.items() if p == names.PRIO_POLICY_EGRESS_IP}
    hop6 = policies[f"ip6.src == ${six}"]
    assert len(hop6) == 1 and hop6[0].startswith("fd00:65:")
    lrp = names.router_port_name(names.egress_switch_name(
        egressip.gateway_name("web/fd00:77::150")))
    port = [c for c in ctl.writer.commands(ensure.EnsureRouterPort) if c.name == lrp][-1]
    assert port.networks[0].startswith("100.65.") and port.networks[1].startswith("fd00:65:")
    assert port.networks[1] == hop6[0][:-1] + "1/64"          # router ::1, host ::2
    st = r.get(ctl.kube, r.EGRESSIPS, "web")["status"]
    assert [i["egressIP"] for i in st["items"]] == [A, "fd00:77::150"]
    assert [x["egressIP"] for x in st["refused"]] == ["fd00:77::11"]     # node1's


def test_without_an_ipv6_join_network_an_ipv6_address_reroutes_nothing():
    """As centralized gateways and a Service's SNAT (gateway.reroutes): with
    no node-local allow for the cluster's IPv6, the reroute would carry the
    pods' IPv6 to each other out of the cluster."""
    ctl = make_controller(**{**DUAL, "join_cidr": "100.64.0.0/16"})
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1", "labels": {
        names.LABEL_EGRESS_ASSIGNABLE: ""}}})
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "blue", "labels": {"team": "blue"}}})
    ctl.kube.add(r.PODS, {"metadata": {"name": "p"}, "spec": {"nodeName": "node1",
                                                            "containers": []}}, "blue")
    ctl.kube.add(r.EGRESSIPS, {"metadata": {"name": "web"}, "spec": {
        "egressIPs": ["fd00:77::150"], "namespaceSelector": {"matchLabels": {"team": "blue"}}}})
    drain(ctl)
    lrp = names.router_port_name(names.egress_switch_name(
        egressip.gateway_name("web/fd00:77::150")))
    port = [c for c in ctl.writer.commands(ensure.EnsureRouterPort) if c.name == lrp][-1]
    assert len(port.networks) == 1
    assert not [m for c in ctl.writer.commands(ensure.EnsureRouterPolicies)
                for (p, m) in c.specs if p == names.PRIO_POLICY_EGRESS_IP]
