"""Kubernetes LabelSelector semantics, once: NetworkPolicy (controller) and
EgressIP (controller and nodes) select pods and namespaces with it.

    matches({"matchLabels": {"app": "web"}}, {"app": "web", "tier": "1"})  # True
    matches({}, {...})        # True: an empty selector selects everything
    matches(None, {...})      # False: no selector selects nothing
"""
from __future__ import annotations

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class SelectorError(ValueError):
    """A selector Kubernetes would not accept (an unknown operator)."""


def matches(sel: dict | None, labels: dict) -> bool:
    if sel is None:
        return False
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op not in OPERATORS:
            raise SelectorError(f"matchExpressions operator {op!r} is not one of "
                                f"{', '.join(OPERATORS)}")
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
