"""A tenant's pod can never claim an infrastructure address or identity
(issue 22): the MACs of router, gateway, transit and management ports, the
Subnet's gateway address, the join network; and a refusal names no other
tenant's object.  Pure IPAM checks, then the pod reconciler on the fakes."""
from __future__ import annotations

import pytest

from controller_fakes import drain, make_controller, events as fake_events
from pacific import contract, names
from pacific.controller import model, transit
from pacific.ipam import IPAM, errors
from pacific.ipam.addr import check_requested_mac, mac_from_ip, parse_ip
from pacific.kube import resources as r

INFRA = (names.JOIN_CIDR, names.EGRESS_TRANSIT_CIDR)


@pytest.mark.parametrize("mac", [
    model.router_mac("10.16.0.1"),                 # the default Subnet's router port
    model.router_mac("100.64.0.1"),                # the join switch's router port
    transit.transit(3)[2],                         # a gateway's transit router port
    names.EGRESS_PORT_MAC,                         # every node's pegress0
    mac_from_ip(*parse_ip("100.64.0.2")),          # node1's ovn0 (join address MAC)
    mac_from_ip(*parse_ip("100.64.3.7")),          # a node that joins later
    mac_from_ip(*parse_ip("100.65.0.2")),          # a transit network's host end
    "0E-00-0A-10-00-01",                           # any spelling
])
def test_an_infrastructure_mac_is_reserved(mac):
    with pytest.raises(errors.ReservedMac, match="reserved"):
        check_requested_mac(mac, INFRA)


@pytest.mark.parametrize("mac", ["0a:00:00:00:00:50", "02:aa:bb:cc:dd:ee",
                                 mac_from_ip(*parse_ip("10.16.0.9"))])
def test_other_macs_are_a_tenants_to_ask_for(mac):
    assert check_requested_mac(mac.upper(), INFRA) == mac


def test_a_mac_in_use_does_not_name_its_holder():
    ipam = IPAM()
    ipam.add_subnet("s", "10.16.0.0/16", gateway="10.16.0.1")
    ipam.allocate("s", "victims/secret-db", mac="02:00:00:00:00:01")
    with pytest.raises(errors.MacInUse) as exc:
        ipam.allocate("s", "atk/p", mac="02:00:00:00:00:01")
    assert "secret-db" not in str(exc.value) and "victims" not in str(exc.value)
    assert exc.value.holder == "victims/secret-db"


def pod_body(name, ns="atk", ann=None):
    return {"metadata": {"name": name, "namespace": ns, "annotations": dict(ann or {})},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "pause"}]}}


def refusal(ctl, name, ns="atk") -> str:
    pod = r.get(ctl.kube, r.PODS, name, ns)
    assert contract.own_record(pod) is None, "the pod got an address"
    return contract.allocation_error(pod)


def events(ctl, name, ns="atk") -> list[str]:
    return fake_events(ctl, name, ns)


@pytest.fixture
def ctl():
    c = make_controller()
    c.kube.add(r.NODES, {"metadata": {"name": "node1"}})
    drain(c)
    assert c.feature("subnet").spec(names.DEFAULT_SUBNET) is not None
    return c


def test_a_pod_asking_for_an_infrastructure_mac_is_refused(ctl):
    node_mac = r.get(ctl.kube, r.NODES, "node1")["metadata"]["annotations"][names.ANN_NODE_JOIN_MAC]
    gw = ctl.feature("subnet").spec(names.DEFAULT_SUBNET).gateway
    for i, mac in enumerate((model.router_mac(gw), node_mac, transit.transit(0)[2],
                             names.EGRESS_PORT_MAC)):
        ctl.kube.add(r.PODS, pod_body(f"p{i}", ann={names.ANN_MAC_ADDRESS: mac}), "atk")
        drain(ctl)
        assert "reserved" in refusal(ctl, f"p{i}") and mac in refusal(ctl, f"p{i}")
        assert any(e.startswith("ReservedMAC") for e in events(ctl, f"p{i}"))
    # nothing that works breaks: an ordinary fixed MAC is still given
    ctl.kube.add(r.PODS, pod_body("ok", ann={names.ANN_MAC_ADDRESS: "0a:00:00:00:00:50"}), "atk")
    drain(ctl)
    assert contract.own_record(r.get(ctl.kube, r.PODS, "ok", "atk")).mac == "0a:00:00:00:00:50"


def test_another_tenants_mac_is_refused_without_naming_its_pod(ctl):
    ctl.kube.add(r.PODS, pod_body("secret-db", ns="vic"), "vic")
    drain(ctl)
    mac = contract.own_record(r.get(ctl.kube, r.PODS, "secret-db", "vic")).mac
    ctl.kube.add(r.PODS, pod_body("p", ann={names.ANN_MAC_ADDRESS: mac}), "atk")
    drain(ctl)
    msg = refusal(ctl, "p")
    assert mac in msg and "secret-db" not in msg and "vic/" not in msg
    assert events(ctl, "p") and not any("secret-db" in e for e in events(ctl, "p"))


@pytest.mark.parametrize("ip,why", [("10.16.0.1", "gateway"), ("100.64.0.2", "10.16.0.0/16"),
                                    ("100.64.0.1", "10.16.0.0/16"), ("100.65.0.1", "10.16.0.0/16")])
def test_a_pod_asking_for_the_gateway_or_an_infrastructure_network_address_is_refused(ctl, ip, why):
    ctl.kube.add(r.PODS, pod_body("p", ann={names.ANN_IP_ADDRESS: ip}), "atk")
    drain(ctl)
    assert ip in refusal(ctl, "p") and why in refusal(ctl, "p")


def test_a_pod_asking_for_the_join_switch_is_refused(ctl):
    ctl.kube.add(r.PODS, pod_body("p", ann={names.ANN_LOGICAL_SWITCH: names.JOIN_SWITCH,
                                            names.ANN_IP_ADDRESS: "100.64.0.9"}), "atk")
    drain(ctl)
    assert refusal(ctl, "p")
