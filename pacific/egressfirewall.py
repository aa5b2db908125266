"""EgressFirewall (group pacific.io, namespaced, one per namespace named
`default`, as ovn-kubernetes'): which destinations outside the cluster a
namespace's pods may reach.  Pure: parses and checks a firewall and turns it
into ACLs for the cluster's exits (controller/egress_firewall.py).

    fw = parse(obj)                      # FirewallError naming the bad field
    fw.rules[0]                          # Rule(action="Deny", cidr="0.0.0.0/0", dns=None,
                                         #      ports=(("tcp", 443),))
    specs = acls(fw, "efw_src_<hash>", {"example.com": "efw_dns_<hash>"}, "pacific_exits",
                 excluded="$efw_cluster")

Rules apply in order and the first that matches decides; traffic matching
none is allowed.  `to.cidrSelector` (IPv4 or IPv6) or `to.dnsName` (A
records, resolved by the controller); `ports` optional (protocol TCP, UDP or
SCTP, port 1-65535; none: every port and protocol).  Destinations inside the
cluster (pods, Services, the join network, nodes) are never matched.

A rule matches its own family only: `0.0.0.0/0` says nothing about IPv6.
In a cluster with IPv6, a firewall that names no IPv6 CIDR (one written for
IPv4) does not let its pods' IPv6 out unfiltered: it ends in an implicit
IPv6 deny (rule names.EFW_RULE_IPV6_DEFAULT, below its last rule), failing
closed; `decides_ipv6` tells which.  A dnsName rule matches its A records,
and in a cluster with IPv6 its AAAA records too (an ACL per family, sets
dns_set and its IPv6 twin); it does not make a firewall decide IPv6 (the
implicit deny still follows: the name's AAAA records are let through or
denied by the rule, the rest of IPv6 by it).
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass

from pacific import names

ACTIONS = ("Allow", "Deny")
PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}
MAX_RULES = 8000
_DNS = re.compile(r"^(?=.{1,253}$)(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*"
                  r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$")


class FirewallError(ValueError):
    """An EgressFirewall Pacific cannot program: the message names the field."""


@dataclass(frozen=True)
class Rule:
    action: str                          # "Allow" | "Deny"
    cidr: str | None                     # canonical network, or None with dns
    dns: str | None                      # lower-case name without the final dot
    ports: tuple[tuple[str, int], ...]   # (ovn protocol, port); () = everything


@dataclass(frozen=True)
class Firewall:
    namespace: str
    rules: tuple[Rule, ...]

    @property
    def dns_names(self) -> list[str]:
        return sorted({r.dns for r in self.rules if r.dns})

    @property
    def decides_ipv6(self) -> bool:
        """True if a rule names an IPv6 CIDR: then the rules decide the pods'
        IPv6 as they do IPv4 (what matches none passes)."""
        return any(_family(r) == 6 for r in self.rules)


def _family(rule: Rule) -> int:
    return 6 if rule.cidr and ":" in rule.cidr else 4


def parse(obj: dict) -> Firewall:
    m = obj.get("metadata") or {}
    ns = m.get("namespace") or ""
    if m.get("name") != names.EGRESS_FIREWALL_NAME:
        raise FirewallError(f"an EgressFirewall must be named {names.EGRESS_FIREWALL_NAME!r} "
                            f"(one per namespace), not {m.get('name')!r}")
    egress = (obj.get("spec") or {}).get("egress")
    if not isinstance(egress, list):
        raise FirewallError("spec.egress must be a list of rules")
    if len(egress) > MAX_RULES:
        raise FirewallError(f"spec.egress has {len(egress)} rules, at most {MAX_RULES}")
    return Firewall(ns, tuple(_rule(r, i) for i, r in enumerate(egress)))


def _rule(raw, i: int) -> Rule:
    where = f"spec.egress[{i}]"
    if not isinstance(raw, dict):
        raise FirewallError(f"{where} must be an object")
    action = raw.get("type")
    if action not in ACTIONS:
        raise FirewallError(f"{where}.type must be Allow or Deny, not {action!r}")
    to = raw.get("to") or {}
    cidr, dns = to.get("cidrSelector"), to.get("dnsName")
    if (cidr is None) == (dns is None):
        raise FirewallError(f"{where}.to needs exactly one of cidrSelector and dnsName")
    if cidr is not None:
        try:
            net = ipaddress.ip_network(str(cidr), strict=False)
        except ValueError:
            raise FirewallError(f"{where}.to.cidrSelector {cidr!r} is not a CIDR") from None
        cidr = str(net)
    else:
        dns = str(dns).lower().rstrip(".")
        if not _DNS.match(dns) or dns.startswith("*."):
            raise FirewallError(f"{where}.to.dnsName {to.get('dnsName')!r} is not a DNS name "
                                "(wildcards are not supported)")
    ports = []
    for j, p in enumerate(raw.get("ports") or []):
        proto = PROTOCOLS.get(str((p or {}).get("protocol", "")).upper())
        port = (p or {}).get("port")
        if proto is None:
            raise FirewallError(f"{where}.ports[{j}].protocol must be TCP, UDP or SCTP")
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise FirewallError(f"{where}.ports[{j}].port must be a number 1-65535")
        ports.append((proto, port))
    return Rule(action, cidr, dns, tuple(ports))


def digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def source_set(namespace: str, family: int = 4) -> str:
    """The address set of the namespace's pods' addresses of one family (what
    the ACLs match as source)."""
    return names.family_set_name(names.EFW_SOURCE_SET_PREFIX + digest(namespace), family)


def dns_set(name: str) -> str:
    """The address set of a DNS name's current A records (shared by namespaces)."""
    return names.EFW_DNS_SET_PREFIX + digest(name)


