"""The pod and node reconcilers, the restart rebuild and the feature wiring,
against a fake API and a fake NB writer (controller_fakes.py): the real
Controller, its features and handlers, the product's own API helpers."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from controller_fakes import drain, make_controller, pod_body, record, events as fake_events
from pacific import contract, names
from pacific.controller import model, rebuild
from pacific.controller.egress import node_set_name, v6_set_name
from pacific.ovn.acl import EnsureACLs
from pacific.controller.feature import Feature, wire_uses
from pacific.kube import resources as r
from pacific.ovn import ensure


def pod(ctl, name, ns="default"):
    return r.get(ctl.kube, r.PODS, name, ns)


def events(ctl, name, ns="default") -> list[str]:
    return fake_events(ctl, name, ns)


@pytest.fixture
def ctl():
    c = make_controller()
    drain(c)     # the default Subnet gets its switch
    assert c.feature("subnet").spec(names.DEFAULT_SUBNET) is not None
    return c


def test_a_new_pod_gets_ip_object_port_and_a_record_naming_itself(ctl):
    created = ctl.kube.add(r.PODS, pod_body("web"), "default")
    drain(ctl)
    rec = record(ctl, "web")
    assert rec is not None and rec.uid == created["metadata"]["uid"]
    assert rec.port == names.pod_lsp_name("default", "web") and rec.subnet == names.DEFAULT_SUBNET
    ports = [c for c in ctl.writer.commands(ensure.EnsurePort) if c.name == rec.port]
    assert ports and ports[-1].addresses == [f"{rec.mac} {rec.ip}"] == ports[-1].port_security
    ip = r.get(ctl.kube, r.IPS, model.ip_object_name("default", "web"))
    assert ip["spec"]["ipAddress"] == rec.ip and ip["spec"]["nodeName"] == "node1"
    # the IP object before the record: a new leader rebuilds IPAM from IP
    # objects, so an address a pod may use must have one (rebuild.py)
    ip_create = ctl.kube.calls.index(("POST", r.IPS.path()))
    record_patch = ctl.kube.calls.index(("PATCH", r.PODS.path("default", "web")))
    assert ip_create < record_patch


def test_a_forged_record_is_replaced_with_an_event(ctl):
    ctl.kube.add(r.PODS, pod_body("victim"), "default")
    drain(ctl)
    stolen = pod(ctl, "victim")["metadata"]["annotations"][names.ANN_ALLOCATION]
    ctl.kube.add(r.PODS, pod_body("thief", ann={names.ANN_ALLOCATION: stolen}), "default")
    drain(ctl)
    mine = record(ctl, "thief")
    assert mine is not None and mine.port == names.pod_lsp_name("default", "thief")
    assert mine.ip != record(ctl, "victim").ip
    assert any(e.startswith("ForeignAllocationRecord") and "copied from another pod" in e
               for e in events(ctl, "thief"))


def test_a_record_forged_right_after_the_controllers_own_write_is_still_replaced(ctl):
    """The pod reconciler skips the watch event of its own record write; a tenant
    who copies another pod's record onto the pod at that moment (its event right
    behind ours) is not skipped with it."""
    import copy
    ctl.kube.add(r.PODS, pod_body("donor"), "default")
    drain(ctl)
    stolen = pod(ctl, "donor")["metadata"]["annotations"][names.ANN_ALLOCATION]
    real_store, forged = ctl.kube._store, []

    def store(key, obj):          # the tenant's patch lands just after the controller's
        out = real_store(key, obj)
        if key.endswith("/pods/racer") and not forged and \
                names.ANN_ALLOCATION in (obj["metadata"].get("annotations") or {}):
            forged.append(key)
            copied = copy.deepcopy(obj)
            copied["metadata"]["annotations"][names.ANN_ALLOCATION] = stolen
            real_store(key, copied)
        return out
    ctl.kube._store = store
    ctl.kube.add(r.PODS, pod_body("racer"), "default")
    drain(ctl)
    assert forged
    mine = record(ctl, "racer")
    assert mine is not None and mine.port == names.pod_lsp_name("default", "racer")
    assert mine.ip != record(ctl, "donor").ip
    assert any(e.startswith("ForeignAllocationRecord") for e in events(ctl, "racer"))


def test_a_copied_address_request_is_refused_and_the_record_removed(ctl):
    ctl.kube.add(r.PODS, pod_body("victim"), "default")
    drain(ctl)
    v = record(ctl, "victim")
    forged = {names.ANN_ALLOCATION: v.to_json(), names.ANN_IP_ADDRESS: v.ip,
              names.ANN_MAC_ADDRESS: v.mac, "pacific.io/allocated": "true",
              "pacific.io/logical_switch_port": v.port}
    ctl.kube.add(r.PODS, pod_body("thief", ann=forged), "default")
    drain(ctl)
    ann = pod(ctl, "thief")["metadata"]["annotations"]
    assert v.ip in ann[names.ANN_ALLOCATION_ERROR]
    assert names.ANN_ALLOCATION not in ann and not set(names.ANN_LEGACY_RECORD) & set(ann)
    assert not [c for c in ctl.writer.commands(ensure.EnsurePort)
                if c.name == names.pod_lsp_name("default", "thief")]
    assert record(ctl, "victim") == v
    assert events(ctl, "thief")


def test_a_running_pods_address_does_not_move_when_its_request_is_edited(ctl):
    ctl.kube.add(r.PODS, pod_body("run"), "default")
    drain(ctl)
    before = record(ctl, "run")
    writes = len(ctl.writer.writes)
    r.patch_merge(ctl.kube, r.PODS, "run", {"metadata": {"annotations": {
        names.ANN_IP_ADDRESS: "10.16.200.200"}}}, "default")
    drain(ctl)
    assert record(ctl, "run") == before
    assert any(e.startswith("AddressImmutable") for e in events(ctl, "run"))
    assert all(c.addresses == [f"{before.mac} {before.ip}"]
               for _, cmds in ctl.writer.writes[writes:] for c in cmds
               if isinstance(c, ensure.EnsurePort))


def test_a_deleted_pod_releases_address_port_and_ip_object(ctl):
    ctl.kube.add(r.PODS, pod_body("gone"), "default")
    drain(ctl)
    rec = record(ctl, "gone")
    r.delete(ctl.kube, r.PODS, "gone", "default")
    drain(ctl)
    assert ctl.ipam.lookup("default/gone") is None
    assert r.get(ctl.kube, r.IPS, model.ip_object_name("default", "gone")) is None
    assert [c for c in ctl.writer.commands(ensure.DeletePort) if c.name == rec.port]


def test_a_label_change_does_not_requeue_the_pod_reconciler(ctl):
    ctl.kube.add(r.PODS, pod_body("lab", labels={"app": "a"}), "default")
    drain(ctl)
    r.patch_merge(ctl.kube, r.PODS, "lab", {"metadata": {"labels": {"app": "b"}}}, "default")
    assert ctl.feature("pod").queue.pending() == 0
    assert ctl.informer("pods").get("default/lab")["metadata"]["labels"] == {"app": "b"}


def test_the_pod_reconciler_is_not_woken_by_its_own_writes(ctl):
    """Its IP object and its record come back as watch events (here before the
    write returns, as a watch may): exactly what it wrote needs no second run;
    someone else's change does."""
    feat = ctl.feature("pod")
    runs = []
    real = feat.reconcile
    feat.reconcile = lambda key: (runs.append(key), real(key))[1]
    ctl.kube.add(r.PODS, pod_body("once"), "default")
    drain(ctl)
    assert runs == ["default/once"]
    rec = record(ctl, "once")
    assert rec is not None
    assert r.get(ctl.kube, r.IPS, model.ip_object_name("default", "once")) is not None
    # another writer removes the record: woken, and it writes it back
    r.patch_merge(ctl.kube, r.PODS, "once", {"metadata": {"annotations": {
        names.ANN_ALLOCATION: None}}}, "default")
    drain(ctl)
    assert runs == ["default/once"] * 2 and record(ctl, "once") == rec
    # another writer edits the IP object: woken, and its spec is put back
    ip = model.ip_object_name("default", "once")
    r.patch_merge(ctl.kube, r.IPS, ip, {"spec": {"nodeName": "elsewhere"}})
    drain(ctl)
    assert runs == ["default/once"] * 3
    assert r.get(ctl.kube, r.IPS, ip)["spec"]["nodeName"] == "node1"
    assert feat._own_records == {} and feat._own_ips == {}
    # a refusal (an address outside the Subnet) is written once and not re-read
    ctl.kube.add(r.PODS, pod_body("far", ann={names.ANN_IP_ADDRESS: "192.0.2.9"}), "default")
    drain(ctl)
    assert runs.count("default/far") == 1
    assert names.ANN_ALLOCATION_ERROR in pod(ctl, "far")["metadata"]["annotations"]
    assert feat._own_records == {}


