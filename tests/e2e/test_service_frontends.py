"""Services reached from outside the cluster, with real packets from the
sandbox's external host: a node port on any node and an external IP (routed
by the external host to one node) reach the endpoints; with
externalTrafficPolicy: Local only the node's own endpoints answer and they see
the client's address; an external IP another Service holds, or inside the
cluster's networks, is refused with an Event while the rest keeps working."""
from __future__ import annotations

import collections
import os
import sys

import pytest

from controller_fixtures import wait_until
from probes import ask
from pacific import contract
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods
from pacific.sandbox.k8s import sandbox as k8s

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
NS, PORT = "svc-front", 7100
EXTERNAL_IP = "203.0.113.10"


def answers(sb, proto, ip, port, n=12, until=()) -> collections.Counter:
    """Who answered n requests from the external host, and which client address
    they saw: Counter of "pod client-ip" (or "rc=N").  With `until`, stops as
    soon as every answer in it has been seen."""
    got = collections.Counter()
    for _ in range(n):
        rc, out = ask(sb, sb.external_netns, proto, ip, port)
        got[out if rc == 0 else f"rc={rc}"] += 1
        if until and set(until) <= set(got):
            break
    return got


def svc(name, ports, type_="NodePort", local=False, external_ips=()):
    spec = {"type": type_, "selector": {"app": "front"}, "ports": ports}
    if local:
        spec["externalTrafficPolicy"] = "Local"
    if external_ips:
        spec["externalIPs"] = list(external_ips)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


@pytest.fixture(scope="module")
def env(sandbox):
    sb = sandbox
    api = client.load(k8s.kubeconfig_path(sb))
    ports = [{"name": "echo", "containerPort": PORT, "protocol": "TCP"},
             {"name": "echo-udp", "containerPort": PORT, "protocol": "UDP"}]
    for name, node in (("front1", "node1"), ("front2", "node2")):
        cnipods.add_pod(sb, NS, name, node, labels={"app": "front"}, api=api, container_ports=ports)
        cnipods.detach_pod(sb, NS, name, [sys.executable, NETCHECK, "serve", str(PORT), name])
    for name in ("front1", "front2"):
        ip = cnipods.load(sb, NS, name).ip
        wait_until(lambda ip=ip: ask(sb, sb.node("node3").netns, "tcp", ip, PORT)[0] == 0, 20,
                   what=f"{name} serving")
    # what an endpoint sees of a connection a node sends to a cluster IP: the
    # node's service source (decision 0043)
    joins = {n.name: contract.NodeRecord.of(r.get(api, r.NODES, n.name)).service_source
             for n in sb.nodes}
    yield sb, api, joins
    r.delete(api, r.NAMESPACES, NS)


def node_port(api, name, index=0):
    return r.get(api, r.SERVICES, name, NS)["spec"]["ports"][index]["nodePort"]


def endpoint_ips(api, name) -> set[str]:
    ep = r.get(api, r.ENDPOINTS, name, NS) or {}
    return {a["ip"] for s in ep.get("subsets") or [] for a in s.get("addresses") or []}


def test_a_node_port_on_every_node_reaches_the_endpoints(env):
    sb, api, joins = env
    r.create(api, r.SERVICES, svc("np", [
        {"name": "http", "port": 80, "targetPort": "echo", "protocol": "TCP"},
        {"name": "dns", "port": 53, "targetPort": PORT, "protocol": "UDP"}]), NS)
    # Kubernetes lists both ready endpoints before the spread is checked
    wait_until(lambda: len(endpoint_ips(api, "np")) == 2, 20, what="both endpoints listed")
    tcp, udp = node_port(api, "np", 0), node_port(api, "np", 1)
    for node in sb.nodes:
        wait_until(lambda: ask(sb, sb.external_netns, "tcp", node.underlay_ip, tcp)[0] == 0, 20,
                   what=f"node port {tcp} on {node.name}")
        both = {f"front1 {joins[node.name]}", f"front2 {joins[node.name]}"}
        for proto, port in (("tcp", tcp), ("udp", udp)):
            # each request picks an endpoint at random (OVN's dp_hash of its 5-tuple), so
            # twelve requests all went to one of two endpoints once in 2,048 tries (a suite
            # run saw it): ask until both answered, at most 40 times (once in 5.5e11)
            got = answers(sb, proto, node.underlay_ip, port, 40, until=both)
            # externalTrafficPolicy Cluster: any endpoint, seen from the node's service source
            assert set(got) == both, f"{node.name} {proto}: not spread over both endpoints: {got}"


