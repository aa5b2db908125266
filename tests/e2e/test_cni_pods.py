"""CNI plugin + node daemon end to end: real sandbox, real OVN, real packets.

Pods are created through `pacific.sandbox.cnipods` on pod-runner nodes (the
plugin binary run as containerd runs it, and its result kept); the allocation
comes from the FakeController in cni_fixtures (real NB rows, annotations through
the real kube-apiserver).  The pod runner's own restart safety is tested here
too, since this is the module that keeps pod runners."""
from __future__ import annotations

import concurrent.futures
import os
import subprocess
import time

import probes
import pytest

from cni_e2e_fixtures import FakeController
from controller_fixtures import wait_until
from pacific.node.attachment import host_ifname
from pacific import metrics as m
from pacific import names
from pacific.sandbox import cniruntime as runtime, cnipods as sandboxpods
from pacific.sandbox.cnipods import PodError
from pacific.kube import client as kclient
from pacific.sandbox import nodedaemons as launch

pytestmark = pytest.mark.e2e
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)


@pytest.fixture(scope="module")
def cluster(sandbox_factory):
    from pacific.sandbox import services
    from pacific.sandbox.k8s.sandbox import kubeconfig_path
    # the control plane and pod runners, but the FakeController instead of Pacific's.
    # Pod runners, not kubelets: these tests drive CNI verbs and read what the
    # plugin returns (the result, CHECK, a second DEL, GC, error codes), which a
    # kubelet neither lets a test ask for nor reports (containerd keeps the
    # result and folds the code into a message); kubelet nodes run the rest.
    sb = sandbox_factory(nodes=2, kubelet=False,
                         services=[services.kube_control_plane, services.pacific_credentials,
                                   services.pod_runners])
    api = kclient.load(kubeconfig_path(sb))
    ctl = FakeController(sb, api)
    launch.start_for_sandbox(sb)
    yield sb, api, ctl
    ctl.close()
    sb.down()


def ping(sb, ns, name, ip, count=3, wait=2) -> bool:
    """True if any of `count` echoes is answered.  Three by default: these checks
    say a pod is (still) reachable, and on a loaded two-core CI machine (the other
    worker churning hundreds of pods) one echo with 2 s to spare was lost twice in
    a row (stop 46).  The first-packet promise after ADD is checked on its own
    with count=1 (test_pods_on_two_nodes_ping_right_after_add); where a ping must
    fail, three unanswered echoes say it more strongly than one."""
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


def _conf(sb, node):
    p = launch.paths(sb.node(node))
    conflist = runtime.load_conflist(p.conflist)
    return runtime._plugin_conf(conflist, conflist["plugins"][0], None), [p.bin_dir]


def _att(pod, container_id=None, netns=None):
    return runtime.Attachment(container_id or pod.container_id,
                              pod.netns_path if netns is None else netns, "eth0",
                              runtime.k8s_args(pod.namespace, pod.name, pod.uid,
                                               container_id or pod.container_id))


def test_del_is_idempotent_and_survives_restart(cluster):
    sb, api, ctl = cluster
    pod = sandboxpods.add_pod(sb, "default", "del-a", "node2", api=api)
    conf, bins = _conf(sb, "node2")
    host = host_ifname(pod.container_id, "eth0")
    assert host in ovs_ports(sb, "node2")
    try:
        for netns in (pod.netns_path, pod.netns_path, ""):
            runtime.exec_plugin(bins, "pacific", "DEL", conf, _att(pod, netns=netns))
        runtime.exec_plugin(bins, "pacific", "DEL", conf, _att(pod, container_id="f" * 64))
        assert host not in ovs_ports(sb, "node2")
        assert host not in host_links(sb, "node2")
        # DEL after the daemon restarted (it keeps no memory but OVS)
        pod2 = sandboxpods.add_pod(sb, "default", "del-b", "node2", api=api)
        launch.restart(sb, "node2")
        runtime.exec_plugin(bins, "pacific", "DEL", conf, _att(pod2))
        assert host_ifname(pod2.container_id, "eth0") not in ovs_ports(sb, "node2")
    finally:
        sandboxpods.delete_pod(sb, "default", "del-a", api=api)
        sandboxpods.delete_pod(sb, "default", "del-b", api=api)