def test_a_pod_refused_for_a_missing_subnet_is_retried_when_it_appears(ctl):
    ctl.kube.add(r.PODS, pod_body("early", ann={names.ANN_LOGICAL_SWITCH: "blue"}), "default")
    drain(ctl)
    assert "blue" in pod(ctl, "early")["metadata"]["annotations"][names.ANN_ALLOCATION_ERROR]
    ctl.kube.add(r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                             "metadata": {"name": "blue"},
                             "spec": {"cidrBlock": "10.17.0.0/24", "namespaces": ["default"]}})
    drain(ctl)
    rec = record(ctl, "early")
    assert rec is not None and rec.subnet == "blue" and rec.ip.startswith("10.17.0.")


def test_node_gets_its_record_and_keeps_its_address_across_a_restart(ctl):
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1"}})
    drain(ctl)
    rec = contract.NodeRecord.of(r.get(ctl.kube, r.NODES, "node1"))
    assert rec.port == names.node_lsp_name("node1") and rec.gateway == ctl.cfg.join_gateway
    # the service source: a second join address on the same port, never the first
    assert rec.service_source and rec.service_source != rec.ip
    ports = [c for c in ctl.writer.commands(ensure.EnsurePort) if c.name == rec.port]
    assert ports[-1].addresses == [f"{rec.mac} {rec.ip} {rec.service_source}"]
    # ... which leaves the cluster through the node, as the node's pods do
    egress = [c for c in ctl.writer.commands(ensure.AddressSetAddAddresses)
              if c.name == node_set_name("node1")]
    assert rec.service_source in egress[-1].members
    # ... is one of the service sources the join switch lets out and back stateless
    added = [c for c in ctl.writer.commands(ensure.AddressSetAddAddresses)
             if c.name == names.SERVICE_SOURCES_SET]
    assert added[-1].members == [rec.service_source]
    (acls,) = [c for c in ctl.writer.commands(EnsureACLs) if c.group == ctl.cfg.join_switch]
    assert {(a.direction, a.action) for a in acls.specs} == {("to-lport", "allow-stateless")}
    assert all(f"${names.SERVICE_SOURCES_SET}" in a.match for a in acls.specs)
    # a new leader: its NB holds the node's port; IPAM is rebuilt from it
    nxt = make_controller()
    nxt.nb.owned.append(SimpleNamespace(
        table=ensure.LSP, name=rec.port, type="", addresses=ports[-1].addresses,
        external_ids={names.EXT_OWNER_KIND: names.OWNER_KIND_NODE, names.EXT_OWNER: "node1"}))
    assert rebuild.restore_node_addresses(nxt) == 1
    assert nxt.ipam.lookup(model.node_owner_key("node1")).ip == rec.ip
    assert nxt.ipam.lookup(model.node_source_key("node1")).ip == rec.service_source
    # the node goes: both addresses are released
    r.delete(ctl.kube, r.NODES, "node1")
    drain(ctl)
    assert ctl.ipam.lookup(model.node_owner_key("node1")) is None
    assert ctl.ipam.lookup(model.node_source_key("node1")) is None
    removed = [c for c in ctl.writer.commands(ensure.AddressSetRemoveAddresses)
               if c.name == names.SERVICE_SOURCES_SET]
    assert removed[-1].members == [rec.service_source]


