"""EgressIP (group pacific.io, cluster-scoped, administrators' only): which pods
leave the cluster with which address.  Pure: the controller decides with it
(gateway rows, address sets, status, Events); the nodes read what it decided
from Southbound (the gateway port's name carries the address, the address set
its members), and every Service decision treats EgressIP addresses as taken.

    d = decide(egressips, pods, namespaces, allowed=["192.168.77.0/24"],
               reserved={"192.168.77.1", ...}, cluster_cidrs=["10.16.0.0/16", ...])
    d.grants["blue/192.168.77.50"]   # Grant(key, name="blue", ip="192.168.77.50",
                                     #       index=0, sources=("10.16.0.5", ...))
    d.refused["blue"]                # {"10.0.0.9": "outside --egress-ip-cidrs ..."}
    d.notes["blue"]                  # Events: pods an older EgressIP took, selector errors

The fields are ovn-kubernetes' (`spec.egressIPs`, `spec.namespaceSelector`,
`spec.podSelector`), so its users' YAML moves by changing the apiVersion.

Rules, in this order:
* an address (IPv4 or IPv6, compared in its canonical spelling) is inside
  the administrator's `--egress-ip-cidrs`, not in the cluster's networks, not
  reserved (a node's, OVN central's, --infrastructure-ips); an address named
  by two EgressIPs belongs to the older one (creationTimestamp, then name);
* selected pods: allocated pods of namespaces matching `namespaceSelector`
  (required: none selects nothing) whose labels match `podSelector` (absent
  or empty: all of them);
* a pod selected by two EgressIPs leaves with the older one's (a note for
  the younger);
* an EgressIP's pods are spread over its granted addresses of each family by
  their own address of that family (stable: a pod keeps its address while
  others come and go): a pod's IPv4 leaves with an IPv4 address, its IPv6
  with an IPv6 one.  A family without a granted address decides nothing
  (IPv4 leaves as without the EgressIP; IPv6 is held: controller/egress_v6.py).
"""
from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass, field
from typing import Iterable

from pacific import names, selectors, servicesnat


@dataclass(frozen=True)
class Grant:
    key: str                  # "<name>/<ip>": names its gateway and address set
    name: str                 # the EgressIP
    ip: str
    index: int                # the address's place among the EgressIP's granted ones
    sources: tuple[str, ...]  # pod addresses of the address's family, sorted

    @property
    def version(self) -> int:
        return ipaddress.ip_address(self.ip).version


@dataclass
class Decision:
    grants: dict[str, Grant] = field(default_factory=dict)
    refused: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)


def key_of(name: str, ip: str) -> str:
    return f"{name}/{ip}"


def gateway_name(key: str) -> str:
    """The gateway's owner name under egress_switch_name (`egw:eip:<name>/<ip>`)."""
    return names.EIP_GATEWAY_PREFIX + key


def address_set_name(key: str) -> str:
    """Its members' address set: the SNAT prefix (the nodes replicate those
    sets), hashed over a name no Service key can have ("eip:..."), so the two
    kinds never share a set."""
    return servicesnat.address_set_name(gateway_name(key))


def ip_of_key(key: str) -> str | None:
    """The address a gateway key names (nodes read it from SB port names)."""
    try:
        return str(ipaddress.ip_address(key.rsplit("/", 1)[-1]))
    except ValueError:
        return None


def spec_addresses(obj: dict) -> list[str]:
    ips = (obj.get("spec") or {}).get("egressIPs") or []
    return [ip for ip in ips if isinstance(ip, str)]


def claimed(objs: Iterable[dict]) -> set[str]:
    """Every address some EgressIP names, canonical: no Service external IP
    may take one (a tenant cannot squat an address the administrator chose)."""
    out = set()
    for o in objs:
        for ip in spec_addresses(o):
            try:
                out.add(str(ipaddress.ip_address(ip)))
            except ValueError:
                pass
    return out


