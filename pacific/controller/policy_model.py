"""NetworkPolicy semantics (networking.k8s.io/v1), pure: selectors, policy
types, peers and ports -> OVN ACL matches.  No I/O; unit-tested.

A policy compiles against a `World` (the pods with addresses, their labels and
named container ports, and the namespaces' labels) into `Rule`s: one per
ingress/egress rule, each an OVN match on the policy's port group plus the
peers' addresses (address sets, ipBlocks) and ports.  Semantics:

* policyTypes default: Ingress, plus Egress when the policy has egress rules;
* a type with no rules isolates and allows nothing (deny all);
* a rule with no peers allows every source/destination; no ports: every port;
* a peer with podSelector only: pods of the policy's namespace; with
  namespaceSelector only: every pod of the matching namespaces; both: pods
  matching podSelector in the matching namespaces (AND); separate peers OR;
* ipBlock: the CIDR minus its excepts;
* ports by number, range (endPort) or name; a named port resolves on the
  DESTINATION pods (ingress: the selected pods; egress: the peer pods, or every
  pod when the rule has no pod peers) and a name that resolves to nothing
  matches nothing.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pacific import names, selectors

PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}


class PolicyError(ValueError):
    """A policy field Pacific cannot apply; str() names it."""


NO_LABELS: Mapping = MappingProxyType({})     # a pod without labels (one, shared)


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One pod as policies see it; one per pod of the cluster, so slots, and
    `labels` is the informer cache's own (read-only) mapping, not a copy."""
    namespace: str
    name: str
    labels: Mapping
    ip: str                            # its IPv4 address ("" on an IPv6-only Subnet)
    port: str                          # its logical switch port
    named_ports: tuple = ()            # ((name, number, protocol), ...)
    ip6: str = ""                      # its IPv6 address, if any (dual-stack)

    def address(self, family: int) -> str:
        return self.ip if family == 4 else self.ip6


@dataclass
class World:
    pods: list[PodInfo]
    namespace_labels: dict[str, dict]
    by_namespace: dict[str, list[PodInfo]] = field(init=False, repr=False)
    # selections already computed against this (unchanging) World: the policies
    # of one port group share their podSelector, and many policies name the same
    # peer; each is computed once per World, not once per policy
    memo: dict = field(init=False, repr=False, default_factory=dict)
    # the families policies compile to: IPv6 too once the cluster may have
    # IPv6 pods (the controller's --ipv6-subnets), else no IPv6 rule at all
    families: tuple = (4,)

    def __post_init__(self):
        # selectors look at one namespace, or at namespaces chosen by labels:
        # index once instead of scanning every pod per policy and peer
        self.by_namespace = {}
        for p in self.pods:
            self.by_namespace.setdefault(p.namespace, []).append(p)

    @classmethod
    def indexed(cls, by_namespace: dict[str, list[PodInfo]],
                namespace_labels: dict[str, dict], families: tuple = (4,)) -> "World":
        """A World of pods already grouped by namespace (the lists are not changed
        afterwards: the policy feature keeps them, and replaces a namespace's list
        when one of its pods changes)."""
        world = cls.__new__(cls)
        world.namespace_labels, world.by_namespace = namespace_labels, by_namespace
        world.memo = {}
        world.families = families
        world.pods = [p for pods in by_namespace.values() for p in pods]
        return world

    def in_namespace(self, namespace: str) -> list[PodInfo]:
        return self.by_namespace.get(namespace, [])


@dataclass(frozen=True)
class Rule:
    direction: str          # "ingress" | "egress"
    index: int              # rule index in the policy ("ingress/0"); -1: the deny
    peers: str              # OVN match of its sources ("": any)
    ports: str              # OVN match of its ports ("": any)
    address_sets: tuple = ()    # ((name, frozenset of IPs), ...) the match refers to
    also: tuple = ()        # merged(): the other ("ns/name", index) it stands for
    family: int = 4         # the IP version its match is written in

    @property
    def match(self) -> str:
        """The part after "outport == @pg && ip4" (or ip6; or inport)."""
        return " && ".join(p for p in (self.peers, self.ports) if p)


