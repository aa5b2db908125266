"""Tenant isolation in the sandbox with real packets: three namespaces, pods on
two nodes, ICMP, TCP and UDP between every ordered pair of pods (so both
directions), through the whole stack (controllers, node daemons, CNI).
Isolated -> joined -> global -> isolated again, changed on running pods.
Three times (issue 27): over IPv4; over IPv6 between dual-stack pods in a
--dual-stack sandbox; and in an --ipv6-only sandbox (its join network,
service CIDR and Nodes IPv6 only)."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import probes
from controller_fixtures import wait_until
from pacific import contract, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods as sandboxpods

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
# IPv4 on the session's sandbox; each other family on its profile's (tests/conftest.py)
SANDBOX_PROFILE = {"dual-stack": "dual-stack", "ipv6-only": "ipv6-only"}
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
PORT = 7070
PODS = [("ta", "a1", "node1"), ("ta", "a2", "node2"), ("tb", "b1", "node1"),
        ("tb", "b2", "node2"), ("tc", "c1", "node2")]


@pytest.fixture(scope="module", params=["ipv4", "dual-stack", "ipv6-only"])
def env(request):
    """The pods and their addresses of the family under test: IPv4 in the
    session's sandbox; IPv6 in a --dual-stack one (its IPv4 is the same code as
    the first's); IPv6 in an --ipv6-only one; and the annotation of the nodes'
    join address of that family (ovn0's IPv6 in a dual-stack join network,
    the first family's annotation in an IPv6-only one)."""
    family = request.param
    sandbox = request.getfixturevalue("sandbox") if family == "ipv4" else \
        request.getfixturevalue("profile_sandbox")(SANDBOX_PROFILE[family])
    api = client.load(os.path.join(sandbox.dir, names.SANDBOX_KUBECONFIG))
    servers = []
    for ns, name, node in PODS:
        sandboxpods.add_pod(sandbox, ns, name, node, api=api)
        p = subprocess.Popen(["ip", "netns", "exec", netns(sandbox, ns, name), sys.executable,
                              NETCHECK, "serve", str(PORT)], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        servers.append(p)
    recs = {(ns, name): contract.own_record(r.get(api, r.PODS, name, ns)) for ns, name, _ in PODS}
    ips = {k: rec.ips[1] if family == "dual-stack" else rec.ip for k, rec in recs.items()}
    assert all((":" in ip) == (family != "ipv4") for ip in ips.values()), ips
    yield sandbox, api, ips, names.ANN_NODE_JOIN_IP6 if family == "dual-stack" \
        else names.ANN_NODE_JOIN_IP
    for p in servers:
        p.kill()
        p.wait()
    for ns, name, _ in PODS:
        sandboxpods.delete_pod(sandbox, ns, name, api=api)


def netns(sb, ns, name):
    return sandboxpods.load(sb, ns, name).netns     # a kubelet's pods: cni-<uuid>


def reaches(sb, src, ip, proto) -> bool:
    ns = netns(sb, *src) if isinstance(src, tuple) else src
    if proto == "icmp":
        argv = ["ping", "-6" if ":" in ip else "-4", "-c1", "-W1", ip]
        return sb.exec(ns, argv, check=False).returncode == 0
    return probes.probe(ns, proto, ip, PORT, 1.0)


def cli(sb, *args):
    out = subprocess.run([sys.executable, "-m", "pacific.cli.main", "tenant", *args],
                         env={**os.environ, "KUBECONFIG": os.path.join(sb.dir, names.SANDBOX_KUBECONFIG)},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def label(api, ns, tenant):
    r.patch_merge(api, r.NAMESPACES, ns, {"metadata": {"labels": {names.LABEL_TENANT: tenant}}})


def matrix(sb, ips, allowed) -> dict:
    """{(src, dst, proto): reached} for every ordered pair of pods and protocol,
    and the pairs that differ from allowed(src_ns, dst_ns)."""
    cases = [(s, d, p) for s, d in itertools.permutations(ips, 2) for p in ("icmp", "tcp", "udp")]
    with ThreadPoolExecutor(24) as pool:
        got = dict(zip(cases, pool.map(lambda c: reaches(sb, c[0], ips[c[1]], c[2]), cases)))
    return {c: ok for c, ok in got.items() if ok != allowed(c[0][0], c[1][0])}


def settle(sb, ips, allowed, timeout=10.0) -> float:
    """Seconds until one pair per namespace pair behaves as `allowed` (the change
    reached the chassis), then the whole matrix must agree."""
    t0 = time.monotonic()
    probes = {}
    for s, d in itertools.permutations(ips, 2):
        probes.setdefault((s[0], d[0]), (s, d))
    while True:
        if all(reaches(sb, s, ips[d], "icmp") == allowed(s[0], d[0]) for s, d in probes.values()):
            break
        assert time.monotonic() - t0 < timeout, "isolation change not in effect"
    took = time.monotonic() - t0
    wrong = matrix(sb, ips, allowed)
    assert not wrong, f"{len(wrong)} wrong: " + ", ".join(
        f"{s[0]}/{s[1]}->{d[0]}/{d[1]} {p} {'reached' if ok else 'blocked'}"
        for (s, d, p), ok in sorted(wrong.items()))
    return took


def tenants(assign: dict):
    def allowed(a, b):
        return a == b or "global" in (assign[a], assign[b]) or assign[a] == assign[b]
    return allowed


def test_isolated_joined_global_and_isolated_again(env):
    sb, api, ips, _ = env
    settle(sb, ips, tenants({"ta": "ta", "tb": "tb", "tc": "tc"}))
    cli(sb, "join", "tb", "--to", "ta")                       # join tb to ta
    settle(sb, ips, tenants({"ta": "ta", "tb": "ta", "tc": "tc"}))
    label(api, "tc", "global")                                # tc global
    settle(sb, ips, tenants({"ta": "ta", "tb": "ta", "tc": "global"}))
    listed = {line.split()[0]: line.split()[1:] for line in cli(sb, "list").splitlines()[1:]}
    assert listed["ta"] == ["ta,tb", "4"] and "tc" in listed["global"][0]
    cli(sb, "isolate", "tb")                                  # isolate again
    r.patch_merge(api, r.NAMESPACES, "tc", {"metadata": {"labels": {names.LABEL_TENANT: None}}})
    settle(sb, ips, tenants({"ta": "ta", "tb": "tb", "tc": "tc"}))


def test_nodes_reach_every_pod_and_every_pod_reaches_the_nodes(env):
    """Over the family under test: a dual-stack join network gives each
    node's ovn0 an IPv6 address, and the nodes route the pods' IPv6 into it."""
    sb, api, ips, join_annotation = env
    joins = [r.get(api, r.NODES, n.name)["metadata"]["annotations"][join_annotation]
             .split("/")[0] for n in sb.nodes]
    cases = [(n.netns, ip) for n in sb.nodes for ip in ips.values()]
    cases += [(netns(sb, *pod), j) for pod in ips for j in joins]
    with ThreadPoolExecutor(24) as pool:
        failed = [c for c, ok in zip(cases, pool.map(lambda c: reaches(sb, c[0], c[1], "icmp"),
                                                       cases)) if not ok]
    assert not failed, failed
    for n in sb.nodes:      # TCP from the node too (kubelet probes)
        assert all(reaches(sb, n.netns, ip, "tcp") for ip in ips.values())


OUTSIDE_PORT = 7171
EIP6 = "fd00:77::160"       # in the sandbox's EgressIP range (--egress-ip-cidrs)


def test_an_ipv6_only_clusters_pods_leave_through_their_node_an_egress_ip_or_a_gateway(env):
    """Egress in a cluster without IPv4 (IPv4 and dual-stack: test_egress*.py
    and test_dual_stack.py):

    - distributed: every pod reaches the outside host through its own node
      with its own address (the outside routes it back to that node);
    - an EgressIP selecting namespace tb: its pods (on both nodes) leave as
      the EgressIP's address, held by node1, the assignable node; ta's keep
      their own;
    - the default Subnet centralized on node2 with natOutgoing: every pod
      leaves as node2's IPv6 address; distributed again with natOutgoing,
      as its own node's."""
    sb, api, ips, _ = env
    if not sb.ipv6_only:
        pytest.skip("the IPv6-only cluster's egress; the others' is tested beside their features")
    out = sb.external_remote_ip6
    node_of = {(ns, name): sb.node(node) for ns, name, node in PODS}
    for pod, ip in ips.items():
        sb.exec(sb.external_netns, ["ip", "-6", "route", "replace", f"{ip}/128",
                                    "via", node_of[pod].underlay_ip6])
    server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable, NETCHECK,
                               "serve", str(OUTSIDE_PORT), "outside"], stdout=subprocess.PIPE,
                              text=True)

    def ask(pod):
        cp = sb.exec(netns(sb, *pod), [sys.executable, NETCHECK, "ask", "tcp", out,
                                       str(OUTSIDE_PORT), "3"], check=False)
        return cp.stdout.strip() if cp.returncode == 0 else None
    try:
        assert server.stdout.readline().strip() == "ready"
        for pod, ip in ips.items():
            got = wait_until(lambda pod=pod: ask(pod), 30, interval=0.5,
                             what=f"{pod} reaching the outside")
            assert got == f"outside {ip}", (pod, got)
        r.patch_merge(api, r.NODES, "node1", {"metadata": {"labels": {
            names.LABEL_EGRESS_ASSIGNABLE: ""}}})
        r.create(api, r.EGRESSIPS, {
            "apiVersion": names.API_VERSION, "kind": "EgressIP", "metadata": {"name": "eip6"},
            "spec": {"egressIPs": [EIP6], "namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": "tb"}}}})
        r.patch_merge(api, r.NAMESPACES, "tb", {"metadata": {"labels": {
            "kubernetes.io/metadata.name": "tb"}}})       # (the 1.20 API server sets none)
        for pod, ip in ips.items():
            want = f"outside {EIP6 if pod[0] == 'tb' else ip}"
            wait_until(lambda pod=pod, want=want: ask(pod) == want, 60, interval=0.5,
                       what=f"{pod} leaving as {want.split()[1]}")
        r.delete(api, r.EGRESSIPS, "eip6")
        r.patch_merge(api, r.SUBNETS, names.DEFAULT_SUBNET, {"spec": {
            "gatewayType": "centralized", "gatewayNodes": ["node2"], "natOutgoing": True}})
        for pod in ips:
            want = f"outside {sb.node('node2').underlay_ip6}"
            wait_until(lambda pod=pod: ask(pod) == want, 60, interval=0.5,
                       what=f"{pod} leaving through gateway node node2")
        r.patch_merge(api, r.SUBNETS, names.DEFAULT_SUBNET, {"spec": {
            "gatewayType": None, "gatewayNodes": None}})
        for pod in ips:
            want = f"outside {node_of[pod].underlay_ip6}"
            wait_until(lambda pod=pod: ask(pod) == want, 60, interval=0.5,
                       what=f"{pod} leaving as its own node's address")
    finally:
        r.delete(api, r.EGRESSIPS, "eip6")
        r.patch_merge(api, r.NODES, "node1", {"metadata": {"labels": {
            names.LABEL_EGRESS_ASSIGNABLE: None}}})
        r.patch_merge(api, r.SUBNETS, names.DEFAULT_SUBNET, {"spec": {
            "natOutgoing": None, "gatewayType": None, "gatewayNodes": None}})
        server.kill()
        server.wait()
        for ip in ips.values():
            sb.exec(sb.external_netns, ["ip", "-6", "route", "del", f"{ip}/128"], check=False)


