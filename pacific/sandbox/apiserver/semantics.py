"""Per-kind validation and defaulting, the parts of kube-apiserver's strategies
that clients can observe: name rules, required pod fields, Service clusterIP and
nodePort allocation, namespace phase, CRD acceptance, status reset on create,
immutable fields, generation bumps.
"""
import ipaddress
import secrets


from pacific import names
from pacific.sandbox.apiserver import kindrules, metavalidation, reqctx, schema
from pacific.sandbox.apiserver.errors import ApiError, invalid
from pacific.sandbox.apiserver.resources import ResourceType

# PUT of a missing object creates it (AllowCreateOnUpdate in kube-apiserver)
CREATE_ON_UPDATE = {("", "endpoints"), ("", "events"), ("coordination.k8s.io", "leases"),
                    ("discovery.k8s.io", "endpointslices")}


def generate_suffix() -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(secrets.choice(alphabet) for _ in range(5))


def validate_meta(rt: ResourceType, obj: dict) -> list:
    """ObjectMeta causes (names per kind, labels, annotations, finalizers, owners)."""
    return metavalidation.validate_object_meta(rt.kind, obj.get("metadata") or {})


def admit_fields(rt: ResourceType, obj: dict, old: dict | None = None) -> list:
    """Prune unknown fields (reported as fieldValidation asks), apply CRD defaults,
    return the schema causes of a custom resource (none for built-ins)."""
    unknown, causes = schema.admit(obj, rt.schema, old)
    reqctx.unknown_fields(rt.kind, rt.version, unknown)
    return causes


def _raise(rt: ResourceType, obj: dict, causes: list) -> None:
    if causes:
        raise invalid(rt.group, rt.kind, (obj.get("metadata") or {}).get("name", ""), causes)


def _validate_service(rt, obj, used_ips, used_ports, causes):
    spec = obj.setdefault("spec", {})
    name = obj["metadata"].get("name", "")
    stype = spec.setdefault("type", "ClusterIP")
    causes = causes + kindrules.validate_service_spec(spec)
    ports = spec.get("ports") or []
    if stype != "ExternalName" and not ports and spec.get("clusterIP") != "None":
        causes.append(("FieldValueRequired", "spec.ports", "Required value"))
    for i, p in enumerate(ports):
        if not isinstance(p, dict) or not isinstance(p.get("port"), int) or not 0 < p["port"] < 65536:
            causes.append(("FieldValueInvalid", f"spec.ports[{i}].port",
                           "Invalid value: must be between 1 and 65535, inclusive"))
            continue
        p.setdefault("protocol", "TCP")
        p.setdefault("targetPort", p["port"])
        if len(ports) > 1 and not p.get("name"):
            causes.append(("FieldValueRequired", f"spec.ports[{i}].name", "Required value"))
    if causes:
        raise invalid(rt.group, rt.kind, name, causes)
    spec.setdefault("sessionAffinity", "None")
    if stype == "ExternalName":
        return
    net = ipaddress.ip_network(names.SERVICE_CIDR)
    cip = spec.get("clusterIP")
    if cip in (None, ""):
        for host in net.hosts():
            if str(host) not in used_ips and host != net.network_address + 1:
                cip = str(host)
                break
        else:
            raise ApiError(500, "InternalError", f"no Service IPs left in {names.SERVICE_CIDR}")
    elif cip != "None":
        try:
            addr = ipaddress.ip_address(cip)
        except ValueError:
            raise invalid(rt.group, rt.kind, name, [("FieldValueInvalid", "spec.clusterIP",
                                                     f'Invalid value: "{cip}": must be a valid IP address')])
        if addr not in net:
            raise invalid(rt.group, rt.kind, name, [("FieldValueInvalid", "spec.clusterIPs",
                          f'Invalid value: ["{cip}"]: failed to allocate IP {cip}: the provided IP '
                          f"({cip}) is not in the valid range. The range of valid IPs is {names.SERVICE_CIDR}")])
        if cip in used_ips:
            raise invalid(rt.group, rt.kind, name, [("FieldValueInvalid", "spec.clusterIPs",
                          f'Invalid value: ["{cip}"]: failed to allocate IP {cip}: provided IP is already allocated')])
    spec["clusterIP"] = cip
    spec["clusterIPs"] = [cip]
    if cip != "None":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    if stype in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
        for p in ports:
            if not p.get("nodePort"):
                p["nodePort"] = next(n for n in range(30000, 32768) if n not in used_ports)
                used_ports.add(p["nodePort"])
    obj["status"] = {"loadBalancer": {}}


def validate_crd(rt, obj, causes=()):
    spec = obj.get("spec") or {}
    name = obj["metadata"].get("name", "")
    n = spec.get("names") or {}
    causes = list(causes)
    if not spec.get("group"):
        causes.append(("FieldValueRequired", "spec.group", "Required value"))
    if not n.get("plural"):
        causes.append(("FieldValueRequired", "spec.names.plural", "Required value"))
    if not n.get("kind"):
        causes.append(("FieldValueRequired", "spec.names.kind", "Required value"))
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(("FieldValueNotSupported", "spec.scope",
                       'Unsupported value: supported values: "Cluster", "Namespaced"'))
    versions = spec.get("versions") or []
    if not versions:
        causes.append(("FieldValueRequired", "spec.versions", "Required value"))
    elif sum(1 for v in versions if v.get("storage")) != 1:
        causes.append(("FieldValueInvalid", "spec.versions",
                       "Invalid value: must have exactly one version marked as storage version"))
    for i, v in enumerate(versions):
        path = f"spec.versions[{i}].schema.openAPIV3Schema"
        sch = (v.get("schema") or {}).get("openAPIV3Schema") if isinstance(v, dict) else None
        if sch is None:
            causes.append(("FieldValueRequired", path, "Required value: schemas are required"))
        else:
            causes += schema.check_structural(sch, path)
    if not causes and name != f"{n['plural']}.{spec['group']}":
        causes.append(("FieldValueInvalid", "metadata.name",
                       f'Invalid value: "{name}": must be spec.names.plural+"."+spec.group'))
    if causes:
        raise invalid(rt.group, rt.kind, name, causes)


