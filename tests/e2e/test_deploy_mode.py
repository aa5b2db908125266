"""`pacific sandbox up --deploy`: Pacific itself runs as pods, from `make image`'s
image and deploy/'s manifests, under the sandbox's kubelets; a Deployment's pods
talk across nodes through it."""
from __future__ import annotations

import os

import pytest

from controller_fixtures import wait_until
from kubelet_fixtures import DEPLOYMENT, kubectl, running, skip_without_kubelets

from pacific import names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox.k8s import deploy
from pacific.sandbox.k8s import sandbox as k8s

pytestmark = pytest.mark.e2e
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)


@pytest.fixture(scope="module")
def dep(sandbox_factory):
    skip_without_kubelets()
    try:
        deploy.archive()
    except Exception as e:
        pytest.skip(str(e))
    sb = sandbox_factory(nodes=2, services=None, deploy=True)
    yield sb, client.load(k8s.kubeconfig_path(sb))
    sb.down()


def test_pacific_runs_as_pods_from_its_image(dep):
    sb, api = dep
    pods = r.list_(api, r.PODS, names.PACIFIC_NAMESPACE)[0]
    images = {c["image"] for p in pods for c in p["spec"]["containers"]}
    assert images == {deploy.image_name()}
    node_pods = [p for p in pods if p["metadata"]["name"].startswith("pacific-node-")]
    assert sorted(p["spec"]["nodeName"] for p in node_pods) == [n.name for n in sb.nodes]
    assert all(p["status"]["phase"] == "Running" for p in node_pods)
    # no sandbox process runs Pacific: the kubelets' containers do
    tags = sb.state.read()["daemons"]
    assert not [t for t in tags if "pacific-node" in t or t.startswith("controller")]


def test_deployment_pods_talk_across_nodes(dep):
    sb, api = dep
    kubectl(sb, "create", "namespace", "kl")
    kubectl(sb, "apply", "-f", "-", input=DEPLOYMENT)
    pods = wait_until(lambda: len(running(api, "kl", "app=web")) == 4 and
                      running(api, "kl", "app=web"), 120, interval=0.2,
                      what="4 web pods Running")
    assert {p["spec"]["nodeName"] for p in pods} == {n.name for n in sb.nodes}
    src = pods[0]
    for p in pods:
        if p["spec"]["nodeName"] != src["spec"]["nodeName"]:
            out = kubectl(sb, "-n", "kl", "exec", src["metadata"]["name"], "--", "wget",
                          "-qO-", f"http://{p['status']['podIP']}:8080/").stdout
            assert out == "hello from pacific\n"


def test_audit_records_of_every_node_pod_through_the_api_server(dep):
    """pacific-node as a pod reads ovn-controller's log from the host and
    writes its records there; `pacific flows --cluster` reads every node's."""
    import json
    import subprocess
    import sys
    sb, api = dep
    pods = wait_until(lambda: len(running(api, "kl", "app=web")) == 4 and
                      running(api, "kl", "app=web"), 120, what="the 4 web pods (test above)")
    target = pods[0]
    src = next(p for p in pods if p["spec"]["nodeName"] != target["spec"]["nodeName"])
    kubectl(sb, "apply", "-f", "-", input=json.dumps({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "deny-one", "namespace": "kl",
                     "annotations": {names.ANN_AUDIT: "deny"}},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}}))
    pacific = os.path.join(os.path.dirname(sys.executable), "pacific")

    def denied_and_recorded():
        # (busybox's wget -T crashes here; `timeout` ends the refused attempt)
        kubectl(sb, "-n", "kl", "exec", src["metadata"]["name"], "--", "timeout", "2", "wget",
                "-qO-", f"http://{target['status']['podIP']}:8080/", check=False)
        out = subprocess.run([pacific, "flows", "--cluster", "--kubeconfig",
                              k8s.kubeconfig_path(sb), "--json", "--verdict", "deny",
                              "--pod", f"kl/{target['metadata']['name']}"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return [json.loads(x) for x in out.stdout.splitlines()]
    recs = wait_until(denied_and_recorded, 60, interval=1, what="a deny record via --cluster")
    assert recs[-1]["node"] == target["spec"]["nodeName"]
    assert recs[-1]["policy"]["name"] == "deny-one"
    assert recs[-1]["src"]["pod"] == f"kl/{src['metadata']['name']}"


def test_down_leaves_no_mount_point_behind(dep):
    sb, _ = dep
    made = []
    path = os.path.join(os.path.dirname(sb.dir), ".kubelet-created")
    if os.path.exists(path):
        made = open(path).read().split()
    sb.down()
    others = [d for d in os.listdir(os.path.dirname(sb.dir))
              if os.path.exists(os.path.join(os.path.dirname(sb.dir), d, ".kubelet"))] \
        if os.path.isdir(os.path.dirname(sb.dir)) else []
    if not others:
        assert not [d for d in made if os.path.exists(d)]
