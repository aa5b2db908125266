"""Validation rules of built-in kinds that a Pacific component could break
unnoticed: pod required fields, defaults and spec immutability, Service types,
protocols and port names, Event namespaces (legacy core/v1 rules), Lease
durations.  Functions return `(reason, field, message)` causes."""
import copy

from pacific.sandbox.apiserver.metavalidation import is_dns1123_label
from pacific.sandbox.apiserver.schema import fmt_value

POD_UPDATE_FORBIDDEN = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)")
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
PROTOCOLS = ("TCP", "UDP", "SCTP")


def validate_pod(obj: dict) -> list:
    spec = obj.get("spec")
    causes = []
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not containers or not isinstance(containers, list):
        return [("FieldValueRequired", "spec.containers", "Required value")]
    seen = set()
    for i, c in enumerate(containers):
        if not isinstance(c, dict) or not c.get("name"):
            causes.append(("FieldValueRequired", f"spec.containers[{i}].name", "Required value"))
        else:
            causes += [("FieldValueInvalid", f"spec.containers[{i}].name", f"Invalid value: "
                        f"{fmt_value(c['name'])}: {m}") for m in is_dns1123_label(c["name"])]
            if c["name"] in seen:
                causes.append(("FieldValueDuplicate", f"spec.containers[{i}].name",
                               f"Duplicate value: {fmt_value(c['name'])}"))
            seen.add(c["name"])
        if not isinstance(c, dict) or not c.get("image"):
            causes.append(("FieldValueRequired", f"spec.containers[{i}].image", "Required value"))
    return causes


def default_pod(obj: dict) -> None:
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


def validate_pod_update(old: dict, new: dict) -> list:
    """A pod's spec is immutable except container images, activeDeadlineSeconds,
    tolerations, terminationGracePeriodSeconds and scheduling gates (spec.nodeName
    is set once, by the scheduler through pods/binding)."""
    ospec, nspec = old.get("spec") or {}, copy.deepcopy(new.get("spec") or {})
    for key in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"):
        if key in ospec:
            nspec[key] = ospec[key]
        else:
            nspec.pop(key, None)
    for key in ("containers", "initContainers"):
        olds, news = ospec.get(key) or [], nspec.get(key) or []
        if len(olds) == len(news):
            for o, n in zip(olds, news):
                if isinstance(n, dict) and isinstance(o, dict) and "image" in o:
                    n["image"] = o["image"]
    if nspec == ospec:
        return []
    changed = sorted(k for k in set(nspec) | set(ospec) if nspec.get(k) != ospec.get(k))
    diff = "\n".join(f"  spec.{k}: {fmt_value(ospec.get(k))} -> {fmt_value(nspec.get(k))}" for k in changed)
    return [("FieldValueForbidden", "spec", f"{POD_UPDATE_FORBIDDEN}\n{diff}")]


def validate_service_spec(spec: dict) -> list:
    causes = []
    stype = spec.get("type", "ClusterIP")
    if stype not in SERVICE_TYPES:
        causes.append(("FieldValueNotSupported", "spec.type", f"Unsupported value: {fmt_value(stype)}: "
                       "supported values: " + ", ".join(f'"{t}"' for t in SERVICE_TYPES)))
    names = set()
    for i, p in enumerate(spec.get("ports") or []):
        if not isinstance(p, dict):
            continue
        proto = p.get("protocol", "TCP")
        if proto not in PROTOCOLS:
            causes.append(("FieldValueNotSupported", f"spec.ports[{i}].protocol",
                           f"Unsupported value: {fmt_value(proto)}: supported values: "
                           + ", ".join(f'"{x}"' for x in PROTOCOLS)))
        name = p.get("name")
        if name:
            causes += [("FieldValueInvalid", f"spec.ports[{i}].name", f"Invalid value: {fmt_value(name)}: {m}")
                       for m in is_dns1123_label(name)]
            if name in names:
                causes.append(("FieldValueDuplicate", f"spec.ports[{i}].name", f"Duplicate value: {fmt_value(name)}"))
            names.add(name)
        np = p.get("nodePort")
        if np and stype == "ClusterIP":
            causes.append(("FieldValueForbidden", f"spec.ports[{i}].nodePort",
                           "Forbidden: may not be used when `type` is 'ClusterIP'"))
    return causes


def validate_event(obj: dict) -> list:
    """core/v1 Event (legacy rules): the involved object's namespace must be the
    Event's; an Event about a cluster-scoped object lives in "default" (or, with
    eventTime set, "default"/"kube-system")."""
    ns = obj["metadata"].get("namespace", "")
    inv = obj.get("involvedObject") or {}
    ins = inv.get("namespace") or ""
    causes = []
    bad = ("FieldValueInvalid", "involvedObject.namespace",
           f"Invalid value: {fmt_value(ins)}: does not match event.namespace")
    if not obj.get("eventTime"):
        if (not ins and ns not in ("", "default")) or (ins and ins != ns):
            causes.append(bad)
    else:
        if not ins and ns not in ("default", "kube-system"):
            causes.append(bad)
        for f in ("reportingController", "reportingInstance", "action", "reason"):
            if not obj.get(f):
                causes.append(("FieldValueRequired", f, "Required value"))
    return causes


def validate_lease(obj: dict) -> list:
    spec = obj.get("spec") or {}
    causes = []
    for f in ("leaseDurationSeconds", "leaseTransitions"):
        v = spec.get(f)
        if v is None:
            continue
        if f == "leaseDurationSeconds" and (not isinstance(v, int) or v <= 0):
            causes.append(("FieldValueInvalid", f"spec.{f}", f"Invalid value: {fmt_value(v)}: must be greater than 0"))
        if f == "leaseTransitions" and (not isinstance(v, int) or v < 0):
            causes.append(("FieldValueInvalid", f"spec.{f}",
                           f"Invalid value: {fmt_value(v)}: must be greater than or equal to 0"))
    return causes
