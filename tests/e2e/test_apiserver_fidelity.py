"""The API emulator is as strict as kube-apiserver where Pacific could go wrong
unnoticed, and prints what kubectl v1.32 expects: CRD schema validation with the
real server's messages, fieldValidation from kubectl, server-side tables."""
import json
import os
import re
import shutil
import subprocess
import time

import pytest

from apiserver_fixtures import REPO, new_emulator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")


@pytest.fixture(scope="module")
def emu():
    e, d = new_emulator(extra=["--crd-dir", str(REPO / "deploy" / "crds")])
    yield e
    e.stop()
    d.cleanup()


def kubectl(emu, *args, input=None, check=True):
    env = dict(os.environ, KUBECONFIG=emu.kubeconfig, HOME=emu.workdir)
    r = subprocess.run([KUBECTL, "--cache-dir", os.path.join(emu.workdir, "kcache"), *args], env=env,
                       input=input, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {r.stderr}")
    return r


def rows(text: str) -> list[list[str]]:
    """kubectl's table output cut at the header's column offsets (cells may be
    empty, or hold spaces)."""
    lines = text.rstrip("\n").splitlines()
    starts = [m.start() for m in re.finditer(r"(?:^|(?<=\s\s))\S", lines[0])]
    bounds = list(zip(starts, starts[1:] + [None]))
    return [[line[a:b].strip() for a, b in bounds] for line in lines]


@needs_kubectl
def test_kubectl_sees_the_real_servers_validation_errors(emu):
    r = kubectl(emu, "apply", "-f", "-", check=False,
                input="apiVersion: pacific.io/v1\nkind: Subnet\nmetadata: {name: bad}\nspec: {gateway: 10.9.0.1}\n")
    assert r.returncode != 0
    assert 'The Subnet "bad" is invalid: spec.cidrBlock: Required value' in r.stderr
    r = kubectl(emu, "apply", "-f", "-", check=False,
                input="apiVersion: pacific.io/v1\nkind: Subnet\nmetadata: {name: typo}\n"
                      "spec: {cidrBlock: 10.9.0.0/24, natOutgoin: true}\n")
    assert r.returncode != 0 and 'strict decoding error: unknown field "spec.natOutgoin"' in r.stderr
    r = kubectl(emu, "apply", "--validate=warn", "-f", "-",
                input="apiVersion: pacific.io/v1\nkind: Subnet\nmetadata: {name: typo}\n"
                      "spec: {cidrBlock: 10.9.0.0/24, natOutgoin: true}\n")
    assert 'Warning: unknown field "spec.natOutgoin"' in r.stderr
    spec = json.loads(kubectl(emu, "get", "subnet", "typo", "-o", "json").stdout)["spec"]
    assert spec == {"cidrBlock": "10.9.0.0/24", "gatewayType": "distributed"}, "pruned and defaulted"
    r = kubectl(emu, "patch", "subnet", "typo", "--type=merge", "-p", '{"spec":{"gatewayType":"anycast"}}',
                check=False)
    assert 'spec.gatewayType: Unsupported value: "anycast": supported values: "distributed", "centralized"' \
        in r.stderr
    kubectl(emu, "delete", "subnet", "typo")


@needs_kubectl
def test_kubectl_get_subnets_prints_crd_columns_with_filters_and_ages(emu):
    kubectl(emu, "apply", "-f", "-", input="apiVersion: pacific.io/v1\nkind: Subnet\nmetadata: {name: blue}\n"
                                           "spec: {cidrBlock: 10.20.0.0/24, default: true}\n")
    kubectl(emu, "patch", "subnet", "blue", "--subresource=status", "--type=merge", "-p", json.dumps(
        {"status": {"usedIPs": 4, "availableIPs": 249, "conditions": [
            {"type": "Validated", "status": "True"}, {"type": "Ready", "status": "False", "reason": "Overlap"}]}}))
    out = rows(kubectl(emu, "get", "subnets", "blue").stdout)
    assert out[0] == ["NAME", "CIDR", "GATEWAY", "DEFAULT", "USED", "AVAILABLE", "READY", "AGE"]
    name, cidr, gw, default, used, avail, ready, age = out[1]
    assert (name, cidr, gw, default, used, avail, ready) == ("blue", "10.20.0.0/24", "", "true", "4",
                                                             "249", "False")
    assert age.endswith("s") and age[:-1].isdigit()
    r = kubectl(emu, "patch", "subnet", "blue", "--subresource=status", "--type=merge", "-p",
                '{"status":{"usedIPs":"four"}}', check=False)
    assert 'status.usedIPs: Invalid value: "string": status.usedIPs in body must be of type ' \
                      'integer: "string"' in r.stderr
    kubectl(emu, "delete", "subnet", "blue")


@needs_kubectl
def test_kubectl_get_nodes_and_pods_wide(emu):
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": "node1", "labels": {"node-role.kubernetes.io/gateway": ""}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": "192.168.77.11"}],
                   "nodeInfo": {"kubeletVersion": "v1.32.4", "osImage": "Debian GNU/Linux 12 (bookworm)"}}}
    kubectl(emu, "apply", "-f", "-", input=json.dumps(node))
    out = rows(kubectl(emu, "get", "nodes", "-o", "wide").stdout)
    assert out[0][:7] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP"]
    assert out[1][:3] == ["node1", "Ready", "gateway"] and out[1][4:8] == [
        "v1.32.4", "192.168.77.11", "<none>", "Debian GNU/Linux 12 (bookworm)"]
    kubectl(emu, "run", "web", "--image=nginx:1.25", "--overrides", json.dumps({"spec": {"nodeName": "node1"}}))
    out = rows(kubectl(emu, "get", "pods", "-o", "wide").stdout)
    assert out[0] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE",
                      "READINESS GATES"]
    assert out[1][:4] == ["web", "0/1", "Pending", "0"] and out[1][5:7] == ["<none>", "node1"]
    # a bound pod cannot be moved by an update (only the scheduler binds, once)
    r = kubectl(emu, "patch", "pod", "web", "-p", '{"spec":{"nodeName":"node2"}}', check=False)
    assert "pod updates may not change fields other than" in r.stderr
    kubectl(emu, "delete", "pod", "web", "--wait=false")
    kubectl(emu, "delete", "node", "node1")


def test_list_resource_version_semantics(emu):
    code, body = emu.request("GET", "/api/v1/namespaces?limit=1&resourceVersion=0")
    assert code == 200 and len(body["items"]) >= 4 and "continue" not in body["metadata"], \
        "rv=0 is served from the watch cache, which ignores limit"
    code, body = emu.request("GET", "/api/v1/namespaces?limit=1")
    assert code == 200 and len(body["items"]) == 1 and body["metadata"]["continue"]
    rv = int(body["metadata"]["resourceVersion"])
    t0 = time.monotonic()
    code, body = emu.request("GET", f"/api/v1/namespaces?resourceVersion={rv + 1000}")
    assert code == 504 and body["reason"] == "Timeout" and time.monotonic() - t0 >= 2.9
    assert body["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    code, body = emu.request("GET", "/api/v1/namespaces?resourceVersionMatch=Exact")
    assert code == 422 and "resourceVersionMatch is forbidden unless resourceVersion is provided" in body["message"]
