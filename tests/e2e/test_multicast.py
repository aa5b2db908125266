"""Multicast per namespace with real packets (docs/multicast.md): IGMP snooping,
the querier, the relay between Subnets, the gate of enabled namespaces, tenant
isolation and NetworkPolicy on groups, switched on and off at run time.

Namespaces (tenant `mct` unless said): `mca` and `mcb` enabled (`mcb` on its
own Subnet), `mcoff` not enabled, `mcx` enabled but another tenant.  Each test
counts what reached each pod's eth0 at all (`Receiver.wire`: a packet socket,
joined or not), so "receives nothing" means the network delivered nothing."""
from __future__ import annotations

import contextlib

import pytest

import mcast_fixtures as mf
from controller_fixtures import wait_until
from pacific import contract, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods
from pacific.sandbox.k8s import sandbox as k8s

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
GROUP, PORT = "239.7.7.7", 5007
SUBNET_B = "10.71.0.0/24"
PODS = [("mca", "a1", "node1"), ("mca", "a2", "node1"), ("mca", "a3", "node2"),
        ("mca", "a4", "node3"), ("mcb", "b1", "node2"), ("mcoff", "o1", "node1"),
        ("mcx", "x1", "node2")]


def enable(api, ns: str, value: str | None = "true") -> None:
    r.patch_merge(api, r.NAMESPACES, ns, {"metadata": {"annotations": {names.ANN_MULTICAST: value}}})


@pytest.fixture(scope="module")
def env(sandbox):
    sb = sandbox
    api = client.load(k8s.kubeconfig_path(sb))
    for ns, tenant in (("mca", "mct"), ("mcb", "mct"), ("mcoff", "mct"), ("mcx", "mcx")):
        r.create(api, r.NAMESPACES, {"metadata": {"name": ns, "labels": {names.LABEL_TENANT: tenant},
                                                  "annotations": {names.ANN_MULTICAST: "true"}
                                                  if ns != "mcoff" else {}}})
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": "mcb"},
                              "spec": {"cidrBlock": SUBNET_B, "namespaces": ["mcb"]}})
    wait_until(lambda: ((r.get(api, r.SUBNETS, "mcb") or {}).get("status") or {}).get("cidrBlock"),
               30, what="Subnet mcb applied")
    for ns, name, node in PODS:
        cnipods.add_pod(sb, ns, name, node, api=api)
    netns = {name: cnipods.load(sb, ns, name).netns for ns, name, _ in PODS}
    ips = {name: contract.own_record(r.get(api, r.PODS, name, ns)).ip for ns, name, _ in PODS}
    assert ips["b1"].startswith(SUBNET_B[:8])
    yield sb, api, netns, ips
    for ns, name, _ in PODS:
        cnipods.delete_pod(sb, ns, name, api=api)
    r.delete(api, r.SUBNETS, "mcb")
    for ns in ("mca", "mcb", "mcoff", "mcx"):
        r.delete(api, r.NAMESPACES, ns)


@contextlib.contextmanager
def receivers(sb, netns, *specs):
    """Receiver per (pod, options) spec: "a2" joined, ("a4", {"join": False}) not."""
    rxs = []
    try:
        for spec in specs:
            name, opts = (spec, {}) if isinstance(spec, str) else spec
            rxs.append(mf.Receiver(sb, netns[name], GROUP, PORT, name=name, **opts))
        yield rxs
    finally:
        for rx in rxs:
            rx.close()


def test_a_group_reaches_joined_pods_of_enabled_namespaces_of_the_tenant_only(env):
    """Same node, across nodes and across Subnets (the router's relay); not a
    pod that did not join, not a disabled namespace, not another tenant even
    when it joined the same group."""
    sb, api, netns, ips = env
    with receivers(sb, netns, "a2", "a3", "b1", ("a4", {"join": False}), "o1", "x1") as (
            a2, a3, b1, a4, o1, x1):
        tag = mf.deliver(sb, netns["a1"], GROUP, PORT, [a2, a3, b1])
        assert len(a2.got(tag, ips["a1"])) >= 19 and len(b1.got(tag, ips["a1"])) >= 19
        assert not a4.wire(tag), "a pod that did not join received the group"
        assert not o1.wire(tag), "a pod of a namespace without multicast received it"
        assert not x1.wire(tag), "another tenant's pod received the group"