def merged(rules: list[tuple[str, Rule]]) -> list[tuple[str, Rule]]:
    """(policy, allow rule) pairs of one port group: those with the same direction
    and peers become one rule with the union of their ports, named by the first
    (the same traffic passes: a group's allows at one priority are a union).  A
    group whose policies each open a port to the same peers then holds one ACL,
    not one per policy: OVN recomputes all of a group's ACLs whenever its
    membership changes (a relabel), so that is what such a change costs
    (docs/benchmarks.md, "Tenant fairness with the CNI shim")."""
    groups: dict[tuple, list[tuple[str, Rule]]] = {}
    for owner, r in rules:
        groups.setdefault((r.direction, r.family, r.peers), []).append((owner, r))
    out = []
    for (direction, family, peers), pairs in groups.items():
        owner, first = pairs[0]
        if len(pairs) == 1:
            out.append((owner, first))
            continue
        ports = list(dict.fromkeys(r.ports for _, r in pairs))
        ports_part = "" if "" in ports else (ports[0] if len(ports) == 1 else
                                             "(" + " || ".join(ports) + ")")
        sets = tuple(dict.fromkeys(s for _, r in pairs for s in r.address_sets))
        also = tuple((k, r.index) for k, r in pairs[1:])
        out.append((owner, Rule(direction, first.index, peers, ports_part, sets, also, family)))
    return out


def selector_matches(sel: dict | None, labels: dict) -> bool:
    """LabelSelector semantics (pacific.selectors); an empty selector matches everything."""
    try:
        return selectors.matches(sel, labels)
    except selectors.SelectorError as e:
        raise PolicyError(str(e)) from None


def _labels_match(sel, labels) -> bool:
    return labels is not None and selector_matches(sel, labels)


def peer_moved(peer: dict, policy_ns: str, ns: str, ns_labels: dict, before: dict | None,
               after: dict | None) -> bool:
    """Does a pod of `ns` going from labels `before` to `after` (None: absent)
    enter or leave the pods of a peer of a policy of `policy_ns`?"""
    if "ipBlock" in peer:
        return False
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], ns_labels):
            return False
    elif policy_ns != ns:
        return False
    sel = peer.get("podSelector") or {}
    return _labels_match(sel, before) != _labels_match(sel, after)


def pod_matters(policy: dict, ns: str, ns_labels: dict, before: dict | None,
                after: dict | None) -> bool:
    """Does a pod of `ns` going from labels `before` to `after` (None: absent
    or without an address) change what the policy compiles to: whether it
    selects the pod as subject or peer, or (egress rules on a named port
    without pod peers, which resolve on every pod) anything at all?"""
    m, spec = policy.get("metadata") or {}, policy.get("spec") or {}
    own = m.get("namespace") == ns
    sel = spec.get("podSelector") or {}
    if own and _labels_match(sel, before) != _labels_match(sel, after):
        return True
    for direction, side in (("ingress", "from"), ("egress", "to")):
        for rule in spec.get(direction) or []:
            peers = (rule or {}).get(side) or []
            if (direction == "egress" and (before is None) != (after is None)
                    and not any("ipBlock" not in (p or {}) for p in peers)
                    and _names_a_port(rule)):
                return True              # a named port resolved on every pod
            if any(peer_moved(peer or {}, m.get("namespace"), ns, ns_labels, before, after)
                   for peer in peers):
                return True
    return False


def policy_types(spec: dict) -> list[str]:
    types = spec.get("policyTypes")
    if types:
        bad = [t for t in types if t not in ("Ingress", "Egress")]
        if bad:
            raise PolicyError(f"policyTypes {bad} are not Ingress or Egress")
        return list(dict.fromkeys(types))
    return ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]


def canonical(selector: dict | None) -> str:
    """One spelling of a selector (JSON, keys sorted): equal selectors, equal text."""
    return json.dumps({} if selector is None else selector, sort_keys=True)


def selected(spec: dict, namespace: str, world: World) -> list[PodInfo]:
    sel = spec.get("podSelector")
    sel = {} if sel is None else sel
    memo_key = ("selected", namespace, canonical(sel))
    out = world.memo.get(memo_key)
    if out is None:
        out = world.memo[memo_key] = [p for p in world.in_namespace(namespace)
                                      if selector_matches(sel, p.labels)]
    return out


def peer_pods(peer: dict, namespace: str, world: World, name: str | None = None) -> list[PodInfo]:
    """The pods of a peer (`name`: its set_name, when the caller has it)."""
    memo_key = ("peer", name or set_name(namespace, peer))
    out = world.memo.get(memo_key)
    if out is None:
        out = world.memo[memo_key] = _peer_pods_uncached(peer, namespace, world)
    return out


