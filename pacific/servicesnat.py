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
A pod behind several such Services uses the oldest one's.  Services of one
namespace leaving by the same address (one external IP on many ports, a
Service each) share one grant and so one gateway and one transit network: the
oldest of them owns it (its key, its members' set) and the others' endpoints
are its members too.  Per family: its
first IPv6 external IP is the source of its IPv6 endpoints (`IPv6`
EndpointSlices), a second grant keyed `<ns>/<name>` + V6 (one gateway per
Service still: gateway_key), whose members' set is the IPv6 twin of the
Service's (set_name).
"""
from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass

from pacific import exposure, names


V6 = "#6"          # an IPv6 grant's key: the Service's key and this


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


def gateway_key(key: str) -> str:
    """The Service (and so gateway) key of a grant's key, either family's."""
    return key[:-len(V6)] if key.endswith(V6) else key


def set_name(key: str) -> str:
    """The members' address set of a grant's key: the Service's set, or its
    IPv6 twin for an IPv6 grant."""
    return names.family_set_name(address_set_name(gateway_key(key)),
                                 6 if key.endswith(V6) else 4)


def _key(svc: dict) -> str:
    m = svc.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"


def opted_in(svc: dict) -> bool:
    """Its endpoints leave with its first granted external IP of their
    family: it has one and does not opt out."""
    ann = (svc.get("metadata") or {}).get("annotations") or {}
    return bool((svc.get("spec") or {}).get("externalIPs")) \
        and ann.get(names.ANN_EGRESS_SNAT, "true").lower() != "false"


def slices_by_service(slices: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for s in slices:
        m = s.get("metadata") or {}
        svc = (m.get("labels") or {}).get(exposure.SERVICE_NAME_LABEL)
        if svc:
            out.setdefault(f"{m.get('namespace')}/{svc}", []).append(s)
    return out


def ready_addresses(slices: list[dict], version: int = 4) -> set[str]:
    out = set()
    for s in slices:
        if s.get("addressType", "IPv4") != f"IPv{version}":
            continue
        for ep in s.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            if cond.get("ready") is False or cond.get("terminating") is True:
                continue
            out.update(a for a in ep.get("addresses") or [] if _version(a) == version)
    return out


def _version(a) -> int | None:
    try:
        return ipaddress.ip_address(a).version
    except (TypeError, ValueError):
        return None


def egress_ips(services: list[dict], slices: list[dict], cluster_cidrs=(), node_ips=(),
               allowed=None, per_namespace: int = names.EXTERNAL_IPS_PER_NAMESPACE) -> tuple[dict[str, SnatGrant], dict[str, list[str]]]:
    """(Service key -> its SnatGrant, Service key -> notes worth an Event)."""
    wanted = [s for s in services if opted_in(s)]
    grants, _ = exposure.exposures(wanted, cluster_cidrs, node_ips, allowed,
                                   per_namespace=per_namespace)
    first: dict[str, str] = {}                # grant key -> the first granted address
    for fe in grants:
        if fe.kind == exposure.EXTERNAL_IP and len(fe.versions) == 1:
            key = fe.service + (V6 if fe.versions == (6,) else "")
            order = [exposure.canonical(ip) for ip in _spec_ips(wanted, fe.service)]
            cur = first.get(key)
            if cur is None or order.index(fe.ip) < order.index(cur):
                first[key] = fe.ip
    by_service = slices_by_service(slices)
    taken: dict[str, str] = {}                # pod address -> the grant it leaves by
    owner: dict[str, str] = {}                # address -> the grant of its oldest Service
    out: dict[str, SnatGrant] = {}
    notes: dict[str, list[str]] = {}
    for svc, version in ((s, v) for s in sorted(wanted, key=exposure._age) for v in (4, 6)):
        key = _key(svc) + (V6 if version == 6 else "")
        ip = first.get(key)
        if ip is None:
            continue
        # one address, one grant: exposure gave the address to one namespace
        own = owner.setdefault(ip, key)
        mine = list(out[own].sources) if own in out else []
        for addr in sorted(ready_addresses(by_service.get(_key(svc), []), version),
                           key=ipaddress.ip_address):
            holder = taken.get(addr)
            if holder is None:
                taken[addr] = own
                mine.append(addr)
            elif holder != own:
                notes.setdefault(key, []).append(
                    f"pod address {addr} leaves as {out[holder].ip} of the older Service "
                    f"{gateway_key(holder)}")
        out[own] = SnatGrant(own, ip, tuple(sorted(mine, key=ipaddress.ip_address)))
    return out, notes


def _spec_ips(services: list[dict], key: str) -> list[str]:
    for s in services:
        if _key(s) == key:
            return list((s.get("spec") or {}).get("externalIPs") or [])
    return []
