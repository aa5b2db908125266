"""Pods in the sandbox through the real CNI path (what `pacific sandbox pod ...` runs).

    pod = add_pod(sb, "default", "web-0", "node1", annotations={...})
    pod.result["ips"][0]["address"]
    exec_pod(sb, "default", "web-0", ["ping", "-c1", "10.16.0.7"])
    delete_pod(sb, "default", "web-0")

add_pod creates the Pod object (spec.nodeName set, as the scheduler would), a
network namespace `pac-<sandbox>-pod-<ns>-<name>`, and runs the node's conflist
through pacific.sandbox.cniruntime exactly as containerd does (environment, stdin
config, exit code, stdout).  The container id and namespace are recorded in
`<sandbox dir>/cni-pods/<ns>_<name>.json` so delete_pod (another process, later)
finds them.  Depends on the node daemons (pacific.sandbox.nodedaemons) and, for the
allocation, the controller.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass

from pacific.sandbox import cniruntime as runtime
from pacific.sandbox import nodedaemons as launch

log = logging.getLogger(__name__)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


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


def _record_path(sb, namespace: str, name: str) -> str:
    return os.path.join(sb.dir, "cni-pods", f"{namespace}_{name}.json")


def _api(sb):
    from pacific.kube import client
    from pacific.sandbox.apiserver import kubeconfig_path
    return client.load(kubeconfig_path(sb))


def load(sb, namespace: str, name: str) -> SandboxPod | None:
    try:
        with open(_record_path(sb, namespace, name)) as f:
            return SandboxPod(**json.load(f))
    except FileNotFoundError:
        return None


def add_pod(sb, namespace: str, name: str, node: str, annotations: dict | None = None,
            labels: dict | None = None, api=None, timeout: float = 120.0,
            owner_references: list | None = None,
            container_ports: list | None = None) -> SandboxPod:
    """Create the Pod, its netns, and run CNI ADD on `node`; then report the pod
    Running with its IP in status, as the node's kubelet would.  On failure nothing
    is left behind (DEL is run, the netns and the Pod object are removed)."""
    from pacific.kube import resources as kr
    from pacific.kube.errors import AlreadyExists
    from pacific.sandbox import netns as sbnetns
    for what, v in (("namespace", namespace), ("pod name", name)):
        if not _NAME.match(v):
            raise PodError(f"invalid {what} {v!r} (DNS-1123 label)")
    nd = sb.node(node)
    if load(sb, namespace, name) is not None:
        raise PodError(f"pod {namespace}/{name} already exists in sandbox {sb.name}")
    api = api or _api(sb)
    ns_name = f"{sb.netns_prefix}pod-{namespace}-{name}"
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": dict(labels or {}), "annotations": dict(annotations or {}),
                         "ownerReferences": list(owner_references or [])},
            "spec": {"nodeName": nd.name,
                     "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                     **({"ports": list(container_ports)} if container_ports else {})}]}}
    if kr.get(api, kr.NAMESPACES, namespace) is None:
        try:
            kr.create(api, kr.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": namespace}})
        except AlreadyExists:
            pass  # created concurrently
    pod = kr.create(api, kr.PODS, body, namespace=namespace)
    cid = runtime.new_container_id()
    made_ns = False
    try:
        sbnetns.create(ns_name)
        made_ns = True  # down() removes every pac-<sandbox>-* namespace, pods' too
        rec = SandboxPod(namespace, name, nd.name, pod["metadata"]["uid"], cid, ns_name, {})
        _save(sb, rec)
        p = launch.paths(nd)
        att = runtime.Attachment(cid, rec.netns_path, "eth0",
                                 runtime.k8s_args(namespace, name, rec.uid, cid))
        # the plugin runs in the node's host namespace, as the node's kubelet runs it
        rec.result = runtime.add(runtime.load_conflist(p.conflist), [p.bin_dir], att, timeout,
                                 run_in_netns=f"/run/netns/{nd.netns}")
        _save(sb, rec)
        kr.patch_merge(api, kr.PODS, name, _running_status(nd, rec), namespace=namespace,
                       subresource="status")
        log.info("pod %s/%s on %s: %s", namespace, name, nd.name,
                 rec.result.get("ips", [{}])[0].get("address"))
        return rec
    except BaseException as e:
        log.warning("pod %s/%s: ADD failed (%s); cleaning up", namespace, name, e)
        _teardown(sb, api, namespace, name, nd, cid, ns_name if made_ns else None)
        if isinstance(e, runtime.CniCallError):
            raise PodError(str(e)) from None
        raise


def _running_status(nd, rec: SandboxPod) -> dict:
    """The status a kubelet reports once the sandbox and its network are up."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ips = [i["address"].split("/")[0] for i in rec.result.get("ips", [])]
    ready = [{"type": t, "status": "True", "lastTransitionTime": now}
             for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
    return {"status": {
        "phase": "Running", "hostIP": nd.underlay_ip, "startTime": now,
        "podIP": ips[0] if ips else None, "podIPs": [{"ip": ip} for ip in ips],
        "conditions": ready,
        "containerStatuses": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                               "imageID": "", "ready": True, "started": True, "restartCount": 0,
                               "containerID": f"sandbox://{rec.container_id}",
                               "state": {"running": {"startedAt": now}}}]}}


def delete_pod(sb, namespace: str, name: str, api=None) -> bool:
    """DEL (as containerd: with the netns, then again without), remove the netns and
    the Pod object.  False if the sandbox has no such pod."""
    rec = load(sb, namespace, name)
    api = api or _api(sb)
    if rec is None:
        from pacific.kube import resources as kr
        return kr.delete(api, kr.PODS, name, namespace=namespace)
    _teardown(sb, api, namespace, name, sb.node(rec.node), rec.container_id, rec.netns)
    return True


def _teardown(sb, api, namespace, name, nd, cid, ns_name) -> None:
    from pacific.kube import resources as kr
    from pacific.sandbox import netns as sbnetns
    p = launch.paths(nd)
    errors = []
    for netns_path in ([f"/run/netns/{ns_name}"] if ns_name else []) + [""]:
        try:
            runtime.delete(runtime.load_conflist(p.conflist), [p.bin_dir],
                           runtime.Attachment(cid, netns_path, "eth0",
                                              runtime.k8s_args(namespace, name, "", cid)),
                           run_in_netns=f"/run/netns/{nd.netns}")
        except (runtime.CniCallError, OSError, ValueError) as e:
            errors.append(str(e))
    if ns_name:
        sbnetns.delete(ns_name)
    kr.delete(api, kr.PODS, name, namespace=namespace)
    try:
        os.unlink(_record_path(sb, namespace, name))
    except FileNotFoundError:
        pass
    if len(errors) == 2:
        raise PodError(f"DEL of {namespace}/{name} failed: {errors[0]}")


def _save(sb, rec: SandboxPod) -> None:
    path = _record_path(sb, rec.namespace, rec.name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(asdict(rec), f)
    os.replace(tmp, path)


def exec_pod(sb, namespace: str, name: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
    rec = load(sb, namespace, name)
    if rec is None:
        raise PodError(f"no pod {namespace}/{name} in sandbox {sb.name}")
    return subprocess.run(["ip", "netns", "exec", rec.netns, *argv], **kw)
