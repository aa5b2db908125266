"""Dual-stack Subnets (issue 27, in a `--dual-stack` sandbox, whose join
network, service CIDR and default Subnet are dual-stack too) with real
packets: pods get an address of each family and talk over both, across
nodes and Subnets; tenant isolation and NetworkPolicy's isolation hold for
IPv6, also for link-local sources; a refused family is named."""
from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import subprocess
import sys

import pytest

import attack_fixtures as af
from controller_fixtures import subnet_ready, wait_until
from pacific import contract, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods as sandboxpods
from pacific.tools import flows

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
# a private sandbox whose one rate test bounds a 2 Mbit/s limit from above
# (and 0.5 below): it runs beside the datapath worker (tests/conftest.py)
BESIDE_THE_DATAPATH = True
ICMP6 = os.path.join(os.path.dirname(__file__), "icmp6check.py")
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
SUBNETS = {"ds-a": ("10.78.0.0/24,fd00:78::/64", ["dsa"]),
           "ds-b": ("10.79.0.0/24,fd00:79::/64", ["dsb"]),
           # one switch, two tenants (and a global namespace): link-local reaches them
           "ds-s": ("10.80.0.0/24,fd00:80::/64", ["dsc", "dsd", "dsg"])}
PODS = [("dsa", "a1", "node1"), ("dsa", "a2", "node2"), ("dsa", "a3", "node1"),
        ("dsb", "b1", "node2"), ("dsc", "c1", "node1"), ("dsd", "d1", "node1"),
        ("dsg", "g1", "node1")]
LABELS = {"a2": {"role": "server"}, "a3": {"role": "client"}}


@pytest.fixture(scope="module")
def env(sandbox_factory):
    sb = sandbox_factory(nodes=2, services=None, dual_stack=True)
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    r.create(api, r.NAMESPACES, {"metadata": {"name": "dsg",
                                              "labels": {names.LABEL_TENANT: "global"}}})
    for name, (cidr, nss) in SUBNETS.items():
        r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                  "metadata": {"name": name},
                                  "spec": {"cidrBlock": cidr, "namespaces": nss}})
        wait_until(lambda n=name: subnet_ready(api, n), 60, what=f"Subnet {name} Ready")
    recs = {}
    for ns, name, node in PODS:
        sandboxpods.add_pod(sb, ns, name, node, api=api, labels=LABELS.get(name))
        recs[name] = contract.own_record(r.get(api, r.PODS, name, ns))
    yield sb, api, recs


def ns_of(name: str) -> str:
    return next(ns for ns, n, _ in PODS if n == name)


def run(sb, pod: str, *argv):
    return sandboxpods.exec_pod(sb, ns_of(pod), pod, list(argv), capture_output=True, text=True)


def ping(sb, pod: str, ip: str, *extra) -> bool:
    flag = "-6" if ":" in ip else "-4"
    return run(sb, pod, "ping", flag, "-c1", "-W1", *extra, ip).returncode == 0


def pings(sb, pod: str, ip: str) -> bool:
    """Any of three echoes answered (the first may wait for neighbour discovery)."""
    flag = "-6" if ":" in ip else "-4"
    return run(sb, pod, "ping", flag, "-c3", "-i0.2", "-W1", ip).returncode == 0


def v6(rec) -> str:
    return rec.ips[1]


