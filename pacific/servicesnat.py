"""Egress SNAT to a Service's external IP: which pods leave the cluster with
which address.  One pure function that the controller (rows, Events) and every
egress gateway node (the SNAT rule, the address it holds) call on the same
Services and EndpointSlices, so they agree without a record a user could write.

    grants, notes = egress_ips(services, slices, cluster_cidrs=[...], node_ips={...})
    grants["web/api"]   # SnatGrant(service="web/api", ip="192.168.77.200",
                        #          sources=("10.16.0.5", "10.16.0.7"))
    notes               # {"web/other": ["pod address 10.16.0.5 leaves as 192.168.77.200
                        #   of the older Service web/api"]}

A Service takes part when it has externalIPs and is not annotated
`pacific.io/egress-snat: "false"`; its first external IP that pacific.exposure
accepts (outside the cluster's networks, not a node's, not held by an older
Service) is the source address of its ready endpoints' traffic to the outside.
A pod behind several such Services uses the oldest one's.
"""
from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass

from pacific import exposure, names


@dataclass(frozen=True)
class SnatGrant:
    service: str                 # "namespace/name"
    ip: str                      # the external IP its endpoints leave with
    sources: tuple[str, ...]     # the endpoints' addresses, sorted


def address_set_name(key: str) -> str:
    """The NB (and SB) address set of the Service's members: the controller
    writes it with only the Service's own namespace's pods (it knows every
    pod's address); gateway nodes read it back from SB, so a hand-written
    EndpointSlice cannot make them SNAT or route another tenant's pod."""
    return names.SNAT_ADDRESS_SET_PREFIX + hashlib.sha1(key.encode()).hexdigest()[:16]


def _key(svc: dict) -> str:
    m = svc.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"


def opted_in(svc: dict) -> bool:
    """Its endpoints leave with its (first granted) IPv4 external IP: it has
    one and does not opt out.  An IPv6 external IP is served, never a source."""
    ann = (svc.get("metadata") or {}).get("annotations") or {}
    return any(":" not in str(ip) for ip in (svc.get("spec") or {}).get("externalIPs") or []) \
        and ann.get(names.ANN_EGRESS_SNAT, "true").lower() != "false"


def slices_by_service(slices: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for s in slices:
        m = s.get("metadata") or {}
        svc = (m.get("labels") or {}).get(exposure.SERVICE_NAME_LABEL)
        if svc:
            out.setdefault(f"{m.get('namespace')}/{svc}", []).append(s)
    return out


def ready_addresses(slices: list[dict]) -> set[str]:
    out = set()
    for s in slices:
        if s.get("addressType", "IPv4") != "IPv4":
            continue
        for ep in s.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            if cond.get("ready") is False or cond.get("terminating") is True:
                continue
            out.update(a for a in ep.get("addresses") or [] if _is_ipv4(a))
    return out


def _is_ipv4(a) -> bool:
    try:
        return ipaddress.ip_address(a).version == 4
    except (TypeError, ValueError):
        return False


def egress_ips(services: list[dict], slices: list[dict], cluster_cidrs=(), node_ips=(),
               allowed=None) -> tuple[dict[str, SnatGrant], dict[str, list[str]]]:
    """(Service key -> its SnatGrant, Service key -> notes worth an Event)."""
    wanted = [s for s in services if opted_in(s)]
    grants, _ = exposure.exposures(wanted, cluster_cidrs, node_ips, allowed)
    first: dict[str, str] = {}
    for fe in grants:                         # sorted: the Service's first granted address
        if fe.kind == exposure.EXTERNAL_IP and fe.versions == (4,):
            order = [exposure.canonical(ip) for ip in _spec_ips(wanted, fe.service)]
            cur = first.get(fe.service)
            if cur is None or order.index(fe.ip) < order.index(cur):
                first[fe.service] = fe.ip
    by_service = slices_by_service(slices)
    taken: dict[str, str] = {}                # pod address -> the Service it leaves by
    out: dict[str, SnatGrant] = {}
    notes: dict[str, list[str]] = {}
    for svc in sorted(wanted, key=exposure._age):
        key = _key(svc)
        ip = first.get(key)
        if ip is None:
            continue
        mine = []
        for addr in sorted(ready_addresses(by_service.get(key, [])), key=ipaddress.ip_address):
            holder = taken.get(addr)
            if holder is None:
                taken[addr] = key
                mine.append(addr)
            else:
                notes.setdefault(key, []).append(
                    f"pod address {addr} leaves as {out[holder].ip} of the older Service {holder}")
        out[key] = SnatGrant(key, ip, tuple(mine))
    return out, notes


def _spec_ips(services: list[dict], key: str) -> list[str]:
    for s in services:
        if _key(s) == key:
            return list((s.get("spec") or {}).get("externalIPs") or [])
    return []
