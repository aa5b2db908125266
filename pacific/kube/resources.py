"""Dict-level Kubernetes API calls on an ApiClient, for any resource.

Objects are plain dicts (the parsed JSON), not the client's model classes: those
cost too much at 10,000 pods.

    from pacific.kube import client, resources as r
    api = client.load()
    pod = r.get(api, r.PODS, "web-0", "default")            # dict or None
    items, rv = r.list_(api, r.PODS, label_selector="app=web")
    r.patch_merge(api, r.PODS, "web-0", {"metadata": {"annotations": {k: v}}}, "default")
    r.patch_merge(api, r.SUBNETS, "blue", {"status": {...}}, subresource="status")
    r.create(api, r.IPS, {"metadata": {"name": "..."}, "spec": {...}})
    r.delete(api, r.IPS, "...")                              # False if already gone
    r.create_event(api, pod, "AddressInUse", "address 10.16.0.5 is already in use")

Every item returned by `list_` carries `kind` and `apiVersion` (the API server
omits them in list items), so an object from any helper can be passed to
`create_event`. Errors are `pacific.kube.errors.ApiError` subclasses.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import sys
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3.exceptions

from pacific import names
from pacific.kube import errors

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds for non-watch requests


@dataclass(frozen=True)
class Resource:
    group: str          # "" for the core API
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
        """URL path of the collection, or of one object (and subresource)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        elif self.namespaced and name is not None:
            raise ValueError(f"{self.kind} {name!r} is namespaced: a namespace is required")
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", True, "Pod")
NODES = Resource("", "v1", "nodes", False, "Node")
NAMESPACES = Resource("", "v1", "namespaces", False, "Namespace")
SERVICES = Resource("", "v1", "services", True, "Service")
ENDPOINTS = Resource("", "v1", "endpoints", True, "Endpoints")
EVENTS = Resource("", "v1", "events", True, "Event")
CONFIGMAPS = Resource("", "v1", "configmaps", True, "ConfigMap")
LEASES = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
STATEFULSETS = Resource("apps", "v1", "statefulsets", True, "StatefulSet")
# EndpointSlice: v1 (1.21+) or v1beta1 (1.20): pacific.kube.versions picks one
ENDPOINTSLICES = Resource("discovery.k8s.io", "v1", "endpointslices", True, "EndpointSlice")
ENDPOINTSLICES_V1BETA1 = Resource("discovery.k8s.io", "v1beta1", "endpointslices", True,
                                  "EndpointSlice")
NETWORKPOLICIES = Resource("networking.k8s.io", "v1", "networkpolicies", True,
                           "NetworkPolicy")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", False,
                "CustomResourceDefinition")
SECRETS = Resource("", "v1", "secrets", True, "Secret")
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", True, "ServiceAccount")
DEPLOYMENTS = Resource("apps", "v1", "deployments", True, "Deployment")
REPLICASETS = Resource("apps", "v1", "replicasets", True, "ReplicaSet")
CLUSTERROLES = Resource("rbac.authorization.k8s.io", "v1", "clusterroles", False, "ClusterRole")
CLUSTERROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", False,
                               "ClusterRoleBinding")
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", True, "Role")
ROLEBINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", True, "RoleBinding")
SUBNETS = Resource(names.GROUP, names.VERSION, names.SUBNET_PLURAL, False, "Subnet")
IPS = Resource(names.GROUP, names.VERSION, names.IP_PLURAL, False, "IP")
EGRESSIPS = Resource(names.GROUP, names.VERSION, names.EGRESSIP_PLURAL, False, "EgressIP")
EGRESSFIREWALLS = Resource(names.GROUP, names.VERSION, names.EGRESSFIREWALL_PLURAL, True,
                           "EgressFirewall")
CLUSTERNETWORKPOLICIES = Resource("policy.networking.k8s.io", "v1alpha2", "clusternetworkpolicies",
                                  False, "ClusterNetworkPolicy")   # network-policy-api v0.2.0


def for_kind(api_version: str, kind: str) -> Resource:
    """The Resource of a kind this module knows (ValueError otherwise)."""
    for v in list(globals().values()):
        if isinstance(v, Resource) and v.kind == kind and v.api_version == api_version:
            return v
    raise ValueError(f"unknown resource kind {api_version} {kind}")


def object_key(obj: dict) -> str:
    """Cache key of an object: "namespace/name", or "name" when cluster-scoped.
    Interned: a pod's key is also its IPAM owner key, one copy for both."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return sys.intern(f"{ns}/{meta.get('name')}" if ns else str(meta.get("name")))


def split_key(key: str) -> tuple[str | None, str]:
    """Inverse of object_key: (namespace or None, name)."""
    ns, sep, name = key.partition("/")
    return (ns, name) if sep else (None, ns)


def request(api: Any, method: str, path: str, query: list[tuple[str, Any]] | None = None,
            body: Any = None, content_type: str = "application/json",
            timeout: Any = DEFAULT_TIMEOUT, stream: bool = False) -> Any:
    """One API request.  Returns parsed JSON, or with stream=True the raw urllib3
    response (caller reads and closes it).  Raises errors.ApiError subclasses."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    try:
        m, url, hdrs, sbody, post = api.param_serialize(
            method, path, query_params=query or None, header_params=headers,
            body=body, auth_settings=["BearerToken"])
        resp = api.call_api(m, url, hdrs, sbody, post, _request_timeout=timeout)
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise errors.Unavailable(0, "ConnectionFailed", str(e), method, path) from e
    raw = resp.response
    if not 200 <= resp.status <= 299:
        try:
            data = raw.data
        except (urllib3.exceptions.HTTPError, OSError):
            data = None
        raise errors.from_response(resp.status, data, method, path)
    if stream:
        return raw
    try:
        data = raw.data
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise errors.Unavailable(0, "ConnectionFailed", str(e), method, path) from e
    return json.loads(data) if data else {}


