"""API versions that differ between the Kubernetes releases Pacific supports
(1.20 to current): chosen once from the server's discovery, then one code path.

    from pacific.kube import versions
    slices = versions.endpointslices(api)     # Resource: discovery.k8s.io/v1 or v1beta1
    items, _ = resources.list_(api, slices, "default")

EndpointSlice is `discovery.k8s.io/v1` from Kubernetes 1.21 and `v1beta1`
before (1.20 serves only v1beta1; 1.25 removed v1beta1).  The fields Pacific
reads (`addressType`, `endpoints[].addresses`, `.conditions.ready`,
`.conditions.serving`, `.conditions.terminating`, `ports[]`, the
`kubernetes.io/service-name` label) mean the same in both; `topology` (v1beta1)
became `nodeName`/`zone` in v1, which `endpoint_node` hides.
"""
from __future__ import annotations

import logging
from typing import Any

from pacific.kube import errors, resources

log = logging.getLogger(__name__)

_PREFERENCE = ("v1", "v1beta1")


def served_versions(api: Any, group: str) -> list[str]:
    """Versions of `group` the server serves ([] if none)."""
    try:
        doc = resources.request(api, "GET", f"/apis/{group}")
    except errors.NotFound:
        return []
    return [v["version"] for v in doc.get("versions", [])]


def endpointslice_version(api: Any) -> str:
    """"v1" or "v1beta1": the EndpointSlice version to use with this server."""
    served = served_versions(api, "discovery.k8s.io")
    for v in _PREFERENCE:
        if v in served:
            return v
    raise errors.ApiError(404, "NotFound", "the server serves no EndpointSlice API "
                          f"(discovery.k8s.io versions: {served or 'none'})", "GET",
                          "/apis/discovery.k8s.io")


def endpointslices(api: Any) -> resources.Resource:
    return endpointslice_resource(endpointslice_version(api))


def endpointslice_resource(version: str) -> resources.Resource:
    return resources.ENDPOINTSLICES_V1BETA1 if version == "v1beta1" else resources.ENDPOINTSLICES


def served_endpointslice_version(api: Any) -> str:
    """endpointslice_version(), asked once at a daemon's start: "v1" (logged)
    when the server does not say."""
    try:
        return endpointslice_version(api)
    except (errors.ApiError, OSError) as e:
        log.warning("EndpointSlice version not discovered (%s): using discovery.k8s.io/v1", e)
        return "v1"


def endpoint_node(endpoint: dict) -> str | None:
    """The node of an EndpointSlice endpoint, v1 (`nodeName`) or v1beta1
    (`topology["kubernetes.io/hostname"]`)."""
    return endpoint.get("nodeName") or (endpoint.get("topology") or {}).get(
        "kubernetes.io/hostname")