def _ports(ports) -> str:
    if not ports:
        return ""
    by_proto: dict[str, list[int]] = {}
    for proto, port in ports:
        by_proto.setdefault(proto, []).append(port)
    parts = [f"{proto}.dst == {{{', '.join(map(str, sorted(set(ps))))}}}"
             for proto, ps in sorted(by_proto.items())]
    return " && " + (parts[0] if len(parts) == 1 else "(" + " || ".join(parts) + ")")


def matches(fw: Firewall, group: str, excluded: str, ipv6: bool = False
            ) -> list[tuple[int, str, str, str]]:
    """(priority, match, OVN action, rule: its index) per rule: the first rule
    gets the highest priority; `group` is the exits' port group, `excluded`
    the address set of the cluster's own destinations (its IPv6 twin:
    names.family_set_name).  `ipv6`: the cluster has IPv6, and a firewall
    that decides none gets the implicit IPv6 deny."""
    out = []
    for i, r in enumerate(fw.rules):
        for v in ((4, 6) if r.dns and ipv6 else (_family(r),)):
            ip = f"ip{v}"
            dst = f"{ip}.dst == {r.cidr}" if r.cidr else \
                f"{ip}.dst == ${names.family_set_name(dns_set(r.dns), v)}"
            match = (f"outport == @{group} && {ip}.src == ${source_set(fw.namespace, v)} && "
                     f"{dst} && {ip}.dst != ${names.family_set_name(excluded, v)}"
                     f"{_ports(r.ports)}")
            out.append((names.PRIO_ACL_EFW_TOP - i, match,
                        "allow" if r.action == "Allow" else "drop", str(i)))
    if ipv6 and not fw.decides_ipv6:
        out.append((names.PRIO_ACL_EFW_TOP - len(fw.rules),
                    f"outport == @{group} && ip6.src == ${source_set(fw.namespace, 6)} && "
                    f"ip6.dst != ${names.family_set_name(excluded, 6)}", "drop",
                    names.EFW_RULE_IPV6_DEFAULT))
    return out