def crd_status(obj, now: str) -> dict:
    n = obj["spec"]["names"]
    accepted = {"plural": n["plural"], "kind": n["kind"],
                "singular": n.get("singular") or n["kind"].lower(),
                "listKind": n.get("listKind") or n["kind"] + "List"}
    for k in ("shortNames", "categories"):
        if n.get(k):
            accepted[k] = n[k]
    stored = [v["name"] for v in obj["spec"]["versions"] if v.get("storage")]
    return {
        "acceptedNames": accepted,
        "storedVersions": stored,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": now},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": now},
        ],
    }


def prepare_create(rt: ResourceType, obj: dict, store) -> None:
    """Validate and default a new object in place (metadata already set)."""
    if rt.status_subresource and not rt.status_on_create:
        obj.pop("status", None)
    causes = validate_meta(rt, obj) + admit_fields(rt, obj)
    if rt.key == ("", "pods"):
        causes += kindrules.validate_pod(obj)
        _raise(rt, obj, causes)
        kindrules.default_pod(obj)
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif rt.key == ("", "services"):
        used_ips, used_ports = store.service_allocations()
        _validate_service(rt, obj, used_ips, used_ports, causes)
    elif rt.key == ("", "namespaces"):
        _raise(rt, obj, causes)
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        validate_crd(rt, obj, causes)
        obj["status"] = crd_status(obj, obj["metadata"]["creationTimestamp"])
    elif rt.key == ("", "events"):
        _raise(rt, obj, causes + kindrules.validate_event(obj))
    elif rt.key == ("coordination.k8s.io", "leases"):
        _raise(rt, obj, causes + kindrules.validate_lease(obj))
    else:
        _raise(rt, obj, causes)


def prepare_update(rt: ResourceType, old: dict, new: dict) -> None:
    """Validate an update of the main resource (not a subresource)."""
    causes = validate_meta(rt, new) + admit_fields(rt, new, old)
    name = new["metadata"]["name"]
    if rt.key == ("", "pods"):
        causes += kindrules.validate_pod(new)
        _raise(rt, new, causes)
        kindrules.default_pod(new)      # defaults apply on every write, as decoding does in kube-apiserver
        _raise(rt, new, kindrules.validate_pod_update(old, new))
    elif rt.key == ("", "services"):
        spec, ospec = new.setdefault("spec", {}), old.get("spec") or {}
        causes += kindrules.validate_service_spec(spec)
        if spec.get("clusterIP") in (None, "") and ospec.get("clusterIP"):
            spec["clusterIP"] = ospec["clusterIP"]
            spec["clusterIPs"] = ospec.get("clusterIPs") or [ospec["clusterIP"]]
        elif spec.get("clusterIP") != ospec.get("clusterIP"):
            causes.append(("FieldValueInvalid", "spec.clusterIPs[0]", "Invalid value: field is immutable"))
        _raise(rt, new, causes)
        for p in spec.get("ports") or []:
            if isinstance(p, dict) and "port" in p:
                p.setdefault("protocol", "TCP")
                p.setdefault("targetPort", p["port"])
    elif rt.key == ("", "namespaces"):
        _raise(rt, new, causes)
        new["spec"] = old.get("spec")
    elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        validate_crd(rt, new, causes)
        if new["spec"].get("group") != old["spec"].get("group") or \
                new["spec"]["names"].get("plural") != old["spec"]["names"].get("plural"):
            raise invalid(rt.group, rt.kind, name, [("FieldValueInvalid", "spec.group",
                                                     "Invalid value: field is immutable")])
        new["status"] = crd_status(new, (old.get("status") or {}).get("conditions", [{}])[0]
                                   .get("lastTransitionTime", new["metadata"]["creationTimestamp"]))
    elif rt.key == ("", "events"):
        _raise(rt, new, causes + kindrules.validate_event(new))
    elif rt.key == ("coordination.k8s.io", "leases"):
        _raise(rt, new, causes + kindrules.validate_lease(new))
    else:
        _raise(rt, new, causes)


def prepare_status_update(rt: ResourceType, old: dict, new: dict) -> None:
    """Validate a write through the status subresource (only status changed):
    custom resources against their schema (status included), metadata as ever."""
    _raise(rt, new, validate_meta(rt, new) + admit_fields(rt, new, old))


def spec_changed(old: dict, new: dict) -> bool:
    """True when anything but metadata/status changed (bumps metadata.generation)."""
    keys = (set(old) | set(new)) - {"metadata", "status", "apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)


__all__ = ["prepare_create", "prepare_update", "prepare_status_update", "spec_changed", "generate_suffix"]