def link_local(sb, pod: str) -> str:
    out = run(sb, pod, "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "link").stdout
    m = re.search(r"inet6 (fe80::[0-9a-f:]+)/64", out)
    assert m, out
    return m.group(1)


def test_pods_get_an_address_of_each_family_and_talk_over_both(env):
    sb, api, recs = env
    a1, a2, a3 = recs["a1"], recs["a2"], recs["a3"]
    assert a1.cidrs == ("10.78.0.0/24", "fd00:78::/64")
    assert a1.gateways == ("10.78.0.1", "fd00:78::1")
    assert a1.ip.startswith("10.78.0.") and v6(a1).startswith("fd00:78::")
    addrs = run(sb, "a1", "ip", "-o", "addr", "show", "dev", "eth0").stdout
    assert f"{v6(a1)}/64" in addrs and f"{a1.ip}/24" in addrs
    assert "tentative" not in addrs      # usable at once: no duplicate address detection
    routes = run(sb, "a1", "ip", "-6", "route", "show", "default").stdout
    assert "via fd00:78::1 dev eth0" in routes, routes
    st = r.get(api, r.PODS, "a1", "dsa")["status"]        # Kubernetes keeps both families
    assert [p["ip"] for p in st["podIPs"]] == list(a1.ips) and st["podIP"] == a1.ip
    ip_obj = r.get(api, r.IPS, "a1.dsa")
    assert ip_obj["spec"]["ipAddresses"] == list(a1.ips)
    st = r.get(api, r.SUBNETS, "ds-a")["status"]
    assert st["cidrBlock"] == "10.78.0.0/24,fd00:78::/64"
    assert st["v4availableIPs"] == 256 - 3 - 3 and st["v6availableIPs"] > 2**63
    for dst in (a2, a3):                     # across nodes, on one node
        assert pings(sb, "a1", v6(dst)), f"a1 -> {v6(dst)}"
        assert ping(sb, "a1", dst.ip)
    assert pings(sb, "a1", "fd00:78::1")      # the cluster router's port


def test_the_default_subnet_is_dual_stack_and_its_pods_talk_over_ipv6(env):
    sb, api, recs = env
    st = r.get(api, r.SUBNETS, names.DEFAULT_SUBNET)["status"]
    assert st["cidrBlock"] == f"{names.DEFAULT_CIDR},{names.SANDBOX_DEFAULT_CIDR6}"
    try:
        for name, node in (("p1", "node1"), ("p2", "node2")):
            sandboxpods.add_pod(sb, "dsdef", name, node, api=api)
        p1, p2 = (contract.own_record(r.get(api, r.PODS, n, "dsdef")) for n in ("p1", "p2"))
        assert p1.subnet == names.DEFAULT_SUBNET and p1.cidrs[1] == names.SANDBOX_DEFAULT_CIDR6
        assert sandboxpods.exec_pod(sb, "dsdef", "p1", ["ping", "-6", "-c3", "-i0.2", "-W1",
                                                        p2.ips[1]], capture_output=True).returncode == 0
    finally:
        for name in ("p1", "p2"):
            sandboxpods.delete_pod(sb, "dsdef", name, api=api)


def test_a_pod_asks_for_an_address_of_each_family(env):
    sb, api, _ = env
    pod = sandboxpods.add_pod(sb, "dsa", "fixed", "node2", api=api, annotations={
        names.ANN_IP_ADDRESS: "10.78.0.77,fd00:78::77"})
    try:
        rec = contract.own_record(r.get(api, r.PODS, "fixed", "dsa"))
        assert rec.ips == ("10.78.0.77", "fd00:78::77")
        assert pod is not None
    finally:
        sandboxpods.delete_pod(sb, "dsa", "fixed", api=api)


def test_routed_ipv6_between_subnets_stops_at_the_tenant_boundary(env):
    sb, api, recs = env
    assert not ping(sb, "a1", v6(recs["b1"])) and not ping(sb, "b1", v6(recs["a1"]))
    assert not ping(sb, "a1", recs["b1"].ip)
    r.patch_merge(api, r.NAMESPACES, "dsb", {"metadata": {"labels": {names.LABEL_TENANT: "ab"}}})
    r.patch_merge(api, r.NAMESPACES, "dsa", {"metadata": {"labels": {names.LABEL_TENANT: "ab"}}})
    try:
        wait_until(lambda: ping(sb, "a1", v6(recs["b1"])), 30, what="a1 -> b1 over IPv6 once joined")
        assert pings(sb, "b1", v6(recs["a1"]))
    finally:
        for ns in ("dsa", "dsb"):
            r.patch_merge(api, r.NAMESPACES, ns, {"metadata": {"labels": {names.LABEL_TENANT: None}}})
    wait_until(lambda: not ping(sb, "a1", v6(recs["b1"])), 30, what="a1 -> b1 cut again")


def test_link_local_ipv6_reaches_no_other_tenant_on_a_shared_switch(env):
    sb, _, recs = env
    assert not pings(sb, "c1", v6(recs["d1"]))                     # global address: isolation
    assert not pings(sb, "c1", f"{link_local(sb, 'd1')}%eth0")      # link-local: the same
    assert not pings(sb, "d1", f"{link_local(sb, 'c1')}%eth0")
    # the path itself carries link-local: a global pod of the switch is reached
    assert pings(sb, "c1", f"{link_local(sb, 'g1')}%eth0")
    assert pings(sb, "c1", v6(recs["g1"]))


def test_an_administrators_isolation_audit_records_ipv6_from_another_tenant(env):
    """dsd and dsb audited by their administrator: c1 (dsc) at d1 on one switch
    and node, a1 (dsa, node1) at b1 (node2) across Subnets, both families,
    each drop recorded as the victim tenant's (IPv6's neighbour discovery
    passes every ACL, so the echo itself meets the victim's ip6 drop; IPv4's
    ARP answer is dropped on one switch, the echo across Subnets)."""
    sb, api, recs = env
    for ns in ("dsd", "dsb"):
        r.patch_merge(api, r.NAMESPACES, ns, {"metadata": {"annotations": {names.ANN_AUDIT: "deny"}}})
    paths = lambda: sorted(glob.glob(os.path.join(sb.dir, "node*", "flows",  # noqa: E731
                                                  os.path.basename(names.FLOW_LOG))))
    try:
        # (IPv4 on one switch: the switch's ARP answer for d1 to c1, dropped at c1)
        for src, dst, node, v4 in (("c1", "d1", "node1", "ARP"), ("a1", "b1", "node2", "ICMP")):
            for ip, proto in ((v6(recs[dst]), "ICMPv6"), (recs[dst].ip, v4)):
                def recorded(src=src, dst=dst, ip=ip, proto=proto):
                    ping(sb, src, ip)
                    return [x for x in flows.read(paths(), {"pod": f"{ns_of(dst)}/{dst}",
                                                            "verdict": "deny"})
                            if x["protocol"] == proto and x["policy"]["kind"] == "Tenant"]
                rec = wait_until(recorded, 30, interval=0.5, what=f"{src} -> {dst} {proto} recorded")[-1]
                assert (rec["policy"]["name"], rec["src"]["pod"], rec["dst"]["ip"], rec["node"]) == (
                    f"ns:{ns_of(dst)}", f"{ns_of(src)}/{src}", ip, node)
    finally:
        for ns in ("dsd", "dsb"):
            r.patch_merge(api, r.NAMESPACES, ns, {"metadata": {"annotations": {names.ANN_AUDIT: None}}})


def test_a_network_policy_isolates_both_families(env):
    sb, api, recs = env
    deny = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny-a2"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}
    assert pings(sb, "a1", v6(recs["a2"]))
    r.create(api, r.NETWORKPOLICIES, deny, namespace="dsa")
    try:
        wait_until(lambda: not ping(sb, "a1", v6(recs["a2"])), 30, what="IPv6 denied")
        assert not ping(sb, "a1", recs["a2"].ip)
        # the nodes (kubelet probes) still reach the pod, over IPv6 too
        for n in sb.nodes:
            assert sb.exec(n.netns, ["ping", "-6", "-c3", "-i0.2", "-W1", v6(recs["a2"])],
                           check=False).returncode == 0, n.name
    finally:
        r.delete(api, r.NETWORKPOLICIES, "deny-a2", "dsa")
    wait_until(lambda: ping(sb, "a1", v6(recs["a2"])), 30, what="IPv6 passes again")


@pytest.mark.parametrize("peer", [
    {"podSelector": {"matchLabels": {"role": "client"}}},
    {"ipBlock": {"cidr": "fd00:78::/64", "except": ["A1/128"]}}], ids=["pods", "ipBlock"])
def test_a_network_policy_allows_ipv6_from_its_peers_only(env, peer):
    sb, api, recs = env
    if "ipBlock" in peer:
        peer = {"ipBlock": {"cidr": "fd00:78::/64", "except": [f"{v6(recs['a1'])}/128"]}}
    pol = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": "clients-only"},
           "spec": {"podSelector": {}, "ingress": [{"from": [peer]}]}}
    r.create(api, r.NETWORKPOLICIES, pol, namespace="dsa")
    try:
        wait_until(lambda: not ping(sb, "a1", v6(recs["a2"])), 30, what="a1 denied over IPv6")
        assert pings(sb, "a3", v6(recs["a2"]))              # the peer passes
        assert not ping(sb, "a1", v6(recs["a2"]))
    finally:
        r.delete(api, r.NETWORKPOLICIES, "clients-only", "dsa")
    wait_until(lambda: ping(sb, "a1", v6(recs["a2"])), 30, what="IPv6 passes again")


def test_an_audited_policy_records_ipv6_connections_in_kubernetes_terms(env):
    sb, api, recs = env
    pol = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": "audited", "annotations": {names.ANN_AUDIT: "all"}},
           "spec": {"podSelector": {"matchLabels": {"role": "server"}},
                    "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}]}}
    r.create(api, r.NETWORKPOLICIES, pol, namespace="dsa")
    try:
        wait_until(lambda: not ping(sb, "a1", v6(recs["a2"])), 30, what="a1 denied over IPv6")

        def recorded(src: str, verdict: str):
            ping(sb, src, v6(recs["a2"]))      # OVN's logging is best effort: once more
            paths = glob.glob(os.path.join(sb.dir, "node*", "flows",   # (a node's file comes
                                           os.path.basename(names.FLOW_LOG)))  # with its first)
            return flows.read(sorted(paths), {"pod": "dsa/a2", "verdict": verdict})
        denied = wait_until(lambda: recorded("a1", "deny"), 20, interval=0.5, what="a deny record")
        assert denied[-1]["src"] == {"ip": v6(recs["a1"]), "pod": "dsa/a1", "port": None}
        assert denied[-1]["protocol"] == "ICMPv6"
        assert denied[-1]["policy"]["rule"] == "ingress/ip6"
        allowed = wait_until(lambda: recorded("a3", "allow"), 20, interval=0.5,
                             what="an allow record")
        assert allowed[-1]["src"]["pod"] == "dsa/a3" and allowed[-1]["policy"]["rule"] == "ingress/0/ip6"
    finally:
        r.delete(api, r.NETWORKPOLICIES, "audited", "dsa")


def test_an_administrators_deny_holds_for_ipv6(env):
    sb, api, recs = env
    cnp = {"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
           "metadata": {"name": "no-clients"},
           "spec": {"tier": "Admin", "priority": 5,
                    "subject": {"pods": {"namespaceSelector": {},
                                         "podSelector": {"matchLabels": {"role": "server"}}}},
                    "ingress": [{"name": "clients", "action": "Deny", "from": [{"pods": {
                        "namespaceSelector": {}, "podSelector": {"matchLabels": {"role": "client"}}}}]}]}}
    assert pings(sb, "a3", v6(recs["a2"]))
    r.create(api, r.CLUSTERNETWORKPOLICIES, cnp)
    try:
        wait_until(lambda: not ping(sb, "a3", v6(recs["a2"])), 30, what="a3 denied over IPv6")
        assert not ping(sb, "a3", recs["a2"].ip)
        assert pings(sb, "a1", v6(recs["a2"]))              # not a client: passes
    finally:
        r.delete(api, r.CLUSTERNETWORKPOLICIES, "no-clients")
    wait_until(lambda: ping(sb, "a3", v6(recs["a2"])), 30, what="IPv6 passes again")


def test_an_ipv6_subnet_for_a_namespace_and_a_family_it_lacks(env):
    sb, api, _ = env
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": "ds-six"},
                              "spec": {"cidrBlock": "fd00:81::/64", "namespaces": ["dsx"]}})
    wait_until(lambda: subnet_ready(api, "ds-six"), 60, what="Subnet ds-six Ready")
    try:
        sandboxpods.add_pod(sb, "dsx", "x1", "node1", api=api)
        sandboxpods.add_pod(sb, "dsx", "x2", "node2", api=api)
        x1 = contract.own_record(r.get(api, r.PODS, "x1", "dsx"))
        x2 = contract.own_record(r.get(api, r.PODS, "x2", "dsx"))
        assert x1.ip.startswith("fd00:81::") and x1.ips == ()
        assert sandboxpods.exec_pod(sb, "dsx", "x1", ["ping", "-6", "-c3", "-i0.2", "-W1", x2.ip],
                                    capture_output=True).returncode == 0
        r.create(api, r.PODS, {"metadata": {"name": "x3", "annotations": {
            names.ANN_IP_ADDRESS: "10.81.0.5"}}, "spec": {"nodeName": sb.node("node1").name,
                                                          "containers": [{"name": "c", "image": "x"}]}},
                 namespace="dsx")
        wait_until(lambda: contract.allocation_error(r.get(api, r.PODS, "x3", "dsx")), 30,
                   what="x3 refused")
        why = contract.allocation_error(r.get(api, r.PODS, "x3", "dsx"))
        assert "10.81.0.5 is IPv4, but subnet ds-six (fd00:81::/64) has no IPv4 CIDR" in why, why
    finally:
        for p in ("x1", "x2", "x3"):
            sandboxpods.delete_pod(sb, "dsx", p, api=api)


