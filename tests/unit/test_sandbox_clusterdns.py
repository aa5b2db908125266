"""pacific.sandbox.k8s.clusterdns: the sandbox's cluster DNS answers the names
Kubernetes' tests look up, over real UDP and TCP sockets on loopback."""
from __future__ import annotations

import socket

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

from pacific.sandbox.k8s import clusterdns


class Cache:
    def __init__(self, objs):
        self.objs = objs

    def get(self, key):
        return next((o for o in self.objs if
                     f"{o['metadata']['namespace']}/{o['metadata']['name']}" == key), None)

    def list(self):
        return list(self.objs)


def svc(name, ns="shop", **spec):
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


def eps(service, *endpoints, ns="shop", address_type="IPv4"):
    return {"metadata": {"name": f"{service}-{address_type}", "namespace": ns,
                         "labels": {"kubernetes.io/service-name": service}},
            "addressType": address_type,
            "endpoints": [{"addresses": [a], "conditions": {"ready": ready}, **extra}
                          for a, ready, extra in endpoints]}


RECORDS = clusterdns.Records(
    Cache([svc("web", clusterIP="10.96.0.20"), svc("db", clusterIP="None"),
           svc("late", clusterIP="None", publishNotReadyAddresses=True),
           svc("out", type="ExternalName", externalName="example.net"),
           svc("both", clusterIP="10.96.0.21", clusterIPs=["10.96.0.21", "fd00:96::21"]),
           svc("six", clusterIP="fd00:96::22"), svc("h6", clusterIP="None")]),
    Cache([eps("db", ("10.16.0.5", True, {"hostname": "db-0"}), ("10.16.0.6", False, {})),
           eps("late", ("10.16.0.7", False, {})),
           eps("h6", ("fd00:16::5", True, {}), address_type="IPv6")]))


def ask(name, qtype="A"):
    q = dns.message.make_query(name, qtype)
    resp = dns.message.from_wire(RECORDS.respond(q.to_wire()))
    return dns.rcode.to_text(resp.rcode()), sorted(str(rd) for rr in resp.answer for rd in rr)


def test_services_headless_hostnames_pods_and_external_names():
    assert ask("web.shop.svc.cluster.local") == ("NOERROR", ["10.96.0.20"])
    assert ask("db.shop.svc.cluster.local") == ("NOERROR", ["10.16.0.5"])     # ready only
    assert ask("late.shop.svc.cluster.local") == ("NOERROR", ["10.16.0.7"])   # publishNotReady
    assert ask("db-0.db.shop.svc.cluster.local") == ("NOERROR", ["10.16.0.5"])
    assert ask("10-16-0-9.shop.pod.cluster.local") == ("NOERROR", ["10.16.0.9"])
    assert ask("out.shop.svc.cluster.local") == ("NOERROR", ["example.net."])
    assert ask("WEB.Shop.svc.cluster.local.") == ("NOERROR", ["10.96.0.20"])  # any case


def test_a_known_name_without_the_type_is_no_data_and_the_rest_is_refused_or_unknown():
    assert ask("web.shop.svc.cluster.local", "AAAA") == ("NOERROR", [])
    assert ask("nope.shop.svc.cluster.local") == ("NXDOMAIN", [])
    assert ask("db-9.db.shop.svc.cluster.local") == ("NXDOMAIN", [])
    assert ask("web.other.svc.cluster.local") == ("NXDOMAIN", [])
    assert ask("x-y.shop.pod.cluster.local") == ("NXDOMAIN", [])
    assert ask("google.com") == ("REFUSED", [])
    assert RECORDS.respond(b"\x00garbage") is None


def test_ipv6_cluster_ips_and_endpoints_are_aaaa_records():
    """An IPv6-only or dual-stack Service: AAAA for its IPv6 cluster IP, A
    for its IPv4 one; a headless Service's IPv6 endpoints too."""
    assert ask("both.shop.svc.cluster.local") == ("NOERROR", ["10.96.0.21"])
    assert ask("both.shop.svc.cluster.local", "AAAA") == ("NOERROR", ["fd00:96::21"])
    assert ask("six.shop.svc.cluster.local", "AAAA") == ("NOERROR", ["fd00:96::22"])
    assert ask("six.shop.svc.cluster.local") == ("NOERROR", [])      # no data for A
    assert ask("h6.shop.svc.cluster.local", "AAAA") == ("NOERROR", ["fd00:16::5"])


def test_it_answers_over_udp_and_tcp():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    servers = clusterdns.serve(RECORDS, "127.0.0.1", None, port)
    try:
        q = dns.message.make_query("web.shop.svc.cluster.local", "A")
        for send in (dns.query.udp, dns.query.tcp):
            resp = send(q, "127.0.0.1", port=port, timeout=5)
            assert [str(rd) for rr in resp.answer for rd in rr] == ["10.96.0.20"], send
    finally:
        for srv in servers:
            srv.shutdown()
            srv.server_close()
