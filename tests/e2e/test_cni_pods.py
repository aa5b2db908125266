"""CNI plugin + node daemon end to end: real sandbox, real OVN, real packets.

Pods are created through `pacific.cni.sandboxpods` (the plugin binary run as
containerd runs it); the allocation comes from the FakeController in
cni_fixtures (real NB rows, annotations through the API emulator)."""
from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import time

import pytest

from cni_e2e_fixtures import FakeController
from pacific import names
from pacific.cni import runtime, sandboxpods
from pacific.cni.sandboxpods import PodError
from pacific.kube import client as kclient
from pacific.node import launch

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(sandbox_factory):
    from pacific.sandbox.apiserver import kubeconfig_path, start_for_sandbox
    sb = sandbox_factory(nodes=2)
    start_for_sandbox(sb)
    api = kclient.load(kubeconfig_path(sb))
    ctl = FakeController(sb, api)
    launch.start_for_sandbox(sb)
    yield sb, api, ctl
    ctl.close()
    sb.down()


def ping(sb, ns, name, ip, count=1, wait=2) -> bool:
    p = sandboxpods.exec_pod(sb, ns, name, ["ping", "-c", str(count), "-W", str(wait), "-i",
                                            "0.2", ip], capture_output=True)
    return p.returncode == 0


def ovs_ports(sb, node) -> set[str]:
    out = sb.node(node).vsctl("list-ports", names.INTEGRATION_BRIDGE)
    return set(out.split())


def host_links(sb, node) -> str:
    return subprocess.run(["ip", "-n", sb.node(node).netns, "-o", "link", "show"],
                          capture_output=True, text=True, check=True).stdout


def test_pods_on_two_nodes_ping_right_after_add(cluster):
    sb, api, ctl = cluster
    a = sandboxpods.add_pod(sb, "default", "ping-a", "node1", api=api)
    b = sandboxpods.add_pod(sb, "default", "ping-b", "node2", api=api)
    try:
        assert a.result["cniVersion"] == "1.0.0"
        assert a.result["interfaces"][1]["mac"] and a.result["interfaces"][1]["sandbox"]
        assert a.ip == ctl.allocated["default/ping-a"]
        # the very first packet after ADD returned must pass (-c1, no retry)
        assert ping(sb, "default", "ping-b", a.ip, count=1, wait=2)
        assert ping(sb, "default", "ping-a", b.ip, count=1, wait=2)
        mtu = sandboxpods.exec_pod(sb, "default", "ping-a", ["cat", "/sys/class/net/eth0/mtu"],
                                   capture_output=True, text=True).stdout.strip()
        assert int(mtu) == sb.node("node1").mtu
        # TCP works only with tx checksum offload off in the pod (userspace datapath)
        feats = sandboxpods.exec_pod(sb, "default", "ping-a", ["ethtool", "-k", "eth0"],
                                     capture_output=True, text=True).stdout
        assert "tx-checksumming: off" in feats
    finally:
        sandboxpods.delete_pod(sb, "default", "ping-a", api=api)
        sandboxpods.delete_pod(sb, "default", "ping-b", api=api)
    assert not any(p.endswith("_h") for p in ovs_ports(sb, "node1") | ovs_ports(sb, "node2"))
    assert "_h@" not in host_links(sb, "node1") + host_links(sb, "node2")


def test_twenty_concurrent_adds_on_one_node(cluster):
    sb, api, ctl = cluster
    podnames = [f"burst-{i}" for i in range(20)]
    with concurrent.futures.ThreadPoolExecutor(20) as ex:
        futs = {n: ex.submit(sandboxpods.add_pod, sb, "burst", n, "node1", api=api)
                for n in podnames}
        pods = {n: f.result() for n, f in futs.items()}
    try:
        assert len({p.ip for p in pods.values()}) == 20
        peer = sandboxpods.add_pod(sb, "burst", "peer", "node2", api=api)
        for n in ("burst-0", "burst-19"):
            assert ping(sb, "burst", "peer", pods[n].ip)
    finally:
        with concurrent.futures.ThreadPoolExecutor(10) as ex:
            list(ex.map(lambda n: sandboxpods.delete_pod(sb, "burst", n, api=api),
                        podnames + ["peer"]))
    assert not any(p.endswith("_h") for p in ovs_ports(sb, "node1"))


def test_daemon_kill9_restart_keeps_pods_and_serves_next_add(cluster):
    sb, api, ctl = cluster
    a = sandboxpods.add_pod(sb, "default", "keep-a", "node1", api=api)
    b = sandboxpods.add_pod(sb, "default", "keep-b", "node2", api=api)
    try:
        launch.stop(sb, "node1", kill=True)
        assert ping(sb, "default", "keep-b", a.ip)  # no daemon on node1: still connected
        launch.start(sb, "node1", os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_UNDERLAY))
        assert ping(sb, "default", "keep-b", a.ip)
        c = sandboxpods.add_pod(sb, "default", "keep-c", "node1", api=api)
        assert ping(sb, "default", "keep-c", b.ip)
        assert ping(sb, "default", "keep-a", c.ip)
    finally:
        for n in ("keep-a", "keep-b", "keep-c"):
            sandboxpods.delete_pod(sb, "default", n, api=api)