def peer_addresses(peer: dict, namespace: str, world: World, name: str,
                   family: int = 4) -> frozenset:
    """The addresses of one family of peer_pods(), once per World: every policy
    naming the peer names the same set (a namespace-wide peer: every pod of
    the cluster)."""
    memo_key = ("addresses", name, family)
    out = world.memo.get(memo_key)
    if out is None:
        out = world.memo[memo_key] = frozenset(
            a for p in peer_pods(peer, namespace, world, name) if (a := p.address(family)))
    return out


def rule_suffix(family: int) -> str:
    """What an ACL's rule name (external_ids, the ACL's name) gains in IPv6:
    "ingress/0" -> "ingress/0/ip6"."""
    return "" if family == 4 else names.RULE_SUFFIX_IP6


def base_set_name(name: str) -> str:
    """set_name() of a family_set_name()."""
    return name.removesuffix(names.SET_SUFFIX_IP6)


def _peer_pods_uncached(peer: dict, namespace: str, world: World) -> list[PodInfo]:
    pod_sel, ns_sel = peer.get("podSelector"), peer.get("namespaceSelector")
    if ns_sel is None:
        spaces = [namespace]
    else:
        spaces = [ns for ns in world.by_namespace
                  if selector_matches(ns_sel, world.namespace_labels.get(ns, {}))]
    sel = {} if pod_sel is None else pod_sel
    return [p for ns in spaces for p in world.in_namespace(ns) if selector_matches(sel, p.labels)]


def set_name(namespace: str, peer: dict) -> str:
    """Address set of a pod peer: shared by every policy naming the same peer,
    as its content is the same: those of the namespace for a podSelector
    alone, those of every namespace for a peer with a namespaceSelector (its
    pods do not depend on the policy's namespace)."""
    sel = (set_namespace(namespace, peer), "namespaceSelector" in peer,
           repr(peer.get("podSelector")), repr(peer.get("namespaceSelector")))
    name = _SET_NAMES.get(sel)
    if name is None:
        canon = json.dumps({"ns": sel[0], "peer": {k: peer.get(k) for k in
                                                   ("podSelector", "namespaceSelector")}},
                           sort_keys=True)
        name = "np_as_" + hashlib.sha256(canon.encode()).hexdigest()[:16]
        if len(_SET_NAMES) >= _SET_NAMES_MAX:
            _SET_NAMES.clear()
        _SET_NAMES[sel] = name
    return name


# set_name() of peers already seen: a relabel recompiles every policy of a
# group, each naming its peers (json + sha256 each time: 7 us, against 1.5 for
# this key).  The key is the selectors' repr: the same selector written in
# another key order is another key with the same name.  Bounded: cleared when
# full (tenants may write many distinct peers).
_SET_NAMES: dict[tuple, str] = {}
_SET_NAMES_MAX = 20_000


def set_namespace(namespace: str, peer: dict) -> str:
    """The namespace a peer's pods come from ("" : any, by namespaceSelector)."""
    return "" if "namespaceSelector" in peer else namespace


def pod_peers(policy: dict) -> dict[str, tuple[str, dict]]:
    """The address sets compile_policy makes the policy name: set name -> (the
    policy's namespace, peer); none for a policy whose types are invalid."""
    ns = (policy.get("metadata") or {}).get("namespace", "")
    spec = policy.get("spec") or {}
    try:
        types = policy_types(spec)
    except PolicyError:
        return {}
    out = {}
    for direction, side in (("ingress", "from"), ("egress", "to")):
        if direction.capitalize() not in types:
            continue
        for rule in spec.get(direction) or []:
            for peer in (rule or {}).get(side) or []:
                if peer and "ipBlock" not in peer:
                    out[set_name(ns, peer)] = (ns, peer)
    return out


def _names_a_port(rule: dict | None) -> bool:
    return any(isinstance(p.get("port"), str) and not p["port"].isdigit()
               for p in (rule or {}).get("ports") or [])


def has_named_ports(policy: dict) -> bool:
    """Does a rule name a port (resolved on pods: the ACLs then depend on pods)?"""
    spec = policy.get("spec") or {}
    return any(_names_a_port(rule) for direction in ("ingress", "egress")
               for rule in spec.get(direction) or [])