def _heard(sb, sender: str, listener: str, kind: int) -> bool:
    """Does `listener` receive the ICMPv6 message of `kind` that `sender` sends
    to every node of the link (ff02::1)?"""
    rec = sandboxpods.load(sb, ns_of(listener), listener)
    p = subprocess.Popen(["ip", "netns", "exec", rec.netns, sys.executable, ICMP6, "listen",
                          str(kind), "3"], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        for _ in range(3):
            run(sb, sender, sys.executable, ICMP6, "send", str(kind), "ff02::1", "eth0")
        return p.stdout.readline().strip() == "got"
    finally:
        p.kill()
        p.wait()


def _routes_via(sb, pod: str, gateway: str) -> bool:
    return f"via {gateway} " in run(sb, pod, "ip", "-6", "route", "show").stdout


def _advertise(sb, sender: str) -> None:
    for _ in range(3):
        run(sb, sender, sys.executable, ICMP6, "send", "134", "ff02::1", "eth0")


def test_a_pod_cannot_become_another_pods_router(env):
    sb, _, _ = env
    rogue = link_local(sb, "c1")
    # the path carries c1's neighbour discovery to the global pod g1 of its
    # switch (a router advertisement: exempt from every ACL)...
    assert _heard(sb, "c1", "g1", 134)
    # ...but no redirect, to anyone
    assert not _heard(sb, "c1", "g1", 137)
    # a router advertisement crosses (OVN exempts neighbour discovery from
    # every ACL), but the pods Pacific plumbs do not listen to one
    assert run(sb, "g1", "cat", "/proc/sys/net/ipv6/conf/eth0/accept_ra").stdout.strip() == "0"
    _advertise(sb, "c1")
    assert not _routes_via(sb, "g1", rogue)
    # (it is a valid advertisement: a pod that accepted them would take the route)
    run(sb, "g1", "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/eth0/accept_ra")
    try:
        wait_until(lambda: _advertise(sb, "c1") or _routes_via(sb, "g1", rogue), 10,
                   interval=0.5, what="g1 takes the advertised route")
    finally:
        run(sb, "g1", "sh", "-c", "echo 0 > /proc/sys/net/ipv6/conf/eth0/accept_ra")
        run(sb, "g1", "ip", "-6", "route", "del", "default", "via", rogue, "dev", "eth0")
    assert not _routes_via(sb, "g1", rogue)


def test_a_pod_cannot_send_from_an_ipv6_address_it_was_not_given(env):
    sb, _, recs = env
    spoofed = "fd00:78::99"
    assert run(sb, "a1", "ip", "-6", "addr", "add", f"{spoofed}/64", "dev", "eth0",
               "nodad").returncode == 0
    try:
        out = run(sb, "a1", "ping", "-6", "-c3", "-i0.2", "-W1", "-I", spoofed, v6(recs["a3"]))
        assert out.returncode != 0, out.stdout
        own = run(sb, "a1", "ping", "-6", "-c3", "-i0.2", "-W1", "-I", v6(recs["a1"]),
                  v6(recs["a3"]))
        assert own.returncode == 0, own.stdout           # from its own address: passes
    finally:
        run(sb, "a1", "ip", "-6", "addr", "del", f"{spoofed}/64", "dev", "eth0")


def test_a_tenants_hand_written_ipv6_endpoints_name_no_other_tenants_pod(env):
    """CVE-2021-25740 in IPv6: a tenant with `edit` writes Endpoints for its
    selectorless dual-stack Service naming another tenant's pod's IPv6 address
    beside its own pod's, and a node's IPv6 addresses (no host-network pod of
    its namespace runs there: infrastructure, outside OVN); the IPv6 cluster IP
    balances over its own pod only, and the Event names the addresses it
    wrote, nothing of the other tenant."""
    sb, api, recs = env
    atk = af.tenant(sb, api, "dsb")
    victim, own = v6(recs["a1"]), v6(recs["b1"])
    nodes = [sb.node("node2").underlay_ip6,
             contract.NodeRecord.of(r.get(api, r.NODES, "node2")).ip6]
    r.create(atk, r.SERVICES, {"apiVersion": "v1", "kind": "Service",
                               "metadata": {"name": "steal6", "namespace": "dsb"},
                               "spec": {"ipFamilyPolicy": "RequireDualStack",
                                        "ipFamilies": ["IPv4", "IPv6"],
                                        "ports": [{"name": "http", "port": 80,
                                                   "protocol": "TCP"}]}}, "dsb")
    r.create(atk, r.ENDPOINTS, {"apiVersion": "v1", "kind": "Endpoints",
                                "metadata": {"name": "steal6", "namespace": "dsb"},
                                "subsets": [{"addresses": [{"ip": victim}, {"ip": own},
                                                           *({"ip": n} for n in nodes)],
                                             "ports": [{"name": "http", "port": 7000,
                                                        "protocol": "TCP"}]}]}, "dsb")
    vip6 = r.get(api, r.SERVICES, "steal6", "dsb")["spec"]["clusterIPs"][1]
    lb_name = names.service_lb_name("dsb", "steal6", "tcp")

    def vips():
        return sb.nbctl("--columns=vips", "find", "Load_Balancer", f'name="{lb_name}"')
    wait_until(lambda: f'"[{vip6}]:80"="[{own}]:7000"' in vips(), 60,
               what="the IPv6 VIP balanced over the tenant's own pod")
    assert not any(a in vips() for a in (victim, *nodes))
    text = wait_until(lambda: " | ".join(e.get("message") or "" for e in af.events_of(
        api, "dsb", "steal6")), 60, what="the ignored endpoint reported on the Service")
    assert all(a in text for a in (victim, *nodes)) and "are not pods of namespace dsb" in text, \
        text
    assert "dsa" not in text          # the other tenant is not named


def _cli(sb, *args):
    return subprocess.run([sys.executable, "-m", "pacific.cli.main", *args, "--sandbox", sb.name],
                          capture_output=True, text=True, timeout=120)


def _trace6(sb, src, dst):
    cp = _cli(sb, "trace", "-6", src, dst, "--json", "--probe")
    assert cp.returncode in (0, 1), cp.stderr
    out = json.loads(cp.stdout)
    assert out["probe"]["agrees"], out           # a real IPv6 packet agrees with the trace
    return out


def test_trace_over_ipv6_names_what_decides_and_a_packet_agrees(env):
    sb, _, _ = env
    out = _trace6(sb, "dsa/a1", "dsa/a2")
    assert out["ok"] and out["verdict"] == "delivered to pod dsa/a2", out
    assert out["reply"] == "delivered to pod dsa/a1"
    out = _trace6(sb, "dsa/a1", "dsb/b1")
    assert not out["ok"] and out["verdict"] == (
        "dropped by tenant isolation: tenant 'ns:dsb' admits no traffic from tenant 'ns:dsa'")
    # a node by its ovn0's IPv6 (a dual-stack join network)
    out = _trace6(sb, "dsa/a1", f"node/{sb.node('node1').name}")
    assert out["ok"] and out["verdict"] == "delivered to node node1 (ovn0)", out
    cp = _cli(sb, "trace", "-6", "dsa/a1", "192.0.2.1")      # an end of the other family
    assert cp.returncode == 2 and "address 192.0.2.1 has no IPv6 address" in cp.stderr, \
        cp.stderr


def test_topology_lists_both_addresses_of_a_port_and_checks_them(env):
    sb, _, recs = env
    topo = json.loads(_cli(sb, "topology", "--format", "json").stdout)
    ports = {p["owner"]: p for sw in topo["switches"] for p in sw["ports"]}
    assert ports["dsa/a1"]["ips"] == list(recs["a1"].ips)
    assert f"dsa/a1 {','.join(recs['a1'].ips)} " in _cli(sb, "topology").stdout
    # (rows of pods that earlier tests deleted may take a moment to go)
    wait_until(lambda: _cli(sb, "topology", "--check").returncode == 0, 30, interval=1,
               what="pacific topology --check finding NB as the records say")


LISTEN = """
import socket, sys, time
for port in sys.argv[1:]:
    s = socket.socket(socket.AF_INET6)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind(("::", int(port)))
    s.listen(8)
    globals()["keep" + port] = s
print("ready", flush=True)
time.sleep(600)
"""


def test_a_pods_ipv6_reaches_no_host_port_of_a_node(env):
    """The host firewall's guards in IPv6: a daemon of node1 listening on
    every IPv6 address (its ovn0's included) on a host-only port is reached
    neither from a pod on node1 nor from one on node2; the same listener's
    other port is (the control: the path itself is open)."""
    sb, api, recs = env
    node1 = sb.node("node1")
    guarded, control = names.CONTROLLER_METRICS_PORT, 7444
    ovn0 = contract.NodeRecord.of(r.get(api, r.NODES, node1.name)).ip6
    assert ovn0, "node1's ovn0 has no IPv6 address"
    p = subprocess.Popen(["ip", "netns", "exec", node1.netns, sys.executable, "-c", LISTEN,
                          str(guarded), str(control)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        for pod in ("a1", "b1"):                 # on node1, on node2
            netns = sandboxpods.load(sb, ns_of(pod), pod).netns
            wait_until(lambda n=netns: af.tcp_connects(sb, n, ovn0, control), 20,
                       what=f"{pod} reaching node1's ovn0 over IPv6")
            assert not af.tcp_connects(sb, netns, ovn0, guarded), pod
    finally:
        p.kill()
        p.wait()


EGRESS_PORT = 7171


def _ask_outside(sb, pod: str, ip: str, port: int = EGRESS_PORT):
    cp = run(sb, pod, sys.executable, NETCHECK, "ask", "tcp", ip, str(port), "3")
    return cp.stdout.strip() if cp.returncode == 0 else None


def _firewall(api, *rules):
    body = {"apiVersion": names.API_VERSION, "kind": "EgressFirewall",
            "metadata": {"name": "default", "namespace": "dsc"}, "spec": {"egress": list(rules)}}
    if r.get(api, r.EGRESSFIREWALLS, "default", "dsc") is None:
        r.create(api, r.EGRESSFIREWALLS, body, namespace="dsc")
    else:
        r.patch_merge(api, r.EGRESSFIREWALLS, "default", {"spec": body["spec"]}, namespace="dsc")


def test_ipv6_leaves_through_the_pods_node_and_an_egress_firewall_decides_both_families(env):
    """Distributed egress in IPv6: a pod reaches the outside (the external
    host's 2001:db8:100::1) through its own node with its own IPv6 address.
    An EgressFirewall (namespace dsc, pod c1; a1 of another namespace on the
    same node is the control, getting out over both families throughout):

    - written for IPv4 (Deny the outside's IPv4 address): c1's IPv4 is denied,
      which in a dual-stack cluster needs every set of the firewall to hold one
      family (a set mixing them dropped every rule); its IPv6, which no rule
      names, is denied by the implicit IPv6 deny rather than let out;
    - with IPv6 rules (Allow the outside's IPv6 on one port, Deny ::/0): c1
      reaches that port over IPv6 and not the next;
    - gone: c1 gets out over both."""
    sb, api, recs = env
    out4, out6 = sb.external_remote_ip, sb.external_remote_ip6
    routes = []       # the outside routes the pods' addresses back to their nodes
    for p in ("a1", "c1"):
        node = sb.node("node1")
        routes += [(recs[p].ip, node.underlay_ip, "-4", 32), (v6(recs[p]), node.underlay_ip6, "-6", 128)]
    for ip, via, flag, plen in routes:
        sb.exec(sb.external_netns, ["ip", flag, "route", "replace", f"{ip}/{plen}", "via", via])
    servers = [subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable,
                                 NETCHECK, "serve", str(port), "outside"],
                                stdout=subprocess.PIPE, text=True)
               for port in (EGRESS_PORT, EGRESS_PORT + 1)]
    try:
        assert all(s.stdout.readline().strip() == "ready" for s in servers)
        for p in ("a1", "c1"):
            got = wait_until(lambda p=p: _ask_outside(sb, p, out6), 30, interval=0.5,
                             what=f"{p} reaching the outside over IPv6")
            assert got == f"outside {v6(recs[p])}"
            assert _ask_outside(sb, p, out4) == f"outside {recs[p].ip}"
        _firewall(api, {"type": "Deny", "to": {"cidrSelector": f"{out4}/32"}})
        try:
            wait_until(lambda: _ask_outside(sb, "c1", out4) is None and
                       _ask_outside(sb, "c1", out6) is None, 30, interval=0.5,
                       what="c1 denied over IPv4 by its rule and over IPv6 by the implicit deny")
            for _ in range(2):
                assert _ask_outside(sb, "c1", out4) is None
                assert _ask_outside(sb, "c1", out6) is None
                assert _ask_outside(sb, "a1", out4) == f"outside {recs['a1'].ip}"
                assert _ask_outside(sb, "a1", out6) == f"outside {v6(recs['a1'])}"
            _firewall(api, {"type": "Allow", "to": {"cidrSelector": f"{out6}/128"},
                            "ports": [{"protocol": "TCP", "port": EGRESS_PORT}]},
                      {"type": "Deny", "to": {"cidrSelector": "::/0"}})
            got = wait_until(lambda: _ask_outside(sb, "c1", out6), 30, interval=0.5,
                             what="c1 reaching the port its IPv6 rule allows")
            assert got == f"outside {v6(recs['c1'])}"
            assert _ask_outside(sb, "c1", out6, EGRESS_PORT + 1) is None
            assert _ask_outside(sb, "a1", out6, EGRESS_PORT + 1) == f"outside {v6(recs['a1'])}"
        finally:
            r.delete(api, r.EGRESSFIREWALLS, "default", "dsc")
        got = wait_until(lambda: _ask_outside(sb, "c1", out6, EGRESS_PORT + 1), 30,
                         interval=0.5, what="c1 out over IPv6 once the firewall is gone")
        assert got == f"outside {v6(recs['c1'])}"
        assert _ask_outside(sb, "c1", out4) == f"outside {recs['c1'].ip}"
    finally:
        for s in servers:
            s.kill()
            s.wait()
        for ip, _, flag, plen in routes:
            sb.exec(sb.external_netns, ["ip", flag, "route", "del", f"{ip}/{plen}"], check=False)


NODE_PORT_SERVER = 7173


def test_a_node_port_is_reached_over_ipv6_at_every_node(env):
    """A dual-stack NodePort Service: the external host reaches the node port at
    each node's IPv6 address (the node DNATs it to the Service's IPv6 cluster
    IP; externalTrafficPolicy Cluster, so the endpoint, a2 on node2, sees the
    node's IPv6 service source) and at its IPv4 address as before."""
    sb, api, recs = env
    sandboxpods.detach_pod(sb, "dsa", "a2", [sys.executable, NETCHECK, "serve",
                                             str(NODE_PORT_SERVER), "a2"])
    r.create(api, r.SERVICES, {"apiVersion": "v1", "kind": "Service",
                               "metadata": {"name": "np6", "namespace": "dsa"},
                               "spec": {"type": "NodePort", "ipFamilyPolicy": "RequireDualStack",
                                        "ipFamilies": ["IPv4", "IPv6"],
                                        "selector": {"role": "server"},
                                        "ports": [{"name": "echo", "port": 80, "protocol": "TCP",
                                                   "targetPort": NODE_PORT_SERVER}]}}, "dsa")
    try:
        port = r.get(api, r.SERVICES, "np6", "dsa")["spec"]["ports"][0]["nodePort"]

        def ask(ip):
            cp = sb.exec(sb.external_netns, [sys.executable, NETCHECK, "ask", "tcp", ip,
                                             str(port), "3"], check=False)
            return cp.stdout.strip() if cp.returncode == 0 else None
        for node in sb.nodes:
            rec = contract.NodeRecord.of(r.get(api, r.NODES, node.name))
            got = wait_until(lambda: ask(node.underlay_ip6), 60, interval=0.5,
                             what=f"node port {port} at {node.name}'s IPv6")
            assert got == f"a2 {rec.service_source6 or rec.ip6}"
            assert wait_until(lambda: ask(node.underlay_ip), 30, interval=0.5,
                              what=f"node port {port} at {node.name}'s IPv4") == \
                f"a2 {rec.service_source or rec.ip}"
    finally:
        r.delete(api, r.SERVICES, "np6", "dsa")


EXTERNAL_SERVER, EXTERNAL_IP6 = 7174, "2001:db8:200::10"


def test_an_ipv6_external_ip_reaches_the_endpoints_and_no_other_spelling_takes_it(env):
    """A dual-stack Service of namespace dsa with an IPv6 external IP (inside
    the administrator's IPv6 range, routed by the external host to node1)
    reaches its endpoint, a2, through node1's IPv6 DNAT.  The attack: a tenant
    with `edit` in dsb claims the same address spelled another way
    (2001:DB8:200:0::10): refused as another namespace's, never naming it, and
    the address keeps answering with dsa's pod."""
    sb, api, recs = env
    sandboxpods.detach_pod(sb, "dsa", "a2", [sys.executable, NETCHECK, "serve",
                                             str(EXTERNAL_SERVER), "a2"])
    node1 = sb.node("node1")
    rec1 = contract.NodeRecord.of(r.get(api, r.NODES, "node1"))
    source = rec1.service_source6 or rec1.ip6

    def service(ns, name, ip):
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
                "spec": {"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"],
                         "selector": {"role": "server"}, "externalIPs": [ip],
                         "ports": [{"name": "echo", "port": 80, "protocol": "TCP",
                                    "targetPort": EXTERNAL_SERVER}]}}

    def ask():
        cp = sb.exec(sb.external_netns, [sys.executable, NETCHECK, "ask", "tcp", EXTERNAL_IP6,
                                         "80", "3"], check=False)
        return cp.stdout.strip() if cp.returncode == 0 else None
    sb.exec(sb.external_netns, ["ip", "-6", "route", "replace", f"{EXTERNAL_IP6}/128", "via",
                                node1.underlay_ip6])
    r.create(api, r.SERVICES, service("dsa", "ext6", EXTERNAL_IP6), "dsa")
    atk = af.tenant(sb, api, "dsb")
    try:
        assert wait_until(ask, 60, interval=0.5, what="the IPv6 external IP answering") == \
            f"a2 {source}"
        r.create(atk, r.SERVICES, service("dsb", "steal-ext6", "2001:DB8:200:0::10"), "dsb")
        text = wait_until(lambda: " | ".join(e.get("message") or "" for e in af.events_of(
            api, "dsb", "steal-ext6")), 60, what="the tenant's claim refused")
        assert "externalIP 2001:db8:200::10 belongs to another namespace" in text, text
        assert "dsa" not in text and "ext6 " not in text
        for _ in range(3):
            assert ask() == f"a2 {source}"
    finally:
        r.delete(api, r.SERVICES, "ext6", "dsa")
        r.delete(api, r.SERVICES, "steal-ext6", "dsb")
        sb.exec(sb.external_netns, ["ip", "-6", "route", "del", f"{EXTERNAL_IP6}/128"],
                check=False)


