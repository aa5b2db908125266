"""Audit and dry-run of policies, pure: what a policy's annotations ask for,
how that changes its ACLs, and how ovn-controller's log lines become records
in Kubernetes terms.  No I/O; unit-tested (tests/unit/test_audit_model.py).

Annotations (on a NetworkPolicy, ClusterNetworkPolicy or EgressFirewall; on a
Namespace for its tenant isolation, which only administrators can write):

    pacific.io/audit: allow | deny | allow,deny | all | none
    pacific.io/audit-severity: alert | warning | notice | info | debug
    pacific.io/enforcement: enforce | dry-run      (policies only)

Audit sets `log` on the ACLs whose verdict is asked for, with the severity and
the meter of its scope (decision 0050): one token bucket per audited namespace
(its NetworkPolicies), per tenant's isolation, per ClusterNetworkPolicy and per
EgressFirewall, however many ACLs it has, each no more than its share of the
node-wide cap (meter_band): a flood in one scope starves no other's records,
and all of them together write at most the cap on a node.

Dry-run (decisions 0039, 0042): the policy's ACLs are not written where they
decide anything.  Each becomes an *observer*: a from-lport ACL evaluated before
load balancing (the stage no enforcing ACL uses: every enforcing from-lport ACL
is after it) on every Subnet switch, matching only a connection's first packet
(`ct.new`), in the same tier and priority as the enforcing ACL would have, with
`allow-related` for an allow and a drop alike (the connection's verdict is the
enforcing stages') and `pass` for a Pass.  The observers of drops log:
"would-deny".  An ingress rule's `outport == @group` becomes `ip4.dst ==
$group_ip4` (`ip6.dst == $group_ip6` for its IPv6 twin; the stage runs before
the destination port is known).  What they
see: pod-originated connections as the pod addressed them: a connection to a
Service's cluster IP is seen before its DNAT (its destination is the Service's
address, not an endpoint); not traffic entering the cluster from nodes or
outside.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from pacific import names

SEVERITIES = ("alert", "warning", "notice", "info", "debug")
ALLOWS = frozenset({"allow", "allow-related", "allow-stateless"})
DENIES = frozenset({"drop", "reject"})
ENFORCE, DRY_RUN = "enforce", "dry-run"
# the kind prefix of Pacific's ACL names ("np:ns/name:ingress/0") -> the object
KINDS = {"np": "NetworkPolicy", "cnp": "ClusterNetworkPolicy", "tenant": "Tenant",
         "efw": "EgressFirewall"}
DRY = "dry-"          # name prefix of a dry-run observer ("dry-np:ns/name:ingress/deny")
WORDS = {"allow": (True, False), "deny": (False, True), "all": (True, True),
         "none": (False, False)}


@dataclass(frozen=True)
class Audit:
    allow: bool = False
    deny: bool = False
    severity: str = "info"
    dry_run: bool = False


OFF = Audit()


def of(obj: dict | None, policy: bool = True) -> tuple[Audit, list[str]]:
    """What `obj`'s annotations ask for, and the problems with them (each names
    the annotation and value).  A bad value audits nothing and enforces (a typo
    never opens what the policy closes)."""
    ann = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    problems: list[str] = []
    allow = deny = False
    raw = ann.get(names.ANN_AUDIT)
    if raw is not None:
        words = [w.strip() for w in str(raw).split(",") if w.strip()]
        bad = [w for w in words if w not in WORDS]
        if bad or not words:
            problems.append(f'{names.ANN_AUDIT}="{raw}": expected allow, deny, "allow,deny", '
                            "all or none; auditing nothing")
        else:
            allow = any(WORDS[w][0] for w in words)
            deny = any(WORDS[w][1] for w in words)
    severity = ann.get(names.ANN_AUDIT_SEVERITY, "info")
    if severity not in SEVERITIES:
        problems.append(f'{names.ANN_AUDIT_SEVERITY}="{severity}": expected one of '
                        f'{", ".join(SEVERITIES)}; using info')
        severity = "info"
    mode = ann.get(names.ANN_ENFORCEMENT, ENFORCE) if policy else ENFORCE
    if mode not in (ENFORCE, DRY_RUN):
        problems.append(f'{names.ANN_ENFORCEMENT}="{mode}": expected {ENFORCE} or {DRY_RUN}; '
                        "enforcing")
        mode = ENFORCE
    return Audit(allow, deny, severity, mode == DRY_RUN), problems


def meter_name(kind: str, owner: str) -> str:
    """The meter of one audited scope: "ns" a namespace's NetworkPolicies,
    "tenant" a tenant's isolation, "cnp" a ClusterNetworkPolicy, "efw" a
    namespace's EgressFirewall (the administrators' scopes are their own: a
    tenant's flood of its policies' records does not use them up)."""
    return f"{names.METER_AUDIT}:{kind}:{owner}"


def meter_of(owner: str) -> str:
    """The meter of a policy `owner` ("np:ns/name" -> its namespace's, "cnp:name")."""
    kind, _, rest = owner.partition(":")
    return meter_name("ns", rest.partition("/")[0]) if kind == "np" else meter_name(kind, rest)


def meter_band(meters: int, rate: int, burst: int, cap: int) -> tuple[int, int]:
    """(rate, burst) of each of `meters` audit meters: `rate` and `burst`, but
    no more than an equal share of the node-wide `cap` records per second
    (the burst cut in the same proportion), so that all of them together log
    at most `cap` per second on a node (whichever node their packets meet).
    OVN's rates are whole packets per second: past `cap` meters each keeps 1."""
    each = max(1, min(rate, cap // max(1, meters)))
    return each, max(1, burst * each // rate)


def meters_of(specs) -> frozenset[str]:
    """The meters the logging ACLs among `specs` name."""
    return frozenset(s.meter for s in specs if s.log and s.meter)


def logged(spec, audit: Audit, meter: str):
    """`spec` (a pacific.ovn.acl.AclSpec), logging through `meter` when its
    verdict is one `audit` asks for."""
    if ((audit.allow and spec.action in ALLOWS) or (audit.deny and spec.action in DENIES)):
        return dataclasses.replace(spec, log=True, severity=audit.severity, meter=meter)
    return spec


_OUTPORT = re.compile(r"^outport == @([A-Za-z0-9_]+)")


def observer(spec, audit: Audit, owner: str):
    """The dry-run observer of an enforcing ACL of policy `owner` (see the
    module doc; its drops log through the owner's meter); None for an ACL that
    matches no IP connection (ARP companions)."""
    ip = "ip6" if " ip6" in spec.match else "ip4"
    if ip not in spec.match or spec.match.startswith("arp"):
        return None
    match = _OUTPORT.sub(lambda m: f"{ip}.dst == ${m.group(1)}_{ip}", spec.match)
    deny = spec.action in DENIES
    kind, _, rest = spec.name.partition(":")
    return dataclasses.replace(
        spec, direction="from-lport", match=f"ct.new && {match}",
        action="pass" if spec.action == "pass" else "allow-related",
        name=f"{DRY}{kind}:{rest}"[:63],
        external_ids={**spec.external_ids, names.EXT_OWNER_KIND: names.OWNER_KIND_DRY_RUN,
                      names.EXT_OWNER: owner},
        log=deny, severity=audit.severity if deny else "", meter=meter_of(owner) if deny else "",
        after_lb=False)


def observers(specs, audit: Audit, owner: str) -> list:
    return [o for o in (observer(s, audit, owner) for s in specs) if o is not None]


# -- ovn-controller's log lines -> records ------------------------------------------
_LINE = re.compile(
    r'^(?P<time>[0-9T:.\-]+Z)\|\d+\|acl_log\([^)]*\)\|\w+\|name="(?P<name>(?:[^"\\]|\\.)*)", '
    r"verdict=(?P<verdict>[\w-]+), severity=(?P<severity>\w+), "
    r"direction=(?P<direction>[\w-]+): (?P<flow>.*)$")
PROTOCOLS = {"tcp": "TCP", "udp": "UDP", "sctp": "SCTP", "icmp": "ICMP",
             "tcp6": "TCP", "udp6": "UDP", "sctp6": "SCTP", "icmp6": "ICMPv6"}


def parse_line(line: str) -> dict | None:
    """One acl_log line of ovn-controller (lib/acl-log.c) -> its fields; None
    for any other line."""
    m = _LINE.match(line.rstrip("\n"))
    if m is None:
        return None
    proto, _, rest = m["flow"].partition(",")
    flow = dict(kv.split("=", 1) for kv in rest.split(",") if "=" in kv)
    arp = proto == "arp"      # who asks for whom: a request's sender and target, and an
    src, dst = ("arp_spa", "arp_tpa") if arp else \
        ("ipv6_src", "ipv6_dst") if "ipv6_src" in flow else ("nw_src", "nw_dst")
    if arp and flow.get("arp_op") == "2":     # answer's (OVN's ARP responder answers for
        src, dst = dst, src                   # a pod: the record is the question it answers)
    return {"time": m["time"], "name": m["name"].replace('\\"', '"'), "verdict": m["verdict"],
            "severity": m["severity"], "direction": m["direction"],
            "protocol": PROTOCOLS.get(proto, proto.upper()),
            "src": flow.get(src), "dst": flow.get(dst),
            "sport": _int(flow.get("tp_src")), "dport": _int(flow.get("tp_dst")),
            "icmp_type": _int(flow.get("icmp_type"))}


def _int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def policy_of(name: str) -> dict:
    """An ACL name Pacific writes -> {kind, namespace, name, rule, dry_run}."""
    dry = name.startswith(DRY)
    tag, _, rest = (name[len(DRY):] if dry else name).partition(":")
    kind = KINDS.get(tag, tag or "unknown")
    ns, pname, rule = "", rest, ""
    if tag == "np":
        key, _, rule = rest.rpartition(":") if rest.count(":") else (rest, "", "")
        ns, _, pname = key.partition("/")
    elif tag == "cnp":
        pname, _, rule = rest.partition(":")
    elif tag == "tenant":
        rule = "isolation"
    elif tag == "efw":
        ns, _, idx = rest.partition(":")
        pname, rule = names.EGRESS_FIREWALL_NAME, f"egress/{idx}"
    return {"kind": kind, "namespace": ns, "name": pname, "rule": rule, "dry_run": dry}


def record(entry: dict, node: str, pod_of) -> dict:
    """A parsed line -> the structured record pacific-node writes; `pod_of(ip)`
    -> "namespace/name" or None."""
    pol = policy_of(entry["name"])
    verdict = {"allow": "allow", "drop": "deny", "reject": "deny",
               "pass": "pass"}.get(entry["verdict"], entry["verdict"])
    if pol.pop("dry_run"):
        verdict = "would-deny"
    return {"time": entry["time"], "node": node, "verdict": verdict,
            "severity": entry["severity"], "policy": pol,
            "protocol": entry["protocol"],
            "src": {"ip": entry["src"], "pod": pod_of(entry["src"]), "port": entry["sport"]},
            "dst": {"ip": entry["dst"], "pod": pod_of(entry["dst"]), "port": entry["dport"]}}


def matches(rec: dict, *, namespace: str | None = None, pod: str | None = None,
            policy: str | None = None, verdict: str | None = None) -> bool:
    """The filters of `pacific flows`: namespace (of either end or the policy),
    pod ("ns/name", either end), policy ("Kind/ns/name" or "name"), verdict."""
    ends = [rec["src"].get("pod") or "", rec["dst"].get("pod") or ""]
    pol = rec["policy"]
    if verdict and rec["verdict"] != verdict:
        return False
    if pod and pod not in ends:
        return False
    if namespace and namespace != pol.get("namespace") and not any(
            e.startswith(namespace + "/") for e in ends):
        return False
    if policy:
        full = "/".join(x for x in (pol["kind"], pol["namespace"], pol["name"]) if x)
        if policy not in (pol["name"], full, f"{pol['namespace']}/{pol['name']}"):
            return False
    return True
