"""The Service feature on the controller fakes: which endpoint addresses become
backends.  A Service's backends are its own namespace's pods: the addresses
Pacific allocated there, and the node address of a host-network pod of the
namespace while it runs on that node (upstream's "should function for service
endpoints using hostNetwork"); any other address is ignored with an Event."""
from controller_fakes import drain, events, make_controller
from pacific.kube import resources as r
from pacific.ovn import lb

NODE1, NODE2 = "192.168.77.11", "192.168.77.12"


def setup():
    ctl = make_controller()
    for n, ip in (("node1", NODE1), ("node2", NODE2)):
        ctl.kube.add(r.NODES, {"metadata": {"name": n}, "status": {
            "addresses": [{"type": "InternalIP", "address": ip}]}})
    for ns in ("web", "atk"):
        ctl.kube.add(r.NAMESPACES, {"metadata": {"name": ns}})
    drain(ctl)
    return ctl


def host_pod(ctl, name, ns, node, phase="Running"):
    return ctl.kube.add(r.PODS, {"metadata": {"name": name},
                                 "spec": {"nodeName": node, "hostNetwork": True, "containers": []},
                                 "status": {"phase": phase}}, ns)


def service(ctl, ns, *addresses):
    ctl.kube.add(r.SERVICES, {"metadata": {"name": "svc"}, "spec": {
        "clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50"],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}, ns)
    ctl.kube.add(r.ENDPOINTSLICES, {
        "metadata": {"name": "svc-1", "labels": {"kubernetes.io/service-name": "svc"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addresses]}, ns)


def backends(ctl, ns):
    ensured = [c for c in ctl.writer.commands(lb.EnsureLoadBalancer)
               if c.external_ids.get("pacific.io/owner") == f"{ns}/svc"]
    return ensured[-1].vips["10.96.0.50:80"] if ensured else None


def test_a_host_network_pod_s_node_address_is_a_backend_of_its_namespace_only():
    ctl = setup()
    host_pod(ctl, "server", "web", "node1")
    service(ctl, "web", NODE1, NODE2)          # node2 runs no host-network pod of web
    service(ctl, "atk", NODE1)                 # atk runs none anywhere
    drain(ctl)
    assert backends(ctl, "web") == f"{NODE1}:8080"
    assert backends(ctl, "atk") == ""
    assert any(f"endpoint addresses {NODE2} are not pods of namespace web" in e
               for e in events(ctl, "svc", "web"))
    assert any(f"endpoint addresses {NODE1} are not pods of namespace atk" in e
               for e in events(ctl, "svc", "atk"))


def test_the_backend_goes_when_the_host_network_pod_stops_or_goes():
    ctl = setup()
    host_pod(ctl, "server", "web", "node1")
    service(ctl, "web", NODE1)
    drain(ctl)
    assert backends(ctl, "web") == f"{NODE1}:8080"
    r.patch_merge(ctl.kube, r.PODS, "server", {"status": {"phase": "Succeeded"}}, "web")
    drain(ctl)
    assert backends(ctl, "web") == ""
    r.patch_merge(ctl.kube, r.PODS, "server", {"status": {"phase": "Running"}}, "web")
    drain(ctl)
    assert backends(ctl, "web") == f"{NODE1}:8080"
    r.delete(ctl.kube, r.PODS, "server", "web")
    drain(ctl)
    assert backends(ctl, "web") == ""


def test_ignored_endpoints_are_reported_when_the_service_is_seen_after_its_slice():
    """The Services and EndpointSlices watches are two streams: a slice may be
    reconciled before its Service is in the cache.  The report waits for the
    Service instead of being counted as made (a CI run lost it so)."""
    ctl = setup()
    ctl.kube.add(r.ENDPOINTSLICES, {
        "metadata": {"name": "svc-1", "labels": {"kubernetes.io/service-name": "svc"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": [{"addresses": [NODE2], "conditions": {"ready": True}}]}, "atk")
    drain(ctl)
    ctl.kube.add(r.SERVICES, {"metadata": {"name": "svc"}, "spec": {
        "clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50"],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}, "atk")
    drain(ctl)
    assert any(f"endpoint addresses {NODE2} are not pods of namespace atk" in e
               for e in events(ctl, "svc", "atk")), events(ctl, "svc", "atk")


def test_a_service_recreated_with_the_same_problem_is_told_again():
    ctl = setup()
    service(ctl, "atk", NODE1)
    drain(ctl)
    r.delete(ctl.kube, r.SERVICES, "svc", "atk")
    drain(ctl)
    before = len(events(ctl, "svc", "atk"))
    ctl.kube.add(r.SERVICES, {"metadata": {"name": "svc"}, "spec": {
        "clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50"],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}, "atk")
    drain(ctl)
    assert len(events(ctl, "svc", "atk")) == before + 1, events(ctl, "svc", "atk")
