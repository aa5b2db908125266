"""Server-side printing: `meta.k8s.io/v1 Table` answers, which `kubectl get` asks
for (Accept: application/json;as=Table;g=meta.k8s.io;v=v1)."""
import datetime

from pacific.sandbox.apiserver.resources import ResourceType
from pacific.sandbox.apiserver.selectors import get_path


def wants_table(accept: str) -> bool:
    first = (accept or "").split(",")[0]
    return "as=Table" in first and "g=meta.k8s.io" in first


def _age(ts: str | None) -> str:
    if not ts:
        return "<unknown>"
    try:
        t = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return "<invalid>"
    s = int((datetime.datetime.now(datetime.timezone.utc) - t).total_seconds())
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def _special(rt: ResourceType, name: str, obj: dict):
    status = obj.get("status") or {}
    if name == "Age":
        return _age(obj["metadata"].get("creationTimestamp"))
    if rt.kind == "Pod":
        cs = status.get("containerStatuses") or []
        total = len((obj.get("spec") or {}).get("containers") or [])
        if name == "Ready":
            return f"{sum(1 for c in cs if c.get('ready'))}/{total}"
        if name == "Restarts":
            return sum(int(c.get("restartCount", 0)) for c in cs)
    if rt.kind == "Node" and name == "Status":
        ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
        return "Ready" if ready and ready.get("status") == "True" else "NotReady" if ready else "Unknown"
    if rt.kind == "Service" and name == "Ports":
        ports = (obj.get("spec") or {}).get("ports") or []
        return ",".join(f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/"
                        f"{p.get('protocol', 'TCP')}" for p in ports) or "<none>"
    return None


def _cell(rt: ResourceType, col, obj: dict):
    if col.path:
        v = get_path(obj, col.path)
        if v is None:
            return "<none>" if rt.crd is None else None
        return v if isinstance(v, (int, float, bool)) else str(v) if not isinstance(v, (dict, list)) else v
    return _special(rt, col.name, obj)


def columns(rt: ResourceType) -> list[dict]:
    cols = [{"name": "Name", "type": "string", "format": "name", "priority": 0,
             "description": "Name must be unique within a namespace."}]
    for c in rt.columns:
        cols.append({"name": c.name, "type": c.type if c.type != "date" else "string", "format": "",
                     "priority": c.priority, "description": ""})
    return cols


def row(rt: ResourceType, obj: dict, include: str) -> dict:
    cells = [obj["metadata"]["name"]] + [_cell(rt, c, obj) for c in rt.columns]
    r = {"cells": cells}
    if include == "Object":
        r["object"] = obj
    elif include != "None":
        r["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                       "metadata": obj["metadata"]}
    return r


def table(rt: ResourceType, objs: list[dict], rv: str, include: str, with_columns: bool = True) -> dict:
    t = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
         "rows": [row(rt, o, include) for o in objs]}
    if with_columns:
        t["columnDefinitions"] = columns(rt)
    return t
