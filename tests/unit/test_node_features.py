"""pacific-node as a wiring of features (pacific/node/feature.py, core.py,
registry.py): one informer per name whatever the number of features reading
it, every event to every feature that handles it, `uses` / `needs` set to the
other feature or refused, spec conflicts and duplicate names refused at start.

The informers are controller_fakes' FakeInformer on a FakeKube (events come in
the writer's thread); the features are NodeFeature subclasses whose loops run
for real."""
from __future__ import annotations

import threading

import pytest

from controller_fakes import FakeKube
from node_fakes import Informer, args
from pacific.kube import resources as r
from pacific.node.core import NodeFeatures, served_endpointslices
from pacific.node.egressgw import EgressGateway
from pacific.node.egresssnat import EgressSnat
from pacific.node.feature import SUBNETS, InformerSpec, NodeContext, NodeFeature
from pacific.node.firewall import HostFirewall
from pacific.node.readiness import Readiness
from pacific.node.registry import FEATURES


class Counting(NodeFeature):
    """Kicked by any Subnet event (the default handler); counts its passes."""
    name = "counting"
    informers = {"subnets": SUBNETS}
    wakes_on = ("subnets",)

    def __init__(self, ctx):
        super().__init__(ctx)
        self.passes = 0
        self.changed = threading.Condition()

    def converge(self) -> None:
        with self.changed:
            self.passes += 1
            self.changed.notify_all()

    def wait_passes(self, n: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.passes >= n, 5), (self.passes, n)


class Recording(NodeFeature):
    """Handles Subnet events with its own handler: records what it is given."""
    name = "recording"
    informers = {"subnets": SUBNETS, "node": InformerSpec(r.NODES, "metadata.name={node}")}

    def __init__(self, ctx):
        super().__init__(ctx)
        self.events: list[tuple[str | None, str | None]] = []

    def handlers(self):
        return {"subnets": self.on_subnet}

    def on_subnet(self, old, new):
        self.events.append(tuple(o and o["spec"]["cidrBlock"] for o in (old, new)))

    def converge(self) -> None:
        pass


class Firewall(Counting):
    """Turned off by the flag that turns off the host firewall."""
    name = "firewall"

    @classmethod
    def disabled(cls, args):
        return None if args.host_firewall else "--no-host-firewall"


class UsesFirewall(Counting):
    name = "uses-firewall"
    uses = {"firewall": "firewall"}


class NeedsFirewall(Counting):
    name = "needs-firewall"
    needs = {"firewall": "firewall"}


def wire(classes, *argv, kube=None) -> NodeFeatures:
    features = NodeFeatures(args(*argv), classes)
    features.build(NodeContext(args(*argv), api=kube or FakeKube()), make_informer=Informer)
    return features


def subnet(cidr: str) -> dict:
    return {"metadata": {"name": "a"}, "spec": {"cidrBlock": cidr}}


def test_an_informer_two_features_declare_is_made_once_and_both_get_every_event():
    kube = FakeKube()
    features = wire([Counting, Recording], kube=kube)
    counting, recording = features.features
    assert sorted(features.ctx.informers) == ["node", "subnets"]
    assert [type(i) for i in kube.informers] == [Informer, Informer]    # one per name
    assert features.informer("node").field_selector == "metadata.name=n1"
    features.start_informers()
    features.start()
    try:
        counting.wait_passes(1)                                       # the pass at start
        kube.add(r.SUBNETS, subnet("10.16.0.0/16"))
        counting.wait_passes(2)
        r.patch_merge(kube, r.SUBNETS, "a", {"spec": {"cidrBlock": "10.17.0.0/16"}})
        counting.wait_passes(3)
        r.delete(kube, r.SUBNETS, "a")
        counting.wait_passes(4)
    finally:
        features.stop()
    assert recording.events == [(None, "10.16.0.0/16"), ("10.16.0.0/16", "10.17.0.0/16"),
                                ("10.17.0.0/16", None)]
    assert all(i.started and i.stopped for i in kube.informers)


def test_a_failing_handler_keeps_the_event_from_no_other_feature():
    class Broken(Recording):
        name = "broken"

        def on_subnet(self, old, new):
            raise KeyError("bug")
    kube = FakeKube()
    broken, recording = wire([Broken, Recording], kube=kube).features
    kube.add(r.SUBNETS, subnet("10.16.0.0/16"))
    assert recording.events == [(None, "10.16.0.0/16")]