def _multicast(api, ns: str, on: bool) -> None:
    r.patch_merge(api, r.NAMESPACES, ns, {"metadata": {"annotations": {
        names.ANN_MULTICAST: "true" if on else None}}})


def test_the_multicast_gate_holds_for_ipv6(env):
    """Namespaces dsc and dsg (one switch) have not enabled multicast: c1's
    IPv6 multicast (an echo request to ff02::1) does not reach g1, though the
    same switch carries c1's neighbour discovery to it (the control).  Once
    the administrator enables multicast on both namespaces it does; enabled
    on dsg only, it no longer does."""
    sb, api, _ = env
    assert _heard(sb, "c1", "g1", 134)
    assert not _heard(sb, "c1", "g1", 128)
    try:
        for ns in ("dsc", "dsg"):
            _multicast(api, ns, True)
        wait_until(lambda: _heard(sb, "c1", "g1", 128), 30, interval=0.5,
                   what="IPv6 multicast between enabled namespaces")
        _multicast(api, "dsc", False)
        wait_until(lambda: not _heard(sb, "c1", "g1", 128), 30, interval=0.5,
                   what="the sender's namespace off again")
        assert not _heard(sb, "c1", "g1", 128)
    finally:
        for ns in ("dsc", "dsg"):
            _multicast(api, ns, False)


