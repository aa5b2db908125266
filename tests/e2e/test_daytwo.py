"""`pacific topology` and `pacific diagnose` on a 3-node sandbox of their own
with two Subnets: the picture's data parsed, --check finding rows changed
behind Pacific's back, diagnose finding a cut tunnel and a killed
ovn-controller (and nothing on a healthy cluster)."""
from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys

import pytest

from controller_fixtures import wait_until
from pacific import names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)
PODS = [("blue", "b1", "node1"), ("blue", "b2", "node2"), ("green", "g1", "node3")]


def cli(sb, *args):
    return subprocess.run([sys.executable, "-m", "pacific.cli.main", *args, "--sandbox", sb.name],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(sandbox_factory):
    sb = sandbox_factory(nodes=3, services=None)
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    for ns in ("blue", "green"):
        r.create(api, r.NAMESPACES, {"metadata": {"name": ns}})
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": "blue-net"},
                              "spec": {"cidrBlock": "10.50.0.0/24", "namespaces": ["blue"]}})
    for ns, name, node in PODS:
        cnipods.add_pod(sb, ns, name, node, api=api)
    yield sb, api
    sb.down()


def test_topology_names_switches_nodes_pods_and_tenants(cluster):
    sb, _ = cluster
    cp = cli(sb, "topology", "--format", "json")
    assert cp.returncode == 0, cp.stderr
    topo = json.loads(cp.stdout)
    assert topo["routers"] == [names.CLUSTER_ROUTER]
    sw = {s["name"]: s for s in topo["switches"]}
    assert set(sw) == {names.JOIN_SWITCH, names.DEFAULT_SUBNET, "blue-net"}
    assert {(p["owner"], p["node"]) for p in sw[names.JOIN_SWITCH]["ports"]} == {
        ("node1", "node1"), ("node2", "node2"), ("node3", "node3")}
    blue = sw["blue-net"]
    assert blue["cidr"] == "10.50.0.0/24" and blue["namespaces"] == ["blue"]
    assert blue["gateway"] == "10.50.0.1/24"
    assert {(p["owner"], p["node"], p["tenant"]) for p in blue["ports"]} == {
        ("blue/b1", "node1", "ns:blue"), ("blue/b2", "node2", "ns:blue")}
    assert all(ipaddress.ip_address(p["ip"]) in ipaddress.ip_network("10.50.0.0/24")
               for p in blue["ports"])
    assert [(p["owner"], p["node"]) for p in sw[names.DEFAULT_SUBNET]["ports"]] == [
        ("green/g1", "node3")]
    assert topo["tenants"]["ns:blue"] == ["blue"] and topo["tenants"]["ns:green"] == ["green"]
    text = cli(sb, "topology").stdout
    assert "switch blue-net 10.50.0.0/24 gateway 10.50.0.1/24 (Subnet blue-net, namespaces: blue)" \
        in text
    assert "node2: blue/b2 " in text
    svg = cli(sb, "topology", "--format", "svg").stdout
    assert svg.lstrip().startswith("<?xml") and "blue/b2" in svg and "tenant ns:green" in svg


def test_diagnose_finds_nothing_on_a_healthy_cluster(cluster):
    sb, _ = cluster
    # the node daemons' first health reports come within their interval
    cp = wait_until(lambda: (c := cli(sb, "diagnose")).returncode == 0 and c, 30,
                    interval=0.5, what="a clean diagnosis")
    assert cp.stdout.rstrip().endswith("no problem found")
    for area in ("databases", "chassis", "sync", "controller", "nodes", "subnets", "rows"):
        assert f"OK   {area}:" in cp.stdout


def tunnel_gauges(sb, node: str) -> dict:
    from pacific import metrics as m
    from pacific.node.nsutil import Netns
    with Netns(f"/run/netns/{sb.node(node).netns}") as ns:
        status, body = ns.run(lambda: m.get(f"http://127.0.0.1:{names.NODE_METRICS_PORT}"
                                            f"{m.PATH_METRICS}"))
    assert status == 200
    return {dict(labels)["peer"]: v for (name, labels), v in m.parse_metrics(body).items()
            if name == "pacific_node_tunnel_peer_up"}


