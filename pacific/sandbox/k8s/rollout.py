"""Rolling upgrades of Pacific's workloads in a --deploy sandbox, as an
administrator does them: a new image tag for a DaemonSet's or Deployment's
container, then wait until every pod runs the new one and is Ready.

    rollout.upgrade(sb, api, "DaemonSet", "pacific-central")   # -> seconds

The "new" image is `make image`'s under another tag (`<name>-upgrade<N>`), tagged
in every node's containerd: the pods are replaced exactly as for a new version.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pacific import names
from pacific.sandbox.proc import SandboxError

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox

KINDS = {"DaemonSet": ("apps", "v1", "daemonsets", True, "DaemonSet"),
         "Deployment": ("apps", "v1", "deployments", True, "Deployment")}


def _res(kind: str):
    from pacific.kube import resources as r
    if kind not in KINDS:
        raise ValueError(f"cannot roll a {kind}: one of {', '.join(KINDS)}")
    return r.Resource(*KINDS[kind])


def tag_image(sb: "Sandbox", image: str, new: str) -> None:
    """`new` names `image` in every node's containerd."""
    from pacific.sandbox.k8s import kubelet
    for n in sb.nodes:
        if new not in kubelet.ctr(sb, n, "images", "ls", "-q").split():
            kubelet.ctr(sb, n, "images", "tag", image, new)


def rolled(obj: dict) -> bool:
    """Every pod of the workload runs its current template and is available."""
    st, meta = obj.get("status") or {}, obj["metadata"]
    if st.get("observedGeneration", 0) < meta.get("generation", 0):
        return False
    if obj["kind"] == "DaemonSet":
        want = st.get("desiredNumberScheduled", 0)
        return (st.get("updatedNumberScheduled", 0) == want == st.get("numberAvailable", 0)
                and st.get("numberReady", 0) == want)
    want = obj["spec"].get("replicas", 1)
    return (st.get("updatedReplicas", 0) == want == st.get("availableReplicas", 0)
            and st.get("replicas", 0) == want)


def upgrade(sb: "Sandbox", api, kind: str, name: str, timeout: float = 300.0,
            env: dict[str, str] | None = None) -> float:
    """Set the workload's Pacific container to a new tag of the same image (and
    `env` set in it: pacific-vswitch's PACIFIC_VSWITCH_REPLACE_DAEMONS=1 makes
    it replace its daemons as a new Open vSwitch version would) and wait until
    the rollout is done; returns its duration in seconds."""
    from pacific.kube import resources as r
    res = _res(kind)
    obj = r.get(api, res, name, names.PACIFIC_NAMESPACE)
    if obj is None:
        raise SandboxError(f"no {kind} {names.PACIFIC_NAMESPACE}/{name}")
    containers = obj["spec"]["template"]["spec"]["containers"]
    image = containers[0]["image"]
    base, _, tag = image.rpartition(":")
    step = int(tag.rsplit("-upgrade", 1)[1]) + 1 if "-upgrade" in tag else 1
    new = f"{base}:{tag.split('-upgrade')[0]}-upgrade{step}"
    tag_image(sb, image, new)
    t0 = time.monotonic()
    def with_env(c: dict) -> dict:
        kept = [e for e in c.get("env") or [] if e["name"] not in (env or {})]
        return {**c, "image": new,
                "env": kept + [{"name": k, "value": v} for k, v in (env or {}).items()]}
    r.patch_merge(api, res, name, {"spec": {"template": {"spec": {"containers": [
        with_env(c) for c in containers]}}}}, namespace=names.PACIFIC_NAMESPACE)
    while True:
        obj = r.get(api, res, name, names.PACIFIC_NAMESPACE)
        if rolled(obj):
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout:
            raise SandboxError(f"{kind} {name} not rolled out to {new} after {timeout:.0f} s: "
                               f"status {obj.get('status')}")
        time.sleep(0.2)