EIP4, EIP6 = "192.168.77.160", "fd00:77::160"


def _neighbour_mac(sb, ip: str) -> str | None:
    out = sb.exec(sb.external_netns, ["ip", "-6", "neigh", "show", ip], check=False).stdout
    m = re.search(r"lladdr ([0-9a-f:]{17})", out)
    return m.group(1) if m else None


def _underlay_mac(sb, node: str) -> str:
    """The MAC of the node's interface holding its underlay address."""
    n = sb.node(node)
    addrs = sb.exec(n.netns, ["ip", "-o", "-4", "addr", "show"]).stdout
    dev = next(line.split()[1] for line in addrs.splitlines() if f" {n.underlay_ip}/" in line)
    out = sb.exec(n.netns, ["ip", "-o", "link", "show", dev]).stdout
    return re.search(r"link/ether ([0-9a-f:]{17})", out).group(1)


def test_an_egress_ip_of_each_family_carries_its_pods_out_and_moves_between_nodes(env):
    """An EgressIP with an IPv4 and an IPv6 address selects namespace dsb: b1
    (on node2) reaches the outside as 192.168.77.160 and as fd00:77::160, held
    by node1, the one node labelled assignable (the pod's IPv6 rerouted to
    node1's IPv6 transit address and SNATed there).  a1 of dsa, on node1, is
    the control: it leaves with its own addresses throughout.  node2 labelled
    and node1's label removed, node2 takes both addresses over and announces
    the IPv6 one by an unsolicited neighbour advertisement: the outside's
    neighbour entry moves to node2's MAC before it sends anything.  Deleted,
    b1 leaves with its own address again."""
    sb, api, recs = env
    out4, out6 = sb.external_remote_ip, sb.external_remote_ip6
    routes = [(recs["a1"].ip, sb.node("node1").underlay_ip, "-4", 32),
              (v6(recs["a1"]), sb.node("node1").underlay_ip6, "-6", 128),
              (recs["b1"].ip, sb.node("node2").underlay_ip, "-4", 32),
              (v6(recs["b1"]), sb.node("node2").underlay_ip6, "-6", 128)]
    for ip, via, flag, plen in routes:
        sb.exec(sb.external_netns, ["ip", flag, "route", "replace", f"{ip}/{plen}", "via", via])
    server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable,
                               NETCHECK, "serve", str(EGRESS_PORT), "outside"],
                              stdout=subprocess.PIPE, text=True)

    def assignable(node, on):
        r.patch_merge(api, r.NODES, node, {"metadata": {"labels": {
            names.LABEL_EGRESS_ASSIGNABLE: "" if on else None}}})

    def holds(node, ip):
        return f" {ip}/128 " in sb.exec(sb.node(node).netns, ["ip", "-6", "-o", "addr",
                                                               "show"]).stdout
    try:
        assert server.stdout.readline().strip() == "ready"
        r.patch_merge(api, r.NAMESPACES, "dsb", {"metadata": {"labels": {"eipv6": "yes"}}})
        assignable("node1", True)
        r.create(api, r.EGRESSIPS, {
            "apiVersion": names.API_VERSION, "kind": "EgressIP", "metadata": {"name": "eipv6"},
            "spec": {"egressIPs": [EIP4, EIP6],
                     "namespaceSelector": {"matchLabels": {"eipv6": "yes"}}}})
        wait_until(lambda: _ask_outside(sb, "b1", out6) == f"outside {EIP6}", 60, interval=0.5,
                   what="b1 leaving over IPv6 as the EgressIP's IPv6 address")
        assert _ask_outside(sb, "b1", out4) == f"outside {EIP4}"
        assert holds("node1", EIP6) and not holds("node2", EIP6)
        assert _ask_outside(sb, "a1", out6) == f"outside {v6(recs['a1'])}"
        assert _ask_outside(sb, "a1", out4) == f"outside {recs['a1'].ip}"
        items = wait_until(lambda: [i for i in ((r.get(api, r.EGRESSIPS, "eipv6") or {}).get(
            "status") or {}).get("items", []) if i.get("node")] or None, 30,
            what="the status naming the holders")
        assert {(i["egressIP"], i["node"], i["pods"]) for i in items} == {
            (EIP4, "node1", 1), (EIP6, "node1", 1)}
        assert _neighbour_mac(sb, EIP6) == _underlay_mac(sb, "node1")
        assignable("node2", True)
        assignable("node1", False)
        node2_mac = _underlay_mac(sb, "node2")
        wait_until(lambda: _neighbour_mac(sb, EIP6) == node2_mac, 30, interval=0.2,
                   what="the outside's neighbour entry moved to node2 by its advertisement")
        assert holds("node2", EIP6) and not holds("node1", EIP6)
        assert _ask_outside(sb, "b1", out6) == f"outside {EIP6}"
        assert _ask_outside(sb, "b1", out4) == f"outside {EIP4}"
        r.delete(api, r.EGRESSIPS, "eipv6")
        wait_until(lambda: _ask_outside(sb, "b1", out6) == f"outside {v6(recs['b1'])}", 60,
                   interval=0.5, what="b1 leaving with its own IPv6 once the EgressIP is gone")
        wait_until(lambda: not holds("node2", EIP6), 30, what="the address given up")
    finally:
        server.kill()
        server.wait()
        r.delete(api, r.EGRESSIPS, "eipv6")
        for node in ("node1", "node2"):
            assignable(node, False)
        r.patch_merge(api, r.NAMESPACES, "dsb", {"metadata": {"labels": {"eipv6": None}}})
        for ip, _, flag, plen in routes:
            sb.exec(sb.external_netns, ["ip", flag, "route", "del", f"{ip}/{plen}"], check=False)


