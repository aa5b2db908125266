"""Centralized egress gateways with real packets: a centralized Subnet's pods
on every node leave through the active gateway node (the external host sees
its address); the gateway's underlay link cut, or its ovs-vswitchd killed, new
connections leave through the next gateway after a measured outage of at most
1 s, with neither the controller nor the API server on the path; the Subnet's
status follows and ranks the new gateway first; egress settles on one gateway
when the old one is back; with no gateway node available nothing leaks out
through another node."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from controller_fixtures import wait_until
from gateway_fixtures import (OUTAGE_BOUND, Sample, ask_outside, bfd_up, cut_link,
                              failover_sample, priorities,
                              remove_gateway_subnet, restore_link, steady_gateway, crash_free)
from pacific import names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import bringup, cnipods

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
MEASURES_TIME = True   # runs last on its worker (tests/conftest.py)
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
NS, SUBNET, CIDR, PORT = "egw", "egw-central", "10.65.0.0/24", 7272


def ask(sb, netns, timeout=1.0):
    return ask_outside(sb, netns, PORT, timeout)


def status(api, subnet=SUBNET) -> dict:
    return ((r.get(api, r.SUBNETS, subnet) or {}).get("status") or {}).get(
        names.STATUS_EGRESS) or {}


@pytest.fixture(scope="module")
def env(sandbox_factory):
    # a sandbox of its own: these tests cut links and kill daemons, and measure
    # failovers against BFD timers that other tests' leftovers must not disturb
    sb = sandbox_factory(nodes=3, services=None)
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": SUBNET},
                              "spec": {"cidrBlock": CIDR, "namespaces": [NS], "natOutgoing": True,
                                       "gatewayType": "centralized",
                                       "gatewayNodes": ["node1", "node2"]}})
    pods = {n: cnipods.add_pod(sb, NS, n, node, api=api).netns
            for n, node in (("g2", "node2"), ("g3", "node3"))}
    server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable, NETCHECK,
                               "serve", str(PORT), "outside"], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "ready"
    yield sb, api, pods
    server.kill()
    server.wait()
    r.delete(api, r.NAMESPACES, NS)
    remove_gateway_subnet(sb, api, SUBNET)      # the sandbox goes at the module's end


def test_pods_on_every_node_leave_through_the_active_gateway(env):
    sb, api, pods = env
    node1 = sb.node("node1").underlay_ip
    for name, netns in pods.items():   # the gateway's rows may come after the pod's
        wait_until(lambda netns=netns: ask(sb, netns) == node1, 30, interval=0.3,
                   what=f"{name} leaving through gateway node1")
        assert steady_gateway(sb, netns, PORT) == "node1"
    st = wait_until(lambda: status(api).get("active") == "node1" and status(api), 20,
                    what="status naming the active gateway")
    assert st["nodes"] == ["node1", "node2"] and st["since"]
    # all of the Subnet's outbound traffic passes the gateway's pegress0
    cap = subprocess.Popen(["ip", "netns", "exec", sb.node("node1").netns, "tcpdump", "-nli",
                            names.EGRESS_PORT, "-c", "2", f"tcp and dst port {PORT}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # tcpdump says "listening on" once it captures
        assert any("listening on" in cap.stderr.readline() for _ in range(2)), "tcpdump"
        for netns in pods.values():
            ask(sb, netns)
        out, _ = cap.communicate(timeout=10)
    finally:
        cap.kill()
    assert out.count(f".{PORT}:") >= 2, out


def sample(sb, netns, fault, cut: list) -> Sample:
    """One failover of the gateway egress leaves through now: fault(gw) applied
    to it (gw appended to `cut`), measured from the pod in `netns`."""
    wait_until(lambda: all(bfd_up(sb, "node3", g) for g in ("node1", "node2")), 20,
               what="BFD up between node3 and the gateways")   # the standby is ready
    gw = steady_gateway(sb, netns, PORT)
    other = "node2" if gw == "node1" else "node1"
    cut.append(gw)
    return failover_sample(sb, netns, sb.external_remote_ip, PORT, lambda: fault(gw),
                           old=lambda who: who.endswith(sb.node(gw).underlay_ip),
                           new=lambda who: who.endswith(sb.node(other).underlay_ip))


def test_the_gateway_fails_over_within_the_outage_bound_and_does_not_flap_back(env):
    sb, api, pods = env
    netns = pods["g3"]
    wait_until(lambda: ask(sb, netns) == sb.node("node1").underlay_ip, 20,
               what="leaving through node1")
    cut: list = []
    try:
        s = crash_free(sample(sb, netns, lambda gw: cut_link(sb, gw), cut))
        gw = cut[-1]
        other = "node2" if gw == "node1" else "node1"
        print(f"gateway failover outage: {s.outage * 1000:.0f} ms")
        assert s.outage <= OUTAGE_BOUND, s.report(sb)
        st = wait_until(lambda: status(api).get("active") == other and status(api), 20,
                        what="status following the failover")
        assert f"{gw} -> {other}" in st["lastFailover"]
        wait_until(lambda: (lambda p: p.get(other, 0) > p.get(gw, 0))(
            priorities(sb, f"egw:{SUBNET}")), 20,
                   what=f"{other} ranked first (no flapping back)")
    finally:
        if cut:
            restore_link(sb, cut[-1])
    # the old gateway back: egress settles on one gateway again (which one: see
    # docs/egress.md, OVN may hand the port back to the node of highest priority it saw last)
    settled = steady_gateway(sb, netns, PORT)
    print(f"with {cut[-1]} back, the Subnet leaves through {settled}")


def test_a_killed_gateway_fails_over_within_the_outage_bound(env):
    """The active gateway's ovs-vswitchd killed (and kept down, as a crash
    without a supervisor): new connections leave through the other one."""
    sb, api, pods = env
    netns = pods["g3"]

    def restart(gw):
        bringup.restart_node_daemon(sb, sb.node(gw), "ovs-vswitchd")
    cut: list = []
    try:
        s = crash_free(sample(sb, netns, lambda gw: sb.stop(f"{gw}/ovs-vswitchd"), cut))
        gw = cut[-1]
        other = "node2" if gw == "node1" else "node1"
        print(f"gateway failover outage (ovs-vswitchd killed): {s.outage * 1000:.0f} ms")
        assert s.outage <= OUTAGE_BOUND, s.report(sb)
        wait_until(lambda: status(api).get("active") == other, 20, what="status following")
        wait_until(lambda: (lambda p: p.get(other, 0) > p.get(gw, 0))(
            priorities(sb, f"egw:{SUBNET}")), 20, what=f"{other} ranked first")
    finally:
        if cut:
            restart(cut[-1])
    print(f"with {cut[-1]} back, the Subnet leaves through {steady_gateway(sb, netns, PORT)}")


def test_no_gateway_available_leaks_nothing(env):
    sb, api, pods = env
    r.patch_merge(api, r.SUBNETS, SUBNET, {"spec": {"gatewayNodes": ["no-such-node"]}})
    try:
        st = wait_until(lambda: "no gateway node available" in (status(api).get("message") or "")
                        and status(api), 20, what="status saying no gateway")
        assert st["nodes"] == [] and "no-such-node: no such node" in st["message"]
        wait_until(lambda: ask(sb, pods["g3"], 0.5) is None, 10, what="egress stopped")
        assert all(ask(sb, netns, 0.5) is None for netns in pods.values())
    finally:
        r.patch_merge(api, r.SUBNETS, SUBNET, {"spec": {"gatewayNodes": ["node1", "node2"]}})
    wait_until(lambda: ask(sb, pods["g3"]) is not None, 20, what="egress back")


def test_subnets_made_together_each_get_their_own_transit_network(env):
    """Centralized Subnets created at once are reconciled on several workers:
    each gets its own transit /24 (two once took the same one, and the
    traffic of both broke), and the pods of each leave through a gateway."""
    sb, api, _ = env
    made = [(f"egw-many-{i}", f"10.66.{i}.0/24") for i in range(4)]
    gateways = {sb.node(n).underlay_ip for n in ("node1", "node2")}
    try:
        for name, cidr in made:
            r.create(api, r.NAMESPACES, {"metadata": {"name": name}})
        for name, cidr in made:   # back to back: their reconciles overlap
            r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                      "metadata": {"name": name},
                                      "spec": {"cidrBlock": cidr, "namespaces": [name],
                                               "natOutgoing": True, "gatewayType": "centralized",
                                               "gatewayNodes": ["node1", "node2"]}})
        wait_until(lambda: all(status(api, n).get("active") for n, _ in made), 60,
                   what="every new gateway bound")
        transit = [status(api, n)["transit"] for n, _ in made]
        assert len(set(transit)) == len(made), transit
        for name, _ in made[:2]:
            netns = cnipods.add_pod(sb, name, "p", "node3", api=api).netns
            wait_until(lambda netns=netns: ask(sb, netns) in gateways, 30, interval=0.3,
                       what=f"a pod of {name} leaving through its gateway")
    finally:
        for name, _ in made:
            r.delete(api, r.NAMESPACES, name)
            r.delete(api, r.SUBNETS, name)
        wait_until(lambda: not any(r.get(api, r.SUBNETS, n) for n, _ in made), 60,
                   what="the Subnets deleted")
