"""`pacific trace SRC GROUP`: where a multicast datagram goes, in Kubernetes terms.

    res = trace_group(kube, nb_remote, sb_remote, "a/sender", "239.1.1.1", port=5000,
                      receivers=["a/r1", "b/r2"])
    print(render(res))

One `ovn-trace --detailed` of a UDP datagram from the source pod to the group
(pacific.tools.trace runs it the same way), from the source's address of the
group's family (an IPv6 group: its IPv6 address).  ovn-trace follows IGMP
and MLD snooping's table: the datagram fans out to the group's members on the
source's Subnet and, through the cluster router's relay, on other Subnets;
each copy is one egress section of the output, delivered or dropped by an ACL
(the multicast gate, tenant isolation, a NetworkPolicy: named by
pacific.tools.explain).  A pod asked about with `receivers` that no copy
reached is explained from what Pacific knows: its namespace has not enabled
multicast, it is another tenant's, or it has not joined the group.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pacific import multicast, names
from pacific.kube import resources as r
from pacific.tools import traceparse
from pacific.tools.explain import Namer, datapath_name, port_name
from pacific.tools.trace import TraceError, Endpoint, microflow, resolve, run_ovn_trace, SOURCE_PORT
from pacific.ovn.query import Query


def is_group(ref: str) -> bool:
    try:
        return ipaddress.ip_address(ref).is_multicast
    except ValueError:
        return False


def group_mac(group: str) -> str:
    """The Ethernet address multicast to `group` is sent to: IPv4's low 23
    bits under 01:00:5e (RFC 1112), IPv6's low 32 bits under 33:33 (RFC 2464)."""
    addr = ipaddress.ip_address(group)
    if addr.version == 6:
        return "33:33:" + ":".join(f"{b:02x}" for b in addr.packed[-4:])
    low = int(addr) & 0x7FFFFF
    return "01:00:5e:" + ":".join(f"{b:02x}" for b in low.to_bytes(3, "big"))


@dataclass
class GroupResult:
    src: Endpoint
    group: str
    port: int
    sender_drop: str | None = None                           # dropped before any copy
    delivered: list[str] = field(default_factory=list)      # "pod ns/name (switch S)"
    dropped: list[tuple[str, str]] = field(default_factory=list)   # (receiver, why)
    missing: list[tuple[str, str]] = field(default_factory=list)   # asked-about, not reached
    raw: str = ""

    @property
    def ok(self) -> bool:
        return self.sender_drop is None and bool(self.delivered)


def _copies(sections: list[traceparse.Section]):
    """(switch, outport, section) for every copy handed to a pod's port."""
    for sec in sections:
        if sec.pipeline == "egress" and sec.outport and \
                sec.outport.startswith(names.PORT_PREFIX_POD):
            yield sec.datapath, sec.outport, sec


def trace_group(kube, nb_remote: str, sb_remote: str, src_ref: str, group: str,
                port: int = 5000, receivers: list[str] = (), ovs: str | None = None,
                global_namespaces=frozenset()) -> GroupResult:
    if not is_group(group):
        raise TraceError(f"{group}: not a multicast group (224.0.0.0/4 or ff00::/8)")
    if not 0 < port < 65536:
        raise TraceError("a UDP port 1-65535 is needed")
    # an IPv6 group from the source's IPv6 address (TraceError naming a pod without one)
    src = resolve(kube, src_ref, "source").in_family(ipaddress.ip_address(group).version)
    if src.kind != "pod":
        raise TraceError(f"{src_ref}: a multicast source is a pod")
    flow = microflow(src, group, group_mac(group), "udp", SOURCE_PORT, port)
    raw = run_ovn_trace(sb_remote, src.switch, flow, "trk,new", ovs)
    sections = traceparse.parse(raw)
    res = GroupResult(src, group, port, raw=raw)
    with Query(nb_remote, "OVN_Northbound") as nb, Query(sb_remote, "OVN_Southbound") as sb:
        namer = Namer(nb, sb, kube, global_namespaces)
        first = sections[0] if sections else None
        for st in (first.steps if first else []):
            if st.is_acl and st.drops:
                res.sender_drop = _why(namer, namer.acl_of(st, "ingress"), src)
                return res
        reached = set()
        for switch, outport, sec in _copies(sections):
            reached.add(outport)
            who = f"{port_name(outport)} ({datapath_name(switch)})"
            drop = next((st for st in sec.steps if st.drops), None)
            if drop is None and sec.output and sec.output[0] == outport:
                res.delivered.append(who)
            elif drop is not None:
                why = _why(namer, namer.acl_of(drop, "egress"), src) if drop.is_acl else \
                    f"dropped in {drop.stage} (flow {drop.uuid}: {drop.match})"
                res.dropped.append((who, why))
        for ref in receivers:
            rx = resolve(kube, ref, "destination")
            if rx.kind != "pod":
                raise TraceError(f"{ref}: a receiver is a pod")
            if rx.port not in reached:
                res.missing.append((f"pod {rx.name}", _why_missing(kube, namer, src, rx, group)))
    return res


def _why(namer: Namer, acl: dict | None, src: Endpoint) -> str:
    if acl is not None and acl["external_ids"].get(names.EXT_OWNER_KIND) == names.OWNER_KIND_MULTICAST:
        return "dropped by the multicast gate: " + multicast.why_dropped(
            acl["external_ids"].get(names.EXT_RULE, ""))
    return namer.acl_words(acl, src)[1]


def _why_missing(kube, namer: Namer, src: Endpoint, rx: Endpoint, group: str) -> str:
    ns_obj = r.get(kube, r.NAMESPACES, rx.namespace)
    on, problem = multicast.enabled(ns_obj)
    if not on:
        detail = problem or f'{names.ANN_MULTICAST} is not "true"'
        return f"its namespace {rx.namespace} has not enabled multicast ({detail})"
    mine, theirs = namer.tenant(src.namespace), namer.tenant(rx.namespace)
    if "global" not in (mine, theirs) and mine != theirs:
        return f"another tenant ({theirs!r}): groups stay inside tenant {mine!r}"
    return (f"not a member of {group} on switch {rx.switch}: it has not joined the group "
            "(IGMP and MLD snooping send a group only to the ports that joined it), or the "
            "sender's TTL ends before the cluster router relays it")


def render(res: GroupResult, detailed: bool = False) -> str:
    head = f"  pod {res.src.name} ({res.src.ip}) -> group {res.group}, udp/{res.port}"
    if res.sender_drop:
        lines = [f"FAIL: {res.sender_drop}", head]
    else:
        n = len(res.delivered)
        lines = [("OK: " if n else "FAIL: ") + f"delivered to {n} member{'s' * (n != 1)}"
                 + ("" if n else " (no pod of an enabled namespace has joined it)"), head]
        lines += [f"  delivered: {who}" for who in res.delivered]
        lines += [f"  not delivered: {who}: {why}" for who, why in res.dropped]
    lines += [f"  not reached: {who}: {why}" for who, why in res.missing]
    if detailed:
        lines += ["  | " + ln for ln in res.raw.splitlines()]
    return "\n".join(lines)