def test_pacific_trace_in_an_ipv6_only_cluster_needs_no_flag(env):
    """Without -6, `pacific trace` follows the source's only family: a pod to
    another tenant's pod is dropped by isolation, to a node delivered, each
    with a real IPv6 packet agreeing."""
    sb, api, ips, _ = env
    if not sb.ipv6_only:
        pytest.skip("the IPv6-only cluster's; -6 in a dual-stack one: test_dual_stack.py")

    def trace(src, dst):
        cp = subprocess.run([sys.executable, "-m", "pacific.cli.main", "trace", src, dst,
                             "--json", "--probe", "--sandbox", sb.name],
                            capture_output=True, text=True, timeout=120)
        assert cp.returncode in (0, 1), cp.stderr
        return json.loads(cp.stdout)
    out = trace("ta/a1", "tb/b2")
    assert not out["ok"] and "tenant isolation" in out["verdict"] and out["probe"]["agrees"], out
    out = trace("ta/a1", "node/node2")
    assert out["ok"] and out["verdict"] == "delivered to node node2 (ovn0)", out
    assert out["probe"]["agrees"], out


def test_an_empty_tenant_label_is_refused_with_an_event_and_isolation_holds(env):
    sb, api, ips, _ = env
    # the API server accepts an empty label value; it names no tenant
    label(api, "tb", "")
    try:
        def evented():   # events of cluster-scoped objects live in "default"
            items, _ = r.list_(api, r.EVENTS, "default")
            return any(e["reason"] == "InvalidTenantLabel" and e["involvedObject"]["name"] == "tb"
                       for e in items)
        deadline = time.monotonic() + 10
        while not evented():
            assert time.monotonic() < deadline, "no InvalidTenantLabel event"
            time.sleep(0.05)
        settle(sb, ips, tenants({"ta": "ta", "tb": "tb", "tc": "tc"}))
    finally:
        r.patch_merge(api, r.NAMESPACES, "tb", {"metadata": {"labels": {names.LABEL_TENANT: None}}})


