"""Pure decisions of the controller (pacific.controller.model)."""
from __future__ import annotations

import re

import pytest

from pacific import names
from pacific.controller import model
from pacific.controller.config import Config, ConfigError


def pod(name="web-0", ns="default", node="node1", ann=None, owner=None, host=False, phase=None):
    p = {"metadata": {"name": name, "namespace": ns, "annotations": ann or {}},
         "spec": {"nodeName": node, "hostNetwork": host}, "status": {}}
    if owner:
        p["metadata"]["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    if phase:
        p["status"]["phase"] = phase
    return p


def subnet(name, cidr="10.17.0.0/16", **spec):
    return {"metadata": {"name": name, "creationTimestamp": spec.pop("ts", "2024-01-01T00:00:00Z")},
            "spec": {"cidrBlock": cidr, **spec}}


def test_needs_network():
    assert model.needs_network(pod())
    assert not model.needs_network(pod(node=None))
    assert not model.needs_network(pod(host=True))
    assert not model.needs_network(pod(phase="Succeeded"))
    assert not model.needs_network(pod(phase="Failed"))


def test_subnet_choice_order():
    binding = {"team-a": "blue"}
    ns_ann = {"metadata": {"name": "team-a", "annotations": {names.ANN_LOGICAL_SWITCH: "green"}}}
    p = pod(ns="team-a", ann={names.ANN_LOGICAL_SWITCH: "red"})
    assert model.choose_subnet(p, ns_ann, binding, "ovn-default")[0] == "red"
    assert model.choose_subnet(pod(ns="team-a"), ns_ann, binding, "ovn-default")[0] == "green"
    assert model.choose_subnet(pod(ns="team-a"), None, binding, "ovn-default")[0] == "blue"
    assert model.choose_subnet(pod(ns="other"), None, binding, "ovn-default") == \
        ("ovn-default", "default subnet")


def test_namespace_binding_oldest_subnet_wins():
    a = subnet("a", namespaces=["x"], ts="2024-01-02T00:00:00Z")
    b = subnet("b", "10.18.0.0/16", namespaces=["x", "y"], ts="2024-01-01T00:00:00Z")
    assert model.namespace_subnets([a, b]) == {"x": "b", "y": "b"}


def test_statefulset_identity_and_keep():
    p = pod(name="db-2", owner=("StatefulSet", "db"))
    assert model.statefulset_of(p) == ("db", 2)
    assert model.statefulset_of(pod(name="db-x", owner=("StatefulSet", "db"))) is None
    assert model.statefulset_of(pod(owner=("ReplicaSet", "web"))) is None
    sts = {"metadata": {"name": "db"}, "spec": {"replicas": 3}}
    assert model.statefulset_keeps(sts, 2)
    assert not model.statefulset_keeps({"metadata": {}, "spec": {"replicas": 2}}, 2)
    assert not model.statefulset_keeps(None, 0)
    assert not model.statefulset_keeps({"metadata": {"deletionTimestamp": "x"}, "spec": {}}, 0)


@pytest.mark.parametrize("cidr,msg", [
    ("10.17.0.0/33", "not a valid CIDR"),
    ("10.17.0.1/16", "not a valid CIDR"),
    ("banana", "not a valid CIDR"),
    ("", "required"),
    ("10.17.0.0/31", "too small"),
])
def test_parse_subnet_rejects_malformed(cidr, msg):
    with pytest.raises(model.SubnetSpecError, match=msg):
        model.parse_subnet(subnet("s", cidr))


def test_parse_subnet_gateway_and_excludes():
    s = model.parse_subnet(subnet("s", excludeIps=["10.17.0.2", "10.17.0.10..10.17.0.20"]))
    assert (s.cidr, s.gateway, s.prefixlen) == ("10.17.0.0/16", "10.17.0.1", 16)
    assert s.exclude == ("10.17.0.2", "10.17.0.10..10.17.0.20")
    assert model.parse_subnet(subnet("s", gateway="10.17.255.254")).gateway == "10.17.255.254"
    with pytest.raises(model.SubnetSpecError, match="gateway"):
        model.parse_subnet(subnet("s", gateway="10.99.0.1"))
    with pytest.raises(model.SubnetSpecError, match="excludeIps"):
        model.parse_subnet(subnet("s", excludeIps=["10.17.0.20..10.17.0.10"]))
    with pytest.raises(model.SubnetSpecError, match="reserved"):
        model.parse_subnet(subnet("join"), reserved_names=("join",))


def test_ip_object():
    obj = model.ip_object("default", "db-0", "ovn-default", "10.16.0.5", "0a:58:0a:10:00:05",
                          "node1", sts="db")
    assert obj["metadata"]["name"] == "db-0.default"
    assert obj["spec"]["ownerKind"] == names.OWNER_KIND_STATEFULSET
    assert obj["spec"]["ownerName"] == "db"


def test_router_mac_is_deterministic_and_not_a_pod_mac():
    assert model.router_mac("10.16.0.1") == "0e:00:0a:10:00:01"


def test_config_validation():
    Config(nb_remote="unix:/x").validate()
    with pytest.raises(ConfigError, match="--default-cidr"):
        Config(nb_remote="unix:/x", default_cidr="10.16.0.0/99").validate()
    with pytest.raises(ConfigError, match="overlaps"):
        Config(nb_remote="unix:/x", default_cidr="100.64.0.0/10").validate()


def test_a_dual_stack_default_subnet_makes_the_cluster_carry_ipv6_one_cidr_per_family():
    dual = "10.16.0.0/16,fd00:16::/64"
    assert Config(nb_remote="unix:/x", default_cidr=dual).validate().families == (4, 6)
    assert Config(nb_remote="unix:/x").validate().families == (4,)
    # --ipv6-subnets: IPv6 Subnets in a cluster whose networks are IPv4
    assert Config(nb_remote="unix:/x", ipv6_subnets=True).validate().families == (4, 6)
    with pytest.raises(ConfigError, match="one IPv4 and one IPv6"):
        Config(nb_remote="unix:/x", default_cidr="10.16.0.0/16,10.17.0.0/16",
               ipv6_subnets=True).validate()
    with pytest.raises(ConfigError, match="overlaps"):
        Config(nb_remote="unix:/x", default_cidr="100.64.0.0/16,fd00::/64",
               ipv6_subnets=True).validate()


def test_ip_object_name_stays_a_valid_object_name_for_long_pod_names():
    ns = "n" * 63
    long_a, long_b = "a" * 240 + "x", "a" * 240 + "y"
    name_a = model.ip_object_name(ns, long_a)
    assert len(name_a) <= 253 and name_a.endswith("." + ns)
    assert name_a == model.ip_object_name(ns, long_a)          # deterministic
    assert name_a != model.ip_object_name(ns, long_b)          # unique per pod
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", name_a)
    assert model.ip_object_name("default", "web-0") == "web-0.default"


def test_allocation_fits_compares_canonical_forms():
    from pacific.ipam import Allocation
    a = Allocation("fd00:10::a", "0a:58:00:00:00:0a", "fd00:10::/64", "fd00:10::1", "v6")
    assert model.allocation_fits(a, "v6", None, None)
    assert model.allocation_fits(a, "v6", "fd00:10:0::000a", "0A-58-00-00-00-0A")
    assert not model.allocation_fits(a, "v6", "fd00:10::b", None)
    assert not model.allocation_fits(a, "v6", None, "0a:58:00:00:00:0b")
    assert not model.allocation_fits(a, "other", None, None)
    assert not model.allocation_fits(a, "v6", "not-an-ip", None)


def test_a_pod_may_ask_only_for_the_subnets_bound_to_its_namespace():
    subnets = [subnet("blue", namespaces=["team-a"]), subnet("red", "10.18.0.0/16",
                                                              namespaces=["team-a", "team-b"]),
               subnet("private", "10.19.0.0/16", namespaces=["bank"])]
    ns_ann = {"metadata": {"name": "team-c", "annotations": {names.ANN_LOGICAL_SWITCH: "red"}}}
    assert model.subnets_of_namespace("team-a", None, subnets, "ovn-default") == {"blue", "red"}
    assert model.subnets_of_namespace("team-c", ns_ann, subnets, "ovn-default") == {"red"}
    # a namespace no Subnet names uses the default one, and only it
    assert model.subnets_of_namespace("other", None, subnets, "ovn-default") == {"ovn-default"}


def test_an_ipv6_subnet_is_refused_in_a_cluster_without_ipv6():
    with pytest.raises(model.SubnetSpecError, match="IPv6, and this cluster's networks are "
                       "IPv4 only: an administrator gives the controller's --join-cidr"):
        model.parse_subnet(subnet("v6", "fd00:10::/64"))
    # dual-stack (kube-ovn's "v4,v6") too: its IPv6 half would be unguarded
    with pytest.raises(model.SubnetSpecError, match=r"IPv6 \(dual-stack\), and this cluster"):
        model.parse_subnet(subnet("dual", "10.17.0.0/16, fd00:10::/64"))


def test_a_dual_stack_subnet_with_the_alpha_switch_lists_each_family_ipv4_first():
    spec = model.parse_subnet(subnet("dual", "fd00:10::/64, 10.17.0.0/16"), ipv6=True)
    assert spec.cidrs == ("10.17.0.0/16", "fd00:10::/64")
    assert spec.gateways == ("10.17.0.1", "fd00:10::1")
    assert (spec.cidr, spec.gateway, spec.families) == ("10.17.0.0/16", "10.17.0.1", (4, 6))
    assert spec.networks() == ["10.17.0.1/16", "fd00:10::1/64"]
    assert spec.cidr_block == "10.17.0.0/16,fd00:10::/64"
    v6 = model.parse_subnet(subnet("v6", "fd00:11::/64"), ipv6=True)
    assert (v6.cidrs, v6.gateways, v6.families) == (("fd00:11::/64",), ("fd00:11::1",), (6,))


@pytest.mark.parametrize("cidr,gateway,msg", [
    ("10.17.0.0/16,10.18.0.0/16", None, "names two IPv4 CIDRs: at most one per family"),
    ("fd00:1::/64,fd00:2::/64", None, "names two IPv6 CIDRs"),
    ("10.17.0.0/16,fd00::/64,10.18.0.0/16", None, "names 3 CIDRs: at most one IPv4 and one IPv6"),
    ("10.17.0.0/16,", None, "has an empty entry"),
    ("10.17.0.0/16,banana", None, "'banana' is not a valid CIDR"),
    ("10.17.0.0/16", "10.17.0.1,10.17.0.2", "gateway '10.17.0.1,10.17.0.2' names two IPv4 addresses"),
    ("10.17.0.0/16", "10.17.0.1,fd00::1", "gateway fd00::1 is IPv6, but spec.cidrBlock"),
    ("10.17.0.0/16", "10.17.0.0", "not a usable address of 10.17.0.0/16"),
    ("10.17.0.0/16", "10.17.255.255", "not a usable address"),
])
def test_a_subnet_names_at_most_one_cidr_and_gateway_per_family(cidr, gateway, msg):
    extra = {"gateway": gateway} if gateway else {}
    with pytest.raises(model.SubnetSpecError, match=msg):
        model.parse_subnet(subnet("s", cidr, **extra))


def test_a_dual_stack_service_cidr_ipv4_first_makes_the_cluster_carry_ipv6():
    dual = "10.96.0.0/12,fd00:96::/108"
    cfg = Config(nb_remote="unix:/x", service_cidr=dual).validate()
    assert cfg.service_cidrs == ["10.96.0.0/12", "fd00:96::/108"] and cfg.families == (4, 6)
    assert cfg.service_cidr_of(4) == "10.96.0.0/12" and cfg.service_cidr_of(6) == "fd00:96::/108"
    assert Config(nb_remote="unix:/x").validate().service_cidr_of(6) is None
    for bad in ("fd00:96::/108,10.96.0.0/12", "10.96.0.0/12,10.112.0.0/12",
                "fd00:96::/108,fd00:97::/108"):
        with pytest.raises(ConfigError, match="one IPv4 CIDR, one IPv4 and one IPv6"):
            Config(nb_remote="unix:/x", service_cidr=bad, ipv6_subnets=True).validate()


def test_an_ipv6_only_cluster_has_an_ipv6_join_network_and_service_cidr():
    cfg = Config(nb_remote="unix:/x", join_cidr="fd00:64::/64", service_cidr="fd00:96::/108",
                 default_cidr="fd00:16::/64").validate()
    assert cfg.ipv6 and cfg.families == (4, 6)
    assert (cfg.join_cidr_of(4), cfg.join_cidr_of(6)) == (None, "fd00:64::/64")
    assert (cfg.join_gateway, cfg.join_gateway_of(6), cfg.join_gateway_of(4)) == \
        ("fd00:64::1", "fd00:64::1", None)
    assert cfg.join_networks == ["fd00:64::1/64"] and cfg.join_prefixlen == 64
    assert (cfg.service_cidr_of(4), cfg.service_cidr_of(6)) == (None, "fd00:96::/108")
