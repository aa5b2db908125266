"""The NetworkPolicy modules' sandbox and helpers (test_networkpolicy,
_more, _tiers, _audit, _conformance, _v6): namespaces x, y, z of one tenant,
pods a, b, c in each over two nodes, TCP 80 and 81 and UDP 80; `check()`
probes every ordered pair and port against a model of the case; the
ClusterNetworkPolicy builders and the wait for its Enforced status."""
from __future__ import annotations

import glob
import itertools
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from controller_fixtures import wait_until
import probes
from pacific import clusterpolicy, contract, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods as sandboxpods


# check() waits up to 15 s for the matrix to converge (the controller and
# ovn-controller apply a policy change asynchronously), probing every pair each round.
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
# (sandbox, namespace, pod) -> the pod's network namespace (a kubelet names it cni-<uuid>)
POD_NETNS: dict[tuple[str, str, str], str] = {}
NSS, PODS = ("x", "y", "z"), ("a", "b", "c")
PROBES = (("tcp", 80), ("tcp", 81), ("udp", 80))
# probes in flight at once: each is a thread in the pod's namespace (no process),
# and a blocked one waits out its 1 s timeout, so the matrix's time is the
# blocked probes' count / this
PARALLEL_PROBES = 48
NAMED = [{"name": "serve-80", "containerPort": 80, "protocol": "TCP"},
         {"name": "serve-81", "containerPort": 81, "protocol": "TCP"},
         {"name": "serve-80-udp", "containerPort": 80, "protocol": "UDP"}]


@pytest.fixture
def np_env(shared):
    """A 2-node sandbox with the 9 pods and their servers, shared with
    test_networkpolicy_more (tests/conftest.py `shared`): made once, brought down
    after the last test of the two modules."""
    return shared("np_env", _np_env)


def _np_env(make_sandbox):
    sandbox = make_sandbox(nodes=2, services=None)
    api = client.load(os.path.join(sandbox.dir, names.SANDBOX_KUBECONFIG))
    servers = []
    try:
        for i, (ns, pod) in enumerate(itertools.product(NSS, PODS)):
            if r.get(api, r.NAMESPACES, ns) is None:
                r.create(api, r.NAMESPACES, {"metadata": {"name": ns, "labels": {
                    "ns": ns, names.LABEL_TENANT: "np"}}})
            serving_pod(sandbox, api, ns, pod, ("node1", "node2")[i % 2], servers)
        ips = {(ns, pod): contract.own_record(r.get(api, r.PODS, pod, ns)).ip
               for ns, pod in itertools.product(NSS, PODS)}
        yield sandbox, api, ips
    finally:          # the sandbox itself goes down with the shared set-up
        for p in servers:
            p.kill()
            p.wait()


def serving_pod(sandbox, api, ns, pod, node, servers: list) -> str:
    """Pod `pod` of `ns` on `node` (label pod=<pod>, the NAMED container ports)
    with netcheck's TCP and UDP echo on ports 80 and 81 (their processes
    appended to `servers`: the caller kills them); its netns, also in POD_NETNS."""
    added = sandboxpods.add_pod(sandbox, ns, pod, node, api=api, labels={"pod": pod},
                                container_ports=NAMED)
    POD_NETNS[(sandbox.name, ns, pod)] = added.netns
    for port in (80, 81):
        p = subprocess.Popen(["ip", "netns", "exec", added.netns,
                              sys.executable, NETCHECK, "serve", str(port)],
                             stdout=subprocess.PIPE, text=True)
        servers.append(p)
        assert p.stdout.readline().strip() == "ready"
    return added.netns


def probe(sb, src, ip, proto, port) -> bool:
    """netcheck's probe from inside the source pod's namespace, on a thread that
    entered it (setns): no process per probe, so hundreds of probes in parallel
    do not starve this 2-core machine into false timeouts."""
    return probes.probe(POD_NETNS[(sb.name, *src)], proto, ip, port, 1.0)