def test_check_reports_what_differs(cluster):
    sb, api, ctl = cluster
    pod = sandboxpods.add_pod(sb, "default", "check-a", "node1", api=api)
    conf, bins = _conf(sb, "node1")
    try:
        conf = dict(conf, prevResult=pod.result)
        runtime.exec_plugin(bins, "pacific", "CHECK", conf, _att(pod))  # all fine
        sandboxpods.exec_pod(sb, "default", "check-a", ["ip", "addr", "flush", "dev", "eth0"],
                             check=True)
        with pytest.raises(runtime.CniCallError) as e:
            runtime.exec_plugin(bins, "pacific", "CHECK", conf, _att(pod))
        assert e.value.code == 104 and f"lacks address {pod.ip}/16" in str(e.value)
        with pytest.raises(runtime.CniCallError) as e:
            runtime.exec_plugin(bins, "pacific", "CHECK", conf, _att(pod, container_id="a" * 64))
        assert e.value.code == 3
    finally:
        sandboxpods.delete_pod(sb, "default", "check-a", api=api)


def test_a_second_pacific_interface_of_a_pod_is_refused_and_eth0_keeps_working(cluster):
    """What a meta-plugin (Multus) does when Pacific is named twice: ADD again
    for the running container as net1.  Refused with a CNI error that says
    why; nothing of eth0 changes; DEL of net1 leaves eth0 alone."""
    sb, api, ctl = cluster
    pod = sandboxpods.add_pod(sb, "default", "twice", "node1", api=api)
    peer = sandboxpods.add_pod(sb, "default", "twice-peer", "node2", api=api)
    conf, bins = _conf(sb, "node1")
    net1 = runtime.Attachment(pod.container_id, pod.netns_path, "net1",
                              runtime.k8s_args(pod.namespace, pod.name, pod.uid, pod.container_id))
    try:
        with pytest.raises(runtime.CniCallError) as e:
            runtime.exec_plugin(bins, "pacific", "ADD", conf, net1)
        assert e.value.code == 7, e.value
        assert "already has its Pacific interface eth0" in str(e.value), e.value
        assert "second interface net1 is not supported" in str(e.value), e.value
        links = sandboxpods.exec_pod(sb, "default", "twice", ["ip", "-o", "link", "show"],
                                     capture_output=True, text=True).stdout
        assert "net1" not in links
        assert host_ifname(pod.container_id, "net1") not in ovs_ports(sb, "node1")
        runtime.exec_plugin(bins, "pacific", "DEL", conf, net1)     # the runtime cleans up
        assert host_ifname(pod.container_id, "eth0") in ovs_ports(sb, "node1")
        assert ping(sb, "default", "twice-peer", pod.ip)
    finally:
        for n in ("twice", "twice-peer"):
            sandboxpods.delete_pod(sb, "default", n, api=api)


def test_gc_removes_attachments_not_listed(cluster):
    sb, api, ctl = cluster
    keep = sandboxpods.add_pod(sb, "default", "gc-keep", "node1", api=api)
    drop = sandboxpods.add_pod(sb, "default", "gc-drop", "node1", api=api)
    peer = sandboxpods.add_pod(sb, "default", "gc-peer", "node2", api=api)
    conf, bins = _conf(sb, "node1")
    try:
        gc_conf = dict(conf, cniVersion="1.1.0", **{"cni.dev/valid-attachments": [
            {"containerID": keep.container_id, "ifname": "eth0"}]})
        runtime.exec_plugin(bins, "pacific", "GC", gc_conf, None)
        ports = ovs_ports(sb, "node1")
        assert host_ifname(keep.container_id, "eth0") in ports
        assert host_ifname(drop.container_id, "eth0") not in ports
        assert host_ifname(drop.container_id, "eth0") not in host_links(sb, "node1")
        assert ping(sb, "default", "gc-peer", keep.ip)
        assert not ping(sb, "default", "gc-peer", drop.ip, wait=1)
        status = dict(conf, cniVersion="1.1.0")
        runtime.exec_plugin(bins, "pacific", "STATUS", status, None)  # ready
    finally:
        for n in ("gc-keep", "gc-drop", "gc-peer"):
            sandboxpods.delete_pod(sb, "default", n, api=api)