def test_a_centralized_subnets_ipv6_leaves_through_its_gateway_node(env):
    """Subnet ds-b made centralized with gateway node node1 and natOutgoing:
    b1 (on node2) reaches the outside over both families as node1's underlay
    addresses, its IPv6 rerouted to node1's IPv6 transit address like its
    IPv4.  a1 of another Subnet on node1 (no natOutgoing, routed back by the
    outside) keeps its own addresses: the control.  Distributed again, b1's
    IPv6 leaves through its own node."""
    sb, api, recs = env
    out4, out6 = sb.external_remote_ip, sb.external_remote_ip6
    node1 = sb.node("node1")
    routes = [(v6(recs["a1"]), node1.underlay_ip6, "-6", 128),
              (v6(recs["b1"]), sb.node("node2").underlay_ip6, "-6", 128)]
    for ip, via, flag, plen in routes:
        sb.exec(sb.external_netns, ["ip", flag, "route", "replace", f"{ip}/{plen}", "via", via])
    server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable,
                               NETCHECK, "serve", str(EGRESS_PORT), "outside"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        r.patch_merge(api, r.SUBNETS, "ds-b", {"spec": {
            "gatewayType": "centralized", "gatewayNodes": ["node1"], "natOutgoing": True}})
        wait_until(lambda: _ask_outside(sb, "b1", out6) == f"outside {node1.underlay_ip6}", 60,
                   interval=0.5, what="b1's IPv6 leaving through gateway node node1")
        assert _ask_outside(sb, "b1", out4) == f"outside {node1.underlay_ip}"
        st = r.get(api, r.SUBNETS, "ds-b")["status"][names.STATUS_EGRESS]
        assert st["transit6"].startswith("fd00:65:") and st["nodes"] == ["node1"]
        assert _ask_outside(sb, "a1", out6) == f"outside {v6(recs['a1'])}"
        r.patch_merge(api, r.SUBNETS, "ds-b", {"spec": {"gatewayType": "distributed",
                                                         "gatewayNodes": None,
                                                         "natOutgoing": False}})
        wait_until(lambda: _ask_outside(sb, "b1", out6) == f"outside {v6(recs['b1'])}", 60,
                   interval=0.5, what="b1's IPv6 leaving through its own node again")
    finally:
        server.kill()
        server.wait()
        r.patch_merge(api, r.SUBNETS, "ds-b", {"spec": {"gatewayType": None, "gatewayNodes": None,
                                                         "natOutgoing": None}})
        for ip, _, flag, plen in routes:
            sb.exec(sb.external_netns, ["ip", flag, "route", "del", f"{ip}/{plen}"], check=False)


SNAT4, SNAT6 = "192.168.77.210", "2001:db8:200::30"


def test_a_services_ipv6_external_ip_is_its_endpoints_ipv6_source(env):
    """A dual-stack Service of dsa with an external IP of each family selects
    a2 (on node2); node1 is the egress gateway node: a2 reaches the outside
    as the Service's IPv6 external IP (routed to node1 by the outside) and as
    its IPv4 one.  a1 of the same namespace, no endpoint, has no IPv6 way
    out while the Service decides for its namespace (failing closed) and its
    own IPv4; b1 of dsb keeps its own IPv6: the control.  The Service gone,
    a2 and a1 leave with their own IPv6 addresses."""
    sb, api, recs = env
    out4, out6 = sb.external_remote_ip, sb.external_remote_ip6
    node1, node2 = sb.node("node1"), sb.node("node2")
    routes = [(SNAT6, node1.underlay_ip6, "-6", 128), (recs["a1"].ip, node1.underlay_ip, "-4", 32),
              (v6(recs["a1"]), node1.underlay_ip6, "-6", 128),
              (v6(recs["a2"]), node2.underlay_ip6, "-6", 128),
              (v6(recs["b1"]), node2.underlay_ip6, "-6", 128)]
    for ip, via, flag, plen in routes:
        sb.exec(sb.external_netns, ["ip", flag, "route", "replace", f"{ip}/{plen}", "via", via])
    server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable,
                               NETCHECK, "serve", str(EGRESS_PORT), "outside"],
                              stdout=subprocess.PIPE, text=True)

    def gateway_node(on):
        r.patch_merge(api, r.NODES, "node1", {"metadata": {"labels": {
            names.LABEL_EGRESS_GATEWAY: "true" if on else None}}})
    try:
        assert server.stdout.readline().strip() == "ready"
        gateway_node(True)
        r.create(api, r.SERVICES, {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "snat6", "namespace": "dsa"},
            "spec": {"ipFamilyPolicy": "RequireDualStack", "ipFamilies": ["IPv4", "IPv6"],
                     "selector": {"role": "server"}, "externalIPs": [SNAT4, SNAT6],
                     "ports": [{"name": "echo", "port": 80, "protocol": "TCP"}]}}, "dsa")
        wait_until(lambda: _ask_outside(sb, "a2", out6) == f"outside {SNAT6}", 60, interval=0.5,
                   what="a2 leaving over IPv6 as the Service's IPv6 external IP")
        wait_until(lambda: _ask_outside(sb, "a2", out4) == f"outside {SNAT4}", 30, interval=0.5,
                   what="a2 leaving over IPv4 as the Service's IPv4 external IP")
        assert _ask_outside(sb, "a1", out6) is None
        assert _ask_outside(sb, "a1", out4) == f"outside {recs['a1'].ip}"
        assert _ask_outside(sb, "b1", out6) == f"outside {v6(recs['b1'])}"
        r.delete(api, r.SERVICES, "snat6", "dsa")
        for p in ("a2", "a1"):
            wait_until(lambda p=p: _ask_outside(sb, p, out6) == f"outside {v6(recs[p])}", 60,
                       interval=0.5, what=f"{p} leaving with its own IPv6 once the Service is gone")
    finally:
        server.kill()
        server.wait()
        r.delete(api, r.SERVICES, "snat6", "dsa")
        gateway_node(False)
        for ip, _, flag, plen in routes:
            sb.exec(sb.external_netns, ["ip", flag, "route", "del", f"{ip}/{plen}"], check=False)


