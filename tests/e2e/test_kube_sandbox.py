"""The sandbox's real Kubernetes: kubectl against kube-apiserver v1.20.2, the
controller-manager's Deployments and EndpointSlices, pods run by the node pod
runners through Pacific, RBAC enforced on Pacific's own identities, deploy/
accepted by the server."""
from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from controller_fixtures import wait_until
from kubelet_fixtures import kubectl, running

from pacific import contract, names
from pacific.kube import client, errors, versions
from pacific.kube import resources as r
from pacific.sandbox import cnipods
from pacific.sandbox import netns as sbnetns
from pacific.sandbox.k8s import bins, kubelet
from pacific.sandbox.k8s import sandbox as k8s

pytestmark = pytest.mark.e2e
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _deletions(sb, api, ns, selector) -> str:
    """Where the pods being deleted are: their state and what their kubelet
    last logged about them."""
    out = []
    for p in r.list_(api, r.PODS, ns, label_selector=selector)[0]:
        md, st = p["metadata"], p.get("status") or {}
        if not md.get("deletionTimestamp"):
            continue
        states = [list((c.get("state") or {}).keys()) for c in st.get("containerStatuses") or []]
        log = os.path.join(sb.dir, "services",
                           kubelet.kubelet_tag(sb.node(p["spec"]["nodeName"])) + ".log")
        lines = [ln.strip()[:300] for ln in open(log, errors="replace")
                 if md["name"] in ln] if os.path.exists(log) else []
        out.append(f"{md['name']} on {p['spec'].get('nodeName')}: phase {st.get('phase')}, "
                   f"deleted {md['deletionTimestamp']}, containers {states}; kubelet: "
                   + " | ".join(lines[-8:]))
    return "; ".join(out) or "none being deleted"


@pytest.fixture(scope="module")
def kube(sandbox):
    return sandbox, client.load(k8s.kubeconfig_path(sandbox))


def test_kubectl_namespace_deployment_scale_and_delete(kube):
    sb, api = kube
    kubectl(sb, "create", "namespace", "kc")
    body = json.loads(kubectl(sb, "-n", "kc", "create", "deployment", "web",
                              "--image=localhost/busybox:latest", "--replicas=6",
                              "--dry-run=client", "-o", "json").stdout)
    # the image's process ignores SIGTERM: each pod scaled away would take the
    # default 30 s grace period before it is killed (and then its DEL)
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    body["metadata"]["namespace"] = "kc"
    subprocess.run([bins.path("kubectl"), f"--kubeconfig={k8s.kubeconfig_path(sb)}", "-n", "kc",
                    "apply", "-f", "-"], input=json.dumps(body), capture_output=True, text=True,
                   check=True, timeout=60)
    pods = wait_until(lambda: len(running(api, "kc", "app=web")) == 6 and
                      running(api, "kc", "app=web"), 90, what="6 web pods Running")
    assert len({p["spec"]["nodeName"] for p in pods}) >= 2, "the scheduler spread them"
    for p in pods:   # the address is the one Pacific allocated, and it answers
        assert contract.own_record(p).ip == p["status"]["podIP"]
    src = pods[0]["metadata"]["name"]
    for p in pods[1:]:
        assert cnipods.exec_pod(sb, "kc", src, ["ping", "-c1", "-W2", p["status"]["podIP"]],
                                capture_output=True).returncode == 0
    out = kubectl(sb, "-n", "kc", "get", "pods", "-o", "wide").stdout
    assert out.count("Running") == 6

    pod_netns = {p["metadata"]["name"]: cnipods.load(sb, "kc", p["metadata"]["name"]).netns
                 for p in pods}
    kubectl(sb, "-n", "kc", "scale", "deployment", "web", "--replicas=2")
    try:
        wait_until(lambda: len(r.list_(api, r.PODS, "kc", label_selector="app=web")[0]) == 2, 60,
                   what="scaled down to 2")
    except AssertionError as e:
        raise AssertionError(f"{e}: {_deletions(sb, api, 'kc', 'app=web')}") from None
    gone = {p["metadata"]["name"] for p in pods} - {
        p["metadata"]["name"] for p in r.list_(api, r.PODS, "kc")[0]}
    assert len(gone) == 4
    for name in gone:   # the node tore their network down
        wait_until(lambda name=name: not sbnetns.exists(pod_netns[name]), 30,
                   what=f"{name}'s network namespace removed")
        assert cnipods.load(sb, "kc", name) is None
    kubectl(sb, "delete", "namespace", "kc", "--wait=true", timeout=120)
    assert r.get(api, r.NAMESPACES, "kc") is None
    # the namespace controller deleted the pods, the runners tore them down, the
    # controller released their addresses
    wait_until(lambda: not [i for i in r.list_(api, r.IPS)[0]
                            if i["spec"].get("namespace") == "kc"], 30, what="IP objects released")