def test_a_disabled_namespace_and_another_tenant_send_to_nobody(env):
    sb, api, netns, ips = env
    with receivers(sb, netns, "a2", "a3", "b1") as rxs:
        for sender in ("o1", "x1"):        # a1's datagrams to them after, the control
            tag = mf.deliver(sb, netns[sender], GROUP, PORT, [], control=(netns["a1"], rxs))
            assert not any(rx.wire(tag) for rx in rxs), f"{sender}'s datagrams were delivered"
        tag = mf.deliver(sb, netns["a1"], GROUP, PORT, rxs)      # the group itself still works


def test_igmpv2_and_v3_leave_stops_delivery(env):
    sb, api, netns, ips = env
    # b1 stays joined: what reaches it after is the control
    with receivers(sb, netns, ("a2", {"igmp": 2}), "a3", "b1") as (a2, a3, b1):
        mf.deliver(sb, netns["a1"], GROUP, PORT, [a2, a3])
        a2.leave()
        a3.leave()

        def stopped():
            return mf.none_reach(sb, netns["a1"], GROUP, PORT, [a2, a3],
                                 control=(netns["a1"], [b1]))
        # a leave takes effect on every chassis; then nothing comes
        wait_until(lambda: stopped() and stopped(), 10, interval=0.1, what="leaves in effect")
        tag = mf.deliver(sb, netns["a1"], GROUP, PORT, [b1])
        assert not a2.wire(tag) and not a3.wire(tag)
        a2.join()                          # joining again delivers again
        mf.deliver(sb, netns["a1"], GROUP, PORT, [a2])


def test_switching_off_stops_delivery_and_on_again_restarts_it_without_restarting_pods(env):
    sb, api, netns, ips = env
    with receivers(sb, netns, "a3", "b1") as (a3, b1):
        mf.deliver(sb, netns["a1"], GROUP, PORT, [a3, b1])
        enable(api, "mca", None)
        try:
            def off():
                return mf.none_reach(sb, netns["a1"], GROUP, PORT, [a3, b1])
            wait_until(lambda: off() and off(), 15, interval=0.1, what="mca switched off")
            # nor does a disabled namespace receive from an enabled one (b1 -> a3)
            tag = mf.deliver(sb, netns["b1"], GROUP, PORT, [])
            assert not a3.wire(tag)
        finally:
            enable(api, "mca")
        # the memberships are still known (they age out only after two queries):
        # delivery comes back without a new join
        mf.deliver(sb, netns["a1"], GROUP, PORT, [a3, b1])


def test_networkpolicy_applies_to_groups_and_leaves_joins_alone(env):
    """A pod isolated for ingress receives a group only from senders a rule
    admits; its joins and the querier's queries still pass."""
    sb, api, netns, ips = env
    deny = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "mc-deny", "namespace": "mca"},
            "spec": {"podSelector": {"matchLabels": {}}, "policyTypes": ["Ingress"]}}
    allow = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": "mc-from-b", "namespace": "mca"},
             "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{
                 "from": [{"namespaceSelector": {"matchLabels": {names.LABEL_TENANT: "mct"}},
                           "podSelector": {}}],
                 "ports": [{"protocol": "UDP", "port": PORT}]}]}}
    with receivers(sb, netns, "a3") as (a3,):
        r.create(api, r.NETWORKPOLICIES, deny, "mca")
        try:
            def denied():
                return mf.none_reach(sb, netns["b1"], GROUP, PORT, [a3])
            wait_until(lambda: denied() and denied(), 15, interval=0.1, what="deny-all in effect")
            a3.leave()
            a3.join()          # a join under the policy still registers
            r.create(api, r.NETWORKPOLICIES, allow, "mca")
            mf.deliver(sb, netns["b1"], GROUP, PORT, [a3])
        finally:
            for p in ("mc-from-b", "mc-deny"):
                r.delete(api, r.NETWORKPOLICIES, p, "mca")


