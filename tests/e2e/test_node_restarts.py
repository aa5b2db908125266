"""A node's daemons restarted under a 10 ms probe between pods on two nodes:
pacific-node loses nothing, ovn-controller at most 1 s, ovs-vswitchd at most
3 s; all of a node's daemons killed at once come back with every pod talking
with its address and MAC, and the management port keeps its own."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from controller_fixtures import wait_until
import probes
from pacific import contract, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import bringup, cnipods, nodedaemons

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
MEASURES_TIME = True   # runs last on its worker (tests/conftest.py)
NS = "restarts"
INTERVAL = 0.01


@pytest.fixture(scope="module")
def env(sandbox_factory):
    sb = sandbox_factory(nodes=2, services=None)
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
    a = cnipods.add_pod(sb, NS, "a", "node1", api=api)
    cnipods.add_pod(sb, NS, "b", "node2", api=api)
    yield sb, api, a
    sb.down()


def ip_of(api, name):
    return probes.pod_ip(api, name, NS)


def outage(sb, src_netns: str, dst: str, action, seconds: float = 6.0) -> float:
    """Seconds of probes lost (10 ms apart) while `action()` runs."""
    count = int(seconds / INTERVAL)
    ping = subprocess.Popen(["ip", "netns", "exec", src_netns, "ping", "-q", "-i", str(INTERVAL),
                             "-c", str(count), "-W", "1", dst], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    action()
    out, _ = ping.communicate(timeout=seconds + 30)
    sent = int(out.split(" packets transmitted")[0].rsplit("\n", 1)[-1])
    received = int(out.split(" received")[0].rsplit(" ", 1)[-1])
    return (sent - received) * INTERVAL


def mgmt_port(sb, node) -> tuple[str, str]:
    out = sb.node(node).exec(["ip", "-o", "link", "show", names.MGMT_PORT]).stdout
    mac = out.split("link/ether ")[1].split()[0]
    addr = sb.node(node).exec(["ip", "-o", "-4", "addr", "show", names.MGMT_PORT]).stdout.split()[3]
    return mac, addr


def pods_talk(sb, api, a) -> bool:
    return sb.exec(a.netns, ["ping", "-c1", "-W2", ip_of(api, "b")], check=False).returncode == 0


def test_restarting_pacific_node_loses_no_packet(env):
    sb, api, a = env
    before = mgmt_port(sb, "node1"), mgmt_port(sb, "node2")
    lost = outage(sb, a.netns, ip_of(api, "b"),
                  lambda: (nodedaemons.restart(sb, "node1", kill=True),
                           nodedaemons.restart(sb, "node2", kill=True)))
    assert lost == 0, f"{lost:.2f} s of probes lost"
    assert (mgmt_port(sb, "node1"), mgmt_port(sb, "node2")) == before


def test_restarting_ovn_controller_keeps_the_outage_under_a_second(env):
    sb, api, a = env
    lost = outage(sb, a.netns, ip_of(api, "b"), lambda: bringup.restart_node_daemon(
        sb, sb.node("node2"), "ovn-controller"))
    assert lost <= 1.0, f"{lost:.2f} s of probes lost"
    assert pods_talk(sb, api, a)


def test_restarting_ovs_vswitchd_recovers_every_port_within_3_s(env):
    sb, api, a = env
    before = mgmt_port(sb, "node2")
    lost = outage(sb, a.netns, ip_of(api, "b"), lambda: bringup.restart_node_daemon(
        sb, sb.node("node2"), "ovs-vswitchd"), seconds=10)
    assert lost <= 3.0, f"{lost:.2f} s of probes lost"
    # ovn0 comes back with its address and MAC (pacific-node restores it)
    wait_until(lambda: mgmt_port(sb, "node2") == before, 20, interval=0.2,
               what="ovn0 restored on node2")
    assert sb.node("node2").exec(["ping", "-c1", "-W2", ip_of(api, "a")],
                                 check=False).returncode == 0


def test_all_of_a_nodes_daemons_killed_at_once_come_back(env):
    sb, api, a = env
    b = cnipods.load(sb, NS, "b")
    rec_before = contract.own_record(r.get(api, r.PODS, "b", NS))
    mac_before = sb.exec(b.netns, ["cat", "/sys/class/net/eth0/address"]).stdout.strip()
    node = sb.node("node2")
    for tag in ("ovn-controller", "ovs-vswitchd"):
        os.kill(sb.daemon_pid(f"{node.name}/{tag}"), signal.SIGKILL)
    nodedaemons.stop(sb, node, kill=True)
    bringup.restart_node_daemon(sb, node, "ovs-vswitchd")
    bringup.restart_node_daemon(sb, node, "ovn-controller")
    nodedaemons.start(sb, node, os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_UNDERLAY))
    wait_until(lambda: pods_talk(sb, api, a), 30, interval=0.2, what="b reachable again")
    assert contract.own_record(r.get(api, r.PODS, "b", NS)) == rec_before
    assert sb.exec(b.netns, ["cat", "/sys/class/net/eth0/address"]).stdout.strip() == mac_before
    pod = cnipods.add_pod(sb, NS, "c", "node2", api=api)      # and it serves the next ADD
    assert sb.exec(pod.netns, ["ping", "-c1", "-W2", ip_of(api, "a")],
                   check=False).returncode == 0
