"""`pacific trace` against the whole stack: its verdicts name the Kubernetes
object that decided, and a real packet (--probe) agrees with every one."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from controller_fixtures import wait_until
from pacific import names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
PORT = 7070


def cli(sb, *args):
    return subprocess.run([sys.executable, "-m", "pacific.cli.main", *args, "--sandbox", sb.name],
                          capture_output=True, text=True, timeout=120)


def trace(sb, src, dst, *extra, probe=True):
    cp = cli(sb, "trace", src, dst, "--json", *(["--probe"] if probe else []), *extra)
    assert cp.returncode in (0, 1), cp.stderr
    out = json.loads(cp.stdout)
    assert (cp.returncode == 0) == (out["ok"] and (not out["probe"] or out["probe"]["agrees"]))
    if probe and out["probe"]:
        assert out["probe"]["agrees"], out
    return out


@pytest.fixture(scope="module")
def env(sandbox):
    api = client.load(os.path.join(sandbox.dir, names.SANDBOX_KUBECONFIG))
    for ns in ("tr-a", "tr-b"):
        r.create(api, r.NAMESPACES, {"metadata": {"name": ns}})
    pods = [("tr-a", "client", "node1", {}), ("tr-a", "web", "node2", {"app": "web"}),
            ("tr-b", "other", "node3", {})]
    servers = []
    for ns, name, node, labels in pods:
        pod = cnipods.add_pod(sandbox, ns, name, node, api=api, labels=labels)
        p = subprocess.Popen(["ip", "netns", "exec", pod.netns, sys.executable, NETCHECK,
                              "serve", str(PORT)], stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        servers.append(p)
    r.create(api, r.SERVICES, {"metadata": {"name": "web", "namespace": "tr-a"},
                               "spec": {"selector": {"app": "web"},
                                        "ports": [{"port": 80, "targetPort": PORT}]}}, "tr-a")
    yield sandbox, api
    for p in servers:
        p.kill()
        p.wait()
    for ns in ("tr-a", "tr-b"):
        r.delete(api, r.NAMESPACES, ns)


def test_an_allowed_path_and_its_reply(env):
    sb, _ = env
    out = trace(sb, "tr-a/client", "tr-a/web", "--tcp", str(PORT))
    assert out["ok"] and out["verdict"] == "delivered to pod tr-a/web"
    assert out["reply"] == "delivered to pod tr-a/client"
    assert out["probe"]["said"] == "TCP connection established"
    assert out["hops"]["request"][-1].endswith("out to pod tr-a/web")


def test_a_service_path_names_the_service(env):
    sb, api = env
    # the Service's endpoints are programmed once the slice names the pod
    out = wait_until(lambda: (o := trace(sb, "tr-a/client", "svc/tr-a/web", "--tcp", "80",
                                         probe=False))["ok"] and o, 30,
                     what="the Service programmed")
    assert out["verdict"] == "delivered to pod tr-a/web through Service tr-a/web"
    assert any("load-balanced by Service tr-a/web" in h for h in out["hops"]["request"])
    trace(sb, "tr-a/client", "svc/tr-a/web", "--tcp", "80")       # and a packet agrees


def test_a_tenant_drop_names_both_tenants(env):
    sb, _ = env
    out = trace(sb, "tr-a/client", "tr-b/other")
    assert not out["ok"]
    assert out["verdict"] == ("dropped by tenant isolation: tenant 'ns:tr-b' admits no traffic "
                              "from tenant 'ns:tr-a'")
    assert out["probe"]["reached"] is False


def test_a_networkpolicy_drop_names_the_policy_and_the_allowing_rule(env):
    sb, api = env
    r.create(api, r.NETWORKPOLICIES, {
        "metadata": {"name": "web-from-x", "namespace": "tr-a"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "x"}}}],
                              "ports": [{"port": PORT, "protocol": "TCP"}]}]}}, "tr-a")
    try:
        out = wait_until(lambda: (o := trace(sb, "tr-a/client", "tr-a/web", "--tcp", str(PORT),
                                             probe=False)) and not o["ok"] and o, 30,
                         what="the policy in force")
        assert out["verdict"].startswith("dropped by NetworkPolicy tr-a/web-from-x: it selects "
                                         "the pod for ingress and no ingress rule")
        trace(sb, "tr-a/client", "tr-a/web", "--tcp", str(PORT))    # a packet agrees
        r.patch_merge(api, r.PODS, "client", {"metadata": {"labels": {"role": "x"}}}, "tr-a")
        out = wait_until(lambda: (o := trace(sb, "tr-a/client", "tr-a/web", "--tcp", str(PORT),
                                             probe=False))["ok"] and o, 30,
                         what="the rule allowing the client")
        assert "NetworkPolicy tr-a/web-from-x ingress rule 0: allow" in " ".join(
            out["hops"]["request"])
        trace(sb, "tr-a/client", "tr-a/web", "--tcp", str(PORT))
    finally:
        r.delete(api, r.NETWORKPOLICIES, "web-from-x", "tr-a")


def test_a_node_reaches_a_pod_and_an_outside_address_leaves_through_the_pods_node(env):
    sb, _ = env
    out = trace(sb, "node/node3", "tr-a/web", "--tcp", str(PORT))
    assert out["ok"] and out["reply"] == "delivered to node node3 (ovn0)"
    out = trace(sb, "tr-a/client", "192.0.2.1", probe=False)
    assert out["ok"] and out["verdict"].startswith("leaves the cluster through node node1 (ovn0)")


@pytest.mark.parametrize("src,dst,extra,words", [
    ("tr-a/nope", "tr-a/web", [], "tr-a/nope: no pod of that name"),
    ("192.0.2.1", "tr-a/web", [], "an address cannot be a source"),
    ("tr-a/client", "svc/tr-a/web", [], "give the port with --tcp or --udp (it serves 80)"),
    ("node/nope", "tr-a/web", [], "node nope does not exist"),
    ("tr-a/client", "not-an-address", [], "expected NS/POD"),
])
def test_bad_input_is_named(env, src, dst, extra, words):
    sb, _ = env
    cp = cli(sb, "trace", src, dst, *extra)
    assert cp.returncode == 2 and words in cp.stderr, cp.stderr