def get(api: Any, res: Resource, name: str, namespace: str | None = None,
        timeout: Any = DEFAULT_TIMEOUT) -> dict | None:
    """The object, or None if it does not exist."""
    try:
        obj = request(api, "GET", res.path(namespace, name), timeout=timeout)
    except errors.NotFound:
        return None
    _fill_type(obj, res)
    return obj


def list_(api: Any, res: Resource, namespace: str | None = None,
          label_selector: str | None = None, field_selector: str | None = None,
          resource_version: str | None = None) -> tuple[list[dict], str]:
    """(items, list resourceVersion).  namespace None lists across namespaces."""
    query: list[tuple[str, Any]] = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    if resource_version is not None:
        query.append(("resourceVersion", resource_version))
    out = request(api, "GET", res.path(namespace), query, timeout=(5.0, 120.0))
    items = out.get("items") or []
    for item in items:
        _fill_type(item, res)
    return items, str((out.get("metadata") or {}).get("resourceVersion") or "")


def create(api: Any, res: Resource, body: dict, namespace: str | None = None,
           timeout: Any = DEFAULT_TIMEOUT) -> dict:
    """Create; raises errors.AlreadyExists if the name is taken."""
    body.setdefault("apiVersion", res.api_version)
    body.setdefault("kind", res.kind)
    ns = namespace or (body.get("metadata") or {}).get("namespace")
    obj = request(api, "POST", res.path(ns), body=body, timeout=timeout)
    _fill_type(obj, res)
    return obj


def replace(api: Any, res: Resource, body: dict, namespace: str | None = None,
            subresource: str | None = None, timeout: Any = DEFAULT_TIMEOUT) -> dict:
    """PUT the whole object; body.metadata.resourceVersion makes it conditional
    (errors.Conflict when stale)."""
    body.setdefault("apiVersion", res.api_version)
    body.setdefault("kind", res.kind)
    meta = body.get("metadata") or {}
    ns = namespace or meta.get("namespace")
    obj = request(api, "PUT", res.path(ns, meta["name"], subresource), body=body,
                  timeout=timeout)
    _fill_type(obj, res)
    return obj


def patch_merge(api: Any, res: Resource, name: str, patch: dict,
                namespace: str | None = None, subresource: str | None = None) -> dict:
    """JSON merge patch (RFC 7386): dicts merge, a None value deletes a key."""
    obj = request(api, "PATCH", res.path(namespace, name, subresource), body=patch,
                  content_type="application/merge-patch+json")
    _fill_type(obj, res)
    return obj


def patch_status(api: Any, res: Resource, obj: dict, fields: dict) -> bool:
    """Merge `fields` into obj's status subresource unless it already holds
    them; False when nothing was written (as it was, or the object is gone)."""
    if all((obj.get("status") or {}).get(k) == v for k, v in fields.items()):
        return False
    meta = obj.get("metadata") or {}
    try:
        patch_merge(api, res, meta["name"], {"status": fields}, namespace=meta.get("namespace"),
                    subresource="status")
    except errors.NotFound:
        return False
    return True


def delete(api: Any, res: Resource, name: str, namespace: str | None = None,
           uid: str | None = None, grace_period: int | None = None) -> bool:
    """Delete; False if it was already gone.  With uid, only that incarnation
    is deleted (errors.Conflict if the name now belongs to another object);
    grace_period=0 removes a pod at once (what a kubelet does once it stopped it)."""
    body = None
    if uid or grace_period is not None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
    try:
        request(api, "DELETE", res.path(namespace, name), body=body)
    except errors.NotFound:
        return False
    return True


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def create_event(api: Any, involved: dict, reason: str, message: str,
                 type: str = "Warning", component: str = "pacific-controller") -> dict | None:
    """Record an Event about `involved` (a dict with kind/apiVersion/metadata).

    Repeats of the same reason and message about the same object are folded
    into one Event whose count goes up, as kubelet does.  Failures are logged,
    never raised: an Event is a report, not part of the operation.
    """
    meta = involved.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    digest = hashlib.sha1(f"{meta.get('uid')}|{reason}|{message}".encode()).hexdigest()[:12]
    name = f"{meta.get('name')}.{digest}"
    now = _now()
    body = {
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {
            "kind": involved.get("kind"), "apiVersion": involved.get("apiVersion"),
            "name": meta.get("name"), "namespace": meta.get("namespace"),
            "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion"),
        },
        "reason": reason, "message": message, "type": type,
        "source": {"component": component}, "reportingComponent": component,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }
    try:
        try:
            return create(api, EVENTS, body, ns)
        except errors.AlreadyExists:
            old = get(api, EVENTS, name, ns) or {}
            return patch_merge(api, EVENTS, name,
                               {"count": int(old.get("count") or 1) + 1,
                                "lastTimestamp": now}, ns)
    except errors.ApiError as e:
        log.warning("could not record event %s on %s %s: %s", reason,
                    involved.get("kind"), object_key(involved), e)
        return None


def _fill_type(obj: dict, res: Resource) -> None:
    if isinstance(obj, dict):
        obj.setdefault("kind", res.kind)
        obj.setdefault("apiVersion", res.api_version)
