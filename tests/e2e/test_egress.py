"""Distributed egress: a pod reaches the outside world (the sandbox's external
namespace, 198.51.100.1) through its own node's ovn0, with its own address
for a Subnet without natOutgoing; traffic inside the cluster is routed as
before.  The external host's server answers with the source it saw."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from controller_fixtures import wait_until
from pacific import contract, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
NS, CIDR, PORT = "egress", "10.61.0.0/24", 7171


@pytest.fixture(scope="module")
def env(sandbox):
    sb = sandbox
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": "egress-direct"},
                              "spec": {"cidrBlock": CIDR, "namespaces": [NS],
                                       "natOutgoing": False}})
    pods = {n: cnipods.add_pod(sb, NS, n, node, api=api)
            for n, node in (("p1", "node1"), ("p2", "node2"))}
    ips = {n: contract.own_record(r.get(api, r.PODS, n, NS)).ip for n in pods}
    # the outside world routes the pods' addresses back to their nodes (an
    # underlay that routes pod CIDRs: no NAT needed)
    routes = [(ips[n], sb.node(node).underlay_ip) for n, node in (("p1", "node1"), ("p2", "node2"))]
    for ip, via in routes:
        sb.exec(sb.external_netns, ["ip", "route", "replace", f"{ip}/32", "via", via])
    server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable, NETCHECK,
                               "serve", str(PORT), "outside"], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "ready"
    yield sb, api, pods, ips
    server.kill()
    server.wait()
    for ip, _ in routes:
        sb.exec(sb.external_netns, ["ip", "route", "del", f"{ip}/32"], check=False)
    r.delete(api, r.NAMESPACES, NS)


def ask(sb, netns, ip, port=PORT):
    cp = sb.exec(netns, [sys.executable, NETCHECK, "ask", "tcp", ip, str(port), "3"], check=False)
    return cp.stdout.strip() if cp.returncode == 0 else None


def test_a_pod_reaches_the_outside_with_its_own_address(env):
    sb, _, pods, ips = env
    for n in ("p1", "p2"):
        got = wait_until(lambda n=n: ask(sb, pods[n].netns, sb.external_remote_ip), 30,
                         interval=0.5, what=f"{n} reaching the outside")
        assert got == f"outside {ips[n]}"


def test_each_pod_leaves_through_its_own_node(env):
    sb, _, _, _ = env
    for n, node in (("p1", "node1"), ("p2", "node2")):
        cp = subprocess.run([sys.executable, "-m", "pacific.cli.main", "trace", f"{NS}/{n}",
                             sb.external_remote_ip, "--json", "--sandbox", sb.name],
                            capture_output=True, text=True, timeout=60)
        out = json.loads(cp.stdout)
        assert out["verdict"] == (f"leaves the cluster through node {node} ({names.MGMT_PORT}): "
                                  "the node's host routes it on (distributed egress)"), out
        assert out["ok"] and out["reply"] is None


def test_traffic_inside_the_cluster_is_not_sent_to_a_node(env):
    sb, _, pods, ips = env
    server = subprocess.Popen(["ip", "netns", "exec", pods["p2"].netns, sys.executable, NETCHECK,
                               "serve", str(PORT + 1), "p2"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        assert ask(sb, pods["p1"].netns, ips["p2"], PORT + 1) == f"p2 {ips['p1']}"
    finally:
        server.kill()
        server.wait()
    # the router's egress rows: one reroute per node, one allow for the cluster
    policies = sb.nbctl("--format=csv", "--columns=priority,action", "list",
                        "Logical_Router_Policy")
    assert f"{names.PRIO_POLICY_NODE_LOCAL},allow" in policies
    assert policies.count(f"{names.PRIO_POLICY_DISTRIBUTED_EGRESS},reroute") == len(sb.nodes)