def test_add_waits_for_allocation_and_reports_refusal(cluster):
    sb, api, ctl = cluster
    ctl.hold.update({"default/wait-a", "default/refused"})
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        fut = ex.submit(sandboxpods.add_pod, sb, "default", "wait-a", "node1", api=api)
        # the ADD reached node1's daemon and waits there (not yet answered)
        wait_until(lambda: m.value(probes.node_metrics(sb, "node1"),
                                   "pacific_cni_requests_in_flight", command="ADD") == 1,
                   30, what="node1 answering the ADD")
        assert not fut.done()  # blocked on the watch, not failed
        ctl.allocate(ctl.informer.wait_for("default/wait-a", lambda p: True, 10))
        pod = fut.result(timeout=30)
    try:
        assert pod.ip == ctl.allocated["default/wait-a"]
        with concurrent.futures.ThreadPoolExecutor(1) as ex:
            fut = ex.submit(sandboxpods.add_pod, sb, "default", "refused", "node1", api=api)
            ctl.informer.wait_for("default/refused", lambda p: True, 10)
            ctl.refuse("default", "refused", "subnet cni-test is full")
            with pytest.raises(PodError, match="code 101.*subnet cni-test is full"):
                # add_pod deletes the refused pod before it raises (up to 60 s
                # when the kubelet is slow to give the pod up)
                fut.result(timeout=90)
        assert sandboxpods.load(sb, "default", "refused") is None  # nothing left behind
        assert not os.path.exists(f"/run/netns/{sb.netns_prefix}pod-default-refused")
    finally:
        sandboxpods.delete_pod(sb, "default", "wait-a", api=api)


def test_no_allocation_is_try_again(cluster):
    sb, api, ctl = cluster
    ctl.hold.add("default/never")
    launch.restart(sb, "node2", extra=["--allocation-timeout", "1"])
    try:
        with pytest.raises(PodError, match="code 11: the controller has not allocated"):
            sandboxpods.add_pod(sb, "default", "never", "node2", api=api)
    finally:
        launch.restart(sb, "node2")


def test_management_port_routes_host_to_pods(cluster):
    sb, api, ctl = cluster
    ctl.add_router_and_join()
    join_ip = ctl.annotate_node("node1", 1)
    ctl.add_subnet_object()
    pod = sandboxpods.add_pod(sb, "default", "mgmt-target", "node2", api=api)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            routes = subprocess.run(["ip", "-n", sb.node("node1").netns, "route", "show", "dev",
                                     names.MGMT_PORT], capture_output=True, text=True).stdout
            if "10.77.0.0/16 via 100.64.0.1" in routes:
                break
            time.sleep(0.1)
        assert "10.77.0.0/16 via 100.64.0.1" in routes
        addrs = subprocess.run(["ip", "-n", sb.node("node1").netns, "addr", "show", "dev",
                                names.MGMT_PORT], capture_output=True, text=True).stdout
        assert f"{join_ip}/16" in addrs
        p = subprocess.run(["ip", "netns", "exec", sb.node("node1").netns, "ping", "-c", "3",
                            "-i", "0.2", "-W", "2", pod.ip], capture_output=True, text=True)
        assert " 0% packet loss" in p.stdout or ", 0% packet loss" in p.stdout, p.stdout
    finally:
        sandboxpods.delete_pod(sb, "default", "mgmt-target", api=api)


