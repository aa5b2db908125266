"""Centralized egress gateways: the controller's pure parts (transit networks,
which Subnets are centralized) and the node's (what a gateway node holds)."""
import pytest

from pacific import names
from pacific.controller import gateway
from pacific.node import egressgw


def subnet(name="audited", cidr="10.70.0.0/24", gtype="centralized", nodes=("node1", "node2"),
           status=None, deleting=False):
    meta = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    return {"metadata": meta,
            "spec": {"cidrBlock": cidr, "gatewayType": gtype, "gatewayNodes": list(nodes)},
            "status": {"cidrBlock": cidr, **(status or {})}}


def test_only_applied_centralized_subnets_have_a_gateway():
    assert gateway.centralized_spec(subnet()) == (["10.70.0.0/24"], ["node1", "node2"])
    assert gateway.centralized_spec(subnet(gtype="distributed")) == (None, [])
    assert gateway.centralized_spec(subnet(deleting=True)) == (None, [])
    not_applied = subnet()
    not_applied["status"] = {}
    assert gateway.centralized_spec(not_applied) == (None, [])
    # repeated or malformed node names are dropped, order kept
    s = subnet(nodes=("node2", "node1", "node2", "", 7))
    assert gateway.centralized_spec(s)[1] == ["node2", "node1"]


def test_a_node_holds_the_transit_address_of_subnets_it_is_a_gateway_of():
    rec = {names.STATUS_EGRESS: {"nodes": ["node1", "node2"], "transit": "100.65.3.1/24"}}
    subnets = [subnet(status=rec), subnet(name="other", cidr="10.71.0.0/24",
                                          status={names.STATUS_EGRESS: {"nodes": ["node3"],
                                                                        "transit": "100.65.4.1/24"}})]
    assert egressgw.wanted(subnets, "node1") == {"10.70.0.0/24": ("100.65.3.2/24", "100.65.3.1")}
    assert egressgw.wanted(subnets, "node3") == {"10.71.0.0/24": ("100.65.4.2/24", "100.65.4.1")}
    assert egressgw.wanted(subnets, "node9") == {}


def test_a_dual_stack_gateway_holds_the_ipv6_transit_address_too():
    rec = {names.STATUS_EGRESS: {"nodes": ["node1"], "transit": "100.65.3.1/24",
                                 "transit6": "fd00:65:0:3::1/64"}}
    s = subnet(cidr="10.70.0.0/24,fd00:70::/64", status=rec)
    assert gateway.centralized_spec(s)[0] == ["10.70.0.0/24", "fd00:70::/64"]
    assert egressgw.wanted([s], "node1") == {"10.70.0.0/24": ("100.65.3.2/24", "100.65.3.1"),
                                             "fd00:70::/64": ("fd00:65:0:3::2/64", "fd00:65:0:3::1")}
    # an IPv6 transit outside the controller's range, or in the IPv4 field, is ignored
    for bad in ({"transit6": "fd00:99::1/64"}, {"transit": "fd00:65:0:3::1/64", "transit6": None}):
        s = subnet(cidr="10.70.0.0/24,fd00:70::/64",
                   status={names.STATUS_EGRESS: {**rec[names.STATUS_EGRESS], **bad}})
        assert "fd00:70::/64" not in egressgw.wanted([s], "node1")


@pytest.mark.parametrize("transit", ["10.16.0.1/24", "nonsense", None, "8.8.8.8/24"])
def test_a_transit_address_the_controller_does_not_hand_out_is_ignored(transit):
    rec = {names.STATUS_EGRESS: {"nodes": ["node1"], "transit": transit}}
    assert egressgw.wanted([subnet(status=rec)], "node1") == {}


def test_the_bridge_mapping_is_added_to_those_there():
    assert egressgw.merged_mappings(None) == "pacific-egress:br-egress"
    assert egressgw.merged_mappings("physnet1:br-ex") == "physnet1:br-ex,pacific-egress:br-egress"
    assert egressgw.merged_mappings("pacific-egress:br-old,physnet1:br-ex") == \
        "physnet1:br-ex,pacific-egress:br-egress"