def test_uses_is_the_other_feature_or_none_when_the_flags_turn_it_off():
    firewall, user = wire([Firewall, UsesFirewall]).features
    assert user.firewall is firewall
    (user,) = wire([Firewall, UsesFirewall], "--no-host-firewall").features
    assert user.firewall is None


def test_needs_of_a_feature_the_flags_turn_off_stops_the_start():
    firewall, needing = wire([Firewall, NeedsFirewall]).features
    assert needing.firewall is firewall
    with pytest.raises(ValueError, match="needs-firewall needs feature firewall, which is off "
                                         r"\(--no-host-firewall\)"):
        wire([Firewall, NeedsFirewall], "--no-host-firewall")


def test_a_feature_name_no_feature_has_is_an_error_at_start():
    class Typo(Counting):
        name = "typo"
        uses = {"firewall": "fire-wall"}
    with pytest.raises(ValueError, match="uses feature 'fire-wall', which is not a node feature"):
        wire([Firewall, Typo])


def test_two_specs_of_one_informer_are_an_error_at_start():
    class AllSubnets(Counting):
        name = "all-subnets"
        informers = {"subnets": InformerSpec(r.SUBNETS, "metadata.name={node}")}
    with pytest.raises(ValueError, match="informer 'subnets' as .* one informer, one spec"):
        wire([Counting, AllSubnets])


def test_a_handler_of_an_informer_the_feature_does_not_declare_is_an_error_at_start():
    class Undeclared(Counting):
        name = "undeclared"
        wakes_on = ("subnets", "pods")
    with pytest.raises(ValueError, match="undeclared handles informer 'pods', which it does "
                                         "not declare"):
        wire([Undeclared])


def test_every_registered_feature_has_its_own_name_and_two_of_one_name_are_refused():
    names = [cls.name for cls in FEATURES]
    assert all(names) and len(set(names)) == len(names)
    with pytest.raises(ValueError, match="unique names"):
        wire([Counting, Counting])


def registry(*argv: str) -> NodeFeatures:
    """The real features of registry.FEATURES on the fakes (no OVS is touched
    while they are built)."""
    flags = args("--ovn-remote", "tcp:192.168.77.1:6642", "--encap-ip", "192.168.77.11", *argv)
    features = NodeFeatures(flags)
    features.build(NodeContext(flags, api=FakeKube(), readiness=Readiness(None, "/nonexistent")),
                   make_informer=Informer)
    return features


def test_the_registry_wires_egress_snat_to_the_firewall_and_the_gateway():
    features = registry()
    snat, fw, gw = (features.get(cls.name) for cls in (EgressSnat, HostFirewall, EgressGateway))
    assert snat.firewall is fw and snat.gateway is gw and fw.snat is snat and gw.snat is snat
    # this node's pods and this Node, selected; Services and all Nodes not waited for
    assert features.informer("pods").field_selector == "spec.nodeName=n1"
    assert features.informer("node").field_selector == "metadata.name=n1"
    assert not features.specs["services"].wait_synced and features.specs["subnets"].wait_synced


def test_the_flags_turn_features_off_and_their_users_do_without():
    features = registry("--no-host-firewall", "--health-interval", "0", "--flow-log", "")
    assert [f.name for f in features.features] == ["pod-loop", "mgmt-port", "egress-gateway"]
    assert "ips" not in features.ctx.informers            # only the flow log reads them
    assert features.get("egress-gateway").snat is None
    assert "services" not in features.ctx.informers      # only the frontends read them


def test_endpointslices_are_asked_for_only_when_read_in_the_version_the_server_serves():
    assert NodeFeatures(args()).reads(r.ENDPOINTSLICES)
    assert not NodeFeatures(args("--no-host-firewall")).reads(r.ENDPOINTSLICES)
    kube = FakeKube()
    assert served_endpointslices(kube) == r.ENDPOINTSLICES      # no answer: v1
    kube.objects["/apis/discovery.k8s.io"] = {"versions": [{"version": "v1beta1"}]}
    slices = served_endpointslices(kube)
    assert slices == r.ENDPOINTSLICES_V1BETA1
    features = NodeFeatures(args())
    features.build(NodeContext(args(), api=kube, readiness=Readiness(None, "/nonexistent"),
                               endpointslices=slices), make_informer=Informer)
    assert features.informer("endpointslices").res == r.ENDPOINTSLICES_V1BETA1