def test_del_while_the_daemon_is_down_succeeds_and_the_daemon_cleans_up(cluster):
    """containerd must be able to tear pods down while pacific-node is away:
    DEL removes the veth itself and succeeds; the daemon, when it starts,
    removes the OVS port left behind; ADD works again."""
    sb, api, ctl = cluster
    pod = sandboxpods.add_pod(sb, "default", "down-a", "node2", api=api)
    conf, bins = _conf(sb, "node2")
    host = host_ifname(pod.container_id, "eth0")
    assert host in ovs_ports(sb, "node2")
    launch.stop(sb, "node2")
    try:
        # run where the node's kubelet runs it: the node's host namespace
        runtime.exec_plugin(bins, "pacific", "DEL", conf, _att(pod),
                            run_in_netns=f"/run/netns/{sb.node('node2').netns}")   # no error
        assert host not in host_links(sb, "node2")
    finally:
        launch.start(sb, "node2", os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_UNDERLAY))
    assert host not in ovs_ports(sb, "node2")
    sandboxpods.delete_pod(sb, "default", "down-a", api=api)
    again = sandboxpods.add_pod(sb, "default", "down-b", "node2", api=api)
    try:
        assert host_ifname(again.container_id, "eth0") in ovs_ports(sb, "node2")
    finally:
        sandboxpods.delete_pod(sb, "default", "down-b", api=api)


def test_status_follows_ovn_controller_over_its_control_socket(cluster):
    """CNI STATUS says not ready (50, naming ovn-controller) while the node's
    ovn-controller is down, and ready again once it is back."""
    from pacific.sandbox import bringup
    sb, api, ctl = cluster
    conf, bins = _conf(sb, "node1")
    conf = dict(conf, cniVersion="1.1.0")
    status = lambda: runtime.exec_plugin(bins, "pacific", "STATUS", conf, None)  # noqa: E731
    status()
    sb.stop("node1/ovn-controller")
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                status()
            except runtime.CniCallError as e:
                assert e.code == 50 and "ovn-controller" in str(e), e
                break
            assert time.monotonic() < deadline, "STATUS still ready with ovn-controller down"
            time.sleep(0.1)
    finally:
        bringup.restart_node_daemon(sb, sb.node("node1"), "ovn-controller")
    deadline = time.monotonic() + 20
    while True:
        try:
            status()
            break
        except runtime.CniCallError:
            assert time.monotonic() < deadline, "STATUS not ready after ovn-controller came back"
            time.sleep(0.1)


def test_a_restarted_pod_runner_keeps_its_pods_and_finishes_deletions(cluster):
    """The runner's records survive it: after a kill -9 and a restart, its pods
    keep their network (no second ADD), and a pod deleted while it was down
    (grace period 0: the object goes at once) is torn down once it is back."""
    import signal
    from pacific.kube import resources as r
    from pacific.sandbox import netns as sbnetns
    from pacific.sandbox.k8s import sandbox as k8s
    sb, api, _ = cluster
    node = sb.node("node1")
    for name, where in (("keep", "node1"), ("gone", "node1"), ("peer", "node2")):
        sandboxpods.add_pod(sb, "rr", name, where, api=api)
    keep = sandboxpods.load(sb, "rr", "keep")
    gone_ns = sandboxpods.load(sb, "rr", "gone").netns
    os.kill(sb.daemon_pid(k8s.runner_tag(node)), signal.SIGKILL)
    r.delete(api, r.PODS, "gone", "rr")
    assert r.get(api, r.PODS, "gone", "rr") is None
    assert sbnetns.exists(gone_ns)                # nobody tore it down yet
    sb.stop(k8s.runner_tag(node))
    k8s.start_pod_runner(sb, node)
    # the runner deletes the namespace, then the record: done once both are gone
    wait_until(lambda: not sbnetns.exists(gone_ns) and
               sandboxpods.load(sb, "rr", "gone") is None, 30,
               what="the orphan's network and record removed")
    again = sandboxpods.load(sb, "rr", "keep")
    assert again.container_id == keep.container_id          # not plumbed twice
    assert ping(sb, "rr", "peer", keep.ip)
    for name in ("keep", "peer"):
        sandboxpods.delete_pod(sb, "rr", name, api=api)
