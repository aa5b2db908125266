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