def test_rebuild_restores_pod_addresses_from_ip_objects(ctl):
    for i in range(3):
        ctl.kube.add(r.PODS, pod_body(f"p{i}"), "default")
    drain(ctl)
    want = {f"default/p{i}": record(ctl, f"p{i}").ip for i in range(3)}
    nxt = make_controller()
    for ip in ctl.kube.of(r.IPS):
        nxt.kube.add(r.IPS, {k: v for k, v in ip.items() if k != "status"})
    stats = rebuild.restore_pod_addresses(nxt)
    assert stats["ips"] == 3 and stats["conflicts"] == 0
    assert {k: nxt.ipam.lookup(k).ip for k in want} == want


def test_resync_names_stale_ports_for_removal(ctl):
    ctl.nb.owned.append(SimpleNamespace(
        table=ensure.LSP, name=names.pod_lsp_name("default", "ghost"), type="", addresses=[],
        external_ids={names.EXT_OWNER_KIND: names.OWNER_KIND_POD, names.EXT_OWNER: "default/ghost"}))
    ctl.resync()
    drain(ctl)
    assert [c for c in ctl.writer.commands(ensure.DeletePort)
            if c.name == names.pod_lsp_name("default", "ghost")]


def test_a_subnet_cidr_or_gateway_change_is_refused_while_addresses_are_in_use(ctl):
    subnets = ctl.feature("subnet")
    ctl.kube.add(r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                             "metadata": {"name": "blue"},
                             "spec": {"cidrBlock": "10.17.0.0/24", "namespaces": ["team"]}})
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "team"}})
    ctl.kube.add(r.PODS, pod_body("web", ns="team"), "team")
    drain(ctl)
    assert record(ctl, "web", "team").subnet == "blue"
    for change in ({"cidrBlock": "10.19.0.0/24"}, {"gateway": "10.17.0.254"}):
        r.patch_merge(ctl.kube, r.SUBNETS, "blue", {"spec": change})
        drain(ctl)
        st = r.get(ctl.kube, r.SUBNETS, "blue")["status"]
        (cond,) = st["conditions"]
        assert cond["status"] == "False" and cond["reason"] == "SubnetInUse", cond
        assert "team/web" in cond["message"] and "stays in effect" in cond["message"]
        assert st["cidrBlock"] == "10.17.0.0/24" and st["gateway"] == "10.17.0.1"
        assert (subnets.spec("blue").cidr, subnets.spec("blue").gateway) == ("10.17.0.0/24", "10.17.0.1")
        r.patch_merge(ctl.kube, r.SUBNETS, "blue", {"spec": {"cidrBlock": "10.17.0.0/24",
                                                             "gateway": None}})
        drain(ctl)
    # once the pod is gone the change applies
    r.patch_merge(ctl.kube, r.SUBNETS, "blue", {"spec": {"cidrBlock": "10.19.0.0/24"}})
    r.delete(ctl.kube, r.PODS, "web", "team")
    drain(ctl)
    subnets.tick()          # released addresses re-queue their Subnet
    drain(ctl)
    assert subnets.spec("blue").cidr == "10.19.0.0/24"
    assert r.get(ctl.kube, r.SUBNETS, "blue")["status"]["cidrBlock"] == "10.19.0.0/24"