def test_an_invalid_annotation_keeps_multicast_off_and_says_so(env):
    sb, api, netns, ips = env
    enable(api, "mcoff", "yes")
    try:
        def event():
            return [e for e in r.list_(api, r.EVENTS, "default")[0]
                    if e.get("reason") == "InvalidMulticast"
                    and (e.get("involvedObject") or {}).get("name") == "mcoff"]
        (ev,) = wait_until(event, 30, what="InvalidMulticast event")
        assert "'yes'" in ev["message"] and "stays off" in ev["message"]
        with receivers(sb, netns, "a2") as (a2,):
            tag = mf.deliver(sb, netns["o1"], GROUP, PORT, [], control=(netns["a1"], [a2]))
            assert not a2.wire(tag)
    finally:
        enable(api, "mcoff", None)


def _leader_metrics(sb):
    from pacific import metrics as m
    from pacific.sandbox import controllers
    holder = controllers.wait_for_leader(k8s.kubeconfig_path(sb))
    i = next(i for i in (1, 2) if holder == f"{sb.name}-{controllers.controller_tag(i)}")
    return m.scrape(controllers.metrics_url(sb, i))


def _cli(sb, *args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "pacific.cli.main", *args, "--sandbox", sb.name],
                          capture_output=True, text=True, timeout=120)


def test_trace_diagnose_and_metrics_name_members_and_why_others_are_not(env):
    from pacific import metrics as m
    sb, api, netns, ips = env
    with receivers(sb, netns, "a2", "b1", "x1") as (a2, b1, x1):
        mf.deliver(sb, netns["a1"], GROUP, PORT, [a2, b1])  # joins are in SB once traced below

        def traced():
            cp = _cli(sb, "trace", "mca/a1", GROUP, "--udp", str(PORT), "--receiver", "mca/a4",
                      "--receiver", "mcoff/o1")
            return cp if "delivered: pod mca/a2" in cp.stdout and \
                "delivered: pod mcb/b1" in cp.stdout else None
        cp = wait_until(traced, 30, interval=0.5, what="trace names both members")
        out = cp.stdout
        assert cp.returncode == 0 and out.startswith("OK: delivered to 2 members"), out
        # another tenant joined the group: its copy is dropped by isolation, and said so
        assert "not delivered: pod mcx/x1" in out and "tenant isolation" in out, out
        assert "not reached: pod mca/a4" in out and "has not joined" in out, out
        assert "not reached: pod mcoff/o1" in out and "has not enabled multicast" in out, out
        cp = _cli(sb, "trace", "mcoff/o1", GROUP, "--udp", str(PORT))
        assert cp.returncode == 1 and "multicast gate" in cp.stdout and \
            "sender's namespace has not enabled" in cp.stdout, cp.stdout + cp.stderr
        cp = _cli(sb, "trace", "mca/a1", GROUP)
        assert cp.returncode == 2 and "--udp PORT" in cp.stderr
        cp = _cli(sb, "diagnose", "--no-sync")
        line = next(ln for ln in cp.stdout.splitlines()
                    if f"Subnet mcb, group {GROUP}" in ln)
        assert "pod:mcb/b1" in line, cp.stdout

        def counted():
            c = _leader_metrics(sb)
            return m.value(c, "pacific_multicast_groups", subnet="mcb") >= 1 and \
                m.value(c, "pacific_multicast_group_members", subnet="mcb") >= 1
        wait_until(counted, 20, interval=0.5, what="multicast metrics for Subnet mcb")
