"""Egress SNAT to a Service's external IP, with real packets: the ready
endpoints of a Service with externalIPs leave the cluster with its external IP
(held by one of the nodes labelled pacific.io/egress-gateway, which answers ARP
for it on the underlay); what comes to that address from outside reaches the
endpoints through the same node; the holder's link cut, another labelled node
takes the address over (gratuitous ARP) within a measured second; an opt-out
annotation, and a newer Service over the same pods, get what the issue says."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import probes
from controller_fixtures import wait_until
from gateway_fixtures import (OUTAGE_BOUND, bfd_up, cut_link, failover_sample, priorities,
                              remove_gateway_subnet, restore_link, crash_free)
from pacific import names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
MEASURES_TIME = True   # runs last on its worker (tests/conftest.py)
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
NS, SUBNET, CIDR = "esnat", "esnat", "10.67.0.0/24"
OUT_PORT, POD_PORT = 7474, 7475
EXT_IP, EXT_IP2 = "192.168.77.200", "192.168.77.201"     # on the underlay: held by ARP


def ask(sb, netns, ip, port, timeout=1.0):
    return probes.answer(sb, netns, "tcp", ip, port, timeout)


def source_seen_outside(sb, netns):
    got = ask(sb, netns, sb.external_remote_ip, OUT_PORT)
    return got.split()[-1] if got else None


def service(name, external_ips, annotations=None):
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}},
            "spec": {"selector": {"app": "snat"}, "externalIPs": external_ips,
                     "ports": [{"name": "echo", "port": 80, "targetPort": POD_PORT,
                                "protocol": "TCP"}]}}


def label(api, node, value):
    r.patch_merge(api, r.NODES, node, {"metadata": {"labels": {names.LABEL_EGRESS_GATEWAY: value}}})


@pytest.fixture(scope="module")
def env(sandbox_factory):
    # a sandbox of its own: these tests cut links and kill daemons, and measure
    # failovers against BFD timers that other tests' leftovers must not disturb
    # (shared with test_egress_ip's, BFD between node3 and the gateways did not
    # come up within 20 s after that module's killed ovs-vswitchd: issue 52's notes)
    sb = sandbox_factory(nodes=3, services=None)
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    for node in ("node1", "node2"):
        label(api, node, "true")
    r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": SUBNET},
                              "spec": {"cidrBlock": CIDR, "namespaces": [NS], "natOutgoing": True}})
    pods = {}
    for name, node in (("s3", "node3"), ("s2", "node2")):
        pods[name] = cnipods.add_pod(sb, NS, name, node, labels={"app": "snat"}, api=api).netns
        cnipods.detach_pod(sb, NS, name, [sys.executable, NETCHECK, "serve", str(POD_PORT), name])
    server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable, NETCHECK,
                               "serve", str(OUT_PORT), "outside"], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "ready"
    r.create(api, r.SERVICES, service("snat-web", [EXT_IP]), NS)
    yield sb, api, pods
    server.kill()
    server.wait()
    try:
        r.delete(api, r.NAMESPACES, NS)
        for node in ("node1", "node2"):
            label(api, node, None)
        remove_gateway_subnet(sb, api, SUBNET)
    finally:
        sb.down()


def holders(sb) -> list[str]:
    """The nodes whose underlay interface holds EXT_IP (two while the old holder
    is cut off and cannot learn it lost the gateway)."""
    return [n.name for n in sb.nodes
            if f" {EXT_IP}/32" in sb.exec(n.netns, ["ip", "-4", "-o", "addr", "show"],
                                          check=False).stdout]


def test_endpoints_leave_with_the_external_ip_and_it_is_reached_through_the_same_node(env):
    sb, api, pods = env
    for name, netns in pods.items():
        wait_until(lambda netns=netns: source_seen_outside(sb, netns) == EXT_IP, 30, interval=0.3,
                   what=f"{name} leaving as {EXT_IP}")
    assert holders(sb) in (["node1"], ["node2"])
    got = {(ask(sb, sb.external_netns, EXT_IP, 80) or "").split()[0] for _ in range(10)}
    assert got <= {"s2", "s3"} and got, got          # the external IP reaches the endpoints


def test_the_holder_fails_over_within_a_second(env):
    sb, api, pods = env
    netns = pods["s3"]
    cut: list = []

    def take():
        # the standby is ready once BFD runs between node3 and both labelled nodes
        wait_until(lambda: all(bfd_up(sb, "node3", g) for g in ("node1", "node2")), 20,
                   what="BFD up between node3 and the gateways")
        wait_until(lambda: source_seen_outside(sb, netns) == EXT_IP and len(holders(sb)) == 1,
                   30, what="the external IP held by one node")
        cut.append(holders(sb)[0])
        return failover_sample(sb, netns, sb.external_remote_ip, OUT_PORT,
                               lambda: cut_link(sb, cut[-1]), old=lambda who: who.endswith(EXT_IP),
                               new=lambda who: who.endswith(EXT_IP))
    try:
        s = crash_free(take())
        old = cut[-1]
        new = "node2" if old == "node1" else "node1"
        print(f"egress SNAT failover outage: {s.outage * 1000:.0f} ms")
        assert s.outage <= OUTAGE_BOUND, s.report(sb)
        wait_until(lambda: new in holders(sb), 10, what="the new holder")
        # the controller ranks the new holder first, so the old one comes back as standby
        group = f"egw:svc:{NS}/snat-web"
        wait_until(lambda: (lambda p: p.get(new, 0) > p.get(old, 0))(priorities(sb, group)), 20,
                   what=f"{new} ranked first")
    finally:
        if cut:
            restore_link(sb, cut[-1])
    # the old holder back: one node holds the address again (the node whose chassis
    # holds the gateway port: see docs/egress.md on a gateway's return)
    wait_until(lambda: len(holders(sb)) == 1, 20, what="one holder only")
    wait_until(lambda: source_seen_outside(sb, netns) == EXT_IP, 20,
               what=f"leaving as {EXT_IP} with the old holder back")


def test_a_newer_service_over_the_same_pods_and_the_opt_out(env):
    sb, api, pods = env
    wait_until(lambda: source_seen_outside(sb, pods["s3"]) == EXT_IP and len(holders(sb)) == 1,
               30, what=f"s3 leaving as {EXT_IP} through one holder")
    r.create(api, r.SERVICES, service("snat-newer", [EXT_IP2]), NS)
    try:
        def event():
            items, _ = r.list_(api, r.EVENTS, NS)
            return any(e["involvedObject"]["name"] == "snat-newer" and e["reason"] == "EgressSNAT"
                       and f"of the older Service {NS}/snat-web" in e.get("message", "")
                       for e in items)
        wait_until(event, 20, what="the Event on the newer Service")
        # still the oldest one's address
        wait_until(lambda: source_seen_outside(sb, pods["s3"]) == EXT_IP, 15,
                   what=f"s3 still leaving as {EXT_IP}")
    finally:
        r.delete(api, r.SERVICES, "snat-newer", NS)
    r.patch_merge(api, r.SERVICES, "snat-web", {"metadata": {"annotations": {
        names.ANN_EGRESS_SNAT: "false"}}}, NS)
    node3 = sb.node("node3").underlay_ip
    wait_until(lambda: source_seen_outside(sb, pods["s3"]) == node3, 20,
               what="s3 leaving through its own node again")
