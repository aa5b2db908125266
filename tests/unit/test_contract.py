"""The controller <-> node contract (pacific/contract.py): what the controller
writes parses back to the same value, a record only belongs to the pod it was
made for, and malformed or foreign values are named, never trusted."""
from __future__ import annotations

import json

import pytest

from pacific import contract, names
from pacific.contract import ContractError, NodeRecord, PodRecord


def rec(**kw) -> PodRecord:
    base = dict(uid="u1", port=names.pod_lsp_name("default", "web"), ip="10.16.0.5",
                mac="0a:58:0a:10:00:05", cidr="10.16.0.0/16", gateway="10.16.0.1",
                subnet="ovn-default")
    return PodRecord(**{**base, **kw})


def pod(ann, uid="u1", name="web", ns="default"):
    return {"metadata": {"uid": uid, "name": name, "namespace": ns, "annotations": ann}}


def test_record_round_trip_and_one_annotation():
    r = rec()
    ann = r.annotations()
    assert ann[names.ANN_ALLOCATION] == r.to_json() and ann[names.ANN_ALLOCATION_ERROR] is None
    assert all(ann[k] is None for k in names.ANN_LEGACY_RECORD)   # removed by the merge patch
    assert PodRecord.parse(r.to_json()) == r
    assert r.ip_cidr == "10.16.0.5/16"
    assert PodRecord.of(pod({names.ANN_ALLOCATION: r.to_json()})) == r
    assert PodRecord.of(pod({})) is None


def test_a_record_belongs_only_to_the_pod_it_names():
    r = rec()
    assert r.belongs_to(pod({}))
    assert "uid" in r.why_not_for(pod({}, uid="u2"))                 # a copy on another pod
    assert "port" in r.why_not_for(pod({}, name="web2"))             # same uid, other port
    assert "port" in r.why_not_for(pod({}, ns="other"))
    assert contract.own_record(pod({names.ANN_ALLOCATION: r.to_json()})) == r
    assert contract.own_record(pod({names.ANN_ALLOCATION: r.to_json()}, uid="u2")) is None
    assert contract.own_record(pod({names.ANN_ALLOCATION: "garbage"})) is None


@pytest.mark.parametrize("text, words", [
    ("not json", "not JSON"),
    ("[1]", "not a JSON object"),
    ("x" * 2000, "at most"),
    (json.dumps({**json.loads(rec().to_json()), "extra": 1}), "unknown fields"),
    (json.dumps({**json.loads(rec().to_json()), "uid": 5}), "'uid'"),
    (json.dumps({**json.loads(rec().to_json()), "ip": "10.17.0.5"}), "outside"),
    (json.dumps({**json.loads(rec().to_json()), "gateway": "10.99.0.1"}), "outside"),
    (json.dumps({**json.loads(rec().to_json()), "mac": "01:00:00:00:00:01"}), "unicast"),
    (json.dumps({**json.loads(rec().to_json()), "cidr": "10.16.0.1/16"}), "host bits"),
])
def test_malformed_records_name_the_problem(text, words):
    with pytest.raises(ContractError) as e:
        PodRecord.parse(text)
    assert names.ANN_ALLOCATION in str(e.value) and words in str(e.value)


def test_foreign_record_keys():
    r = rec()
    assert contract.foreign_record_keys(pod({names.ANN_ALLOCATION: r.to_json()}), r) == []
    forged = rec(uid="victim").to_json()
    assert contract.foreign_record_keys(pod({names.ANN_ALLOCATION: forged}), r) == [names.ANN_ALLOCATION]
    assert contract.foreign_record_keys(pod({"pacific.io/allocated": "true"}), r) == ["pacific.io/allocated"]
    assert contract.foreign_record_keys(pod({names.ANN_ALLOCATION: forged}), None) == [names.ANN_ALLOCATION]


def test_refusal_removes_any_record():
    ann = contract.refusal_annotations("address in use")
    assert ann[names.ANN_ALLOCATION_ERROR] == "address in use" and ann[names.ANN_ALLOCATION] is None
    assert contract.allocation_error(pod({names.ANN_ALLOCATION_ERROR: "x"})) == "x"
    assert contract.allocation_error(pod({})) is None


def test_node_record():
    r = NodeRecord(ip_cidr="100.64.0.2/16", mac="0a:58:64:40:00:02", gateway="100.64.0.1",
                   port=names.node_lsp_name("node1"))
    node = {"metadata": {"annotations": r.annotations()}}
    assert NodeRecord.of(node) == r and r.ip == "100.64.0.2"
    assert NodeRecord.of({"metadata": {}}) is None and NodeRecord.of(None) is None
    assert r.service_source == "" and names.ANN_NODE_SERVICE_SOURCE not in r.annotations()
    s = NodeRecord(ip_cidr="100.64.0.2/16", mac="0a:58:64:40:00:02", gateway="100.64.0.1",
                   port=names.node_lsp_name("node1"), service_source="100.64.0.9")
    assert NodeRecord.of({"metadata": {"annotations": s.annotations()}}) == s
    for key, bad in ((names.ANN_NODE_JOIN_IP, "100.64.0.2"), (names.ANN_NODE_JOIN_GW, "x"),
                     (names.ANN_NODE_JOIN_GW, "10.0.0.1"), (names.ANN_NODE_JOIN_MAC, "zz"),
                     (names.ANN_NODE_SERVICE_SOURCE, "10.0.0.9"),
                     (names.ANN_NODE_SERVICE_SOURCE, "x")):
        with pytest.raises(ContractError, match=key):
            NodeRecord.of({"metadata": {"annotations": {**r.annotations(), key: bad}}})