def _ip_block(block: dict, field_: str, family: int = 4) -> str:
    try:
        net = ipaddress.ip_network(block.get("cidr", ""), strict=False)
        excepts = [ipaddress.ip_network(e, strict=False) for e in block.get("except") or []]
    except ValueError as e:
        raise PolicyError(f"ipBlock {block!r}: {e}") from None
    if net.version != family:
        return ""      # a block of the other family matches nothing in this one
    part = f"{field_} == {net}"
    if excepts:
        part += f" && {field_} != {{{', '.join(str(e) for e in excepts)}}}"
    return f"({part})"


def _port_clauses(ports: list[dict], destinations: list[PodInfo], dst_field: str,
                  family: int = 4) -> list[str] | None:
    """OR-able clauses for a rule's ports; None = every port.  [] = nothing."""
    if not ports:
        return None
    out = []
    for p in ports:
        proto = PROTOCOLS.get((p.get("protocol") or "TCP").upper())
        if proto is None:
            raise PolicyError(f"ports protocol {p.get('protocol')!r} is not TCP, UDP or SCTP")
        port = p.get("port")
        if port is None:
            out.append(proto)
        elif isinstance(port, int) or (isinstance(port, str) and port.isdigit()):
            n = int(port)
            end = p.get("endPort")
            out.append(f"{proto}.dst >= {n} && {proto}.dst <= {int(end)}" if end
                       else f"{proto}.dst == {n}")
        else:   # a named port: resolved on each destination pod
            by_number: dict[int, list[str]] = {}
            for d in destinations:
                if not d.address(family):
                    continue
                for name, number, pproto in d.named_ports:
                    if name == port and PROTOCOLS.get(pproto.upper()) == proto:
                        by_number.setdefault(number, []).append(d.address(family))
            for number, ips in sorted(by_number.items()):
                out.append(f"{dst_field} == {{{', '.join(sorted(set(ips)))}}} && {proto}.dst == {number}")
    return out


def compile_policy(obj: dict, world: World) -> tuple[list[str], list[Rule], list[str]]:
    """(types it isolates, allow rules, selected ports) of one policy."""
    meta = obj.get("metadata") or {}
    ns, spec = meta.get("namespace", ""), obj.get("spec") or {}
    types = policy_types(spec)
    pods = selected(spec, ns, world)
    rules: list[Rule] = []
    for family in world.families:
        ip = f"ip{family}"
        for direction, key, peers_key, addr_field in (("ingress", "ingress", "from", f"{ip}.src"),
                                                      ("egress", "egress", "to", f"{ip}.dst")):
            if direction.capitalize() not in types:
                continue
            for i, rule in enumerate(spec.get(key) or []):
                r = _compile_rule(rule, direction, i, peers_key, addr_field, family, ns, pods, world)
                if r is not None:
                    rules.append(r)
    return [t.lower() for t in types], rules, sorted(p.port for p in pods)


def _compile_rule(rule: dict, direction: str, i: int, peers_key: str, addr_field: str,
                  family: int, ns: str, pods: list[PodInfo], world: World) -> Rule | None:
    """One ingress/egress rule in one family; None if it matches nothing."""
    peers = rule.get(peers_key) or []
    sources, sets, members_all, any_pod_peer = [], [], [], False
    for peer in peers:
        if "ipBlock" in peer:
            clause = _ip_block(peer["ipBlock"], addr_field, family)
            if clause:
                sources.append(clause)
            continue
        any_pod_peer = True
        name = set_name(ns, peer)
        members_all += peer_pods(peer, ns, world, name)
        fname = names.family_set_name(name, family)
        sets.append((fname, peer_addresses(peer, ns, world, name, family)))
        sources.append(f"{addr_field} == ${fname}")
    if peers and not sources:
        return None           # peers that can match nothing (blocks of the other family)
    if direction == "ingress":
        destinations = pods
    else:
        destinations = members_all if any_pod_peer else world.pods
    ports = _port_clauses(rule.get("ports") or [], destinations,
                          f"ip{family}.dst" if direction == "ingress" else addr_field, family)
    if ports == []:
        return None           # named ports resolving to nothing: match nothing
    peers_part = "(" + " || ".join(sources) + ")" if sources else ""
    ports_part = "(" + " || ".join(f"({c})" for c in ports) + ")" if ports else ""
    return Rule(direction, i, peers_part, ports_part, tuple(sets), family=family)
