"""Issue 51, an address's new holder inherits nothing: a Service whose
hand-written EndpointSlice names its own pod is confined again when the
address changes holder (the address -> Services index queues only those
Services), with an Event that never names the new holder; the address is
quarantined before another pod may take it; a new leader holds back the
addresses slices name that nothing holds."""
from controller_fakes import drain, events, make_controller
from pacific import names
from pacific.controller.endpoint_index import EndpointAddresses
from pacific.kube import resources as r
from pacific.ovn import lb


class Clock:
    def __init__(self):
        self.t = 1_700_000_000.0

    def __call__(self):
        return self.t


def setup():
    ctl = make_controller()
    clock = ctl.ipam.clock = Clock()
    for ns in ("red", "blue"):
        ctl.kube.add(r.NAMESPACES, {"metadata": {"name": ns}})
    drain(ctl)
    return ctl, clock


def add_pod(ctl, name, ns, ip=None):
    ann = {names.ANN_IP_ADDRESS: ip} if ip else {}
    ctl.kube.add(r.PODS, {"metadata": {"name": name, "annotations": ann},
                          "spec": {"nodeName": "node1", "containers": [{"name": "c"}]}}, ns)
    drain(ctl)
    alloc = ctl.ipam.lookup(f"{ns}/{name}")
    return alloc.ip if alloc else None


def slice_body(name, svc, *addresses):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/service-name": svc}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses]}


def hand_written_service(ctl, ns, *addresses, external_ip=None):
    spec = {"clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50"], "type": "NodePort",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP", "nodePort": 30080}]}
    if external_ip:
        spec["externalIPs"] = [external_ip]
    ctl.kube.add(r.SERVICES, {"metadata": {"name": "svc"}, "spec": spec}, ns)
    ctl.kube.add(r.ENDPOINTSLICES, slice_body("svc-1", "svc", *addresses), ns)
    drain(ctl)


def backends(ctl, ns):
    ensured = [c for c in ctl.writer.commands(lb.EnsureLoadBalancer)
               if c.external_ids.get("pacific.io/owner") == f"{ns}/svc"]
    return ensured[-1].vips["10.96.0.50:80"] if ensured else None


def test_the_index_names_only_the_services_whose_slices_name_an_address():
    idx = EndpointAddresses()
    a = {**slice_body("a-1", "a", "10.16.0.5", "10.16.0.6"), "metadata": {
        "name": "a-1", "namespace": "red", "labels": {"kubernetes.io/service-name": "a"}}}
    b = {**slice_body("b-1", "b", "10.16.0.6"), "metadata": {
        "name": "b-1", "namespace": "red", "labels": {"kubernetes.io/service-name": "b"}}}
    idx.update(None, a)
    idx.update(None, b)
    assert idx.services(["10.16.0.5"]) == {"red/a"}
    assert idx.services(["10.16.0.6", "10.16.0.99"]) == {"red/a", "red/b"}
    assert idx.named_by("red/b", ["10.16.0.5", "10.16.0.6"]) == {"10.16.0.6"}
    moved = {**a, "endpoints": [{"addresses": ["10.16.0.7"]}]}
    idx.update(a, moved)
    assert idx.services(["10.16.0.5"]) == set() and idx.services(["10.16.0.7"]) == {"red/a"}
    relabelled = {**b, "metadata": {**b["metadata"], "labels": {}}}
    idx.update(b, relabelled)                     # no Service's slice any more
    assert idx.services(["10.16.0.6"]) == set()
    idx.update(moved, None)
    assert len(idx) == 0


def test_a_released_address_leaves_the_service_and_its_new_holder_never_joins_it():
    ctl, clock = setup()
    mine = add_pod(ctl, "server", "red")
    hand_written_service(ctl, "red", mine)
    assert backends(ctl, "red") == f"{mine}:8080"          # positive control
    r.delete(ctl.kube, r.PODS, "server", "red")
    drain(ctl)                              # the pod's release queued the Service
    assert backends(ctl, "red") == ""
    said = events(ctl, "svc", "red")
    assert any(f"endpoint address {mine} is no longer a pod of this namespace: ignored" in e
               for e in said), said
    # another tenant's pod asks for it: refused while quarantined
    assert add_pod(ctl, "victim", "blue", ip=mine) is None
    refusal = [e for e in events(ctl, "victim", "blue") if "AddressQuarantined" in e]
    assert refusal and mine in refusal[0] and "quarantined until" in refusal[0]
    assert "red" not in refusal[0]                        # never who held it
    assert any(key == "blue/victim" for _, _, key in ctl.feature("pod").queue._delayed)
    clock.t += names.ADDRESS_QUARANTINE
    ctl.feature("pod").queue.add("blue/victim")          # the delayed retry, now due
    drain(ctl)
    assert ctl.ipam.holder(mine) == "blue/victim"
    assert backends(ctl, "red") == ""
    for e in events(ctl, "svc", "red"):
        assert "blue" not in e and "victim" not in e


def test_a_pod_of_the_same_namespace_taking_the_address_is_a_backend_again():
    ctl, clock = setup()
    mine = add_pod(ctl, "server", "red")
    hand_written_service(ctl, "red", mine)
    r.delete(ctl.kube, r.PODS, "server", "red")
    drain(ctl)
    clock.t += names.ADDRESS_QUARANTINE
    assert add_pod(ctl, "server2", "red", ip=mine) == mine
    assert backends(ctl, "red") == f"{mine}:8080"


def test_a_holder_change_queues_only_the_services_naming_the_address():
    ctl, _ = setup()
    mine = add_pod(ctl, "server", "red")
    hand_written_service(ctl, "red", mine)
    svc = ctl.feature("service")
    add_pod(ctl, "other", "blue")            # an address no slice names
    assert svc.queue.pending() == 0
    pods = ctl.feature("pod")
    for name, ns in (("other", "blue"), ("server", "red")):
        r.delete(ctl.kube, r.PODS, name, ns)
        while pods.queue.pending():          # the pod feature alone: its releases
            key = pods.queue.get(0)
            pods.reconcile(key)
            pods.queue.done(key)
        assert svc.queue.pending() == (ns == "red")


def test_egress_snat_members_are_re_decided_when_an_address_changes_holder():
    ctl, _ = setup()
    mine = add_pod(ctl, "server", "red")
    hand_written_service(ctl, "red", mine, external_ip="203.0.113.10")
    snat = ctl.feature("egress-snat")
    drain(ctl)
    r.delete(ctl.kube, r.PODS, "server", "red")
    ctl.feature("pod").reconcile("red/server")
    assert snat.queue.pending() == 1
    grants, _, _ = snat.grants()
    assert not any(mine in g.sources for g in grants.values())


def test_a_new_leader_holds_back_the_addresses_slices_name_that_nothing_holds():
    ctl, _ = setup()
    ctl.kube.add(r.ENDPOINTSLICES, slice_body("svc-1", "svc", "10.16.3.3"), "red")
    ctl.feature("service").prepare()
    assert ctl.ipam.quarantined("10.16.3.3") is not None
    assert add_pod(ctl, "p", "blue", ip="10.16.3.3") is None
