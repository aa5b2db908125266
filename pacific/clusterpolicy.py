"""ClusterNetworkPolicy (policy.networking.k8s.io/v1alpha2, network-policy-api
v0.2.0): its spec checked and parsed, and its place among OVN's ACL tiers (pure;
the controller's `cluster-policy` feature writes it, docs/networkpolicy.md).

Precedence (the API's, in OVN's ACL tiers, which OVN 23.09+ has):

| tier | what | OVN ACL tier | priorities |
|---|---|---|---|
| Admin | Admin ClusterNetworkPolicies, then tenant isolation (the lowest Admin rule) and the multicast gate | 0 | ADMIN_BASE + (1000 - priority) * 25 + (24 - rule index) |
| NetworkPolicy | every NetworkPolicy | 1 | as before (1000 / 1001) |
| Baseline | Baseline ClusterNetworkPolicies | 2 | as the Admin tier's |

`Accept` is `allow-related` (replies and related ICMP pass), `Deny` `drop`,
`Pass` OVN's `pass` (on to the next tier).  A connection no tier decides is
allowed.  Rules of one policy keep their written order; ingress rules are
to-lport ACLs on the subject's port group, egress rules from-lport.

The API server (1.20) has no CEL: `parse` checks what the upstream CRD's
validation rules say (exactly one field per subject, peer, protocol and port,
a range's start below its end, domain names only in `Accept` rules, named
ports not with networks/nodes/domainNames), and more: each problem is named
with its field path.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pacific import selectors

GROUP, VERSION, PLURAL, KIND = "policy.networking.k8s.io", "v1alpha2", "clusternetworkpolicies", \
    "ClusterNetworkPolicy"
ADMIN, BASELINE = "Admin", "Baseline"
OVN_TIER = {ADMIN: 0, BASELINE: 2}
NP_TIER = 1
ADMIN_BASE = 3100          # above tenant isolation (3000) and the multicast gate (2900)
ACTIONS = {"Accept": "allow-related", "Deny": "drop", "Pass": "pass"}
PROTOCOLS = ("tcp", "udp", "sctp")
MAX_RULES = MAX_PEERS = MAX_PROTOCOLS = 25


class PolicyError(ValueError):
    """The spec is invalid; the message lists every problem with its path."""


@dataclass(frozen=True)
class Selection:
    """Pods by namespace labels only (`namespaces`), or by namespace and pod
    labels (`pods`); `nodes` by node labels."""
    kind: str                          # namespaces | pods | nodes
    namespace_selector: dict | None = None
    pod_selector: dict | None = None


@dataclass(frozen=True)
class Peer:
    kind: str                          # namespaces | pods | nodes | networks | domainNames
    selection: Selection | None = None
    values: tuple = ()                 # CIDRs or domain names


@dataclass(frozen=True)
class Port:
    protocol: str | None               # tcp | udp | sctp; None: a named port (any of them)
    start: int | None = None           # None: every port of the protocol
    end: int | None = None
    named: str | None = None


@dataclass(frozen=True)
class Rule:
    direction: str                     # ingress | egress
    index: int
    name: str
    action: str                        # Accept | Deny | Pass
    peers: tuple
    ports: tuple                       # () : every protocol and port


@dataclass(frozen=True)
class Policy:
    name: str
    tier: str
    priority: int
    subject: Selection
    rules: tuple

    def acl_priority(self, rule: Rule) -> int:
        return acl_priority(self.priority, rule.index)


def acl_priority(priority: int, index: int) -> int:
    return ADMIN_BASE + (1000 - priority) * MAX_RULES + (MAX_RULES - 1 - index)


def _one_of(obj, path: str, fields: tuple, problems: list) -> str | None:
    if not isinstance(obj, dict):
        problems.append(f"{path}: expected an object")
        return None
    set_ = [f for f in fields if obj.get(f) is not None]
    unknown = sorted(set(obj) - set(fields))
    if unknown:
        problems.append(f"{path}: unknown field(s) {', '.join(unknown)} (a newer API version?)")
    if len(set_) != 1:
        problems.append(f"{path}: exactly one of {', '.join(fields)} must be set "
                        f"({', '.join(set_) or 'none'} set)")
        return None
    return set_[0]


def _selector(sel, path: str, problems: list) -> dict:
    sel = sel if sel is not None else {}
    try:
        selectors.matches(sel, {})
    except selectors.SelectorError as e:
        problems.append(f"{path}: {e}")
    return sel


def _selection(kind: str, value, path: str, problems: list) -> Selection:
    if kind == "pods":
        if not isinstance(value, dict) or "podSelector" not in value:
            problems.append(f"{path}.pods: podSelector is required")
            value = value if isinstance(value, dict) else {}
        return Selection("pods", _selector(value.get("namespaceSelector"),
                                           f"{path}.pods.namespaceSelector", problems),
                         _selector(value.get("podSelector"), f"{path}.pods.podSelector", problems))
    if kind == "nodes":
        return Selection("nodes", pod_selector=_selector(value, f"{path}.nodes", problems))
    return Selection("namespaces", _selector(value, f"{path}.namespaces", problems))


def _ports(protos, path: str, problems: list) -> tuple:
    if protos is None:
        return ()
    if not isinstance(protos, list) or not 1 <= len(protos) <= MAX_PROTOCOLS:
        problems.append(f"{path}: 1 to {MAX_PROTOCOLS} items")
        return ()
    out = []
    for i, p in enumerate(protos):
        where = f"{path}[{i}]"
        kind = _one_of(p, where, (*PROTOCOLS, "destinationNamedPort"), problems)
        if kind is None:
            continue
        if kind == "destinationNamedPort":
            name = p[kind]
            if not isinstance(name, str) or not name:
                problems.append(f"{where}.destinationNamedPort: a container port's name")
            else:
                out.append(Port(None, named=name))
            continue
        body = p[kind]
        if not isinstance(body, dict) or not body:
            problems.append(f"{where}.{kind}: destinationPort is required")
            continue
        dp = body.get("destinationPort")
        which = _one_of(dp, f"{where}.{kind}.destinationPort", ("number", "range"), problems)
        if which == "number":
            n = dp["number"]
            if not isinstance(n, int) or not 1 <= n <= 65535:
                problems.append(f"{where}.{kind}.destinationPort.number: 1-65535, not {n!r}")
                continue
            out.append(Port(kind, n, n))
        elif which == "range":
            rg = dp["range"] if isinstance(dp["range"], dict) else {}
            s, e = rg.get("start"), rg.get("end")
            if not all(isinstance(x, int) and 1 <= x <= 65535 for x in (s, e)):
                problems.append(f"{where}.{kind}.destinationPort.range: start and end 1-65535")
            elif s >= e:
                problems.append(f"{where}.{kind}.destinationPort.range: start ({s}) must be "
                                f"less than end ({e})")
            else:
                out.append(Port(kind, s, e))
    return tuple(out)


def _cidrs(values, path: str, problems: list) -> tuple:
    if not isinstance(values, list) or not 1 <= len(values) <= MAX_PEERS:
        problems.append(f"{path}: 1 to {MAX_PEERS} CIDRs")
        return ()
    out = []
    for i, v in enumerate(values):
        try:
            out.append(str(ipaddress.ip_network(str(v), strict=False)))
        except ValueError:
            problems.append(f"{path}[{i}]: {v!r} is not a CIDR")
    return tuple(out)


def _rule(direction: str, i: int, rule, problems: list) -> Rule | None:
    path = f"spec.{direction}[{i}]"
    if not isinstance(rule, dict):
        problems.append(f"{path}: expected an object")
        return None
    action = rule.get("action")
    if action not in ACTIONS:
        problems.append(f"{path}.action: {action!r} is not one of {', '.join(ACTIONS)}")
    name = rule.get("name") or ""
    if not isinstance(name, str) or len(name) > 100:
        problems.append(f"{path}.name: at most 100 characters")
        name = ""
    key = "from" if direction == "ingress" else "to"
    kinds = ("namespaces", "pods") if direction == "ingress" else \
        ("namespaces", "pods", "nodes", "networks", "domainNames")
    items = rule.get(key)
    peers = []
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_PEERS:
        problems.append(f"{path}.{key}: 1 to {MAX_PEERS} peers")
        items = []
    for j, peer in enumerate(items):
        where = f"{path}.{key}[{j}]"
        kind = _one_of(peer, where, kinds, problems)
        if kind in ("namespaces", "pods", "nodes"):
            peers.append(Peer(kind, _selection(kind, peer[kind], where, problems)))
        elif kind == "networks":
            peers.append(Peer(kind, values=_cidrs(peer[kind], f"{where}.networks", problems)))
        elif kind == "domainNames":
            if action != "Accept":
                problems.append(f"{where}.domainNames: only in Accept rules")
            vals = peer[kind] if isinstance(peer[kind], list) else []
            peers.append(Peer(kind, values=tuple(str(v).rstrip(".").lower() for v in vals)))
    ports = _ports(rule.get("protocols"), f"{path}.protocols", problems)
    if any(p.named for p in ports) and any(p.kind in ("networks", "nodes", "domainNames")
                                           for p in peers):
        problems.append(f"{path}: destinationNamedPort cannot go with networks, nodes or "
                        "domainNames peers (they have no named ports)")
    if action not in ACTIONS:
        return None
    return Rule(direction, i, name, action, tuple(peers), ports)


def parse(obj: dict) -> Policy:
    meta, spec = obj.get("metadata") or {}, obj.get("spec")
    problems: list[str] = []
    if not isinstance(spec, dict):
        raise PolicyError("spec: expected an object")
    tier = spec.get("tier")
    if tier not in OVN_TIER:
        problems.append(f"spec.tier: {tier!r} is not Admin or Baseline")
    prio = spec.get("priority")
    if not isinstance(prio, int) or isinstance(prio, bool) or not 0 <= prio <= 1000:
        problems.append(f"spec.priority: 0-1000, not {prio!r}")
        prio = 0
    subject = None
    kind = _one_of(spec.get("subject"), "spec.subject", ("namespaces", "pods"), problems)
    if kind is not None:
        subject = _selection(kind, spec["subject"][kind], "spec.subject", problems)
    rules = []
    for direction in ("ingress", "egress"):
        items = spec.get(direction) or []
        if not isinstance(items, list) or len(items) > MAX_RULES:
            problems.append(f"spec.{direction}: at most {MAX_RULES} rules")
            continue
        rules += [rule for i, item in enumerate(items) if (rule := _rule(direction, i, item, problems))]
    if problems:
        raise PolicyError("; ".join(problems))
    return Policy(meta.get("name", ""), tier, prio, subject, tuple(rules))


def selects_namespace(sel: Selection, ns_labels: dict) -> bool:
    return selectors.matches(sel.namespace_selector or {}, ns_labels)


def selects_pod(sel: Selection, ns_labels: dict, pod_labels: dict) -> bool:
    if not selects_namespace(sel, ns_labels):
        return False
    return sel.kind == "namespaces" or selectors.matches(sel.pod_selector or {}, pod_labels)


def port_clauses(ports: tuple, named_dst: dict[str, list[tuple[str, int, str]]] | None,
                 dst_field: str) -> list[str] | None:
    """OR-able clauses of a rule's protocols; None: every protocol and port;
    []: nothing (named ports resolving on no pod).  `named_dst`: destination
    address -> its (name, number, protocol) container ports."""
    if not ports:
        return None
    out = []
    for p in ports:
        if p.named is None:
            out.append(p.protocol if p.start is None else
                       f"{p.protocol} && {p.protocol}.dst == {p.start}" if p.start == p.end else
                       f"{p.protocol} && {p.protocol}.dst >= {p.start} && "
                       f"{p.protocol}.dst <= {p.end}")
            continue
        by: dict[tuple[str, int], list[str]] = {}
        for ip, named in (named_dst or {}).items():
            for name, number, proto in named:
                if name == p.named and proto.lower() in PROTOCOLS:
                    by.setdefault((proto.lower(), number), []).append(ip)
        for (proto, number), ips in sorted(by.items()):
            out.append(f"{dst_field} == {{{', '.join(sorted(set(ips)))}}} && {proto} && "
                       f"{proto}.dst == {number}")
    return out
