"""Distributed egress in IPv6 (controller/egress.py, egress_v6.py): a node's
pods' IPv6 is rerouted to its ovn0's IPv6, except the pods an IPv4-only
egress feature decides for, whose IPv6 is held (no way out)."""
from __future__ import annotations

from controller_fakes import drain, make_controller
from pacific import contract, names
from pacific.controller import egress_v6
from pacific.controller.egress import v6_set_name
from pacific.kube import resources as r
from pacific.ovn import ensure

DUAL = dict(ipv6_subnets=True, join_cidr="100.64.0.0/16,fd00:64::/64",
            default_cidr="10.16.0.0/16,fd00:16::/64")


def ns(name, **labels):
    return {"metadata": {"name": name, "labels": labels}}


def test_what_holds_a_namespace():
    eip = {"metadata": {"name": "out"}, "spec": {"namespaceSelector": {"matchLabels": {"t": "x"}},
                                                 "egressIPs": ["203.0.113.5"]}}
    svc = {"metadata": {"name": "web", "namespace": "snat"},
           "spec": {"externalIPs": ["203.0.113.7"]}}
    plain = {"metadata": {"name": "plain", "namespace": "free"}, "spec": {}}
    h = egress_v6.held([eip], [ns("chosen", t="x"), ns("free")], [svc, plain])
    assert "EgressIP out" in h.holds("chosen")
    assert "external IP" in h.holds("snat")
    assert h.holds("free") is None


def _specs(ctl):
    return [c.specs for c in ctl.writer.commands(ensure.EnsureRouterPolicies)
            if c.owner_ids.get(names.EXT_OWNER) == "node1"][-1]


def _v6_added(ctl, node="node1") -> set:
    return {a for c in ctl.writer.commands(ensure.AddressSetAddAddresses)
            if c.name == v6_set_name(node) for a in c.members}


def test_a_nodes_pods_leave_over_ipv6_through_its_ovn0_but_a_held_pod_does_not():
    ctl = make_controller(**DUAL)
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1"}})
    for n in ("free", "walled"):
        ctl.kube.add(r.NAMESPACES, ns(n, **({"out": "eip"} if n == "walled" else {})))
        ctl.kube.add(r.PODS, {"metadata": {"name": "p", "namespace": n},
                              "spec": {"nodeName": "node1", "containers": [{"name": "c"}]}}, n)
    # an administrator's EgressIP selects namespace "walled" (its IPv4 leaves with it)
    ctl.kube.add(r.EGRESSIPS, {"metadata": {"name": "out"}, "spec": {
        "egressIPs": ["203.0.113.5"], "namespaceSelector": {"matchLabels": {"out": "eip"}}}})
    drain(ctl)
    node = contract.NodeRecord.of(r.get(ctl.kube, r.NODES, "node1"))
    free, walled = (contract.own_record(r.get(ctl.kube, r.PODS, "p", n)) for n in ("free", "walled"))
    assert _specs(ctl)[(names.PRIO_POLICY_DISTRIBUTED_EGRESS,
                        f"ip6.src == ${v6_set_name('node1')}")] == ("reroute", [node.ip6])
    assert free.ips[1] in _v6_added(ctl) and walled.ips[1] not in _v6_added(ctl)
    # the cluster router: IPv6 inside the cluster stays, the rest goes to ::/0
    routes = ctl.writer.commands(ensure.EnsureRouterRoutes)[-1].routes
    assert routes == {"0.0.0.0/0": "100.64.0.1", "::/0": "fd00:64::1"}
    allowed = {m for c in ctl.writer.commands(ensure.EnsureRouterPolicies)
               if c.owner_ids.get(names.EXT_OWNER) == names.CLUSTER_ROUTER for _, m in c.specs}
    assert any(m.startswith("ip6.dst == {") and "fd00:16::/64" in m and "fd00:64::/64" in m
               for m in allowed), allowed
    # the namespace is no longer selected: its pod's IPv6 may leave through its node
    r.patch_merge(ctl.kube, r.NAMESPACES, "walled", {"metadata": {"labels": {"out": None}}})
    drain(ctl)
    assert walled.ips[1] in _v6_added(ctl)


def test_an_ipv4_join_network_writes_no_ipv6_egress():
    ctl = make_controller(ipv6_subnets=True, default_cidr="10.16.0.0/16,fd00:16::/64")
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1"}})
    drain(ctl)
    assert all("ip6" not in m for _, m in _specs(ctl)) and not _v6_added(ctl)
    assert "egressips" not in ctl.feature("egress").informers


def test_a_subnet_status_write_leaves_the_hold_as_computed():
    ctl = make_controller(**DUAL)
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1"}})
    drain(ctl)
    f = ctl.feature("egress")
    held = f.held()
    r.patch_status(ctl.kube, r.SUBNETS, r.get(ctl.kube, r.SUBNETS, names.DEFAULT_SUBNET),
                   {"v4availableIPs": 7})
    assert f.held() is held            # pods coming and going rewrite status: no recompute


def test_an_ipv6_only_pods_address_joins_its_nodes_ipv6_set_never_the_ipv4_one():
    """A set mixing families makes OVN drop the flow using it: an IPv6-only
    pod in the node's IPv4 set would have cut every pod of the node off."""
    ctl = make_controller(**DUAL)
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1"}})
    ctl.kube.add(r.NAMESPACES, ns("six"))
    ctl.kube.add(r.SUBNETS, {"metadata": {"name": "six"},
                             "spec": {"cidrBlock": "fd00:81::/64", "namespaces": ["six"]}})
    drain(ctl)
    ctl.kube.add(r.PODS, {"metadata": {"name": "p", "namespace": "six"},
                          "spec": {"nodeName": "node1", "containers": [{"name": "c"}]}}, "six")
    drain(ctl)
    rec = contract.own_record(r.get(ctl.kube, r.PODS, "p", "six"))
    assert rec.address(4) is None and rec.address(6).startswith("fd00:81:")
    assert rec.address(6) in _v6_added(ctl)
    v4 = {a for c in ctl.writer.commands(ensure.AddressSetAddAddresses)
          if c.name != v6_set_name("node1") and c.name.startswith("pacific_egress_")
          for a in c.members}
    assert v4 and all(":" not in a for a in v4)