def test_kubectl_run_apply_watch_and_a_service_gets_endpointslices(kube, tmp_path):
    sb, api = kube
    kubectl(sb, "create", "namespace", "svc")
    watch = subprocess.Popen([bins.path("kubectl"), f"--kubeconfig={k8s.kubeconfig_path(sb)}",
                              "-n", "svc", "get", "pods", "-w", "--no-headers"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        kubectl(sb, "-n", "svc", "run", "solo", "--image=localhost/busybox:latest",
                "--image-pull-policy=IfNotPresent")
        manifest = tmp_path / "web.yaml"
        manifest.write_text("""
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: svc}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{name: web, image: localhost/busybox:latest, imagePullPolicy: IfNotPresent,
                    ports: [{name: http, containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: svc}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
""")
        kubectl(sb, "apply", "-f", str(manifest))
        pods = wait_until(lambda: len(running(api, "svc", "app=web")) == 3 and
                          running(api, "svc", "app=web"), 90, what="3 web pods Running")
        wait_until(lambda: running(api, "svc", "run=solo"), 60, what="solo Running")
        want = sorted(p["status"]["podIP"] for p in pods)
        slices_res = versions.endpointslices(api)
        assert slices_res.version == "v1beta1"        # what a 1.20 server serves

        def slice_addresses():
            items, _ = r.list_(api, slices_res, "svc",
                               label_selector="kubernetes.io/service-name=web")
            return sorted(a for s in items for e in s.get("endpoints") or []
                          if (e.get("conditions") or {}).get("ready")
                          for a in e["addresses"])
        wait_until(lambda: slice_addresses() == want, 60, what=f"EndpointSlice listing {want}")
        items, _ = r.list_(api, slices_res, "svc", label_selector="kubernetes.io/service-name=web")
        assert {versions.endpoint_node(e) for s in items for e in s["endpoints"]} == \
            {p["spec"]["nodeName"] for p in pods}
        assert items[0]["ports"][0]["port"] == 8080    # the named target port, resolved
    finally:
        kubectl(sb, "delete", "namespace", "svc", "--wait=false", check=False)
        time.sleep(0.5)
        watch.terminate()
        out = watch.communicate(timeout=10)[0]
    assert "solo" in out and "Running" in out, out[-2000:]


def test_rbac_is_enforced_on_pacifics_own_identities(kube):
    """Pacific's daemons hold their ServiceAccount tokens, bound by deploy/'s roles
    and nothing more."""
    import yaml

    from pacific.sandbox.k8s.kubeconfig import write_kubeconfig
    sb, _ = kube
    # pacific-node's token, at the root namespace's URL (its own kubeconfig points
    # at the underlay address, which only the node namespaces reach)
    with open(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_UNDERLAY)) as f:
        token = yaml.safe_load(f)["users"][0]["user"]["token"]
    plane = k8s.plane(sb)
    node_kc = write_kubeconfig(os.path.join(sb.dir, "test-node-root.kubeconfig"), plane.url,
                               token, plane.pki.ca_crt)
    ctl_kc = os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_CONTROLLER)
    node_api, ctl_api = client.load(node_kc), client.load(ctl_kc)
    # the controller may write Subnets' status, the node daemon may not
    with pytest.raises(errors.ApiError) as e:
        r.list_(node_api, r.SECRETS, "kube-system")
    assert e.value.status == 403 and "system:serviceaccount:pacific-system:pacific-node" in str(e.value)
    with pytest.raises(errors.ApiError) as e:
        r.create(node_api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                       "metadata": {"name": "forbidden"},
                                       "spec": {"cidrBlock": "10.99.0.0/24"}})
    assert e.value.status == 403
    with pytest.raises(errors.ApiError) as e:
        r.delete(ctl_api, r.NAMESPACES, "default")
    assert e.value.status == 403
    assert r.list_(ctl_api, r.SUBNETS)[0]            # what it needs, it has


def test_deploy_manifests_pass_server_side_dry_run(kube):
    sb, _ = kube
    out = kubectl(sb, "apply", "--dry-run=server", "-k", os.path.join(REPO, "deploy"),
                  check=False)
    assert out.returncode == 0, out.stderr
    for kind in ("customresourcedefinition.apiextensions.k8s.io/subnets.pacific.io",
                 "deployment.apps/pacific-controller", "daemonset.apps/pacific-node",
                 "clusterrole.rbac.authorization.k8s.io/pacific-controller"):
        assert kind in out.stdout, out.stdout


def test_pod_add_with_ports_exec_detach_and_delete(kube):
    sb, api = kube
    out = subprocess.run([".venv/bin/pacific", "sandbox", "pod", "add", "tools/srv", "--name",
                          sb.name, "--port", "http:8080/TCP"], capture_output=True, text=True,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr
    pod = r.get(api, r.PODS, "srv", "tools")
    assert pod["spec"]["containers"][0]["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    assert pod["spec"]["nodeName"] in {n.name for n in sb.nodes}     # the scheduler chose
    out = subprocess.run([".venv/bin/pacific", "sandbox", "exec", "tools/srv", "--name", sb.name,
                          "--detach", "--", "sleep", "300"], capture_output=True, text=True,
                         cwd=REPO)
    assert out.returncode == 0, out.stderr
    ns = cnipods.load(sb, "tools", "srv").netns
    assert wait_until(lambda: sbnetns.pids(ns), 10, what="detached process")
    bad = subprocess.run([".venv/bin/pacific", "sandbox", "pod", "add", "tools/x", "--name",
                          sb.name, "--port", "http:99999"], capture_output=True, text=True,
                         cwd=REPO)
    assert bad.returncode != 0 and "--port" in bad.stderr
    assert cnipods.delete_pod(sb, "tools", "srv")
    assert not sbnetns.exists(ns)          # and with it the detached process
    assert r.get(api, r.PODS, "srv", "tools") is None