def test_a_tenants_ipv6_external_ip_takes_no_other_tenants_pod_out(env):
    """The attack on egress SNAT in IPv6: a tenant with `edit` in dsb gives its
    selectorless Service an IPv6 external IP and writes Endpoints naming a1's
    IPv6 address (dsa's) beside its own b1's.  b1 leaves as the external IP;
    a1 still leaves with its own address, and the Event names the address
    the tenant wrote, nothing of dsa."""
    sb, api, recs = env
    atk = af.tenant(sb, api, "dsb")
    out6, ext = sb.external_remote_ip6, "2001:db8:200::31"
    victim, own = v6(recs["a1"]), v6(recs["b1"])
    routes = [(ext, sb.node("node1").underlay_ip6), (victim, sb.node("node1").underlay_ip6)]
    for ip, via in routes:
        sb.exec(sb.external_netns, ["ip", "-6", "route", "replace", f"{ip}/128", "via", via])
    server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable,
                               NETCHECK, "serve", str(EGRESS_PORT), "outside"],
                              stdout=subprocess.PIPE, text=True)
    r.patch_merge(api, r.NODES, "node1", {"metadata": {"labels": {
        names.LABEL_EGRESS_GATEWAY: "true"}}})
    try:
        assert server.stdout.readline().strip() == "ready"
        r.create(atk, r.SERVICES, {"apiVersion": "v1", "kind": "Service",
                                   "metadata": {"name": "out6", "namespace": "dsb"},
                                   "spec": {"ipFamilyPolicy": "RequireDualStack",
                                            "ipFamilies": ["IPv4", "IPv6"], "externalIPs": [ext],
                                            "ports": [{"name": "http", "port": 80,
                                                       "protocol": "TCP"}]}}, "dsb")
        r.create(atk, r.ENDPOINTS, {"apiVersion": "v1", "kind": "Endpoints",
                                    "metadata": {"name": "out6", "namespace": "dsb"},
                                    "subsets": [{"addresses": [{"ip": victim}, {"ip": own}],
                                                 "ports": [{"name": "http", "port": 7000,
                                                            "protocol": "TCP"}]}]}, "dsb")
        wait_until(lambda: _ask_outside(sb, "b1", out6) == f"outside {ext}", 60, interval=0.5,
                   what="the tenant's own pod leaving as its IPv6 external IP")
        for _ in range(3):
            assert _ask_outside(sb, "a1", out6) == f"outside {victim}"
        text = wait_until(lambda: " | ".join(e.get("message") or "" for e in af.events_of(
            api, "dsb", "out6") if e.get("reason") == "EgressSNAT"), 60,
            what="the ignored member reported on the Service")
        assert victim in text and "dsa" not in text, text
    finally:
        server.kill()
        server.wait()
        r.delete(api, r.SERVICES, "out6", "dsb")
        r.delete(api, r.ENDPOINTS, "out6", "dsb")
        r.patch_merge(api, r.NODES, "node1", {"metadata": {"labels": {
            names.LABEL_EGRESS_GATEWAY: None}}})
        for ip, _ in routes:
            sb.exec(sb.external_netns, ["ip", "-6", "route", "del", f"{ip}/128"], check=False)


def test_a_dnsname_rule_matches_the_names_aaaa_records_too(env):
    """An EgressFirewall of dsc allows dnsName outside.example on one port and
    denies the rest of both families: c1 reaches the name's IPv6 address (its
    AAAA record) and its IPv4 one on that port, not the next port.  The AAAA
    record gone from DNS (1 s TTL), c1's IPv6 to it is denied, its IPv4 still
    allowed."""
    import signal

    sb, api, recs = env
    out4, out6 = sb.external_remote_ip, sb.external_remote_ip6
    with _named_outside(sb, recs["c1"]) as (hosts, dnsmasq):
        try:
            _firewall(api, {"type": "Allow", "to": {"dnsName": "outside.example"},
                            "ports": [{"protocol": "TCP", "port": EGRESS_PORT}]},
                      {"type": "Deny", "to": {"cidrSelector": "0.0.0.0/0"}},
                      {"type": "Deny", "to": {"cidrSelector": "::/0"}})
            got = wait_until(lambda: _ask_outside(sb, "c1", out6), 60, interval=0.5,
                             what="c1 reaching the name's AAAA address")
            assert got == f"outside {v6(recs['c1'])}"
            assert _ask_outside(sb, "c1", out4) == f"outside {recs['c1'].ip}"
            wait_until(lambda: _ask_outside(sb, "c1", out6, EGRESS_PORT + 1) is None, 30,
                       interval=0.5, what="the next port denied")
            with open(hosts, "w") as f:
                f.write(f"{out4} outside.example\n")
            dnsmasq.send_signal(signal.SIGHUP)          # re-reads the hosts file
            wait_until(lambda: _ask_outside(sb, "c1", out6) is None, 60, interval=0.5,
                       what="c1's IPv6 denied once the AAAA record is gone")
            assert _ask_outside(sb, "c1", out4) == f"outside {recs['c1'].ip}"
        finally:
            r.delete(api, r.EGRESSFIREWALLS, "default", "dsc")


@contextlib.contextmanager
def _named_outside(sb, rec):
    """The outside host named outside.example (an A and an AAAA record in the
    sandbox's DNS, which the controller asks), serving on EGRESS_PORT and the
    next port, with routes back to `rec`'s pod through node1.  Yields (the
    hosts file, dnsmasq)."""
    from pacific.sandbox import controllers
    node1 = sb.node("node1")
    routes = [(rec.ip, node1.underlay_ip, "-4", 32), (v6(rec), node1.underlay_ip6, "-6", 128)]
    for ip, via, flag, plen in routes:
        sb.exec(sb.external_netns, ["ip", flag, "route", "replace", f"{ip}/{plen}", "via", via])
    hosts = os.path.join(sb.dir, "outside-hosts")
    with open(hosts, "w") as f:
        f.write(f"{sb.external_remote_ip} outside.example\n"
                f"{sb.external_remote_ip6} outside.example\n")
    dnsmasq = controllers.serve_dns(sb, hosts)
    servers = [subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable,
                                 NETCHECK, "serve", str(port), "outside"],
                                stdout=subprocess.PIPE, text=True)
               for port in (EGRESS_PORT, EGRESS_PORT + 1)]
    try:
        assert all(s.stdout.readline().strip() == "ready" for s in servers)
        yield hosts, dnsmasq
    finally:
        dnsmasq.kill()
        dnsmasq.wait()
        for s in servers:
            s.kill()
            s.wait()
        for ip, _, flag, plen in routes:
            sb.exec(sb.external_netns, ["ip", flag, "route", "del", f"{ip}/{plen}"], check=False)


