"""What a Service should be in OVN: pure functions of the Service and its
EndpointSlices (no I/O), so they are unit-tested on their own.

    want, problems = balancers(service, slices)
    want["tcp"].vips   # {"10.96.0.10:80": "10.16.0.5:8080,10.16.0.6:8080"}

One balancer per protocol in use.  Each of the Service's cluster IPs (IPv4) and
ports is a VIP; its backends are the ready, not terminating endpoints of the
slices whose port has the Service port's name and protocol (the controller-
manager resolved named target ports per pod into that port number).  A VIP with
no backend stays, so OVN rejects (TCP reset, ICMP unreachable) instead of
letting the client wait: `options:reject=true`.  `sessionAffinity: ClientIP`
becomes `options:affinity_timeout`.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pacific import names
from pacific.exposure import SERVICE_NAME_LABEL, proxied, ready_backends  # noqa: F401 (shared with nodes)

PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}


@dataclass
class Balancer:
    protocol: str
    vips: dict[str, str] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)


def is_load_balanced(svc: dict) -> bool:
    """Services Pacific programs: a cluster IP (not headless, not ExternalName),
    and not labelled for another proxy (exposure.proxied)."""
    spec = svc.get("spec") or {}
    return spec.get("type") != "ExternalName" and \
        spec.get("clusterIP") not in (None, "", "None") and proxied(svc)


def cluster_ips(svc: dict) -> list[str]:
    spec = svc.get("spec") or {}
    ips = spec.get("clusterIPs") or [spec.get("clusterIP")]
    out = []
    for ip in ips:
        try:
            if ipaddress.ip_address(ip).version == 4:
                out.append(ip)
        except (TypeError, ValueError):
            continue
    return out


# UDP has no end of a "connection": a client sending from one port keeps its
# conntrack entry, and so the backend it had, for as long as it sends.  When a
# backend goes, ovn-controller flushes the entries that lead to it, as kube-proxy
# does for UDP (upstream's Conntrack tests).  Not for TCP: a terminating
# endpoint keeps its open connections until it closes them.
UDP_OPTIONS = {"ct_flush": "true"}


def balancers(svc: dict, slices: list[dict]) -> tuple[dict[str, Balancer], list[str]]:
    """Desired balancers by OVN protocol, and problems worth an Event."""
    problems: list[str] = []
    if not is_load_balanced(svc):
        return {}, problems
    spec = svc.get("spec") or {}
    options = {"reject": "true"}
    if spec.get("sessionAffinity") == "ClientIP":
        timeout = ((spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}).get(
            "timeoutSeconds") or names.SERVICE_AFFINITY_DEFAULT
        options["affinity_timeout"] = str(int(timeout))
    out: dict[str, Balancer] = {}
    ips = cluster_ips(svc)
    for port in spec.get("ports") or []:
        proto = port.get("protocol") or "TCP"
        if proto not in PROTOCOLS:
            problems.append(f"port {port.get('name') or port.get('port')}: protocol {proto} "
                            "is not supported")
            continue
        lb = out.setdefault(PROTOCOLS[proto], Balancer(PROTOCOLS[proto], options=dict(
            options, **UDP_OPTIONS) if proto == "UDP" else dict(options)))
        backends = ",".join(ready_backends(slices, port.get("name") or "", proto))
        for ip in ips:
            vip = f"{ip}:{port.get('port')}"
            if vip in lb.vips:
                problems.append(f"{proto} {vip} is declared twice; the first one is used")
                continue
            lb.vips[vip] = backends
    return out, problems
