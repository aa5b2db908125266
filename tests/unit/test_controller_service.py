"""service_model: a Service and its EndpointSlices -> the OVN balancers wanted."""
from pacific.controller import service_model as sm


def svc(ports, cluster_ip="10.96.0.10", **spec):
    return {"metadata": {"name": "web", "namespace": "ns"},
            "spec": {"clusterIP": cluster_ip, "clusterIPs": [cluster_ip], "ports": ports, **spec}}


def eps(*endpoints, ports=(("http", 8080, "TCP"),), family="IPv4"):
    return {"addressType": family,
            "ports": [{"name": n, "port": p, "protocol": pr} for n, p, pr in ports],
            "endpoints": [{"addresses": [a], "conditions": c} for a, c in endpoints]}


READY = {"ready": True}


def test_vips_per_protocol_and_named_ports_resolved_per_slice():
    s = svc([{"name": "http", "port": 80, "protocol": "TCP"},
             {"name": "dns", "port": 53, "protocol": "UDP"}])
    slices = [eps(("10.16.0.5", READY), ("10.16.0.6", READY)),
              # another slice: the same named port resolved to another number
              eps(("10.16.0.7", READY), ports=(("http", 9090, "TCP"), ("dns", 5353, "UDP")))]
    want, problems = sm.balancers(s, slices)
    assert not problems
    assert want["tcp"].vips == {"10.96.0.10:80": "10.16.0.5:8080,10.16.0.6:8080,10.16.0.7:9090"}
    assert want["udp"].vips == {"10.96.0.10:53": "10.16.0.7:5353"}
    assert want["tcp"].options == {"reject": "true"}


def test_not_ready_and_terminating_endpoints_get_no_new_connections():
    s = svc([{"name": "http", "port": 80, "protocol": "TCP"}])
    slices = [eps(("10.16.0.5", {"ready": False}), ("10.16.0.6", {"ready": True, "terminating": True}),
                  ("10.16.0.7", {}))]          # unset "ready" means ready (v1 semantics)
    want, _ = sm.balancers(s, slices)
    assert want["tcp"].vips == {"10.96.0.10:80": "10.16.0.7:8080"}


def test_no_endpoint_keeps_the_vip_so_ovn_rejects():
    want, _ = sm.balancers(svc([{"name": "http", "port": 80, "protocol": "TCP"}]), [])
    assert want["tcp"].vips == {"10.96.0.10:80": ""} and want["tcp"].options["reject"] == "true"


def test_affinity_headless_externalname_and_ipv6():
    s = svc([{"port": 80, "protocol": "TCP"}], sessionAffinity="ClientIP")
    assert sm.balancers(s, [])[0]["tcp"].options["affinity_timeout"] == "10800"
    s["spec"]["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": 30}}
    assert sm.balancers(s, [])[0]["tcp"].options["affinity_timeout"] == "30"
    assert sm.balancers(svc([{"port": 80}], cluster_ip="None"), []) == ({}, [])
    assert sm.balancers({"spec": {"type": "ExternalName", "externalName": "x"}}, []) == ({}, [])
    six = svc([{"port": 80, "protocol": "TCP"}], cluster_ip="fd00::10")
    assert sm.balancers(six, [])[0]["tcp"].vips == {}
    v6slice = eps(("fd00::5", READY), family="IPv6", ports=(("", 80, "TCP"),))
    assert sm.balancers(svc([{"port": 80, "protocol": "TCP"}]), [v6slice])[0]["tcp"].vips == \
        {"10.96.0.10:80": ""}


def test_unnamed_port_and_an_unsupported_protocol_is_a_problem_not_a_failure():
    s = svc([{"port": 80, "protocol": "TCP"}, {"name": "x", "port": 9, "protocol": "ICMP"}])
    want, problems = sm.balancers(s, [eps(("10.16.0.5", READY), ports=(("", 8080, "TCP"),))])
    assert want["tcp"].vips == {"10.96.0.10:80": "10.16.0.5:8080"}
    assert problems == ["port x: protocol ICMP is not supported"]


def test_a_service_labelled_for_another_proxy_or_none_is_not_balanced():
    """Kubernetes' service.kubernetes.io/service-proxy-name and .../headless
    labels (any value): kube-proxy leaves such a Service alone, so does Pacific
    (upstream "should implement service.kubernetes.io/service-proxy-name")."""
    for label in ("service.kubernetes.io/service-proxy-name", "service.kubernetes.io/headless"):
        s = svc([{"port": 80, "protocol": "TCP"}])
        assert sm.balancers(s, [])[0]["tcp"].vips == {"10.96.0.10:80": ""}
        s["metadata"]["labels"] = {label: "foo-bar"}
        assert sm.balancers(s, []) == ({}, [])
        s["metadata"]["labels"] = {label: ""}
        assert sm.balancers(s, []) == ({}, [])


def test_udp_balancers_flush_the_conntrack_entries_of_a_backend_that_goes():
    """A UDP client that keeps sending from one port would keep a deleted
    backend (upstream's "Conntrack ... preserve UDP traffic when server pod
    cycles"); TCP keeps a terminating endpoint's open connections."""
    got, _ = sm.balancers(svc([{"port": 53, "protocol": "UDP"}, {"port": 80, "protocol": "TCP"}]),
                          [])
    assert got["udp"].options.get("ct_flush") == "true"
    assert "ct_flush" not in got["tcp"].options


def test_dual_stack_service_a_vip_per_family_balanced_over_that_familys_endpoints():
    s = svc([{"name": "http", "port": 80, "protocol": "TCP"}], cluster_ip="10.96.0.10",
            clusterIPs=["10.96.0.10", "fd00:96::a"])
    slices = [eps(("10.16.0.5", READY)),
              eps(("fd00:16::6", READY), ("fd00:16::5", READY), family="IPv6")]
    want, problems = sm.balancers(s, slices, families=(4, 6))
    assert not problems
    assert want["tcp"].vips == {"10.96.0.10:80": "10.16.0.5:8080",
                                "[fd00:96::a]:80": "[fd00:16::5]:8080,[fd00:16::6]:8080"}
    # an IPv4 cluster (no --ipv6-subnets) programs the IPv4 VIP only
    assert sm.balancers(s, slices)[0]["tcp"].vips == {"10.96.0.10:80": "10.16.0.5:8080"}


def test_ipv6_only_service_and_an_ipv6_vip_without_endpoints_rejects():
    six = svc([{"name": "http", "port": 80, "protocol": "TCP"}], cluster_ip="fd00:96::b")
    want, _ = sm.balancers(six, [eps(("10.16.0.5", READY))], families=(4, 6))
    assert want["tcp"].vips == {"[fd00:96::b]:80": ""}       # no IPv4 endpoint crosses over
    assert want["tcp"].options["reject"] == "true"
