"""Helpers shared by the deploy/ tests: the manifests as the cluster would see
them (the kustomization's resources), and a container's command line after
Kubernetes expanded its $(VAR) references."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
NAMESPACE = "pacific-system"

# Downward API fields the manifests use, with values a real pod would get.
FIELD_SAMPLES = {
    "metadata.name": "sample-pod-7d9f8-x2x4k",
    "spec.nodeName": "worker-1",
    "status.hostIP": "10.0.0.11",
    "status.podIP": "10.0.0.11",     # host network: the node's address
}


@functools.lru_cache(maxsize=None)
def _load(path: Path) -> tuple:
    with open(path) as f:
        return tuple(d for d in yaml.safe_load_all(f) if d is not None)


def load_file(path: Path) -> list[dict]:
    """The file's documents (parsed once per test run: treat them as read-only)."""
    return list(_load(Path(path)))


def kustomization() -> dict:
    (doc,) = load_file(DEPLOY / "kustomization.yaml")
    return doc


def manifests() -> list[dict]:
    """Every object the kustomization applies, in its order."""
    out = []
    for rel in kustomization()["resources"]:
        out.extend(load_file(DEPLOY / rel))
    return out


def find(kind: str, name: str, docs: list[dict] | None = None) -> dict:
    hits = [d for d in (docs or manifests())
            if d.get("kind") == kind and d["metadata"]["name"] == name]
    assert len(hits) == 1, f"expected one {kind} {name!r} in deploy/, found {len(hits)}"
    return hits[0]


def pod_spec(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def container_env(workload: dict, container: dict, docs: list[dict]) -> dict[str, str]:
    """The container's environment as the kubelet builds it (values, ConfigMap
    keys, downward API fields).  A reference to a missing ConfigMap or key fails."""
    env: dict[str, str] = {}
    for e in container.get("env") or []:
        if "value" in e:
            env[e["name"]] = expand(str(e["value"]), env)
            continue
        src = e["valueFrom"]
        if "configMapKeyRef" in src:
            ref = src["configMapKeyRef"]
            cm = find("ConfigMap", ref["name"], docs)
            assert cm["metadata"].get("namespace") == workload["metadata"]["namespace"], \
                f"ConfigMap {ref['name']} is not in {workload['metadata']['namespace']}"
            if ref.get("optional") and ref["key"] not in cm["data"]:
                continue           # the kubelet leaves the variable as it was
            assert ref["key"] in cm["data"], \
                f"env {e['name']}: ConfigMap {ref['name']} has no key {ref['key']!r}"
            env[e["name"]] = str(cm["data"][ref["key"]])
        elif "fieldRef" in src:
            path = src["fieldRef"]["fieldPath"]
            if path == "metadata.namespace":
                env[e["name"]] = workload["metadata"]["namespace"]
            else:
                assert path in FIELD_SAMPLES, f"env {e['name']}: unexpected field {path}"
                env[e["name"]] = FIELD_SAMPLES[path]
        else:
            raise AssertionError(f"env {e['name']}: unsupported source {sorted(src)}")
    return env


_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command/args, except that a reference to
    an undefined variable is an error here (Kubernetes would pass it on
    literally, which is never what a manifest means)."""
    def sub(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        if name not in env:
            raise AssertionError(f"{text!r} refers to $({name}), which the container "
                                 "does not define")
        return env[name]
    return _REF.sub(sub, text)


def command_line(workload: dict, container_name: str, docs: list[dict] | None = None
                 ) -> tuple[list[str], dict[str, str]]:
    """(argv as the process gets it, its environment)."""
    docs = docs or manifests()
    (c,) = [c for c in pod_spec(workload)["containers"] if c["name"] == container_name]
    env = container_env(workload, c, docs)
    argv = [expand(a, env) for a in (c.get("command") or []) + (c.get("args") or [])]
    return argv, env