def test_a_pod_waits_for_its_namespaces_subnet_instead_of_taking_the_default(ctl):
    """A Subnet created together with its namespace's first pod: the pod must
    not land in the default Subnet because the new one is not applied yet."""
    from pacific.controller.pod import SubnetPending
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "early"}})
    ctl.kube.add(r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                             "metadata": {"name": "early-net"},
                             "spec": {"cidrBlock": "10.30.0.0/24", "namespaces": ["early"]}})
    ctl.kube.add(r.PODS, pod_body("first", ns="early"), "early")
    with pytest.raises(SubnetPending):
        ctl.feature("pod").reconcile("early/first")     # before the Subnet's reconcile
    drain(ctl)
    assert record(ctl, "first", "early").subnet == "early-net"


def _node_of(cfg: dict):
    """A controller of `cfg` with Node node1 reconciled, and node1's record."""
    ctl = make_controller(**cfg)
    drain(ctl)
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1"}})
    drain(ctl)
    return ctl, contract.NodeRecord.of(r.get(ctl.kube, r.NODES, "node1"))


def test_a_dual_stack_join_network_gives_the_node_an_ipv6_address_kept_by_a_new_leader():
    dual = dict(ipv6_subnets=True, join_cidr="100.64.0.0/16,fd00:64::/64",
                service_cidr="10.96.0.0/12,fd00:96::/108")
    ctl, rec = _node_of(dual)
    assert rec.ip6_cidr.startswith("fd00:64::") and rec.ip6_cidr.endswith("/64")
    assert rec.gateway6 == "fd00:64::1" and rec.interfaces[1] == (rec.ip6_cidr, "fd00:64::1")
    ports = [c for c in ctl.writer.commands(ensure.EnsurePort) if c.name == rec.port]
    (addresses,) = ports[-1].addresses
    mac, ip4, source4, ip6, source6 = addresses.split()
    assert (mac, ip4, source4, ip6) == (rec.mac, rec.ip, rec.service_source, rec.ip6)
    assert source6.startswith("fd00:64::") and source6 != ip6
    # the service source's IPv6 twin: recorded for the node, in the IPv6 set of
    # service sources, in the node's IPv6 egress set (OVN sends it out there)
    assert rec.service_source6 == source6
    added = [c for c in ctl.writer.commands(ensure.AddressSetAddAddresses)
             if c.name == names.SERVICE_SOURCES_SET6]
    assert added[-1].members == [source6]
    egress6 = [c for c in ctl.writer.commands(ensure.AddressSetAddAddresses)
               if c.name == v6_set_name("node1")]
    assert source6 in egress6[-1].members
    (acls,) = [c for c in ctl.writer.commands(EnsureACLs) if c.group == ctl.cfg.join_switch]
    assert {a.match for a in acls.specs} >= {
        f"ip6.src == ${names.SERVICE_SOURCES_SET6}",
        f"ip6.dst == ${names.SERVICE_SOURCES_SET6} && ip6.src == fd00:96::/108"}
    # the router's port on the join switch has both gateways
    (rp,) = [c for c in ctl.writer.commands(ensure.EnsureRouterPort)
             if c.name == names.router_port_name(ctl.cfg.join_switch)][-1:]
    assert rp.networks == ["100.64.0.1/16", "fd00:64::1/64"]
    # a new leader restores both families from the port
    nxt = make_controller(**dual)
    nxt.nb.owned.append(SimpleNamespace(
        table=ensure.LSP, name=rec.port, type="", addresses=ports[-1].addresses,
        external_ids={names.EXT_OWNER_KIND: names.OWNER_KIND_NODE, names.EXT_OWNER: "node1"}))
    assert rebuild.restore_node_addresses(nxt) == 1
    assert nxt.ipam.lookup(model.node_owner_key("node1")).ips == (rec.ip, rec.ip6)
    assert nxt.ipam.lookup(model.node_source_key("node1")).ips == (rec.service_source, source6)
    # a controller whose IPAM is empty (no port yet) keeps both annotated sources
    fresh = make_controller(**dual)
    drain(fresh)
    fresh.kube.add(r.NODES, r.get(ctl.kube, r.NODES, "node1"))
    drain(fresh)
    assert fresh.ipam.lookup(model.node_source_key("node1")).ips == (rec.service_source, source6)
    # the node goes: both twins leave their sets
    r.delete(ctl.kube, r.NODES, "node1")
    drain(ctl)
    removed = [c for c in ctl.writer.commands(ensure.AddressSetRemoveAddresses)
               if c.name == names.SERVICE_SOURCES_SET6]
    assert removed[-1].members == [source6]


