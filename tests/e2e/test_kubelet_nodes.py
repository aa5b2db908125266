"""Real nodes: a containerd and a kubelet v1.20.2 per sandbox node run the pods
through Pacific's CNI configuration (`pacific sandbox up --kubelet`).

A Deployment's pods run under the kubelets on both nodes and talk across them;
`kubectl exec`, `kubectl logs` and `kubectl run` reach the kubelets through the
API server; `pacific sandbox pod add/exec/delete` keep working; `down` leaves
no process, mount, cgroup, network namespace or file and puts back the host
sysctls the kubelets change.

This module runs on Debian 12's Open vSwitch 3.1 and OVN 23.03 (`--ovs-prefix /usr`),
the rest of the suite on the build of hack/build-ovs-ovn.sh: Pacific supports both."""
from __future__ import annotations

import os
import subprocess

import pytest

from controller_fixtures import wait_until
from kubelet_fixtures import DEPLOYMENT, kubectl, running, skip_without_kubelets
from ovsdb_fixtures import sandbox_programs

from pacific import contract, ovsinstall
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods, controllers
from pacific.sandbox import netns as sbnetns
from pacific.sandbox.k8s import hoststate, kubelet
from pacific.sandbox.k8s import sandbox as k8s

pytestmark = pytest.mark.e2e
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)

@pytest.fixture(scope="module")
def kl(sandbox_factory):
    skip_without_kubelets()
    before = {k: hoststate.read_sysctl(k) for k in hoststate.SYSCTLS}
    sb = sandbox_factory(nodes=2, services=None, kubelet=True,
                         ovs_prefix=ovsinstall.SYSTEM_PREFIX)
    yield sb, client.load(k8s.kubeconfig_path(sb)), before
    sb.down()