def explain(sb, src, dst, proto, port) -> str:
    """What `pacific trace` (OVN's logical pipeline and the source chassis's
    OpenFlow tables) says of one case a check got wrong: whether the policy or
    the datapath disagrees is then in the failure message."""
    cp = subprocess.run([os.path.join(os.path.dirname(sys.executable), "pacific"), "trace",
                         "/".join(src), "/".join(dst), f"--{proto}", str(port), "--ovs",
                         "--sandbox", sb.name], capture_output=True, text=True, timeout=60)
    return f"pacific trace {'/'.join(src)} {'/'.join(dst)} --{proto} {port}:\n" + \
        (cp.stdout + cp.stderr)[-3000:]


def controller_policy_log(sb, lines=15) -> str:
    """The controllers' last log lines about policies (for a failure message:
    whether the controller compiled and wrote the policy, and when)."""
    out = []
    for path in sorted(glob.glob(os.path.join(sb.dir, "services", "controller*.log"))):
        with open(path, errors="replace") as f:
            got = [ln.rstrip() for ln in f if "policy" in ln]
        out.append(f"{os.path.basename(path)}:\n" + "\n".join(got[-lines:]))
    return "\n".join(out)


def check(sb, ips, allowed, timeout=15.0, probes=PROBES, targets=None):
    """Every pair and probe as allowed(src, dst, proto, port) says.  Probes that
    disagree are probed again until they agree or the timeout passes (policies
    apply within a second; a lone probe can also lose a packet on this busy
    2-core machine): every case must agree at some point, none is skipped.
    `probes`: the (proto, port) tried on each pair; `targets`: more
    destinations ({key: ip}, e.g. nodes) that are no sources."""
    dsts = {**ips, **(targets or {})}
    cases = [(s, d, pr, pt) for s in ips for d in dsts if d != s for pr, pt in probes]
    deadline = time.monotonic() + timeout
    while True:
        with ThreadPoolExecutor(PARALLEL_PROBES) as pool:
            got = list(pool.map(lambda c: probe(sb, c[0], dsts[c[1]], c[2], c[3]), cases))
        wrong = [(c, ok) for c, ok in zip(cases, got) if ok != allowed(*c)]
        if not wrong:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(wrong)}/{len(cases)} wrong: " + ", ".join(
                f"{s[0]}/{s[1]}->{d[0]}/{d[1]} {pr}/{pt} {'reached' if ok else 'blocked'}"
                for (s, d, pr, pt), ok in wrong[:12]) + "\n" + explain(sb, *wrong[0][0])
                + "\n" + controller_policy_log(sb))
        cases = [c for c, _ in wrong]      # the others already agreed


def apply(api, *policies) -> list[dict]:
    """Create the policies; returns them as the server stored them."""
    return [r.create(api, r.NETWORKPOLICIES, {"apiVersion": "networking.k8s.io/v1",
                                              "kind": "NetworkPolicy", **p},
                     p["metadata"]["namespace"])
            for p in policies]


def end_port_kept(stored: list[dict]) -> bool:
    """endPort came with Kubernetes 1.21 (beta 1.22): a 1.20 server drops the
    field, and the rule is then the single port, which Pacific enforces."""
    return any("endPort" in port for p in stored for rule in p["spec"].get("ingress") or []
               for port in rule.get("ports") or [])


def clean(api):
    for ns in NSS:
        for p in r.list_(api, r.NETWORKPOLICIES, ns)[0]:
            r.delete(api, r.NETWORKPOLICIES, p["metadata"]["name"], ns)


def pol(name, ns, spec):
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec}


@pytest.fixture
def cluster(np_env):
    sb, api, ips = np_env
    clean(api)
    yield sb, api, ips
    clean(api)


def every(s, d, proto, port):
    return True


ALL_IN_X = {"podSelector": {}}
ING = {"policyTypes": ["Ingress"]}