def test_diagnose_finds_a_cut_tunnel_and_its_repair(cluster):
    sb, _ = cluster
    node2, node3 = sb.node("node2"), sb.node("node3")
    rules = ["add table inet pacific-test-cut",
             "add chain inet pacific-test-cut in { type filter hook input priority -300; }",
             f"add rule inet pacific-test-cut in ip saddr {node2.underlay_ip} drop"]
    node3.exec(["nft", "-f", "-"], input="\n".join(rules) + "\n")
    try:
        # each node probes on its own schedule: both ends report it within two rounds
        cp = wait_until(lambda: "node2 -> node3: down" in (c := cli(sb, "diagnose", "-q")).stdout
                        and "node3 -> node2: down" in c.stdout and c, 30, interval=0.5,
                        what="the cut tunnel reported by both ends")
        assert cp.returncode == 1
        assert "node1 -> node3" not in cp.stdout         # the other tunnels are fine
        assert tunnel_gauges(sb, "node3") == {"node1": 1.0, "node2": 0.0}
    finally:
        node3.exec(["nft", "delete", "table", "inet", "pacific-test-cut"])
    wait_until(lambda: cli(sb, "diagnose").returncode == 0, 30, interval=0.5,
               what="the repaired tunnel reported up")
    assert tunnel_gauges(sb, "node3") == {"node1": 1.0, "node2": 1.0}


def test_topology_check_finds_rows_changed_behind_pacifics_back(cluster):
    sb, _ = cluster
    assert cli(sb, "topology", "--check").returncode == 0
    ghost = names.pod_lsp_name("blue", "ghost")
    sb.nbctl("lsp-add", "blue-net", ghost, "--", "set", "Logical_Switch_Port", ghost,
             f'external_ids:"{names.EXT_OWNER_KIND}"={names.OWNER_KIND_POD}',
             f'external_ids:"{names.EXT_OWNER}"="blue/ghost"')
    sb.nbctl("lsp-del", names.pod_lsp_name("blue", "b1"))
    cp = cli(sb, "topology", "--check")
    assert cp.returncode == 1
    assert cp.stdout.splitlines() == [
        "missing: port pod:blue/b1 of pod blue/b1 (switch blue-net)",
        "stale: port pod:blue/ghost on blue-net: no pod blue/ghost holds it"]
    assert "WARN rows: missing: port pod:blue/b1" in cli(sb, "diagnose", "-q").stdout


def test_diagnose_finds_a_killed_ovn_controller(cluster):
    sb, _ = cluster
    node3 = sb.node("node3")
    pid = int(open(os.path.join(node3.rundir, "ovn-controller.pid")).read())
    os.kill(pid, signal.SIGKILL)
    cp = cli(sb, "diagnose", "-q", "--timeout", "2")
    assert cp.returncode == 1
    assert "FAIL sync: chassis node3 has not applied NB change" in cp.stdout
    assert "node1" not in cp.stdout.split("FAIL sync")[1].split("\n")[0]
    wait_until(lambda: "FAIL nodes: node node3: not ready: ovn-controller" in
               cli(sb, "diagnose", "-q", "--no-sync").stdout, 30, interval=0.5,
               what="node3's daemon reporting ovn-controller gone")


def test_kubectl_finds_the_plugin_and_passes_the_users_kubeconfig(cluster):
    """kubectl (the real one, v1.20) runs `kubectl-pacific` from PATH; the
    plugin reads $KUBECONFIG and the databases from the environment."""
    from pacific.sandbox.k8s import bins
    sb, _ = cluster
    env = dict(os.environ, KUBECONFIG=os.path.join(sb.dir, names.SANDBOX_KUBECONFIG),
               PACIFIC_NB_REMOTE=sb.nb_remote, PACIFIC_SB_REMOTE=sb.sb_remote,
               PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    kubectl = bins.path("kubectl")
    listed = subprocess.run([kubectl, "plugin", "list"], env=env, capture_output=True, text=True)
    assert "kubectl-pacific" in listed.stdout, listed.stdout + listed.stderr
    cp = subprocess.run([kubectl, "pacific", "topology", "--format", "json"], env=env,
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert "blue-net" in {s["name"] for s in json.loads(cp.stdout)["switches"]}
    usage = subprocess.run([kubectl, "pacific", "--help"], env=env, capture_output=True, text=True)
    assert usage.stdout.startswith("usage: kubectl pacific")