def test_node_record_of_a_dual_stack_join_network():
    r = NodeRecord(ip_cidr="100.64.0.2/16", mac="0a:58:64:40:00:02", gateway="100.64.0.1",
                   port=names.node_lsp_name("node1"), ip6_cidr="fd00:64::2/64",
                   gateway6="fd00:64::1", service_source="100.64.0.9",
                   service_source6="fd00:64::9")
    assert NodeRecord.of({"metadata": {"annotations": r.annotations()}}) == r
    assert r.ip6 == "fd00:64::2" and r.interfaces == [("100.64.0.2/16", "100.64.0.1"),
                                                       ("fd00:64::2/64", "fd00:64::1")]
    for key, bad in ((names.ANN_NODE_JOIN_IP6, "fd00:64::2"), (names.ANN_NODE_JOIN_IP6, "10.0.0.2/8"),
                     (names.ANN_NODE_JOIN_GW6, "fd00:65::1"), (names.ANN_NODE_JOIN_GW6, "x"),
                     (names.ANN_NODE_SERVICE_SOURCE6, "fd00:65::9"),
                     (names.ANN_NODE_SERVICE_SOURCE6, "100.64.0.10")):
        with pytest.raises(ContractError, match=key):
            NodeRecord.of({"metadata": {"annotations": {**r.annotations(), key: bad}}})
    # a source's IPv6 twin without ovn0's IPv6 names the missing annotation
    alone = {k: v for k, v in r.annotations().items()
             if k not in (names.ANN_NODE_JOIN_IP6, names.ANN_NODE_JOIN_GW6)}
    with pytest.raises(ContractError, match=names.ANN_NODE_JOIN_IP6):
        NodeRecord.of({"metadata": {"annotations": alone}})


def test_node_record_of_an_ipv6_only_join_network():
    r = NodeRecord(ip_cidr="fd00:64::2/64", mac="0a:58:64:40:00:02", gateway="fd00:64::1",
                   port=names.node_lsp_name("node1"), service_source="fd00:64::9")
    assert NodeRecord.of({"metadata": {"annotations": r.annotations()}}) == r
    assert (r.address(6), r.cidr(6), r.gateway_of(6), r.source(6)) == (
        "fd00:64::2", "fd00:64::2/64", "fd00:64::1", "fd00:64::9")
    assert (r.address(4), r.cidr(4), r.gateway_of(4), r.source(4), r.ip6) == (
        "", "", "", "", "fd00:64::2")
    # a second IPv6 beside an IPv6 first family is refused, naming both
    with pytest.raises(ContractError, match="a dual-stack record has IPv4 first"):
        NodeRecord.of({"metadata": {"annotations": {
            **r.annotations(), names.ANN_NODE_JOIN_IP6: "fd00:64::3/64",
            names.ANN_NODE_JOIN_GW6: "fd00:64::1"}}})


def test_port_names_of_different_kinds_cannot_collide():
    # pod "a" in namespace "b-pacific-cluster" vs the router link of Subnet "a.b"
    # collided under the old scheme; Kubernetes names never contain ":" or "/"
    made = {names.pod_lsp_name("b-pacific-cluster", "a"), names.pod_lsp_name("b", "a.pacific-cluster"),
            names.router_port_name("a.b"), names.switch_router_port_name("a.b"),
            names.node_lsp_name("a.b"), names.router_port_name("b-pacific-cluster"),
            names.pod_lsp_name("a", "b"), names.pod_lsp_name("a.b", "x"), names.pod_lsp_name("a", "b.x")}
    assert len(made) == 9
    prefixes = (names.PORT_PREFIX_POD, names.PORT_PREFIX_NODE, names.PORT_PREFIX_ROUTER,
                names.PORT_PREFIX_ROUTER_LINK)
    assert all(p.endswith(":") for p in prefixes) and len(set(prefixes)) == 4
    assert not any(a != b and a.startswith(b) for a in prefixes for b in prefixes)


def dual(**kw) -> PodRecord:
    return rec(ips=("10.16.0.5", "fd00:16::5"), cidrs=("10.16.0.0/16", "fd00:16::/64"),
               gateways=("10.16.0.1", "fd00:16::1"), **kw)


def test_a_dual_stack_record_lists_both_families_and_a_single_one_is_unchanged():
    r = dual()
    assert PodRecord.parse(r.to_json()) == r
    assert r.families() == [("10.16.0.5/16", "10.16.0.0/16", "10.16.0.1"),
                            ("fd00:16::5/64", "fd00:16::/64", "fd00:16::1")]
    assert "ips" not in json.loads(rec().to_json())          # byte for byte as before
    assert rec().families() == [("10.16.0.5/16", "10.16.0.0/16", "10.16.0.1")]


@pytest.mark.parametrize("change, words", [
    ({"ips": ["10.16.0.5"]}, "lists of two"),
    ({"cidrs": ["fd00:16::/64", "10.16.0.0/16"]}, "IPv4 first"),
    ({"ips": ["10.16.0.5", "fd00:99::5"]}, "outside fd00:16::/64"),
    ({"ips": ["10.16.0.6", "fd00:16::5"]}, "do not start with ip"),
    ({"gateways": ["10.16.0.1", "banana"]}, "does not appear to be an IPv4 or IPv6"),
])
def test_malformed_dual_stack_lists_name_the_problem(change, words):
    raw = {**json.loads(dual().to_json()), **change}
    with pytest.raises(ContractError, match=words):
        PodRecord.parse(json.dumps(raw))