def _age(obj: dict) -> tuple:
    m = obj.get("metadata") or {}
    return (m.get("creationTimestamp") or "", m.get("name") or "")


def _check(ip: str, allowed: list, reserved: set[str], cluster: list) -> str | None:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return f"{ip!r} is not an IP address"
    if any(addr.version == c.version and addr in c for c in cluster):
        return "inside the cluster's networks"
    if str(addr) in reserved:
        return "an infrastructure address (a node's, OVN central's or reserved)"
    nets = [n for n in allowed if n.version == addr.version and addr in n]
    if not nets:
        return ("outside the networks egress IPs may come from (--egress-ip-cidrs "
                f"{','.join(map(str, allowed)) or 'is empty: none'})")
    if any(addr in (n.network_address, n.broadcast_address) for n in nets
           if n.version == 4 and n.prefixlen < 31):
        return "the network or broadcast address of its network"
    if addr.version == 6 and any(addr == n.network_address for n in nets if n.prefixlen < 127):
        return "the subnet-router anycast address of its network"
    return None


def _spread(ip: str, n: int) -> int:
    return int.from_bytes(hashlib.sha1(ip.encode()).digest()[:4], "big") % n


def _version(ip: str) -> int:
    return ipaddress.ip_address(ip).version


def _ordered(ip: str) -> tuple[int, int]:
    a = ipaddress.ip_address(ip)
    return a.version, int(a)


def decide(egressips: Iterable[dict], pods: Iterable[tuple[str, dict, str]],
           namespaces: dict[str, dict], allowed: Iterable[str] = (),
           reserved: Iterable[str] = (), cluster_cidrs: Iterable[str] = ()) -> Decision:
    """`pods`: (namespace, labels, address) of allocated pods, one entry per
    address (a dual-stack pod has two); `namespaces`: name -> labels."""
    allowed_n = [ipaddress.ip_network(c, strict=False) for c in allowed]
    cluster = [ipaddress.ip_network(c, strict=False) for c in cluster_cidrs]
    reserved_s = set(reserved)
    out = Decision()
    owner: dict[str, str] = {}            # address -> the EgressIP it belongs to
    taken: dict[str, str] = {}            # pod address -> the EgressIP it leaves with
    pods = list(pods)
    for obj in sorted(egressips, key=_age):
        name = (obj.get("metadata") or {}).get("name") or ""
        spec = obj.get("spec") or {}
        refused: dict[str, str] = {}
        granted: list[str] = []
        for ip in spec_addresses(obj):
            why = _check(ip, allowed_n, reserved_s, cluster)
            canon = str(ipaddress.ip_address(ip)) if why is None else ip
            if why is None and canon in owner:
                why = f"already the address of the older EgressIP {owner[canon]}"
            if why is None and canon in granted:
                continue
            if why is None:
                owner[canon] = name
                granted.append(canon)
            else:
                refused[ip] = why
        if refused:
            out.refused[name] = refused
        try:
            mine = sorted({ip for ns, labels, ip in pods
                           if selectors.matches(spec.get("namespaceSelector"),
                                                namespaces.get(ns, {}))
                           and selectors.matches(spec.get("podSelector") or {}, labels or {})},
                          key=_ordered)
        except selectors.SelectorError as e:
            out.notes.setdefault(name, []).append(f"selector: {e}")
            mine = []
        family = {v: [a for a in granted if _version(a) == v] for v in (4, 6)}
        kept = []
        for ip in mine:
            if ip in taken:
                out.notes.setdefault(name, []).append(
                    f"pod address {ip} leaves with the older EgressIP {taken[ip]}")
            elif family[_version(ip)]:
                taken[ip] = name
                kept.append(ip)
        for i, addr in enumerate(granted):
            key, v = key_of(name, addr), _version(addr)
            place, same = family[v].index(addr), len(family[v])
            out.grants[key] = Grant(key, name, addr, i, tuple(
                ip for ip in kept if _version(ip) == v and _spread(ip, same) == place))
    return out
