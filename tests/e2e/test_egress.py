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

import probes
from controller_fixtures import wait_until
from pacific import contract, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
NS, CIDR, PORT = "egress", "10.63.0.0/24", 7171


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
    delete_subnet(api, "egress-direct")    # the session's sandbox is shared: free the CIDR


def delete_subnet(api, name):
    """Deleted once its pods are gone (the controller keeps a Subnet whose
    addresses are in use)."""
    r.delete(api, r.SUBNETS, name)
    wait_until(lambda: r.get(api, r.SUBNETS, name) is None, 60, interval=0.2,
               what=f"Subnet {name} deleted")


def ask(sb, netns, ip, port=PORT):
    return probes.answer(sb, netns, "tcp", ip, port, 3)


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


NAT_NS, NAT_CIDR = "egress-nat", "10.64.0.0/24"


@pytest.fixture(scope="module")
def nat(env):
    sb, api, _, _ = env
    r.create(api, r.NAMESPACES, {"metadata": {"name": NAT_NS}})
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": "egress-nat"},
                              "spec": {"cidrBlock": NAT_CIDR, "namespaces": [NAT_NS],
                                       "natOutgoing": True}})
    pod = cnipods.add_pod(sb, NAT_NS, "q1", "node1", api=api)
    yield sb, api, pod
    r.delete(api, r.NAMESPACES, NAT_NS)
    delete_subnet(api, "egress-nat")


def table(sb, node) -> dict:
    cp = sb.exec(sb.node(node).netns, ["nft", "-j", "list", "table", "inet", "pacific"],
                 check=False)
    return json.loads(cp.stdout) if cp.returncode == 0 else {}


def nat_set(sb, node) -> set[str]:
    for item in table(sb, node).get("nftables", []):
        s = item.get("set")
        if s and s["name"] == "nat_cidrs":
            return {f"{e['prefix']['addr']}/{e['prefix']['len']}" for e in s.get("elem", [])}
    return set()


def test_natoutgoing_masquerades_behind_the_node(nat):
    """The external host has no route to 10.62.0.0/24: only the masquerade
    (the node's address) can bring the answer back."""
    sb, _, pod = nat
    wait_until(lambda: NAT_CIDR in nat_set(sb, "node1"), 20, interval=0.2,
               what="the natOutgoing Subnet in the node's set")
    got = wait_until(lambda: ask(sb, pod.netns, sb.external_remote_ip), 30, interval=0.5,
                     what="q1 reaching the outside")
    assert got == f"outside {sb.node('node1').underlay_ip}"
    assert CIDR not in nat_set(sb, "node1")          # natOutgoing false: not masqueraded


def test_the_host_firewall_holds_its_rules_and_comes_back_after_a_flush(nat):
    sb, _, pod = nat
    listing = table(sb, "node1")["nftables"]
    comments = {i["rule"]["comment"] for i in listing   # not Services' frontends, nor the
                if "rule" in i and i["rule"]["chain"] not in ("services", "service-source")}
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    source = contract.NodeRecord.of(r.get(api, r.NODES, "node1")).service_source
    assert {i["rule"]["comment"] for i in listing if "rule" in i
            and i["rule"]["chain"] == "service-source"} == {
        f"pacific-service-source {source}", f"pacific-service-source-out {source}"}
    assert comments == {"pacific-masquerade", "pacific-invalid-drop", "pacific-from-pods",
                        "pacific-to-pods", "pacific-geneve", "pacific-from-ovn0",
                        "pacific-services-in", "pacific-services-out",
                        "pacific-service-masquerade", "pacific-gateway-in",
                        "pacific-gateway-reply", "pacific-to-nodes-masquerade",
                        "pacific-underlay-spoof", "pacific-ovn-central-in",
                        "pacific-host-ports-in", "pacific-ovn-central-fwd",
                        "pacific-host-ports-fwd",
                        # no pod or join source to a tunnel or BFD port (decision 0051)
                        "pacific-underlay-udp-in", "pacific-underlay-tcp-in",
                        "pacific-underlay-udp-fwd", "pacific-underlay-tcp-fwd",
                        "pacific-underlay-udp-in-6", "pacific-underlay-tcp-in-6",
                        "pacific-underlay-udp-fwd-6", "pacific-underlay-tcp-fwd-6",
                        # the IPv6 twins, in every cluster (their sets are empty
                        # without IPv6 on the pod network)
                        "pacific-underlay-spoof-6", "pacific-ovn-central-in-6",
                        "pacific-host-ports-in-6", "pacific-ovn-central-fwd-6",
                        "pacific-host-ports-fwd-6", "pacific-masquerade-6",
                        "pacific-service-masquerade-6", "pacific-to-nodes-masquerade-6",
                        "pacific-invalid-drop-6",
                        "pacific-from-pods-6", "pacific-to-pods-6"}
    sb.exec(sb.node("node1").netns, ["nft", "flush", "ruleset"])   # (the daemon may be
    # rebuilding it already: what holds is that it comes back whole)
    wait_until(lambda: NAT_CIDR in nat_set(sb, "node1"), 15, interval=0.2,
               what="the table rebuilt after a flush")
    assert wait_until(lambda: ask(sb, pod.netns, sb.external_remote_ip), 15, interval=0.5,
                      what="masquerade again") == f"outside {sb.node('node1').underlay_ip}"


def test_uninstall_removes_the_table(nat):
    """`pacific-node --uninstall` on a node that leaves: nothing of the table stays
    (its daemon stopped first, else it rebuilds the table at once)."""
    sb, _, _ = nat
    node = sb.node("node3")
    assert table(sb, "node3")
    from pacific.sandbox import nodedaemons
    nodedaemons.stop(sb, node)
    try:
        cp = sb.exec(node.netns, [sys.executable, "-m", "pacific.node.main", "--uninstall"],
                     check=False)
        assert cp.returncode == 0, cp.stderr
        assert table(sb, "node3") == {}
    finally:
        nodedaemons.start(sb, node, os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_UNDERLAY))
    wait_until(lambda: table(sb, "node3"), 15, interval=0.2, what="the table back with the daemon")


def test_invalid_packets_from_pods_never_leave(env):
    """A TCP segment with SYN and RST set (conntrack: INVALID) from a pod does not
    reach the outside; a plain SYN from the same pod does (the control)."""
    sb, _, pods, ips = env
    port = PORT + 7
    cap = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, "tcpdump", "-nli", "any",
                            "-c", "1", f"src host {ips['p1']} and tcp dst port {port}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while "listening on" not in cap.stderr.readline():   # tcpdump ready (it says so)
            pass
        for _ in range(3):
            sb.exec(pods["p1"].netns, [sys.executable, NETCHECK, "rawtcp", sb.external_remote_ip,
                                       str(port), "SR"])
        with pytest.raises(subprocess.TimeoutExpired):
            cap.communicate(timeout=2)          # nothing of the INVALID segments arrived
        sb.exec(pods["p1"].netns, [sys.executable, NETCHECK, "rawtcp", sb.external_remote_ip,
                                   str(port), "S"])
        out, _ = cap.communicate(timeout=10)    # the control arrives
        assert "Flags [S]" in out, out
    finally:
        cap.kill()
