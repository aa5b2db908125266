"""Real packets through a 3-node sandbox: a router with two switches made through
pacific.ovn, test pods on different nodes, ping (switched and routed), TCP, MTU."""
from __future__ import annotations

import json
import textwrap
import time

import pytest

import nb_commands
from pacific import names
from pacific.ovn.nb import NorthboundAPI, Owner

pytestmark = pytest.mark.e2e
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)

ROUTER = "t-router"
SWITCHES = {  # switch: (gateway/prefix, router port MAC)
    "t-ls-a": ("10.70.1.1/24", "0a:00:46:01:00:01"),
    "t-ls-b": ("10.70.2.1/24", "0a:00:46:02:00:01"),
}
PODS = {  # pod: (node, switch, ip/prefix, mac)
    "a1": ("node1", "t-ls-a", "10.70.1.11/24", "0a:00:46:01:00:0b"),
    "a2": ("node2", "t-ls-a", "10.70.1.12/24", "0a:00:46:01:00:0c"),
    "b3": ("node3", "t-ls-b", "10.70.2.13/24", "0a:00:46:02:00:0d"),
}

ECHO_SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], 7007)); s.listen(4)
    while True:
        c, _ = s.accept()
        with c:
            while data := c.recv(65536):
                c.sendall(data)
""")
ECHO_CLIENT = textwrap.dedent("""
    import os, socket, sys, threading, time
    payload = os.urandom(4 << 20)
    deadline = time.time() + 10
    while True:
        try:
            c = socket.create_connection((sys.argv[1], 7007), timeout=5); break
        except OSError:
            if time.time() > deadline: raise
            time.sleep(0.1)
    got = bytearray()
    def read():  # read while writing, or both sides' buffers fill up and stall
        while data := c.recv(65536):
            got.extend(data)
    reader = threading.Thread(target=read); reader.start()
    c.sendall(payload); c.shutdown(socket.SHUT_WR)
    reader.join()
    assert bytes(got) == payload, f"echo mismatch: sent {len(payload)} got {len(got)}"
    print("echoed", len(got))
""")


@pytest.fixture(scope="module")
def net(sandbox_factory):
    """Sandbox + router + two switches (via pacific.ovn) + three test pods."""
    sb = sandbox_factory(nodes=3)
    nb = NorthboundAPI(sb.nb_remote, created_by="test-sandbox")
    try:
        cluster = Owner(names.OWNER_KIND_CLUSTER, ROUTER)
        with nb.transaction() as txn:
            txn.add(nb_commands.add_router(nb, ROUTER, owner=cluster))
            for ls, (gw, mac) in SWITCHES.items():
                owner = Owner(names.OWNER_KIND_SUBNET, ls)
                txn.add(nb_commands.add_switch(nb, ls, owner=owner))
                for cmd in nb_commands.link_router_switch(nb, ROUTER, ls, mac, gw, owner=owner):
                    txn.add(cmd)
            for pod, (_node, ls, cidr, mac) in PODS.items():
                addr = f"{mac} {cidr.split('/')[0]}"
                txn.add(nb_commands.add_switch_port(nb, ls, f"{pod}.test", addresses=[addr],
                                           port_security=[addr],
                                           owner=Owner(names.OWNER_KIND_POD, f"test/{pod}")))
    finally:
        nb.close()
    pods = {}
    for pod, (node, ls, cidr, mac) in PODS.items():
        gw = SWITCHES[ls][0].split("/")[0]
        pods[pod] = sb.add_test_pod(node, pod, f"{pod}.test", mac, cidr, gateway=gw)
    for p in pods.values():
        p.wait_installed(timeout=20)
    sb.nbctl("--wait=hv", "sync")
    yield sb, pods
    sb.down()


def test_same_switch_ping_across_nodes(net):
    _, pods = net
    assert pods["a1"].ping(pods["a2"].ip, count=3, wait=10), "a1(node1) -> a2(node2) on t-ls-a"


def test_routed_ping_across_nodes(net):
    _, pods = net
    assert pods["a1"].ping(pods["b3"].ip, count=3, wait=10), "a1(node1) -> b3(node3) via t-router"
    assert pods["b3"].ping(pods["a2"].ip, count=3, wait=10), "b3(node3) -> a2(node2) via t-router"
    assert pods["b3"].ping("10.70.2.1", wait=5), "b3 -> its router port"


def test_tcp_echo_across_nodes(net):
    """4 MiB through a TCP echo across nodes (routed): checksums and MTU right."""
    _, pods = net
    pods["b3"].spawn("echo", ["python3", "-c", ECHO_SERVER, pods["b3"].ip])
    out = pods["a1"].exec(["python3", "-c", ECHO_CLIENT, pods["b3"].ip], timeout=30)
    assert "echoed 4194304" in out.stdout


def test_full_mtu_frames_cross_nodes(net):
    """Pods get MTU underlay-100; a full-size unfragmented packet crosses Geneve."""
    sb, pods = net
    a1 = pods["a1"]
    assert a1.mtu == sb.underlay_mtu - names.POD_MTU_OVERHEAD
    size = a1.mtu - 28  # IPv4 + ICMP headers
    r = a1.exec(["ping", "-c1", "-w5", "-M", "do", "-s", str(size), pods["a2"].ip], check=False)
    assert r.returncode == 0, r.stdout + r.stderr


def test_iperf3_across_nodes(net):
    _, pods = net
    pods["a2"].spawn("iperf3", ["iperf3", "-s", "-1", "-B", pods["a2"].ip])
    r = None
    for _ in range(20):  # the server needs a moment to listen
        r = pods["a1"].exec(["iperf3", "-c", pods["a2"].ip, "-t", "1", "-J"], check=False,
                            timeout=20)
        if r.returncode == 0:
            break
        time.sleep(0.1)
    assert r.returncode == 0, r.stdout[-500:] + r.stderr
    bps = json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"]
    assert bps > 10e6, f"only {bps / 1e6:.1f} Mbit/s"


def test_nodes_reach_the_external_host(net):
    sb, _ = net
    for node in sb.nodes:
        for dst in (sb.external_ip, sb.external_remote_ip, sb.central_ip):
            r = node.exec(["ping", "-c1", "-w3", dst], check=False)
            assert r.returncode == 0, f"{node.name} -> {dst}: {r.stdout}"
