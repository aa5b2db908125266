"""Every manifest in deploy/ (the CRDs included) against the published
OpenAPI schemas of each Kubernetes release from 1.25 to the newest that
kubernetes-validate carries, in strict mode (an unknown or misspelt field is
an error): the sandbox runs Kubernetes 1.20, users run current releases, and
a field a newer API server drops or refuses would otherwise be found only
there.  Kustomize's own file is no Kubernetes object and has no schema."""
from __future__ import annotations

import pathlib

import kubernetes_validate.utils as kv
import pytest
import yaml

DEPLOY = pathlib.Path(__file__).resolve().parents[2] / "deploy"
NOT_KUBERNETES = {("kustomize.config.k8s.io/v1beta1", "Kustomization")}
OLDEST = (1, 25)


def documents() -> list[tuple[str, dict]]:
    out = []
    for path in sorted([*DEPLOY.glob("*.yaml"), *DEPLOY.glob("crds/*.yaml")]):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text())):
            if doc and (doc.get("apiVersion"), doc.get("kind")) not in NOT_KUBERNETES:
                out.append((f"{path.relative_to(DEPLOY)}#{i} {doc['kind']}", doc))
    return out


def versions() -> list[str]:
    return sorted({v for v in kv.all_versions()
                   if tuple(int(p) for p in v.split(".")[:2]) >= OLDEST},
                  key=lambda v: tuple(int(p) for p in v.split(".")))


def test_the_releases_checked_run_from_1_25_to_the_newest_known():
    found = versions()
    assert found[0].startswith("1.25.") and found[-1] == kv.latest_version()


def test_deploy_has_its_manifests_and_crds():
    kinds = {doc["kind"] for _, doc in documents()}
    assert {"CustomResourceDefinition", "DaemonSet", "Deployment", "ConfigMap",
            "ClusterRole"} <= kinds, kinds


@pytest.mark.parametrize("version", versions())
def test_every_manifest_is_valid_in_strict_mode(version):
    problems = []
    for where, doc in documents():
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as e:
            problems.append(f"{where}: {'.'.join(str(p) for p in e.path)}: {e.message}")
        except kv.SchemaNotFoundError as e:
            problems.append(f"{where}: no schema for it in Kubernetes {version}: {e}")
    assert not problems, "\n".join(problems)
