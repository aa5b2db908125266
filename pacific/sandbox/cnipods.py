"""Pods in the sandbox, as a user makes them (what `pacific sandbox pod ...` runs).

    pod = add_pod(sb, "default", "web-0", "node1", annotations={...})
    pod.ip
    exec_pod(sb, "default", "web-0", ["ping", "-c1", "10.16.0.7"])
    delete_pod(sb, "default", "web-0")

add_pod creates the Pod object (spec.nodeName set when a node is given, else the
scheduler places it) and waits until the node's pod runner
(pacific.sandbox.k8s.podrunner) reports it Running: the runner made its network
namespace and ran the node's conflist through the `pacific` plugin as containerd
does.  If the runner reports that the network set-up failed
(FailedCreatePodSandBox), the Pod is deleted again and PodError carries the
plugin's message.  The runner records each running pod in
`<sandbox dir>/pods/<ns>_<name>.json`, which exec_pod reads.
"""
from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from dataclasses import dataclass

from pacific.sandbox.k8s import podrunner
from pacific.sandbox.k8s import sandbox as k8s

log = logging.getLogger(__name__)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
FAILED_SANDBOX = "FailedCreatePodSandBox"


class PodError(RuntimeError):
    pass


@dataclass
class SandboxPod:
    namespace: str
    name: str
    node: str
    uid: str
    container_id: str
    netns: str            # netns name (file /run/netns/<netns>)
    result: dict

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"

    @property
    def ip(self) -> str:
        return self.result["ips"][0]["address"].split("/")[0]

    @property
    def ips(self) -> list[str]:
        """Every address of the pod, IPv4 first (status.podIPs' order)."""
        return [i["address"].split("/")[0] for i in self.result["ips"]]

    def ip_of(self, version: int) -> str | None:
        """The pod's address of IP `version`, None without one."""
        return next((ip for ip in self.ips if (":" in ip) == (version == 6)), None)


def _api(sb):
    from pacific.kube import client
    return client.load(k8s.kubeconfig_path(sb))


def load(sb, namespace: str, name: str, api=None) -> SandboxPod | None:
    """The newest record of namespace/name on any node (a pod re-created on
    another node may still have its old record on the old one).  In a sandbox
    with kubelets: the running Pod, its network namespace found through its
    processes (the pod's cgroup under its node's cgroup root)."""
    if getattr(sb, "kubelet", False):
        return _load_kubelet_pod(sb, namespace, name, api)
    recs = [rec for n in sb.nodes
            if (rec := podrunner.load_record(k8s.pod_state_dir(sb, n.name), namespace, name))]
    if not recs:
        return None
    rec = max(recs, key=lambda rec: rec.get("started", 0.0))
    return SandboxPod(rec["namespace"], rec["name"], rec["node"], rec["uid"],
                      rec["container_id"], rec["netns"], rec["result"])


def _load_kubelet_pod(sb, namespace: str, name: str, api=None) -> SandboxPod | None:
    from pacific.kube import resources as kr
    from pacific.sandbox.k8s import kubelet
    pod = kr.get(api or _api(sb), kr.PODS, name, namespace)
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return None
    st, node = pod.get("status") or {}, (pod.get("spec") or {}).get("nodeName")
    ips = [i["ip"] for i in st.get("podIPs") or []] or ([st["podIP"]] if st.get("podIP") else [])
    if st.get("phase") != "Running" or not ips or not node:
        return None
    ns = kubelet.pod_netns(sb, node, pod["metadata"]["uid"])
    if ns is None:
        return None
    cid = kubelet.pod_sandbox_id(sb, node, pod["metadata"]["uid"],
                                 [c.get("containerID", "") for c in
                                  st.get("containerStatuses") or []]) or ""
    result = {"cniVersion": "1.0.0",
              "ips": [{"address": f"{ip}/{128 if ':' in ip else 32}"} for ip in ips]}
    return SandboxPod(namespace, name, node, pod["metadata"]["uid"], cid, ns, result)