def test_an_ipv6_only_join_network_gives_the_node_ipv6_only_and_egress_in_ipv6_only():
    six = dict(ipv6_subnets=True, join_cidr="fd00:64::/64", service_cidr="fd00:96::/108",
               default_cidr="fd00:16::/64")
    ctl, rec = _node_of(six)
    assert rec.ip_cidr.startswith("fd00:64::") and rec.gateway == "fd00:64::1"
    assert (rec.address(4), rec.address(6), rec.ip6) == ("", rec.ip, rec.ip)
    assert rec.source(6) == rec.service_source and rec.source(4) == "" and not rec.ip6_cidr
    ports = [c for c in ctl.writer.commands(ensure.EnsurePort) if c.name == rec.port]
    assert ports[-1].addresses == [f"{rec.mac} {rec.ip} {rec.service_source}"]
    # the source goes into the IPv6 set only (a set of both families drops its flows)
    sets = {c.name: c.members for c in ctl.writer.commands(ensure.AddressSetAddAddresses)}
    assert sets[names.SERVICE_SOURCES_SET6] == [rec.service_source]
    assert names.SERVICE_SOURCES_SET not in sets and node_set_name("node1") not in sets
    assert rec.service_source in sets[v6_set_name("node1")]
    (acls,) = [c for c in ctl.writer.commands(EnsureACLs) if c.group == ctl.cfg.join_switch]
    assert {a.match for a in acls.specs} == {
        f"ip6.src == ${names.SERVICE_SOURCES_SET6}",
        f"ip6.dst == ${names.SERVICE_SOURCES_SET6} && ip6.src == fd00:96::/108"}
    # the router: IPv6 only, its default route and node-local allow in IPv6 only
    (rp,) = [c for c in ctl.writer.commands(ensure.EnsureRouterPort)
             if c.name == names.router_port_name(ctl.cfg.join_switch)][-1:]
    assert rp.networks == ["fd00:64::1/64"]
    routes = [c for c in ctl.writer.commands(ensure.EnsureRouterRoutes)
              if c.owner_ids.get(names.EXT_RULE) == "egress"][-1]
    assert routes.routes == {"::/0": "fd00:64::1"}
    policies = {m: (a, hops) for c in ctl.writer.commands(ensure.EnsureRouterPolicies)
                if c.owner_ids.get(names.EXT_RULE) == "egress"
                for (_, m), (a, hops) in c.specs.items()}
    assert not [m for m in policies if "ip4" in m]
    assert policies[f"ip6.src == ${v6_set_name('node1')}"] == ("reroute", [rec.ip])
    # a new leader restores the address and the source from the port
    nxt = make_controller(**six)
    nxt.nb.owned.append(SimpleNamespace(
        table=ensure.LSP, name=rec.port, type="", addresses=ports[-1].addresses,
        external_ids={names.EXT_OWNER_KIND: names.OWNER_KIND_NODE, names.EXT_OWNER: "node1"}))
    assert rebuild.restore_node_addresses(nxt) == 1
    assert nxt.ipam.lookup(model.node_owner_key("node1")).ips == (rec.ip,)
    assert nxt.ipam.lookup(model.node_source_key("node1")).ips == (rec.service_source,)
    # ... and one with an empty IPAM keeps the annotated join address
    fresh = make_controller(**six)
    drain(fresh)
    fresh.kube.add(r.NODES, r.get(ctl.kube, r.NODES, "node1"))
    drain(fresh)
    assert fresh.ipam.lookup(model.node_owner_key("node1")).ips == (rec.ip,)


