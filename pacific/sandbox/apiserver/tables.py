"""Server-side printing: `meta.k8s.io/v1 Table` answers, which `kubectl get` asks
for (Accept: application/json;as=Table;g=meta.k8s.io;v=v1).

Built-in kinds print through printers.py; custom resources through their CRD's
additionalPrinterColumns (JSONPath, filters included), cells converted as
kube-apiserver's tableconvertor does: `string` columns print the first match
(objects and lists as JSON), `integer`/`number`/`boolean` keep the JSON value when
it has that type (else no value), `date` columns become an age ("5s", "3m",
"2d4h")."""
import json
import logging

from pacific.sandbox.apiserver import jsonpath, printers
from pacific.sandbox.apiserver.resources import ResourceType
from pacific.sandbox.apiserver.schema import fmt_number

log = logging.getLogger(__name__)
NAME_COLUMN = {"name": "Name", "type": "string", "format": "name", "priority": 0,
               "description": "Name must be unique within a namespace. Is required when creating resources, "
                              "although some resources may allow a client to request the generation of an "
                              "appropriate name automatically. Name is primarily intended for creation "
                              "idempotence and configuration definition. Cannot be updated. More info: "
                              "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"}
DEFAULT_COLUMNS = ([("Age", "string", 0)], lambda o: [o["metadata"]["name"], printers.age(
    o["metadata"].get("creationTimestamp"))])


def wants_table(accept: str) -> bool:
    first = (accept or "").split(",")[0]
    return "as=Table" in first and "g=meta.k8s.io" in first


def _print_string(v) -> str:
    """client-go jsonpath's text printing of one value."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return fmt_number(v)
    return json.dumps(v, separators=(",", ":"))


def crd_cell(col_type: str, path: str, obj: dict):
    try:
        found = jsonpath.find(path, obj)
    except jsonpath.JSONPathError as e:
        log.debug("printer column %s: %s", path, e)
        return None
    if not found or found[0] is None:
        return None
    v = found[0]
    if col_type == "string":
        return _print_string(v)
    if col_type == "integer":
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        return int(v) if isinstance(v, float) else None
    if col_type == "number":
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if col_type == "boolean":
        return v if isinstance(v, bool) else None
    if col_type == "date":
        if not isinstance(v, str):
            return None
        return printers.age(v) if printers.parse_time(v) else "<invalid>"
    return None


def columns(rt: ResourceType) -> list[dict]:
    if rt.crd is not None:
        return [NAME_COLUMN] + [{"name": c.name, "type": c.type, "format": c.format, "priority": c.priority,
                                 "description": c.description} for c in rt.columns]
    cols, _ = printers.PRINTERS.get(rt.key, DEFAULT_COLUMNS)
    head = [] if rt.key in printers.NO_NAME_COLUMN else [NAME_COLUMN]
    return head + [{"name": n, "type": t, "format": "", "priority": p, "description": ""} for n, t, p in cols]


def cells(rt: ResourceType, obj: dict) -> list:
    if rt.crd is not None:
        return [obj["metadata"]["name"]] + [crd_cell(c.type, c.path, obj) for c in rt.columns]
    _, fn = printers.PRINTERS.get(rt.key, DEFAULT_COLUMNS)
    return fn(obj)


def row(rt: ResourceType, obj: dict, include: str) -> dict:
    r = {"cells": cells(rt, obj)}
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
