"""Per-kind validation and defaulting, the parts of kube-apiserver's strategies
that clients can observe: name rules, required pod fields, Service clusterIP and
nodePort allocation, namespace phase, CRD acceptance, status reset on create,
immutable fields, generation bumps.
"""
import ipaddress
import re
import secrets


from pacific import names
from pacific.sandbox.apiserver.errors import ApiError, invalid
from pacific.sandbox.apiserver.resources import ResourceType

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# kinds whose names must be DNS-1123 labels rather than subdomains
_LABEL_NAMED = {"Namespace", "Service"}
# PUT of a missing object creates it (AllowCreateOnUpdate in kube-apiserver)
CREATE_ON_UPDATE = {("", "endpoints"), ("", "events"), ("coordination.k8s.io", "leases"),
                    ("discovery.k8s.io", "endpointslices")}


def generate_suffix() -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(secrets.choice(alphabet) for _ in range(5))


def validate_meta(rt: ResourceType, obj: dict) -> None:
    meta = obj.get("metadata")
    name = meta.get("name", "")
    causes = []
    if not name:
        causes.append(("FieldValueRequired", "metadata.name",
                       "Required value: name or generateName is required"))
    else:
        pattern = _DNS1123_LABEL if rt.kind in _LABEL_NAMED else _DNS1123_SUBDOMAIN
        limit = 63 if rt.kind in _LABEL_NAMED else 253
        if len(name) > limit or not pattern.match(name):
            what = "RFC 1123 label" if rt.kind in _LABEL_NAMED else "RFC 1123 subdomain"
            causes.append(("FieldValueInvalid", "metadata.name",
                           f'Invalid value: "{name}": a lowercase {what} must consist of lower case '
                           "alphanumeric characters, '-' or '.', and must start and end with an "
                           "alphanumeric character"))
    for field in ("labels", "annotations"):
        v = meta.get(field)
        if v is not None and (not isinstance(v, dict) or
                              not all(isinstance(x, str) for x in v.values())):
            causes.append(("FieldValueInvalid", f"metadata.{field}",
                           "Invalid value: must be a map of string keys to string values"))
    if causes:
        raise invalid(rt.group, rt.kind, name, causes)


def _validate_pod(rt, obj):
    spec = obj.get("spec")
    name = obj["metadata"].get("name", "")
    causes = []
    containers = (spec or {}).get("containers") if isinstance(spec, dict) else None
    if not containers:
        causes.append(("FieldValueRequired", "spec.containers", "Required value"))
    else:
        for i, c in enumerate(containers):
            if not isinstance(c, dict) or not c.get("name"):
                causes.append(("FieldValueRequired", f"spec.containers[{i}].name", "Required value"))
            if not isinstance(c, dict) or not c.get("image"):
                causes.append(("FieldValueRequired", f"spec.containers[{i}].image", "Required value"))
    if causes:
        raise invalid(rt.group, rt.kind, name, causes)


def _default_pod(obj):
    spec = obj["spec"]
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for c in spec["containers"]:
        c.setdefault("terminationMessagePath", "/dev/termination-log")
        c.setdefault("terminationMessagePolicy", "File")
        c.setdefault("imagePullPolicy", "Always" if c["image"].endswith(":latest")
                     or ":" not in c["image"].rsplit("/", 1)[-1] else "IfNotPresent")
        c.setdefault("resources", {})


def _validate_service(rt, obj, used_ips, used_ports):
    spec = obj.setdefault("spec", {})
    name = obj["metadata"].get("name", "")
    stype = spec.setdefault("type", "ClusterIP")
    causes = []
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


def validate_crd(rt, obj):
    spec = obj.get("spec") or {}
    name = obj["metadata"].get("name", "")
    n = spec.get("names") or {}
    causes = []
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
    validate_meta(rt, obj)
    if rt.status_subresource and not rt.status_on_create:
        obj.pop("status", None)
    if rt.key == ("", "pods"):
        _validate_pod(rt, obj)
        _default_pod(obj)
        obj["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    elif rt.key == ("", "services"):
        used_ips, used_ports = store.service_allocations()
        _validate_service(rt, obj, used_ips, used_ports)
    elif rt.key == ("", "namespaces"):
        obj["spec"] = {"finalizers": ["kubernetes"]}
        obj["status"] = {"phase": "Active"}
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        validate_crd(rt, obj)
        obj["status"] = crd_status(obj, obj["metadata"]["creationTimestamp"])


def prepare_update(rt: ResourceType, old: dict, new: dict) -> None:
    """Validate an update of the main resource (not a subresource)."""
    validate_meta(rt, new)
    name = new["metadata"]["name"]
    if rt.key == ("", "pods"):
        _validate_pod(rt, new)
        _default_pod(new)      # defaults apply on every write, as decoding does in kube-apiserver
        old_node = (old.get("spec") or {}).get("nodeName")
        if old_node and (new.get("spec") or {}).get("nodeName") != old_node:
            raise invalid(rt.group, rt.kind, name, [("FieldValueForbidden", "spec",
                          "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
                          "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
                          "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
                          "(allow it to be set to 1 if it was previously negative)")])
    elif rt.key == ("", "services"):
        spec, ospec = new.setdefault("spec", {}), old.get("spec") or {}
        if spec.get("clusterIP") in (None, "") and ospec.get("clusterIP"):
            spec["clusterIP"] = ospec["clusterIP"]
            spec["clusterIPs"] = ospec.get("clusterIPs") or [ospec["clusterIP"]]
        elif spec.get("clusterIP") != ospec.get("clusterIP"):
            raise invalid(rt.group, rt.kind, name, [("FieldValueInvalid", "spec.clusterIPs[0]",
                          "Invalid value: field is immutable")])
        for p in spec.get("ports") or []:
            if isinstance(p, dict) and "port" in p:
                p.setdefault("protocol", "TCP")
                p.setdefault("targetPort", p["port"])
    elif rt.key == ("", "namespaces"):
        new["spec"] = old.get("spec")
    elif rt.key == ("apiextensions.k8s.io", "customresourcedefinitions"):
        validate_crd(rt, new)
        if new["spec"].get("group") != old["spec"].get("group") or \
                new["spec"]["names"].get("plural") != old["spec"]["names"].get("plural"):
            raise invalid(rt.group, rt.kind, name, [("FieldValueInvalid", "spec.group",
                                                     "Invalid value: field is immutable")])
        new["status"] = crd_status(new, (old.get("status") or {}).get("conditions", [{}])[0]
                                   .get("lastTransitionTime", new["metadata"]["creationTimestamp"]))


def spec_changed(old: dict, new: dict) -> bool:
    """True when anything but metadata/status changed (bumps metadata.generation)."""
    keys = (set(old) | set(new)) - {"metadata", "status", "apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)


__all__ = ["prepare_create", "prepare_update", "spec_changed", "generate_suffix"]