def test_a_subnet_holding_a_node_s_address_is_refused(ctl):
    """Pods would take the node's address, and every node's host firewall
    would treat the underlay as pod traffic (it dropped the API server's
    answers once)."""
    ctl.kube.add(r.NODES, {"metadata": {"name": "node1"}, "status": {"addresses": [
        {"type": "InternalIP", "address": "192.168.77.11"}]}})
    ctl.kube.add(r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                             "metadata": {"name": "underlay"},
                             "spec": {"cidrBlock": "192.168.77.0/24"}})
    drain(ctl)
    st = r.get(ctl.kube, r.SUBNETS, "underlay").get("status") or {}
    (cond,) = [c for c in st.get("conditions") or [] if c["type"] == "Ready"]
    assert cond["status"] == "False" and cond["reason"] == "InfrastructureOverlap"
    assert "contains node node1's address 192.168.77.11" in cond["message"]
    assert not st.get("cidrBlock")


def test_policies_compile_against_the_pods_and_namespaces_their_events_said(ctl):
    """The policy feature keeps what policies see from the informers' events
    (one pod re-read per change): after adds, a relabel, a delete and a
    namespace relabel it equals a World rebuilt from every pod."""
    from pacific.controller.policy import pod_info
    from pacific.controller.policy_model import World
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "shop", "labels": {"team": "a"}}})
    for name, role in (("a", "db"), ("b", "web"), ("c", "web")):
        ctl.kube.add(r.PODS, pod_body(name, "shop", labels={"role": role}), "shop")
    ctl.kube.add(r.PODS, pod_body("d", ann={names.ANN_IP_ADDRESS: "10.99.0.9"}), "default")
    drain(ctl)
    policy = ctl.feature("policy")

    def seen():
        w = policy.world()
        return ({(p.namespace, p.name, p.ip, tuple(sorted(p.labels.items()))) for p in w.pods},
                w.namespace_labels)

    def rebuilt():
        pods = [i for i in (pod_info(p) for p in ctl.informer("pods").list()) if i is not None]
        w = World(pods, {model.meta(n)["name"]: model.labels_of(n)
                         for n in ctl.informer("namespaces").list()})
        return ({(p.namespace, p.name, p.ip, tuple(sorted(p.labels.items()))) for p in w.pods},
                w.namespace_labels)
    assert {p[1] for p in seen()[0]} == {"a", "b", "c"}     # d was refused: no address
    assert seen() == rebuilt()
    r.patch_merge(ctl.kube, r.PODS, "b", {"metadata": {"labels": {"role": "db"}}}, "shop")
    r.delete(ctl.kube, r.PODS, "c", "shop")
    r.patch_merge(ctl.kube, r.NAMESPACES, "shop", {"metadata": {"labels": {"team": "b"}}})
    drain(ctl)
    assert seen() == rebuilt()
    assert ("shop", "b") in {(p[0], p[1]) for p in seen()[0] if ("role", "db") in p[3]}
    assert seen()[1]["shop"] == {"team": "b"}