# Each case: (policies, allowed(src, dst, proto, port)); src/dst are (ns, pod).
CASES = {
    "no policy: all": ([], every),
    "deny all ingress in x (replies of x's own connections pass)": (
        [pol("deny", "x", {**ALL_IN_X, **ING})], lambda s, d, pr, pt: d[0] != "x"),
    "deny all ingress to x/a only": (
        [pol("deny-a", "x", {"podSelector": {"matchLabels": {"pod": "a"}}})],
        lambda s, d, pr, pt: d != ("x", "a")),
    "x/a from x/b only (podSelector peer)": (
        [pol("a-from-b", "x", {"podSelector": {"matchLabels": {"pod": "a"}},
                               "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]})],
        lambda s, d, pr, pt: d != ("x", "a") or s == ("x", "b")),
    "x from namespace y (namespaceSelector peer)": (
        [pol("from-y", "x", {**ALL_IN_X, "ingress": [{"from": [
            {"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]})],
        lambda s, d, pr, pt: d[0] != "x" or s[0] == "y"),
    "x from y/c only (namespace AND pod in one peer)": (
        [pol("from-yc", "x", {**ALL_IN_X, "ingress": [{"from": [
            {"namespaceSelector": {"matchLabels": {"ns": "y"}}, "podSelector": {"matchLabels": {"pod": "c"}}}]}]})],
        lambda s, d, pr, pt: d[0] != "x" or s == ("y", "c")),
    "x from y or from pods c (two peers: OR)": (
        [pol("or", "x", {**ALL_IN_X, "ingress": [{"from": [
            {"namespaceSelector": {"matchLabels": {"ns": "y"}}},
            {"podSelector": {"matchLabels": {"pod": "c"}}}]}]})],
        lambda s, d, pr, pt: d[0] != "x" or s[0] == "y" or s == ("x", "c")),
    "x: TCP 80 only from anywhere": (
        [pol("tcp80", "x", {**ALL_IN_X, "ingress": [{"ports": [{"protocol": "TCP", "port": 80}]}]})],
        lambda s, d, pr, pt: d[0] != "x" or (pr, pt) == ("tcp", 80)),
    "x: named port serve-81": (
        [pol("named", "x", {**ALL_IN_X, "ingress": [{"ports": [{"port": "serve-81"}]}]})],
        lambda s, d, pr, pt: d[0] != "x" or (pr, pt) == ("tcp", 81)),
    "x: UDP 80 only": (
        [pol("udp", "x", {**ALL_IN_X, "ingress": [{"ports": [{"protocol": "UDP", "port": 80}]}]})],
        lambda s, d, pr, pt: d[0] != "x" or (pr, pt) == ("udp", 80)),
    "x: TCP 80-81 (endPort)": (
        [pol("range", "x", {**ALL_IN_X, "ingress": [{"ports": [{"protocol": "TCP", "port": 80, "endPort": 81}]}]})],
        lambda s, d, pr, pt: d[0] != "x" or pr == "tcp"),
    # what a 1.20 server keeps of the case above (it drops endPort)
    "x: TCP 80-81 (endPort dropped by the server)": (
        [], lambda s, d, pr, pt: d[0] != "x" or (pr, pt) == ("tcp", 80)),
    "x: a named port nobody declares matches nothing": (
        [pol("nobody", "x", {**ALL_IN_X, "ingress": [{"ports": [{"port": "nope"}]}]})],
        lambda s, d, pr, pt: d[0] != "x"),
    "deny all egress from x": (
        [pol("no-out", "x", {**ALL_IN_X, "policyTypes": ["Egress"]})],
        lambda s, d, pr, pt: s[0] != "x"),
    "x egress to y on TCP 80 only": (
        [pol("out-y80", "x", {**ALL_IN_X, "policyTypes": ["Egress"], "egress": [{
            "to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}],
            "ports": [{"protocol": "TCP", "port": 80}]}]})],
        lambda s, d, pr, pt: s[0] != "x" or (d[0] == "y" and (pr, pt) == ("tcp", 80))),
    "z from pods NotIn {a} (matchExpressions)": (
        [pol("notin", "z", {**ALL_IN_X, "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {
            "matchExpressions": [{"key": "pod", "operator": "NotIn", "values": ["a"]}]}}]}]})],
        lambda s, d, pr, pt: d[0] != "z" or s[1] != "a"),
    "two policies on x add up (from y, and TCP 81 from anywhere)": (
        [pol("from-y", "x", {**ALL_IN_X, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}}]}]}),
         pol("tcp81", "x", {**ALL_IN_X, "ingress": [{"ports": [{"protocol": "TCP", "port": 81}]}]})],
        lambda s, d, pr, pt: d[0] != "x" or s[0] == "y" or (pr, pt) == ("tcp", 81)),
    "ingress and egress in one policy on y/b": (
        [pol("both", "y", {"podSelector": {"matchLabels": {"pod": "b"}}, "policyTypes": ["Ingress", "Egress"],
                           "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "a"}}}]}],
                           "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"ns": "z"}}}]}]})],
        lambda s, d, pr, pt: (d != ("y", "b") or s == ("y", "a")) and (s != ("y", "b") or d[0] == "z")),
}


FIRST = list(CASES)[:9]      # test_networkpolicy's cases; _more runs the rest


def run_case(cluster, case):
    sb, api, ips = cluster
    policies, allowed = CASES[case]
    stored = apply(api, *policies)
    if "endPort" in case and not end_port_kept(stored):
        allowed = CASES["x: TCP 80-81 (endPort dropped by the server)"][1]
    check(sb, ips, allowed)


def cnp(name, tier, priority, subject, ingress=None, egress=None):
    spec = {"tier": tier, "priority": priority, "subject": subject}
    if ingress:
        spec["ingress"] = ingress
    if egress:
        spec["egress"] = egress
    return {"apiVersion": f"{clusterpolicy.GROUP}/{clusterpolicy.VERSION}",
            "kind": clusterpolicy.KIND, "metadata": {"name": name}, "spec": spec}


def ns_sel(ns):
    return {"matchLabels": {"ns": ns}}


def pod_sel(ns, pod):
    return {"pods": {"namespaceSelector": ns_sel(ns), "podSelector": {"matchLabels": {"pod": pod}}}}


def tcp(port):
    return {"tcp": {"destinationPort": {"number": port}}}


def clean_cnps(api):
    for o in r.list_(api, r.CLUSTERNETWORKPOLICIES)[0]:
        r.delete(api, r.CLUSTERNETWORKPOLICIES, o["metadata"]["name"])


@pytest.fixture
def tiers(np_env):
    sb, api, ips = np_env
    clean(api)
    clean_cnps(api)
    yield sb, api, ips
    clean(api)
    clean_cnps(api)


# s: OVS revalidates its datapath's cached flows at most this long after an
# OpenFlow change (other_config:max-revalidator, 500 ms), plus a probe's time
REVALIDATION = 1.5


def enforced(api, name, timeout=30.0, generation=0) -> dict:
    """Its conditions once Enforced is True (for `generation` or a later one:
    after a change, the True of the one before does not count)."""
    def cond():
        o = r.get(api, r.CLUSTERNETWORKPOLICIES, name) or {}
        c = {x["type"]: x for x in (o.get("status") or {}).get("conditions") or []}
        e = c.get("Enforced", {})
        return c if e.get("status") == "True" and e.get("observedGeneration", 0) >= generation \
            else None
    return wait_until(cond, timeout, what=f"ClusterNetworkPolicy {name} Enforced")


def run(tiers_env, cnps=(), nps=(), allowed=every):
    sb, api, ips = tiers_env
    for c in cnps:
        r.create(api, r.CLUSTERNETWORKPOLICIES, c)
    apply(api, *nps)
    for c in cnps:
        enforced(api, c["metadata"]["name"])
    check(sb, ips, allowed)
