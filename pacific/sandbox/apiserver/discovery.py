"""Discovery documents: /version, /api, /apis, /api/v1, /apis/<g>/<v>, and a
minimal /openapi/v3 that tells kubectl which resources accept `fieldValidation`
(so plain `kubectl apply` validates on the server instead of asking for the
full OpenAPI schemas, which the emulator does not have).
"""
import hashlib
import json

from pacific.sandbox.apiserver.resources import Registry, ResourceType

KUBE_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0-pacific-emulator",
                "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23", "compiler": "gc",
                "platform": "linux/amd64"}

_PREFERRED_ORDER = ["", "apps", "events.k8s.io", "coordination.k8s.io", "discovery.k8s.io",
                    "networking.k8s.io", "apiextensions.k8s.io"]


def version() -> dict:
    return dict(KUBE_VERSION)


def api_versions() -> dict:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}


def _group_entry(group: str, versions: list[str], preferred: str) -> dict:
    return {"name": group,
            "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
            "preferredVersion": {"groupVersion": f"{group}/{preferred}", "version": preferred}}


def _groups(reg: Registry) -> list[tuple[str, list[str], str]]:
    gv = reg.group_versions()
    out = []
    for group in sorted(gv, key=lambda g: (_PREFERRED_ORDER.index(g) if g in _PREFERRED_ORDER
                                           else len(_PREFERRED_ORDER), g)):
        if not group:
            continue
        versions = sorted(gv[group], reverse=True)
        storage = next((rt.storage_version for rt in reg.all() if rt.group == group), versions[0])
        out.append((group, versions, storage if storage in versions else versions[0]))
    return out


def api_group_list(reg: Registry) -> dict:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [_group_entry(g, vs, p) for g, vs, p in _groups(reg)]}


def api_group(reg: Registry, group: str) -> dict | None:
    for g, vs, p in _groups(reg):
        if g == group:
            return dict(_group_entry(g, vs, p), kind="APIGroup", apiVersion="v1")
    return None


def _resource_entry(rt: ResourceType) -> dict:
    e = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
         "kind": rt.kind, "verbs": rt.verbs}
    if rt.short_names:
        e["shortNames"] = rt.short_names
    if rt.categories:
        e["categories"] = rt.categories
    e["storageVersionHash"] = hashlib.sha256(f"{rt.group}/{rt.plural}".encode()).hexdigest()[:12]
    return e


def resource_list(reg: Registry, group: str, version: str) -> dict | None:
    rts = sorted(reg.in_group_version(group, version), key=lambda r: r.plural)
    if not rts:
        return None
    resources = []
    for rt in rts:
        resources.append(_resource_entry(rt))
        if rt.status_subresource:
            resources.append({"name": f"{rt.plural}/status", "singularName": "",
                              "namespaced": rt.namespaced, "kind": rt.kind,
                              "verbs": ["get", "patch", "update"]})
        if rt.key == ("", "pods"):
            resources.append({"name": "pods/binding", "singularName": "", "namespaced": True,
                              "kind": "Binding", "verbs": ["create"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": resources}


# ---------------------------------------------------------------- OpenAPI v3 (minimal)
def _gv_path(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def openapi_root(reg: Registry) -> dict:
    paths = {}
    gvs = {(rt.group, rt.version) for rt in reg.all()}
    for g, v in sorted(gvs):
        doc = json.dumps(openapi_gv(reg, g, v), sort_keys=True).encode()
        h = hashlib.sha256(doc).hexdigest()[:16].upper()
        paths[_gv_path(g, v)] = {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash={h}"}
    return {"paths": paths}


def openapi_gv(reg: Registry, group: str, version: str) -> dict | None:
    rts = reg.in_group_version(group, version)
    if not rts:
        return None
    prefix = "/" + _gv_path(group, version)
    paths = {}
    for rt in sorted(rts, key=lambda r: r.plural):
        base = f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
        gvk = {"group": group, "version": version, "kind": rt.kind}
        params = [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                  {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
                  {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}}]
        ok = {"responses": {"200": {"description": "OK"}}}
        paths[f"{base}/{{name}}"] = {
            "get": dict(ok, **{"x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk}),
            "put": dict(ok, parameters=params, **{"x-kubernetes-action": "put",
                                                   "x-kubernetes-group-version-kind": gvk}),
            "patch": dict(ok, parameters=params, **{"x-kubernetes-action": "patch",
                                                     "x-kubernetes-group-version-kind": gvk}),
            "delete": dict(ok, **{"x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk}),
        }
        paths[base] = {
            "get": dict(ok, **{"x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk}),
            "post": dict(ok, parameters=params, **{"x-kubernetes-action": "post",
                                                    "x-kubernetes-group-version-kind": gvk}),
        }
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (Pacific emulator)", "version": "v1.32.0"},
            "paths": paths, "components": {"schemas": {}}}
