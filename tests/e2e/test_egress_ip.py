"""EgressIP with real packets: the pods an administrator's EgressIP selects (on
every node) leave the cluster with its addresses, TCP and UDP, each address
held by one of the nodes labelled pacific.io/egress-assignable (two addresses:
two nodes); a pod outside the selector and traffic inside the cluster are
untouched; bad addresses are refused in status with a reason; the holder's
link cut, another assignable node takes the address over within a second and
the old holder back does not take it back."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import probes
from controller_fixtures import wait_until
from gateway_fixtures import (OUTAGE_BOUND, bfd_settled, crash_free, cut_link, failover_sample,
                              priorities, remove_gateway_subnet, restore_link)
from pacific import contract, egressip, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.node import bfd
from pacific.sandbox import bringup, cnipods

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
MEASURES_TIME = True   # runs last on its worker (tests/conftest.py)
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
NS, OTHER, SUBNET, CIDR = "eip", "eip-other", "eip", "10.68.0.0/24"
OUT_PORT, POD_PORT = 7484, 7485
EIP_A, EIP_B = "192.168.77.150", "192.168.77.151"


def ask(sb, netns, ip, port, proto="tcp", timeout=1.0):
    return probes.answer(sb, netns, proto, ip, port, timeout)


def seen_outside(sb, netns, proto="tcp"):
    # UDP to the outside host's underlay address: its echo server answers UDP
    # from the address the route picks, which must be the one asked
    dest = sb.external_remote_ip if proto == "tcp" else sb.external_ip
    got = ask(sb, netns, dest, OUT_PORT, proto)
    return got.split()[-1] if got else None


def egress_ip(name, ips, ns_labels, pod_labels=None):
    spec = {"egressIPs": ips, "namespaceSelector": {"matchLabels": ns_labels}}
    if pod_labels:
        spec["podSelector"] = {"matchLabels": pod_labels}
    return {"apiVersion": names.API_VERSION, "kind": "EgressIP", "metadata": {"name": name},
            "spec": spec}


def label(api, node, value):
    r.patch_merge(api, r.NODES, node, {"metadata": {"labels": {
        names.LABEL_EGRESS_ASSIGNABLE: value}}})


@pytest.fixture(scope="module")
def env(sandbox_factory):
    # a sandbox of its own: the failover cuts a link and is measured against BFD
    sb = sandbox_factory(nodes=3, services=None)
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    for node in ("node1", "node2"):
        label(api, node, "")
    r.create(api, r.NAMESPACES, {"metadata": {"name": NS, "labels": {"team": "eip"}}})
    r.create(api, r.NAMESPACES, {"metadata": {"name": OTHER}})
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": SUBNET},
                              "spec": {"cidrBlock": CIDR, "namespaces": [NS, OTHER],
                                       "natOutgoing": True}})
    pods = {}
    for ns, name, node, app in ((NS, "e3", "node3", "web"), (NS, "e1", "node1", "web"),
                                (NS, "db", "node3", "db"), (OTHER, "o3", "node3", "web")):
        pods[name] = cnipods.add_pod(sb, ns, name, node, labels={"app": app}, api=api).netns
        cnipods.detach_pod(sb, ns, name, [sys.executable, NETCHECK, "serve", str(POD_PORT), name])
    server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable, NETCHECK,
                               "serve", str(OUT_PORT), "outside"], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "ready"
    r.create(api, r.EGRESSIPS, egress_ip("web", [EIP_A, EIP_B], {"team": "eip"}, {"app": "web"}))
    yield sb, api, pods
    if os.environ.get("PACIFIC_KEEP_SANDBOXES"):     # debugging: inspect after a failure
        return
    server.kill()
    server.wait()
    try:
        for name in ("web", "bad"):
            r.delete(api, r.EGRESSIPS, name)
        for ns in (NS, OTHER):
            r.delete(api, r.NAMESPACES, ns)
        for node in ("node1", "node2"):
            label(api, node, None)
        remove_gateway_subnet(sb, api, SUBNET)
    finally:
        sb.down()


def holders(sb, ip) -> list[str]:
    return [n.name for n in sb.nodes
            if f" {ip}/32" in sb.exec(n.netns, ["ip", "-4", "-o", "addr", "show"],
                                      check=False).stdout]


def status(api, name="web") -> dict:
    return (r.get(api, r.EGRESSIPS, name) or {}).get("status") or {}


def expected_address(pod_ip: str) -> str:
    """Which of the two addresses pacific.egressip spreads `pod_ip` to."""
    d = egressip.decide([egress_ip("web", [EIP_A, EIP_B], {"t": "x"})], [("n", {}, pod_ip)],
                        {"n": {"t": "x"}}, ["192.168.77.0/24"])
    return next(g.ip for g in d.grants.values() if g.sources)


def cnipods_ip(api, ns, name) -> str:
    return contract.PodRecord.of(r.get(api, r.PODS, name, ns)).ip


def test_selected_pods_leave_with_their_egress_ip_tcp_and_udp_on_every_node(env):
    sb, api, pods = env
    for name in ("e3", "e1"):
        want = expected_address(cnipods_ip(api, NS, name))
        for proto in ("tcp", "udp"):
            wait_until(lambda n=name, p=proto: seen_outside(sb, pods[n], p) == want, 30,
                       interval=0.3, what=f"{name} leaving as {want} over {proto}")
    # the two addresses start on different nodes, each held by exactly one
    wait_until(lambda: sorted(h for ip in (EIP_A, EIP_B) for h in holders(sb, ip)) ==
               ["node1", "node2"], 20, what="each address held by its own node")
    # the status follows the holders (written after the controller's SB replica saw them:
    # a status read at once may still name where an address was a moment before)
    def agrees():
        st = status(api)
        held = {ip: holders(sb, ip) for ip in (EIP_A, EIP_B)}
        said = {i["egressIP"]: i.get("node") for i in st.get("items", [])}
        return st if all(len(h) == 1 for h in held.values()) and said == {
            ip: h[0] for ip, h in held.items()} else None
    st = wait_until(agrees, 20, what="status names both holders as SB does")
    assert sum(i["pods"] for i in st["items"]) == 2 and st["refused"] == []
    # every chassis applied the EgressIP's rows (the nb_cfg/hv_cfg barrier)
    st = wait_until(lambda: (lambda s: s if s.get("enforced") == "True" else None)(status(api)),
                    20, what="status.enforced True")
    assert "every chassis applied it" in st["enforcedMessage"]


def test_unselected_pods_and_cluster_traffic_are_untouched(env):
    sb, api, pods = env
    node3 = sb.node("node3").underlay_ip
    wait_until(lambda: seen_outside(sb, pods["e3"]) in (EIP_A, EIP_B), 30, what="e3 selected")
    assert seen_outside(sb, pods["db"]) == node3            # podSelector: not selected
    assert seen_outside(sb, pods["o3"]) == node3            # namespace not selected
    # pod to pod: the server sees the pod's own address
    e3_ip, o3_ip = cnipods_ip(api, NS, "e3"), cnipods_ip(api, OTHER, "o3")
    got = ask(sb, pods["e3"], cnipods_ip(api, NS, "e1"), POD_PORT)
    assert got is not None and got.split()[-1] == e3_ip, got
    assert o3_ip != e3_ip


def test_bad_addresses_are_refused_in_status_with_an_event(env):
    sb, api, pods = env
    node1 = sb.node("node1").underlay_ip
    r.create(api, r.EGRESSIPS, egress_ip("bad", [node1, "203.0.113.77", EIP_A, "192.168.77.152"],
                                         {"team": "nobody"}))
    st = wait_until(lambda: (lambda s: s if s.get("refused") else None)(status(api, "bad")), 30,
                    what="the refusals in status")
    why = {x["egressIP"]: x["reason"] for x in st["refused"]}
    assert "infrastructure" in why[node1], why
    assert "--egress-ip-cidrs" in why["203.0.113.77"], why
    assert "older EgressIP web" in why[EIP_A], why
    assert [i["egressIP"] for i in st["items"]] == ["192.168.77.152"]

    def event():
        items, _ = r.list_(api, r.EVENTS, "default")
        return any(e["involvedObject"]["name"] == "bad" and e["reason"] == "EgressIPProblem"
                   for e in items)
    wait_until(event, 20, what="an Event on the EgressIP")
    r.delete(api, r.EGRESSIPS, "bad")
    wait_until(lambda: not holders(sb, "192.168.77.152"), 20, what="the address given up")


def failover(sb, netns, want, fault, faulted: list):
    """The outage sample of `fault(holder)` once BFD is settled and one node
    holds `want` (appended to `faulted`)."""
    wait_until(lambda: bfd_settled(sb), 30, what="BFD up both ways between every pair")
    wait_until(lambda: seen_outside(sb, netns) == want and len(holders(sb, want)) == 1,
               30, what=f"{want} held by one node")
    faulted.append(holders(sb, want)[0])
    return crash_free(failover_sample(sb, netns, sb.external_remote_ip, OUT_PORT,
                                      lambda: fault(faulted[-1]),
                                      old=lambda who: who.endswith(want),
                                      new=lambda who: who.endswith(want)))


def test_the_holder_fails_over_within_a_second_and_does_not_flap_back(env):
    sb, api, pods = env
    netns = pods["e3"]
    want = expected_address(cnipods_ip(api, NS, "e3"))
    cut: list = []
    try:
        s = failover(sb, netns, want, lambda node: cut_link(sb, node), cut)
        old = cut[-1]
        new = "node2" if old == "node1" else "node1"
        print(f"EgressIP failover outage: {s.outage * 1000:.0f} ms")
        assert s.outage <= OUTAGE_BOUND, s.report(sb)
        wait_until(lambda: new in holders(sb, want), 10, what="the new holder")
        group = names.egress_switch_name(egressip.gateway_name(f"web/{want}"))
        wait_until(lambda: (lambda p: p.get(new, 0) > p.get(old, 0))(priorities(sb, group)), 20,
                   what=f"{new} ranked first")
    finally:
        if cut:
            restore_link(sb, cut[-1])
    # the old holder back: it gives the address up once it reads SB again, and
    # while its BFD sessions come up one by one (its ovn-controller claims every
    # group in between: decision 0040) the address never leaves the new holder
    # nor comes back to it
    samples = rejoin_samples(sb, old, lambda: holders(sb, want))
    assert all(new in got for got in samples), samples
    left = next(i for i, got in enumerate(samples) if old not in got)
    assert all(got == [new] for got in samples[left:]), samples
    wait_until(lambda: seen_outside(sb, netns) == want, 20, what=f"still leaving as {want}")
    assert holders(sb, want) == [new]


def rejoin_samples(sb, node: str, sample) -> list:
    """`sample()` again and again from now until `node`'s ovn-controller is
    connected to SB, BFD is up between every pair and BFD_SETTLE + 1 s passed."""
    ctl = ["ovs-appctl", "-t", sb.node(node).controller_ctl, "connection-status"]
    samples, since, deadline = [], None, time.monotonic() + 60
    while since is None or time.monotonic() - since < bfd.SETTLE + 1:
        samples.append(sample())
        if since is None and bfd_settled(sb) and \
                subprocess.run(ctl, capture_output=True, text=True).stdout.strip() == "connected":
            since = time.monotonic()
        assert time.monotonic() < deadline, f"{node} not back within 60 s: {samples[-5:]}"
    return samples


def test_a_killed_ovs_vswitchd_moves_the_address_within_a_second(env):
    """The holder's ovs-vswitchd killed and kept down (a crash without a
    supervisor): another assignable node holds the address and the pods leave
    with it again within the bound."""
    sb, api, pods = env
    netns = pods["e3"]
    want = expected_address(cnipods_ip(api, NS, "e3"))
    killed: list = []
    try:
        s = failover(sb, netns, want, lambda node: sb.stop(f"{node}/ovs-vswitchd"), killed)
        print(f"EgressIP failover outage (ovs-vswitchd killed): {s.outage * 1000:.0f} ms")
        assert s.outage <= OUTAGE_BOUND, s.report(sb)
        other = "node2" if killed[-1] == "node1" else "node1"
        wait_until(lambda: other in holders(sb, want), 10, what="the new holder")
        # still so while the killed node stays down
        assert seen_outside(sb, netns) == want
    finally:
        if killed:
            bringup.restart_node_daemon(sb, sb.node(killed[-1]), "ovs-vswitchd")
