"""The transit networks are fair (issue 51, item 3) on the controller fakes:
a tenant's Services sharing one external IP cost one network, a Service
without ready endpoints none, a namespace holds at most
--transit-networks-per-namespace (its oldest Services first), tenants take a
network only while more than --transit-networks-reserved are free, and a
refused Service fails closed (its members' traffic to the outside dropped)
with an Event naming nothing of another tenant."""
from types import SimpleNamespace

from controller_fakes import drain, events, make_controller
from pacific import contract, names, servicesnat
from pacific.controller import transit as tr
from pacific.controller.gateway import GatewayFeature
from pacific.kube import resources as r
from pacific.ovn import ensure

CFG = dict(external_ip_cidrs="192.168.77.192/27")
SVC_PORT = names.router_port_name(names.egress_switch_name(names.SNAT_GATEWAY_PREFIX))


def setup(pods=4, **cfg):
    ctl = make_controller(**{**CFG, **cfg})
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1", "labels": {
        names.LABEL_EGRESS_GATEWAY: "true"}}})
    for ns in ("t", "u"):
        ctl.kube.add(r.NAMESPACES, {"metadata": {"name": ns}})
        for i in range(pods):
            ctl.kube.add(r.PODS, {"metadata": {"name": f"p{i}"},
                                  "spec": {"nodeName": "node1", "containers": []}}, ns)
    drain(ctl)
    return ctl


def address(ctl, ns, pod):
    return contract.own_record(r.get(ctl.kube, r.PODS, pod, ns)).address(4)