def test_local_traffic_policy_keeps_the_client_address_and_the_node_s_own_endpoints(env):
    sb, api, _ = env
    r.create(api, r.SERVICES, svc("np-local", [
        {"name": "http", "port": 80, "targetPort": "echo", "protocol": "TCP"}], local=True), NS)
    port = node_port(api, "np-local")
    clients = {sb.external_ip, sb.external_remote_ip}
    for node, pod in (("node1", "front1"), ("node2", "front2")):
        ip = sb.node(node).underlay_ip
        wait_until(lambda: ask(sb, sb.external_netns, "tcp", ip, port)[0] == 0, 20,
                   what=f"local node port on {node}")
        got = answers(sb, "tcp", ip, port, 6)
        assert {a.split()[0] for a in got} == {pod}, got        # only its own endpoint
        assert {a.split()[1] for a in got} <= clients, got       # the client's own address
    # node3 has no endpoint: dropped there, never sent to another node
    assert ask(sb, sb.external_netns, "tcp", sb.node("node3").underlay_ip, port)[0] == 1


def test_an_external_ip_routed_to_a_node_reaches_the_endpoints(env):
    sb, api, joins = env
    via = sb.node("node2")
    sb.exec(sb.external_netns, ["ip", "route", "replace", f"{EXTERNAL_IP}/32", "via",
                                via.underlay_ip])
    try:
        r.create(api, r.SERVICES, svc("ext", [
            {"name": "http", "port": 8080, "targetPort": "echo", "protocol": "TCP"}],
            type_="ClusterIP", external_ips=[EXTERNAL_IP]), NS)
        wait_until(lambda: ask(sb, sb.external_netns, "tcp", EXTERNAL_IP, 8080)[0] == 0, 20,
                   what="the external IP answering")
        got = answers(sb, "tcp", EXTERNAL_IP, 8080)
        assert set(got) == {f"front1 {joins['node2']}", f"front2 {joins['node2']}"}, got
        # a Service created later that claims the same external IP and port: refused,
        # with an Event; the first keeps answering
        r.create(api, r.SERVICES, svc("ext-copy", [
            {"name": "http", "port": 8080, "targetPort": "echo", "protocol": "TCP"}],
            type_="ClusterIP", external_ips=[EXTERNAL_IP, "10.16.0.99"]), NS)
        events = wait_until(lambda: event_text(api, "ext-copy"), 20, what="the refusal Event")
        assert f"externalIP {EXTERNAL_IP} TCP/8080 is already used by Service {NS}/ext" in events
        assert "externalIP 10.16.0.99 is inside the cluster network" in events
        assert set(answers(sb, "tcp", EXTERNAL_IP, 8080, 6)) <= {
            f"front1 {joins['node2']}", f"front2 {joins['node2']}"}
    finally:
        sb.exec(sb.external_netns, ["ip", "route", "del", f"{EXTERNAL_IP}/32"], check=False)


def test_a_deleted_service_leaves_no_frontend(env):
    sb, api, _ = env
    r.create(api, r.SERVICES, svc("gone", [
        {"name": "http", "port": 80, "targetPort": "echo", "protocol": "TCP"}]), NS)
    port = node_port(api, "gone")
    ip = sb.node("node1").underlay_ip
    wait_until(lambda: ask(sb, sb.external_netns, "tcp", ip, port)[0] == 0, 20,
               what="the node port answering")
    r.delete(api, r.SERVICES, "gone", NS)
    wait_until(lambda: f"{NS}/gone " not in rules_text(sb, "node1"), 20,
               what="the frontend removed from node1's firewall")
    assert ask(sb, sb.external_netns, "tcp", ip, port)[0] != 0


def event_text(api, name) -> str:
    items, _ = r.list_(api, r.EVENTS, NS)
    return " | ".join(e.get("message", "") for e in items
                      if e["involvedObject"]["name"] == name
                      and e["reason"] == "ServiceNotFullyProgrammed")


def rules_text(sb, node) -> str:
    return sb.exec(sb.node(node).netns, ["nft", "list", "chain", "inet", "pacific", "services"],
                   check=False).stdout
