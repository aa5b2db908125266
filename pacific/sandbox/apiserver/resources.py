"""The resource registry: which kinds the emulator serves, and how.

A `ResourceType` describes one REST resource (group, version, plural, kind,
scope, subresources, allowed field selectors, table columns).  Built-in types are
listed here; custom resources are derived from CustomResourceDefinition objects
by `from_crd`.
"""
from dataclasses import dataclass, field


@dataclass
class Column:
    """A CRD additionalPrinterColumn (built-in kinds print through printers.py)."""
    name: str
    path: str            # JSONPath, e.g. .status.conditions[?(@.type=="Ready")].status
    type: str = "string"
    priority: int = 0
    format: str = ""
    description: str = ""


@dataclass
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: list[str] = field(default_factory=list)
    status_subresource: bool = False
    # extra field selectors beyond metadata.name / metadata.namespace
    field_selectors: tuple[str, ...] = ()
    columns: list[Column] = field(default_factory=list)
    # keep status as sent on create (nodes); otherwise status is reset on create
    status_on_create: bool = False
    crd: str | None = None          # name of the CRD defining it
    served_versions: tuple[str, ...] = ()
    categories: list[str] = field(default_factory=list)
    storage_version: str = ""
    schema: dict | None = None      # a custom resource's openAPIV3Schema for this version

    def __post_init__(self):
        if not self.singular:
            self.singular = self.kind.lower()
        if not self.served_versions:
            self.served_versions = (self.version,)
        if not self.storage_version:
            self.storage_version = self.version

    @property
    def key(self) -> tuple[str, str]:
        """Storage identity (group, plural): same objects whatever version is asked."""
        return (self.group, self.plural)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def verbs(self) -> list[str]:
        return ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]

    def allowed_fields(self) -> set[str]:
        f = {"metadata.name"}
        if self.namespaced:
            f.add("metadata.namespace")
        f.update(self.field_selectors)
        return f


def _b(group, version, plural, kind, namespaced, **kw) -> ResourceType:
    return ResourceType(group, version, plural, kind, namespaced, **kw)


BUILTINS: list[ResourceType] = [
    _b("", "v1", "namespaces", "Namespace", False, short_names=["ns"], status_subresource=True,
       field_selectors=("status.phase",)),
    _b("", "v1", "pods", "Pod", True, short_names=["po"], status_subresource=True,
       field_selectors=("spec.nodeName", "status.phase", "spec.restartPolicy", "spec.schedulerName",
                        "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName",
                        "spec.hostNetwork"), categories=["all"]),
    _b("", "v1", "nodes", "Node", False, short_names=["no"], status_subresource=True,
       status_on_create=True, field_selectors=("spec.unschedulable",)),
    _b("", "v1", "services", "Service", True, short_names=["svc"], status_subresource=True,
       field_selectors=("spec.clusterIP", "spec.type"), categories=["all"]),
    _b("", "v1", "endpoints", "Endpoints", True, short_names=["ep"]),
    _b("", "v1", "events", "Event", True, short_names=["ev"],
       field_selectors=("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                        "involvedObject.uid", "involvedObject.apiVersion",
                        "involvedObject.resourceVersion", "involvedObject.fieldPath",
                        "reason", "reportingComponent", "source", "type")),
    _b("", "v1", "configmaps", "ConfigMap", True, short_names=["cm"]),
    _b("", "v1", "secrets", "Secret", True, field_selectors=("type",)),
    _b("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=["sa"]),
    _b("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True),
    _b("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, short_names=["netpol"]),
    _b("coordination.k8s.io", "v1", "leases", "Lease", True),
    _b("apps", "v1", "deployments", "Deployment", True, short_names=["deploy"],
       status_subresource=True, categories=["all"]),
    _b("apps", "v1", "statefulsets", "StatefulSet", True, short_names=["sts"],
       status_subresource=True, categories=["all"]),
    _b("apps", "v1", "daemonsets", "DaemonSet", True, short_names=["ds"],
       status_subresource=True, categories=["all"]),
    _b("apps", "v1", "replicasets", "ReplicaSet", True, short_names=["rs"],
       status_subresource=True, categories=["all"]),
    _b("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False,
       short_names=["crd", "crds"], status_subresource=True),
]

# Kinds that need no body.kind check (sub-resource bodies)
CRD_KEY = ("apiextensions.k8s.io", "customresourcedefinitions")
NAMESPACE_KEY = ("", "namespaces")


def from_crd(crd: dict) -> list[ResourceType]:
    """ResourceTypes (one per served version) for a CustomResourceDefinition object."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = spec["group"]
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    served = tuple(v["name"] for v in versions)
    storage = next((v["name"] for v in versions if v.get("storage")), served[0] if served else "v1")
    out = []
    for v in versions:
        sel = tuple(s.get("jsonPath", "").lstrip(".") for s in v.get("selectableFields") or [])
        cols = []
        for c in v.get("additionalPrinterColumns") or []:
            cols.append(Column(c["name"], c.get("jsonPath", ""), c.get("type", "string"),
                               c.get("priority", 0), c.get("format", ""), c.get("description", "")))
        if not cols:      # kube-apiserver's default when a CRD declares no columns
            cols.append(Column("Age", ".metadata.creationTimestamp", "date"))
        out.append(ResourceType(
            group=group, version=v["name"], plural=names["plural"], kind=names["kind"],
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            singular=names.get("singular") or names["kind"].lower(),
            short_names=list(names.get("shortNames") or []),
            status_subresource="status" in ((v.get("subresources") or {})),
            field_selectors=sel, columns=cols, crd=crd["metadata"]["name"],
            served_versions=served, categories=list(names.get("categories") or []),
            storage_version=storage, schema=(v.get("schema") or {}).get("openAPIV3Schema"),
        ))
    return out


class Registry:
    """Lookup of ResourceTypes by (group, version, plural).

    Copy-on-write: writers (under the store lock) build a new dict and swap it in
    with one assignment, so request threads reading without the lock never see a
    CRD's types half-replaced (a 404 for its resources) nor a dict that changes
    size while they iterate it."""

    def __init__(self):
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {
            (rt.group, rt.version, rt.plural): rt for rt in BUILTINS}

    def add(self, rt: ResourceType) -> None:
        self._by_gvr = {**self._by_gvr, (rt.group, rt.version, rt.plural): rt}

    def replace_crd(self, crd_name: str, rts: list[ResourceType]) -> None:
        """The types of CRD `crd_name` become `rts`, in one step."""
        by_gvr = {k: rt for k, rt in self._by_gvr.items() if rt.crd != crd_name}
        by_gvr.update({(rt.group, rt.version, rt.plural): rt for rt in rts})
        self._by_gvr = by_gvr

    def remove_crd(self, crd_name: str) -> None:
        self.replace_crd(crd_name, [])

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, plural))

    def by_key(self, key: tuple[str, str]) -> ResourceType | None:
        for rt in self._by_gvr.values():
            if rt.key == key:
                return rt
        return None

    def all(self) -> list[ResourceType]:
        return list(self._by_gvr.values())

    def group_versions(self) -> dict[str, list[str]]:
        """group -> versions, core group "" included."""
        out: dict[str, list[str]] = {}
        for rt in self._by_gvr.values():
            vs = out.setdefault(rt.group, [])
            if rt.version not in vs:
                vs.append(rt.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._by_gvr.values() if rt.group == group and rt.version == version]