def service(ctl, ns, name, ip, day, pods=(), port=80):
    """A Service of `ns` on external IP `ip` and `port`, created on `day`, whose
    ready endpoints are `pods`."""
    ctl.kube.add(r.SERVICES, {"metadata": {"name": name,
                                           "creationTimestamp": f"2026-01-{day:02d}T00:00:00Z"},
                              "spec": {"clusterIP": f"10.96.0.{day}", "externalIPs": [ip],
                                       "ports": [{"port": port, "protocol": "TCP"}]}}, ns)
    if pods:
        ctl.kube.add(r.ENDPOINTSLICES, {
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": name}},
            "addressType": "IPv4", "ports": [{"port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [address(ctl, ns, p)], "conditions": {"ready": True}}
                          for p in pods]}, ns)


def gateways(ctl) -> set[str]:
    """The Services whose gateway port exists now, by the writes so far."""
    out = set()
    for _, cmds in ctl.writer.writes:
        for c in cmds:
            if type(c) in (ensure.EnsureRouterPort, ensure.DeleteRouterPort) and \
                    c.name.startswith(SVC_PORT):
                key = c.name[len(SVC_PORT):]
                (out.add if type(c) is ensure.EnsureRouterPort else out.discard)(key)
    return out


def policies(ctl, key):
    return [c.specs for c in ctl.writer.commands(ensure.EnsureRouterPolicies)
            if c.owner_ids.get(names.EXT_OWNER) == key][-1]


def members(ctl, key):
    added = [c for c in ctl.writer.commands(ensure.AddressSetAddAddresses)
             if c.name == servicesnat.set_name(key)]
    return set().union(*(c.members for c in added))


def test_services_on_one_external_ip_share_one_transit_network():
    """256 Services on 256 ports of one address took 256 networks: now the
    oldest one's gateway carries every sharer's endpoints."""
    ctl = setup()
    for i in range(12):
        service(ctl, "t", f"s{i}", "192.168.77.200", i + 1, [f"p{i % 4}"], port=80 + i)
    drain(ctl)
    assert gateways(ctl) == {"t/s0"}
    assert members(ctl, "t/s0") == {address(ctl, "t", f"p{i}") for i in range(4)}
    assert not events(ctl, "s5", "t")


def last_members(ctl, key):
    """The members of the last write of the set (FakeNB shows none: all added)."""
    return set([c for c in ctl.writer.commands(ensure.AddressSetAddAddresses)
                if c.name == servicesnat.set_name(key)][-1].members)


def test_a_sharer_coming_and_going_wakes_only_itself_and_the_owner():
    """Not every Service of the address: a tenant's 256 sharers would make each
    change cost 256 reconciles of 256 Services."""
    ctl = setup()
    for i in range(6):
        service(ctl, "t", f"s{i}", "192.168.77.200", i + 1, ["p0"], port=80 + i)
    drain(ctl)
    feature = next(f for f in ctl.features if f.name == "egress-snat")
    done = []
    reconcile = feature.reconcile
    feature.reconcile = lambda key: (done.append(key), reconcile(key))
    service(ctl, "t", "late", "192.168.77.200", 20, ["p3"], port=99)
    drain(ctl)
    assert set(done) == {"t/late", "t/s0"}
    assert address(ctl, "t", "p3") in members(ctl, "t/s0") and gateways(ctl) == {"t/s0"}
    done.clear()
    r.delete(ctl.kube, r.SERVICES, "late", "t")
    drain(ctl)
    assert set(done) == {"t/late", "t/s0"}
    assert last_members(ctl, "t/s0") == {address(ctl, "t", "p0")}


def test_a_service_without_ready_endpoints_holds_no_transit_network():
    ctl = setup()
    service(ctl, "t", "idle", "192.168.77.200", 1)
    drain(ctl)
    assert gateways(ctl) == set()
    assert not ctl.transit.holds(SVC_PORT + "t/idle")
    # its endpoints become ready: a gateway; gone again: released
    service_slice = {"metadata": {"name": "idle", "labels": {"kubernetes.io/service-name": "idle"}},
                     "addressType": "IPv4", "ports": [{"port": 8080, "protocol": "TCP"}],
                     "endpoints": [{"addresses": [address(ctl, "t", "p0")],
                                    "conditions": {"ready": True}}]}
    ctl.kube.add(r.ENDPOINTSLICES, service_slice, "t")
    drain(ctl)
    assert gateways(ctl) == {"t/idle"}
    r.delete(ctl.kube, r.ENDPOINTSLICES, "idle", "t")
    drain(ctl)
    assert gateways(ctl) == set() and not ctl.transit.holds(SVC_PORT + "t/idle")


def test_a_namespace_holds_at_most_its_bound_oldest_first_and_the_rest_fail_closed():
    ctl = setup(transit_networks_per_namespace=2)
    for i in range(3):
        service(ctl, "t", f"s{i}", f"192.168.77.20{i}", i + 1, [f"p{i}"])
    service(ctl, "u", "other", "192.168.77.210", 9, ["p0"])     # another tenant: its own bound
    drain(ctl)
    assert gateways(ctl) == {"t/s0", "t/s1", "u/other"}
    # the youngest fails closed: its members stay in the set, their way out is dropped
    assert members(ctl, "t/s2") == {address(ctl, "t", "p2")}
    match = f"ip4.src == ${servicesnat.set_name('t/s2')}"
    assert policies(ctl, "t/s2") == {(names.PRIO_POLICY_SNAT_EGRESS, match): ("drop", [])}
    told = events(ctl, "s2", "t")
    assert told and "--transit-networks-per-namespace" in told[-1] and "dropped" in told[-1]
    assert all("u/" not in e and "other" not in e for e in told)
    # the oldest goes: the refused one gets its gateway, its policy reroutes
    r.delete(ctl.kube, r.SERVICES, "s0", "t")
    drain(ctl)
    assert gateways(ctl) == {"t/s1", "t/s2", "u/other"}
    assert policies(ctl, "t/s2")[(names.PRIO_POLICY_SNAT_EGRESS, match)][0] == "reroute"


def test_an_older_service_getting_endpoints_takes_the_youngest_one_s_place():
    ctl = setup(transit_networks_per_namespace=1)
    service(ctl, "t", "old", "192.168.77.200", 1)
    service(ctl, "t", "new", "192.168.77.201", 2, ["p1"])
    drain(ctl)
    assert gateways(ctl) == {"t/new"}
    ctl.kube.add(r.ENDPOINTSLICES, {
        "metadata": {"name": "old", "labels": {"kubernetes.io/service-name": "old"}},
        "addressType": "IPv4", "ports": [{"port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [address(ctl, "t", "p0")], "conditions": {"ready": True}}]},
        "t")
    drain(ctl)
    assert gateways(ctl) == {"t/old"}
    assert policies(ctl, "t/new") == {
        (names.PRIO_POLICY_SNAT_EGRESS, f"ip4.src == ${servicesnat.set_name('t/new')}"):
        ("drop", [])}


def admin_port(name, index):
    return SimpleNamespace(table=ensure.LRP, name=tr.PORT_PREFIX + name,
                           networks=[tr.transit(index)[0]],
                           external_ids={names.EXT_OWNER_KIND: names.OWNER_KIND_SUBNET})


def test_tenants_leave_the_reserve_to_the_administrator_s_gateways():
    """With only the reserve free, a tenant's Service is refused (and told so,
    naming no one else) while a centralized Subnet still gets its gateway; a
    network freed lets the tenant's Service in."""
    ctl = setup(transit_networks_reserved=4)
    ctl.nb.owned += [admin_port(f"busy{i}", i) for i in range(tr.COUNT - 5)]
    service(ctl, "t", "first", "192.168.77.200", 1, ["p0"])
    service(ctl, "u", "second", "192.168.77.210", 2, ["p0"])
    drain(ctl)
    assert gateways(ctl) == {"t/first"}       # 5 were free: it took one, 4 stay
    told = events(ctl, "second", "u")
    assert told and "--transit-networks-reserved" in told[-1]
    assert all("t/" not in e and "first" not in e for e in told)
    assert policies(ctl, "u/second")[
        (names.PRIO_POLICY_SNAT_EGRESS, f"ip4.src == ${servicesnat.set_name('u/second')}")] == \
        ("drop", [])
    for n in range(4):                        # the administrator's Subnets: the reserve is theirs
        ctl.kube.add(r.SUBNETS, {"metadata": {"name": f"c{n}"}, "spec": {
            "cidrBlock": f"10.7{n}.0.0/24", "gatewayType": "centralized",
            "gatewayNodes": ["node1"]}})
    drain(ctl)
    subnet_ports = {names.router_port_name(names.egress_switch_name(f"c{n}")) for n in range(4)}
    assert subnet_ports <= {c.name for c in ctl.writer.commands(ensure.EnsureRouterPort)}
    assert all(ctl.transit.holds(p) for p in subnet_ports)
    # the first tenant's Service goes: one free, still within the reserve
    r.delete(ctl.kube, r.SERVICES, "first", "t")
    drain(ctl)
    assert gateways(ctl) == set()
    # the Subnets go too: five free, more than the reserve: the refused Service gets one
    for n in range(4):
        r.delete(ctl.kube, r.SUBNETS, f"c{n}")
    drain(ctl)
    assert gateways(ctl) == {"u/second"}