def test_a_private_subnet_accepts_only_itself_its_allowed_subnets_and_the_nodes(sandbox):
    sb = sandbox
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    subnets = {"vault": ("10.60.0.0/24", "pv", True, ["10.61.0.0/24"]),
               "vault-friends": ("10.61.0.0/24", "pa", False, [])}
    for subnet, (cidr, ns, private, allow) in subnets.items():
        r.create(api, r.NAMESPACES, {"metadata": {"name": ns, "labels": {names.LABEL_TENANT: "priv"}}})
        r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                  "metadata": {"name": subnet},
                                  "spec": {"cidrBlock": cidr, "namespaces": [ns], "private": private,
                                           "allowSubnets": allow}})
    r.create(api, r.NAMESPACES, {"metadata": {"name": "po", "labels": {names.LABEL_TENANT: "priv"}}})
    pods = [("pv", "v1", "node1"), ("pv", "v2", "node2"), ("pa", "f1", "node2"), ("po", "o1", "node1")]
    try:
        for ns, name, node in pods:
            sandboxpods.add_pod(sb, ns, name, node, api=api)
        ip = {(ns, n): contract.own_record(r.get(api, r.PODS, n, ns)).ip for ns, n, _ in pods}
        assert ip[("pv", "v1")].startswith("10.60.0.")
        v1, v2 = ip[("pv", "v1")], ip[("pv", "v2")]
        # what must pass may take a first packet's time to get there (a just-made
        # path, a vswitchd the node guard restarts): waited for, each up to 10 s
        wait_until(lambda: reaches(sb, ("pv", "v2"), v1, "icmp"), 10, what="itself")
        wait_until(lambda: reaches(sb, ("pa", "f1"), v1, "icmp"), 10, what="an allowed subnet")
        for n in sb.nodes:
            wait_until(lambda: reaches(sb, n.netns, v1, "icmp"), 10, what=f"{n.name}")
        # what must not pass, once every allowed path is known to work
        assert not reaches(sb, ("po", "o1"), v1, "icmp")         # any other
        assert not reaches(sb, ("po", "o1"), v2, "icmp")
        wait_until(lambda: reaches(sb, ("po", "o1"), ip[("pa", "f1")], "icmp"), 10,
                   what="o1 reaching the subnet that is not private")
        # private no more: the other subnet reaches it
        r.patch_merge(api, r.SUBNETS, "vault", {"spec": {"private": False}})
        wait_until(lambda: reaches(sb, ("po", "o1"), v1, "icmp"), 10, what="vault no longer private")
    finally:
        for ns, name, _ in pods:
            sandboxpods.delete_pod(sb, ns, name, api=api)
        for subnet in subnets:
            r.delete(api, r.SUBNETS, subnet)