def test_an_administrators_rules_name_nodes_and_domain_names_in_ipv6_too(env):
    """ClusterNetworkPolicy egress peers over IPv6: a `nodes` peer is the
    nodes' IPv6 addresses too (the Node's IPv6 InternalIP and ovn0's IPv6 on
    the join network), and a `domainNames` peer the name's AAAA records too."""
    sb, api, recs = env
    node2 = contract.NodeRecord.of(r.get(api, r.NODES, "node2"))
    node_ips = (node2.ip6, sb.node("node2").underlay_ip6)

    def cnp(name, priority, subject, egress):
        return {"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
                "metadata": {"name": name},
                "spec": {"tier": "Admin", "priority": priority, "subject": subject,
                         "egress": egress}}
    for ip in node_ips:
        assert pings(sb, "a3", ip) and pings(sb, "a1", ip), ip
    out6 = sb.external_remote_ip6
    try:
        r.create(api, r.CLUSTERNETWORKPOLICIES, cnp(
            "no-nodes", 6, {"pods": {"namespaceSelector": {},
                                     "podSelector": {"matchLabels": {"role": "client"}}}},
            [{"name": "nodes", "action": "Deny", "to": [{"nodes": {}}]}]))
        for ip in node_ips:
            wait_until(lambda ip=ip: not ping(sb, "a3", ip), 30, what=f"a3 denied {ip}")
            assert pings(sb, "a1", ip), ip               # not the subject: passes
        # 1.20 does not label namespaces with their name itself
        r.patch_merge(api, r.NAMESPACES, "dsc", {"metadata": {"labels": {
            "kubernetes.io/metadata.name": "dsc"}}})
        with _named_outside(sb, recs["c1"]):
            assert _ask_outside(sb, "c1", out6, EGRESS_PORT + 1) is not None
            r.create(api, r.CLUSTERNETWORKPOLICIES, cnp(
                "only-outside", 7, {"namespaces": {"matchLabels": {
                    "kubernetes.io/metadata.name": "dsc"}}},
                [{"name": "named", "action": "Accept",
                  "to": [{"domainNames": ["outside.example"]}],
                  "protocols": [{"tcp": {"destinationPort": {"number": EGRESS_PORT}}}]},
                 {"name": "rest", "action": "Deny", "to": [{"networks": ["0.0.0.0/0", "::/0"]}]}]))
            wait_until(lambda: _ask_outside(sb, "c1", out6, EGRESS_PORT + 1) is None, 30,
                       interval=0.5, what="the next port denied")
            assert _ask_outside(sb, "c1", out6) == f"outside {v6(recs['c1'])}"
    finally:
        for name in ("no-nodes", "only-outside"):
            r.delete(api, r.CLUSTERNETWORKPOLICIES, name)
    wait_until(lambda: ping(sb, "a3", node_ips[0]), 30, what="a3 reaching node2 again")


def test_an_ipv6_group_is_relayed_between_subnets_to_joined_pods_only(env):
    """Namespaces dsg (global, Subnet ds-s) and dsa (Subnet ds-a) enable
    multicast: g1's datagrams to an IPv6 group (hop limit 8) reach a1 and a2
    of the other Subnet, on both nodes, which joined it by MLD, relayed by the
    cluster router, as `pacific trace` of the group says; once a1 leaves they
    stop reaching it and still reach a2.  b1 (dsb, not enabled) joined too
    and hears nothing (the trace: its copy dropped by the gate)."""
    import mcast_fixtures as mf
    sb, api, _ = env
    group, port = "ff0e::db8:77", 7175
    netns = {p: sandboxpods.load(sb, ns_of(p), p).netns for p in ("g1", "a1", "a2", "b1")}
    for ns in ("dsg", "dsa"):
        _multicast(api, ns, True)
    rx = {p: mf.Receiver(sb, netns[p], group, port, name=p) for p in ("a1", "a2", "b1")}
    try:
        tag = mf.deliver(sb, netns["g1"], group, port, [rx["a1"], rx["a2"]])
        assert not rx["b1"].wire(tag)

        def traced():       # pacific trace follows MLD snooping's table too
            cp = _cli(sb, "trace", "dsg/g1", group, "--udp", str(port))
            return cp if all(f"delivered: pod dsa/{p}" in cp.stdout for p in ("a1", "a2")) \
                else None
        cp = wait_until(traced, 30, interval=0.5, what="trace naming both members")
        assert cp.returncode == 0 and cp.stdout.startswith("OK: delivered to 2 members"), cp.stdout
        assert "not delivered: pod dsb/b1" in cp.stdout and "multicast" in cp.stdout, cp.stdout
        rx["a1"].leave()
        wait_until(lambda: mf.none_reach(sb, netns["g1"], group, port, [rx["a1"]],
                                         control=(netns["g1"], [rx["a2"]])), 30,
                   interval=0.2, what="a1's leave in effect")
        tag = mf.deliver(sb, netns["g1"], group, port, [rx["a2"]])
        assert not rx["a1"].wire(tag) and not rx["b1"].wire(tag)
    finally:
        for r_ in rx.values():
            r_.close()
        for ns in ("dsg", "dsa"):
            _multicast(api, ns, False)


def test_a_pods_bandwidth_limit_and_mirroring_hold_for_ipv6(env):
    """Per-pod bandwidth (a tbf on the pod's interface) and mirroring (an OVS
    Mirror of its port) act on frames, whatever their family: a1's IPv6 is
    copied to node1's mirror0 both ways, another pod's is not; a1 sending UDP
    over IPv6 at 40 Mbit/s under an egress limit of 2 Mbit/s: a2 receives no
    more than the limit."""
    from mirror_fixtures import Capture
    sb, api, recs = env
    a1, a2, a3 = v6(recs["a1"]), v6(recs["a2"]), v6(recs["a3"])
    r.patch_merge(api, r.PODS, "a1", {"metadata": {"annotations": {
        names.ANN_MIRROR: "true", names.ANN_EGRESS_RATE: "2"}}}, "dsa")
    try:
        def mirrored():
            """a2's ping of a1 seen both ways (the Mirror row is written before
            ovs-vswitchd applies it)."""
            cap = Capture(sb, "node1", "ip6")
            ok = ping(sb, "a2", a1)
            seen = cap.stop()
            return ok and f"{a2} > {a1}: ICMP6, echo request" in seen and \
                f"{a1} > {a2}: ICMP6, echo reply" in seen
        wait_until(mirrored, 30, interval=0.5, what="a1's IPv6 on mirror0 both ways")
        cap = Capture(sb, "node1", "ip6")
        assert pings(sb, "a3", a2)
        assert f"{a3} > {a2}" not in cap.stop()                 # a3 is not mirrored

        wait_until(lambda: "qdisc tbf" in run(sb, "a1", "tc", "qdisc", "show", "dev",
                                              "eth0").stdout, 20, what="a1's egress tbf")
        port = "5201"
        server = subprocess.Popen(["ip", "netns", "exec", sandboxpods.load(sb, "dsa", "a2").netns,
                                   "iperf3", "-s", "-1", "-p", port],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_until(lambda: run(sb, "a2", "ss", "-Hlun6t", f"sport = :{port}").stdout.strip(),
                       10, what="iperf3 server in a2")
            cp = run(sb, "a1", "iperf3", "-c", a2, "-p", port, "-u", "-b", "40M", "-t", "2",
                     "--json")
            assert cp.returncode == 0, cp.stdout[-800:] + cp.stderr
        finally:
            server.kill()
            server.wait()
        got = json.loads(cp.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
        assert 0.5 < got <= 2.2, f"a2 received {got:.2f} Mbit/s from a1 over IPv6"
    finally:
        r.patch_merge(api, r.PODS, "a1", {"metadata": {"annotations": {
            names.ANN_MIRROR: None, names.ANN_EGRESS_RATE: None}}}, "dsa")
