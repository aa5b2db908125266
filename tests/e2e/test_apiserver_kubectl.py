"""The API emulator driven by kubectl (whatever `kubectl` is on PATH) and by two
leader-election candidates using the official client's LeaseLock."""
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from kubernetes import client

from apiserver_fixtures import new_emulator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
KUBECTL = shutil.which("kubectl")


@pytest.fixture(scope="module")
def emu():
    e, d = new_emulator()
    yield e
    e.stop()
    d.cleanup()


def kubectl(emu, *args, input=None, check=True, timeout=30):
    env = dict(os.environ, KUBECONFIG=emu.kubeconfig, HOME=emu.workdir)
    r = subprocess.run([KUBECTL, "--cache-dir", os.path.join(emu.workdir, "kcache"), *args], env=env,
                       input=input, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {r.stderr}")
    return r


MANIFEST = """\
apiVersion: v1
kind: Namespace
metadata: {name: kc}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: kc, labels: {app: web}}
spec:
  replicas: REPLICAS
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.25", ports: [{containerPort: 80}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: kc}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: p1, namespace: kc, labels: {app: web}}
spec:
  nodeName: node1
  containers: [{name: c, image: busybox}]
"""


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
def test_kubectl_apply_get_annotate_label_delete(emu):
    out = kubectl(emu, "apply", "-f", "-", input=MANIFEST.replace("REPLICAS", "1")).stdout
    assert "deployment.apps/web created" in out and "pod/p1 created" in out
    out = kubectl(emu, "apply", "-f", "-", input=MANIFEST.replace("REPLICAS", "3")).stdout
    assert "deployment.apps/web configured" in out and "pod/p1 unchanged" in out
    assert kubectl(emu, "-n", "kc", "get", "deploy", "web", "-o",
                   "jsonpath={.spec.replicas}/{.metadata.generation}").stdout == "3/2"
    assert "10.96." in kubectl(emu, "-n", "kc", "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}").stdout
    kubectl(emu, "-n", "kc", "annotate", "pod", "p1", "pacific.io/ip_address=10.16.0.9")
    kubectl(emu, "-n", "kc", "label", "pod", "p1", "tier=front")
    out = kubectl(emu, "-n", "kc", "get", "pods", "-l", "tier=front", "-o", "wide").stdout
    assert out.splitlines()[0].split()[:3] == ["NAME", "READY", "STATUS"] and "p1" in out and "node1" in out
    assert kubectl(emu, "-n", "kc", "get", "pod", "p1", "-o",
                   "jsonpath={.metadata.annotations.pacific\\.io/ip_address}").stdout == "10.16.0.9"
    out = kubectl(emu, "get", "pods", "-A", "--field-selector", "spec.nodeName=node1").stdout
    assert "p1" in out and "kc" in out
    r = kubectl(emu, "-n", "kc", "label", "pod", "p1", "tier=back", check=False)
    assert r.returncode != 0 and "already has a value" in r.stderr
    kubectl(emu, "-n", "kc", "delete", "pod", "p1")
    r = kubectl(emu, "-n", "kc", "get", "pod", "p1", check=False)
    assert r.returncode != 0 and 'pods "p1" not found' in r.stderr
    kubectl(emu, "delete", "namespace", "kc")
    assert "kc" not in kubectl(emu, "get", "ns", "-o", "name").stdout


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
def test_kubectl_get_pods_watch(emu):
    env = dict(os.environ, KUBECONFIG=emu.kubeconfig, HOME=emu.workdir)
    w = subprocess.Popen([KUBECTL, "--cache-dir", os.path.join(emu.workdir, "kcache"), "get", "pods", "-w",
                          "--output-watch-events"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(1.5)
        with emu.api_client() as api:
            core = client.CoreV1Api(api)
            core.create_namespaced_pod("default", {"metadata": {"name": "watched"},
                                                   "spec": {"containers": [{"name": "c", "image": "x"}]}})
            core.patch_namespaced_pod_status("watched", "default", {"status": {"phase": "Running"}})
            core.delete_namespaced_pod("watched", "default")
        time.sleep(1.5)
    finally:
        os.killpg(w.pid, signal.SIGTERM)
        out, err = w.communicate(timeout=10)
    events = [line.split()[:2] for line in out.splitlines() if "watched" in line]
    assert [e[0] for e in events] == ["ADDED", "MODIFIED", "DELETED"], out + err
    assert any("Running" in line for line in out.splitlines())


@pytest.mark.skipif(KUBECTL is None, reason="kubectl not installed")
def test_kubectl_custom_resource_by_plural(emu):
    crd = textwrap.dedent("""\
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {name: widgets.example.com}
        spec:
          group: example.com
          scope: Cluster
          names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wdg]}
          versions:
          - name: v1
            served: true
            storage: true
            schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
            additionalPrinterColumns: [{name: Size, type: integer, jsonPath: .spec.size}]
        """)
    kubectl(emu, "apply", "-f", "-", input=crd)
    kubectl(emu, "apply", "-f", "-", input="apiVersion: example.com/v1\nkind: Widget\n"
                                           "metadata: {name: w1}\nspec: {size: 7}\n")
    out = kubectl(emu, "get", "widgets").stdout.splitlines()
    assert out[0].split() == ["NAME", "SIZE"] and out[1].split()[:2] == ["w1", "7"]
    assert "w1" in kubectl(emu, "get", "wdg", "-o", "name").stdout
    kubectl(emu, "delete", "widget", "w1")
    assert "No resources found" in kubectl(emu, "get", "widgets").stderr


CANDIDATE = """
import sys, time
from kubernetes import client, config
from kubernetes.leaderelection import leaderelection, electionconfig
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock
config.load_kube_config(config_file=sys.argv[1])
ident = sys.argv[2]
def lead():
    print("LEADING", ident, flush=True)
    while True:
        time.sleep(1)
lock = LeaseLock("pacific-test", "default", ident)
cfg = electionconfig.Config(lock, lease_duration=4, renew_deadline=3, retry_period=1,
                            onstarted_leading=lead, onstopped_leading=lambda: print("STOPPED", flush=True))
leaderelection.LeaderElection(cfg).run()
"""


def test_lease_leader_election_hands_over(emu):
    script = os.path.join(emu.workdir, "candidate.py")
    with open(script, "w") as f:
        f.write(CANDIDATE)
    procs = {}
    logs = {}
    try:
        for ident in ("cand-a", "cand-b"):
            logs[ident] = os.path.join(emu.workdir, f"{ident}.log")
            procs[ident] = subprocess.Popen([sys.executable, script, emu.kubeconfig, ident],
                                            stdout=open(logs[ident], "w"), stderr=subprocess.STDOUT,
                                            start_new_session=True)
            if ident == "cand-a":
                time.sleep(2)

        def leader():
            with emu.api_client() as api:
                lease = client.CoordinationV1Api(api).read_namespaced_lease("pacific-test", "default")
            return lease.spec.holder_identity

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and "LEADING" not in open(logs["cand-a"]).read():
            time.sleep(0.2)
        assert leader() == "cand-a", open(logs["cand-a"]).read()
        assert "LEADING" not in open(logs["cand-b"]).read()
        os.killpg(procs["cand-a"].pid, signal.SIGKILL)
        procs["cand-a"].wait(5)
        killed = time.monotonic()
        while time.monotonic() - killed < 12 and "LEADING" not in open(logs["cand-b"]).read():
            time.sleep(0.2)
        took = time.monotonic() - killed
        assert "LEADING cand-b" in open(logs["cand-b"]).read(), open(logs["cand-b"]).read()
        assert leader() == "cand-b"
        assert took < 4 + 2, f"handover took {took:.1f}s for a 4s lease"
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
