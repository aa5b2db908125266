"""Which tenant a namespace belongs to: the pure rules, shared by the
controller (pacific.controller.tenant programs the isolation in OVN) and the
tools (`pacific tenant`, trace, topology).

Each namespace is a tenant of its own, unless it carries the label
`pacific.io/tenant: NAME`: namespaces with the same value form one tenant.  The
value `global` makes a namespace global.  The namespaces of
`--global-namespaces` are global unless labelled otherwise.  A namespace's
NAME grants nothing: the own tenant of an unlabelled namespace is
`ns:<namespace>` (own_tenant), which no label value can spell.
"""
from __future__ import annotations

import hashlib
import re

from pacific import names

GLOBAL = "global"
OWN_PREFIX = "ns:"            # own tenant of an unlabelled namespace: no label value has ':'
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def own_tenant(namespace: str) -> str:
    """The tenant of a namespace without (a valid) tenant label: its own, under a
    name no label value can spell, so the namespace's name grants nothing."""
    return OWN_PREFIX + namespace


def is_own_tenant(tenant: str) -> bool:
    return tenant.startswith(OWN_PREFIX)


def tenant_of(ns: dict | None, name: str, global_namespaces: frozenset[str]) -> tuple[str, str | None]:
    """(tenant, problem): the namespace's tenant (the label's value, GLOBAL for a
    global one, own_tenant(name) without a label) and why its label was not
    used (None if it was, or there is none)."""
    label = (((ns or {}).get("metadata") or {}).get("labels") or {}).get(names.LABEL_TENANT)
    if label is not None:
        if label and len(label) <= 63 and _LABEL_VALUE.match(label):
            return label, None
        problem = (f"label {names.LABEL_TENANT}={label!r} is not a valid tenant name "
                   "(a label value: 1-63 letters, digits, '-', '_', '.')")
    else:
        problem = None
    return (GLOBAL if name in global_namespaces else own_tenant(name)), problem


def group_name(tenant: str) -> str:
    """Port group of a tenant: OVN names in ACL matches are [A-Za-z_][A-Za-z0-9_]*,
    so a hash of the tenant (named in the group's external_ids)."""
    return "pt_" + hashlib.sha256(tenant.encode()).hexdigest()[:16]