def test_the_sandbox_runs_debian_12s_ovs_and_ovn_and_the_controller_says_what_it_uses(kl):
    sb, _api, _ = kl
    for n in sb.nodes:
        assert sb.node(n).appctl("version").startswith("ovs-vswitchd (Open vSwitch) 3.1.")
    programs = sandbox_programs(sb)      # every daemon runs Debian's program
    assert programs and all(exe == os.path.realpath(sb.ovs.program(os.path.basename(exe)))
                            and exe.startswith("/usr/") for exe in programs.values()), programs
    out = subprocess.run([sb.ovs.program("ovn-northd"), "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("ovn-northd 23.03.")
    path = os.path.join(sb.dir, "services", f"{controllers.controller_tag(1)}.log")
    log = wait_until(lambda: (t := open(path).read()) and "OVN northbound schema" in t and t,
                     30, what="the controller's capability line")
    assert "ACL tiers no (tenant isolation and NetworkPolicy by priority bands)" in log


def test_nodes_are_kubelets_on_their_underlay_address(kl):
    sb, api, _ = kl
    for n in sb.nodes:
        node = r.get(api, r.NODES, n.name)
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.20.2"
        assert {"type": "InternalIP", "address": n.underlay_ip} in node["status"]["addresses"]
        assert kubelet.node_ready(node)


def test_deployment_pods_talk_across_nodes_exec_and_logs(kl):
    sb, api, _ = kl
    kubectl(sb, "create", "namespace", "kl")
    kubectl(sb, "apply", "-f", "-", input=DEPLOYMENT)
    pods = wait_until(lambda: len(running(api, "kl", "app=web")) == 4 and
                      running(api, "kl", "app=web"), 90, interval=0.2,
                      what="4 web pods Running under the kubelets")
    assert {p["spec"]["nodeName"] for p in pods} == {n.name for n in sb.nodes}
    for p in pods:     # the address Pacific allocated, and the container runs
        assert contract.own_record(p).ip == p["status"]["podIP"]
        assert p["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
    src = pods[0]
    for p in pods:
        if p["spec"]["nodeName"] == src["spec"]["nodeName"]:
            continue   # across nodes: the container's own wget, through kubectl exec
        out = kubectl(sb, "-n", "kl", "exec", src["metadata"]["name"], "--", "wget", "-qO-",
                      f"http://{p['status']['podIP']}:8080/").stdout
        assert out == "hello from pacific\n"
    name = src["metadata"]["name"]
    assert kubectl(sb, "-n", "kl", "logs", name).stdout == f"serving as {name}\n"
    assert kubectl(sb, "-n", "kl", "exec", name, "--", "hostname").stdout.strip() == name


def test_kubectl_run_to_completion_and_logs(kl):
    sb, api, _ = kl
    kubectl(sb, "-n", "kl", "run", "once", "--image=localhost/busybox:latest",
            "--image-pull-policy=IfNotPresent", "--restart=Never", "--", "sh", "-c",
            "ip -4 -o addr show eth0 | awk '{print $4}'")
    pod = wait_until(lambda: (p := r.get(api, r.PODS, "once", "kl")) and
                     p["status"].get("phase") == "Succeeded" and p, 60, interval=0.2,
                     what="pod once Succeeded")
    assert kubectl(sb, "-n", "kl", "logs", "once").stdout.strip().split("/")[0] == \
        pod["status"]["podIP"]
    kubectl(sb, "-n", "kl", "delete", "pod", "once", "--wait=true")


def test_latest_images_pull_from_the_sandbox_registry(kl):
    """`kubectl create deployment` leaves imagePullPolicy Always for :latest: the
    kubelets pull from the sandbox's registry, the mirror of localhost."""
    sb, api, _ = kl
    kubectl(sb, "-n", "kl", "create", "deployment", "pull", "--image=localhost/busybox:latest",
            "--replicas=2")
    pods = wait_until(lambda: len(running(api, "kl", "app=pull")) == 2 and
                      running(api, "kl", "app=pull"), 90, interval=0.2,
                      what="2 pull pods Running")
    assert {p["spec"]["containers"][0]["imagePullPolicy"] for p in pods} == {"Always"}
    kubectl(sb, "-n", "kl", "delete", "deployment", "pull")


def test_sandbox_pod_add_exec_delete_on_kubelet_nodes(kl):
    sb, api, _ = kl
    peer = running(api, "kl", "app=web")
    pod = cnipods.add_pod(sb, "kl", "probe", "node2", api=api)
    assert pod.netns.startswith("cni-") and sbnetns.exists(pod.netns)
    # ADD answers once this node's ovn-controller installed the port; the peer's
    # chassis learns where the new port lives from SB a moment later (OVN has no
    # cluster-wide "installed"): once seen at 2 s on a loaded machine (ci25)
    for p in peer:
        wait_until(lambda p=p: cnipods.exec_pod(
            sb, "kl", "probe", ["ping", "-c1", "-W1", p["status"]["podIP"]],
            capture_output=True).returncode == 0, 10, what=f"ping {p['status']['podIP']}")
    assert cnipods.delete_pod(sb, "kl", "probe", api=api)
    assert not sbnetns.exists(pod.netns), "containerd removed the pod's namespace"
    assert r.get(api, r.PODS, "probe", "kl") is None


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = os.path.join(REPO, "_output", "pacific-image.tar")


@pytest.mark.skipif(not os.path.exists(IMAGE), reason="no _output/pacific-image.tar (make image)")
def test_pacific_image_runs_on_a_kubelet_node(kl):
    """`make image`'s archive imports into a node's containerd and its commands run
    there, with Debian's compiled OVSDB JSON parser found."""
    sb, api, _ = kl
    p = kubelet.Paths(sb, sb.nodes[0])
    subprocess.run(["ctr", "--address", p.socket, "--namespace", "k8s.io", "images", "import",
                    IMAGE], check=True, capture_output=True, timeout=300)
    script = ("pacific-node --help >/dev/null && pacific-controller --help >/dev/null && "
              "nft --version >/dev/null && ovn-appctl --version >/dev/null && "
              "python3 -c 'from pacific.ovn import cjson; cjson.enable(); print(cjson.parser())'")
    kubectl(sb, "-n", "kl", "run", "image", "--image=localhost/pacific:0.1.0",
            "--image-pull-policy=IfNotPresent", "--restart=Never",
            f"--overrides={{\"spec\": {{\"nodeName\": \"{sb.nodes[0].name}\"}}}}",
            "--", "sh", "-c", script)
    pod = wait_until(lambda: (q := r.get(api, r.PODS, "image", "kl")) and
                     q["status"].get("phase") in ("Succeeded", "Failed") and q, 120,
                     interval=0.2, what="pod image done")
    assert kubectl(sb, "-n", "kl", "logs", "image").stdout.strip() == "C"
    assert pod["status"]["phase"] == "Succeeded"


def test_down_leaves_nothing_and_restores_sysctls(kl):
    sb, _api, before = kl
    paths = [kubelet.Paths(sb, n) for n in sb.nodes]
    with open(paths[0].netns_list) as f:
        made = {os.path.basename(x.strip()) for x in f if x.strip()}
    assert made, "the loopback wrapper recorded the pod namespaces"
    sb.down()
    assert not os.path.exists(sb.dir)
    assert not [n for n in made if sbnetns.exists(n)]
    with open("/proc/self/mountinfo") as f:
        mounts = f.read()
    assert sb.dir not in mounts and not any(f"/run/netns/{n}" in mounts for n in made)
    for p in paths:
        assert not hoststate.cgroup_pids(p.cgroup_root)
        assert not [h for h in hoststate.hierarchies() if os.path.exists(h + p.cgroup_root)]
    assert not kubelet._shim_pids({p.socket for p in paths})
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert sb.dir.encode() not in f.read(), f"pid {pid} left"
        except FileNotFoundError:
            pass
    if not [d for d in os.listdir(os.path.dirname(sb.dir))
            if os.path.exists(os.path.join(os.path.dirname(sb.dir), d, hoststate.MARKER))] \
            if os.path.isdir(os.path.dirname(sb.dir)) else True:
        assert {k: hoststate.read_sysctl(k) for k in hoststate.SYSCTLS} == before