def add_pod(sb, namespace: str, name: str, node: str | None = None,
            annotations: dict | None = None, labels: dict | None = None, api=None,
            timeout: float = 120.0, owner_references: list | None = None,
            container_ports: list | None = None) -> SandboxPod:
    """Create the Pod (on `node`, or where the scheduler puts it) and wait until it
    runs.  On failure the Pod is deleted again and PodError says why."""
    from pacific.kube import resources as kr
    from pacific.kube.errors import AlreadyExists
    for what, v in (("namespace", namespace), ("pod name", name)):
        if not _NAME.match(v):
            raise PodError(f"invalid {what} {v!r} (DNS-1123 label)")
    api = api or _api(sb)
    spec = {"containers": [{"name": "app", "image": "localhost/busybox:latest",
                            "imagePullPolicy": "IfNotPresent",
                            **({"ports": list(container_ports)} if container_ports else {})}],
            "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False}
    if node:
        spec["nodeName"] = sb.node(node).name
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": dict(labels or {}), "annotations": dict(annotations or {}),
                         "ownerReferences": list(owner_references or [])},
            "spec": spec}
    if kr.get(api, kr.NAMESPACES, namespace) is None:
        try:
            kr.create(api, kr.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": namespace}})
        except AlreadyExists:
            pass  # created concurrently
    try:
        pod = kr.create(api, kr.PODS, body, namespace=namespace)
    except AlreadyExists:
        raise PodError(f"pod {namespace}/{name} already exists in sandbox {sb.name}") from None
    uid = pod["metadata"]["uid"]
    try:
        return wait_running(sb, api, namespace, name, uid, timeout)
    except BaseException as e:
        log.warning("pod %s/%s did not start (%s); deleting it", namespace, name, e)
        _delete_and_wait(sb, api, namespace, name, uid, 60.0)
        raise


def _ready(status: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in status.get("conditions") or [])


def wait_running(sb, api, namespace: str, name: str, uid: str, timeout: float) -> SandboxPod:
    """Until the kubelet (or runner) reports the pod Running and Ready, as the
    Endpoints controller reads it, so a Service made next lists it at once
    (PodError on FailedCreatePodSandBox)."""
    from pacific.kube import resources as kr
    deadline = time.monotonic() + timeout
    checked_events = 0.0
    while True:
        pod = kr.get(api, kr.PODS, name, namespace)
        if pod is None or pod["metadata"]["uid"] != uid:
            raise PodError(f"pod {namespace}/{name} was deleted while starting")
        rec = load(sb, namespace, name, api)
        st = pod.get("status") or {}
        if (rec is not None and rec.uid == uid and st.get("phase") == "Running"
                and st.get("podIP") and _ready(st)):
            return rec
        if time.monotonic() > checked_events:
            checked_events = time.monotonic() + 0.5
            failed = [e for e in kr.list_(api, kr.EVENTS, namespace,
                                          field_selector=f"involvedObject.uid={uid}")[0]
                      if e.get("reason") == FAILED_SANDBOX]
            if failed:
                raise PodError(f"pod {namespace}/{name}: {failed[-1].get('message')}")
        if time.monotonic() > deadline:
            where = (pod.get("spec") or {}).get("nodeName") or "no node (not scheduled)"
            raise PodError(f"pod {namespace}/{name} not Running and Ready after {timeout:.0f} s "
                           f"(on {where}, phase {st.get('phase')}, ready {_ready(st)})")
        time.sleep(0.05)


def delete_pod(sb, namespace: str, name: str, api=None, timeout: float = 60.0) -> bool:
    """Delete the Pod and wait until its runner tore its network down and the
    object is gone.  False if there was no such pod."""
    from pacific.kube import resources as kr
    api = api or _api(sb)
    pod = kr.get(api, kr.PODS, name, namespace)
    if pod is None:
        return False
    _delete_and_wait(sb, api, namespace, name, pod["metadata"]["uid"], timeout)
    return True


def _delete_and_wait(sb, api, namespace, name, uid, timeout) -> None:
    from pacific.kube import errors
    from pacific.kube import resources as kr
    kubelet_pod = None
    if getattr(sb, "kubelet", False):
        # what `exec --detach` started in the pod's namespace goes with the pod
        # (the pod runner stops it; a kubelet knows nothing of it)
        for tag in [t for t in sb.state.read()["daemons"]
                    if t.startswith(f"pod.{namespace}.{name}.")]:
            sb.stop(tag)
        kubelet_pod = load(sb, namespace, name, api)
    try:
        kr.delete(api, kr.PODS, name, namespace=namespace, uid=uid)
    except errors.Conflict:
        return                      # the name belongs to a newer pod now
    deadline = time.monotonic() + timeout
    while True:
        pod = kr.get(api, kr.PODS, name, namespace)
        rec = None if getattr(sb, "kubelet", False) else load(sb, namespace, name)
        if (pod is None or pod["metadata"]["uid"] != uid) and (rec is None or rec.uid != uid):
            if kubelet_pod is not None:
                if _kubelet_pod_gone(sb, kubelet_pod):
                    return
            elif pod is not None or not _runner_netns_left(sb, namespace, name):
                return
        if time.monotonic() > deadline:
            raise PodError(f"pod {namespace}/{name} still terminating after {timeout:.0f} s "
                           f"(is its node's pod runner running?){_runner_log(sb, pod)}")
        time.sleep(0.05)


def _runner_log(sb, pod: dict | None) -> str:
    """The end of the pod's node's pod runner log, for an error message."""
    node = ((pod or {}).get("spec") or {}).get("nodeName")
    if getattr(sb, "kubelet", False) or not node:
        return ""
    try:
        with open(os.path.join(sb.dir, "services", f"{node}-podrunner.log"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 1500))
            tail = f.read().decode(errors="replace").strip()
    except OSError:
        return ""
    return f"; {node}'s pod runner log ends:\n{tail}"


def _runner_netns_left(sb, namespace: str, name: str) -> bool:
    """A pod runner's retried start may still be in flight when its Pod goes
    (a refused ADD is retried): its network namespace is gone once that start
    failed or the runner tore the pod down.  Only asked when no newer Pod of the
    name exists, so the namespace can be nobody else's."""
    if getattr(sb, "kubelet", False):
        return False
    from pacific.sandbox import netns
    return netns.exists(podrunner.pod_netns_name(k8s.pod_netns_prefix(sb), namespace, name))


def _kubelet_pod_gone(sb, pod: SandboxPod) -> bool:
    """The kubelet stopped the pod's processes and containerd removed its
    network namespace (after CNI DEL): a Pod deleted with grace 0 is gone from
    the API before that."""
    from pacific.sandbox import netns as sbnetns
    from pacific.sandbox.k8s import kubelet
    return not kubelet.pod_pids(sb, pod.node, pod.uid) and not sbnetns.exists(pod.netns)


def exec_pod(sb, namespace: str, name: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
    rec = load(sb, namespace, name)
    if rec is None:
        raise PodError(f"no running pod {namespace}/{name} in sandbox {sb.name}")
    return subprocess.run(["ip", "netns", "exec", rec.netns, *argv], **kw)


def detach_pod(sb, namespace: str, name: str, argv: list[str]) -> int:
    """Start a background process in the pod's network namespace; it is stopped
    when the pod goes (its runner stops what runs in the namespace) or the sandbox does."""
    rec = load(sb, namespace, name)
    if rec is None:
        raise PodError(f"no running pod {namespace}/{name} in sandbox {sb.name}")
    n = sum(1 for t in sb.state.read()["daemons"] if t.startswith(f"pod.{namespace}.{name}."))
    return sb.spawn(f"pod.{namespace}.{name}.{n}", argv, netns=rec.netns)
