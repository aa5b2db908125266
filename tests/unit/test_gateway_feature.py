"""The centralized egress gateway feature on the controller fakes: when the
group's priorities are re-ranked after the gateway moved."""
from types import SimpleNamespace

from controller_fakes import make_controller
from pacific import names
from pacific.controller import gateway
from pacific.controller.gateway import GatewayFeature
from pacific.kube import resources as r
from pacific.ovn import gateway as gw
from pacific.ovn.sb import SbView


def test_a_holder_is_ranked_first_only_once_it_has_held_the_gateway_for_a_while(monkeypatch):
    """BFD flaps move a gateway back and forth within seconds: the group's
    priorities are rewritten only for a holder that kept it SETTLE s."""
    ctl = make_controller(sb_remote="fake")
    for n in ("node1", "node2"):
        ctl.kube.add(r.NODES, {"metadata": {"name": n}})
    ctl.kube.add(r.SUBNETS, {"metadata": {"name": "c"},
                             "spec": {"cidrBlock": "10.70.0.0/24", "gatewayType": "centralized",
                                      "gatewayNodes": ["node1", "node2"]},
                             "status": {"cidrBlock": "10.70.0.0/24"}})
    feature = next(f for f in ctl.features if isinstance(f, GatewayFeature))
    clock, holder = [1000.0], ["node1"]
    monkeypatch.setattr(gateway.time, "monotonic", lambda: clock[0])
    port = "cr-" + names.router_port_name(names.egress_switch_name("c"))
    ctl.southbound = SimpleNamespace(view=lambda: SbView({port: holder[0]}, {}, {}))
    monkeypatch.setattr(feature, "_patch_status", lambda name, value: None)

    def step(node, seconds):
        holder[0] = node
        feature.tick()
        clock[0] += seconds
        while feature.queue.pending():
            key = feature.queue.get(0)
            feature.reconcile(key)
            feature.queue.done(key)
        groups = ctl.writer.commands(gw.EnsureHAChassisGroup)
        return max(groups[-1].priorities, key=groups[-1].priorities.get) if groups else None
    assert step("node1", 5) == "node1"
    for _ in range(3):                      # flapping: 1 s each, never settled
        assert step("node2", 1) == "node1"
        assert step("node1", 1) == "node1"
    assert step("node2", 3) == "node1"      # held 3 s from here on
    assert step("node2", 1) == "node2"      # ranked first: node1 back stays standby
    assert feature._active["c"][0] == "node2"


def test_a_centralized_subnets_ipv6_leaves_through_its_gateway_too():
    """A dual-stack centralized Subnet: the gateway port has both transit
    networks, a reroute per family, both hosts' MAC bound statically
    and both in the status the nodes read; without an IPv6 join network
    (IPv6 has no way out) the IPv6 half is left out."""
    from controller_fakes import drain
    from pacific.ovn import ensure
    dual = dict(ipv6_subnets=True, join_cidr="100.64.0.0/16,fd00:64::/64",
                default_cidr="10.16.0.0/16,fd00:16::/64")
    for cfg, six in ((dual, True), ({**dual, "join_cidr": "100.64.0.0/16"}, False)):
        ctl = make_controller(**cfg)
        ctl.kube.add(r.NODES, {"metadata": {"name": "node1"}})
        ctl.kube.add(r.SUBNETS, {"metadata": {"name": "c"}, "spec": {
            "cidrBlock": "10.70.0.0/24,fd00:70::/64", "gatewayType": "centralized",
            "gatewayNodes": ["node1"]}})
        drain(ctl)
        lrp = names.router_port_name(names.egress_switch_name("c"))
        port = [c for c in ctl.writer.commands(ensure.EnsureRouterPort) if c.name == lrp][-1]
        specs = [c.specs for c in ctl.writer.commands(ensure.EnsureRouterPolicies)
                 if c.owner_ids.get(names.EXT_OWNER) == "c"][-1]
        status = r.get(ctl.kube, r.SUBNETS, "c")["status"][names.STATUS_EGRESS]
        macs = [c.bindings for c in ctl.writer.commands(gw.EnsureStaticMacBindings)
                if c.port == lrp]
        host4 = port.networks[0].replace(".1/24", ".2")
        if six:
            assert port.networks[1].startswith("fd00:65:") and port.networks[1].endswith("::1/64")
            host6 = port.networks[1].replace("::1/64", "::2")
            assert specs[(names.PRIO_POLICY_CENTRALIZED_EGRESS, "ip6.src == fd00:70::/64")] == \
                ("reroute", [host6])
            assert macs[-1] == {host4: names.EGRESS_PORT_MAC, host6: names.EGRESS_PORT_MAC}
            assert status["transit6"] == port.networks[1]
        else:
            assert len(port.networks) == 1 and "transit6" not in status
            assert macs[-1] == {host4: names.EGRESS_PORT_MAC}     # never learnt (0052)
            assert all("ip6" not in m for _, m in specs)
        assert specs[(names.PRIO_POLICY_CENTRALIZED_EGRESS, "ip4.src == 10.70.0.0/24")][0] == \
            "reroute"
