"""What a Service should be in OVN: pure functions of the Service and its
EndpointSlices (no I/O), so they are unit-tested on their own.

    want, problems = balancers(service, slices, families=(4, 6))
    want["tcp"].vips   # {"10.96.0.10:80": "10.16.0.5:8080,10.16.0.6:8080",
                       #  "[fd00:96::a]:80": "[fd00:16::5]:8080,[fd00:16::6]:8080"}

One balancer per protocol in use.  Each of the Service's cluster IPs of the
cluster's families (IPv6 too in a cluster with IPv6) and ports is a VIP;
its backends are the ready, not terminating endpoints of that family (the
slices of its addressType) whose port has the Service port's name and protocol (the controller-
manager resolved named target ports per pod into that port number).  A VIP with
no backend stays, so OVN rejects (TCP reset, ICMP unreachable) instead of
letting the client wait: `options:reject=true`.  `sessionAffinity: ClientIP`
becomes `options:affinity_timeout`.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from pacific import names
from pacific.exposure import (SERVICE_NAME_LABEL, host_port, proxied,  # noqa: F401 (shared
                              ready_backends)                          # with nodes)

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


def cluster_ips(svc: dict, families=(4,)) -> list[tuple[str, int]]:
    """(address, IP version) of the Service's cluster IPs of these families,
    in its order (spec.clusterIPs: the primary family first)."""
    spec = svc.get("spec") or {}
    ips = spec.get("clusterIPs") or [spec.get("clusterIP")]
    out = []
    for ip in ips:
        try:
            version = ipaddress.ip_address(ip).version
            if version in families:
                out.append((ip, version))
        except (TypeError, ValueError):
            continue
    return out


# UDP has no end of a "connection": a client sending from one port keeps its
# conntrack entry, and so the backend it had, for as long as it sends.  When a
# backend goes, ovn-controller flushes the entries that lead to it, as kube-proxy
# does for UDP (upstream's Conntrack tests).  Not for TCP: a terminating
# endpoint keeps its open connections until it closes them.
UDP_OPTIONS = {"ct_flush": "true"}


def balancers(svc: dict, slices: list[dict], families=(4,)
              ) -> tuple[dict[str, Balancer], list[str]]:
    """Desired balancers by OVN protocol, and problems worth an Event.
    `families`: the IP versions the cluster serves (Config.families)."""
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
    ips = cluster_ips(svc, families)
    for port in spec.get("ports") or []:
        proto = port.get("protocol") or "TCP"
        if proto not in PROTOCOLS:
            problems.append(f"port {port.get('name') or port.get('port')}: protocol {proto} "
                            "is not supported")
            continue
        lb = out.setdefault(PROTOCOLS[proto], Balancer(PROTOCOLS[proto], options=dict(
            options, **UDP_OPTIONS) if proto == "UDP" else dict(options)))
        backends = {v: ",".join(ready_backends(slices, port.get("name") or "", proto, v))
                    for v in {v for _, v in ips}}
        for ip, version in ips:
            vip = host_port(ip, port.get("port"))
            if vip in lb.vips:
                problems.append(f"{proto} {vip} is declared twice; the first one is used")
                continue
            lb.vips[vip] = backends[version]
    return out, problems