def test_features_reach_each_other_through_declared_uses(ctl):
    pods, subnets = ctl.feature("pod"), ctl.feature("subnet")
    assert pods.subnets is subnets and subnets.pods is pods

    class Lonely(Feature):
        name = "lonely"
        uses = {"helper": "nowhere"}
    with pytest.raises(ValueError, match="feature lonely uses feature 'nowhere', which is not"):
        wire_uses([Lonely(ctl)])


def test_a_pod_refused_from_the_start_costs_no_nb_write_when_deleted(ctl):
    """A tenant creating and deleting refused pods (bench_fairness) makes the
    controller write nothing to NB: they never had a port."""
    ctl.kube.add(r.PODS, pod_body("far", ann={names.ANN_IP_ADDRESS: "192.0.2.9"}), "default")
    drain(ctl)
    assert record(ctl, "far") is None
    before = len(ctl.writer.writes)
    r.delete(ctl.kube, r.PODS, "far", "default")
    drain(ctl)
    assert ctl.writer.writes[before:] == []


def test_its_own_ip_object_arriving_after_the_pod_went_wakes_the_release(ctl):
    """A pod deleted before the informer held its new IP object: the release
    found no object to delete.  When the object's watch event arrives, it is
    the reconciler's own write, yet the pod is gone: woken, so the object is
    deleted now rather than at the next resync (seen in test_chaos)."""
    feat = ctl.feature("pod")
    ctl.kube.add(r.PODS, pod_body("stays"), "default")
    drain(ctl)
    name = model.ip_object_name("default", "quick")
    spec = {"namespace": "default", "pod": "quick", "subnet": "x", "ipAddress": "10.16.0.99"}
    obj = {"metadata": {"name": name}, "spec": spec}
    feat._own_ips[name] = spec
    assert set(feat._on_ip(None, obj)) == {"default/quick"}     # no such pod: woken
    stays = model.ip_object_name("default", "stays")
    own = dict(r.get(ctl.kube, r.IPS, stays))
    feat._own_ips[stays] = own["spec"]
    assert not feat._on_ip(None, own)                           # its pod is there: not woken
