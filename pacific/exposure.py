"""What the Services of a cluster expose outside it: external IPs and node
ports, decided by one pure function that the controller (which reports what it
refused, as Events) and every node (which programs what was granted into its
host firewall) both call on the same Services, so they agree without a record
a user could forge.

    grants, refused = exposures(services, cluster_cidrs=[...], node_ips={...})
    grants[0]   # Frontend(service="web/api", kind="externalIP", protocol="tcp",
                #          ip="203.0.113.10", port=80, cluster_ip="10.96.0.20",
                #          service_port=80, port_name="http", local=False)
    refused     # {"web/other": ["externalIP 203.0.113.10 TCP/80 is already used by
                #   Service web/api (older)"],
                #  "shop/x": ["externalIP 203.0.113.10 belongs to another namespace"]}

Rules (Kubernetes leaves all of them to the network plugin; a Service is a
tenant's request, checked here, and only the administrator's settings grant):

* external IPs are denied unless the cluster names the ranges they may come
  from (``allowed``, pacific-controller's and pacific-node's
  ``--external-ip-cidrs``; empty: none, the CVE-2020-8554 advice), and an
  external IP is an address inside one of them (IPv4, or IPv6 for a Service
  with an IPv6 cluster IP; compared in its canonical spelling, so
  ``FD00::A`` and ``fd00::a`` are one address), outside every cluster
  CIDR (pod Subnets, the join network, the service CIDR) and not an
  infrastructure address (a node's, OVN central's);
* an external IP belongs to ONE namespace for every protocol and port: the
  namespace of the oldest Service that claims it (creationTimestamp, then
  namespace/name); another namespace's claim is refused without naming the
  holder (it may be another tenant's);
* a node port is inside the cluster's node port range;
* an (address or node port, protocol, port) used by two Services goes to the
  older one: the same winner on every node and in the controller, whatever
  order they saw the Services in.

A Service's backends are only addresses of pods that Pacific allocated in the
Service's own namespace (``confine``): an EndpointSlice or Endpoints object
written by hand that names another namespace's pod, a node or any other
address is ignored for it (CVE-2021-25740), except for the Services the
administrator names as trusted (``default/kubernetes``, whose endpoint is the
API server).

``externalTrafficPolicy: Local`` marks a frontend ``local``: a node sends it
only to its own endpoints and keeps the client's address.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pacific import names

PROTOCOLS = {"TCP": "tcp", "UDP": "udp", "SCTP": "sctp"}
NODE_PORT_RANGE = (30000, 32767)          # kube-apiserver's default --service-node-port-range
EXTERNAL_IP, NODE_PORT = "externalIP", "nodePort"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"    # an EndpointSlice's Service
# Kubernetes' labels on a Service that the default service proxy leaves alone (as
# kube-proxy does): another proxy serves it, or none (headless by label)
LABELS_NOT_PROXIED = ("service.kubernetes.io/service-proxy-name", "service.kubernetes.io/headless")


@dataclass(frozen=True, order=True)
class Frontend:
    service: str          # "namespace/name"
    kind: str             # EXTERNAL_IP or NODE_PORT
    protocol: str         # tcp, udp, sctp
    ip: str | None        # the external IP; None for a node port (every node address)
    port: int             # the external port, or the node port
    cluster_ip: str | None  # where a node sends it over IPv4 (the Service's OVN load
                            # balancer); None for an IPv6-only Service
    service_port: int
    port_name: str        # the Service port's name (matches EndpointSlice ports)
    local: bool           # externalTrafficPolicy: Local
    cluster_ip6: str | None = None   # ... and over IPv6 (a dual-stack or IPv6-only
                                     # Service's node port at a node's IPv6, an IPv6 external IP)

    @property
    def versions(self) -> tuple[int, ...]:
        """The IP versions a node serves it in: an external IP its own family's,
        a node port each family the Service has a cluster IP of."""
        if self.kind == EXTERNAL_IP:
            return (6,) if ":" in (self.ip or "") else (4,)
        return tuple(v for v, ip in ((4, self.cluster_ip), (6, self.cluster_ip6)) if ip)

    def cluster_ip_of(self, version: int) -> str | None:
        return self.cluster_ip if version == 4 else self.cluster_ip6


def addresses_of(node: dict | None, types=("InternalIP", "ExternalIP")) -> set[str]:
    """A Node's status addresses of these types."""
    return {a["address"] for a in ((node or {}).get("status") or {}).get("addresses") or []
            if a.get("type") in types and a.get("address")}


def node_addresses(nodes: list[dict]) -> set[str]:
    """Every node's InternalIP and ExternalIP (no external IP may be one)."""
    return {a for n in nodes for a in addresses_of(n)}


def internal_ips(node: dict | None) -> set[str]:
    """A node's InternalIP addresses: what a host-network pod on it has as its
    own (status.podIPs)."""
    return addresses_of(node, ("InternalIP",))


def _age(svc: dict) -> tuple:
    m = svc.get("metadata") or {}
    return (m.get("creationTimestamp") or "", m.get("namespace") or "", m.get("name") or "")


def _key(svc: dict) -> str:
    m = svc.get("metadata") or {}
    return f"{m.get('namespace')}/{m.get('name')}"


def proxied(svc: dict) -> bool:
    """Is the Service Pacific's to serve?  Not when it carries one of
    Kubernetes' labels for another proxy (service.kubernetes.io/service-proxy-name)
    or for none (service.kubernetes.io/headless), whatever their value, as
    kube-proxy decides; the controller's balancers and the nodes' frontends
    both ask here."""
    labels = (svc.get("metadata") or {}).get("labels") or {}
    return not any(k in labels for k in LABELS_NOT_PROXIED)


def _cluster_ips(svc: dict) -> dict[int, str]:
    """The Service's cluster IP per IP version ({} for one not proxied, headless
    or ExternalName: nothing to send it to)."""
    if not proxied(svc):
        return {}
    spec = svc.get("spec") or {}
    out: dict[int, str] = {}
    for ip in spec.get("clusterIPs") or [spec.get("clusterIP")]:
        try:
            out.setdefault(ipaddress.ip_address(ip).version, ip)
        except (TypeError, ValueError):
            continue
    return out


def canonical(ip) -> str | None:
    """An address as ipaddress spells it ("fd00::a" for "FD00:0::A"); None if
    it is none."""
    try:
        return str(ipaddress.ip_address(ip))
    except (TypeError, ValueError):
        return None


def _special(addr) -> str | None:
    """What kind of address no external IP may be, whatever range the
    administrator grants: a node would catch traffic for it that is not the
    Service's (a multicast group pods send to, a node's own link).  The API
    server refuses loopback and link-local ones itself; the multicast and
    reserved ones it accepts."""
    for kind, test in (("loopback", addr.is_loopback), ("link-local", addr.is_link_local),
                       ("multicast", addr.is_multicast), ("unspecified", addr.is_unspecified),
                       ("reserved", addr.is_reserved)):
        if test:
            return kind
    return None


def _external_ip_problem(ip, networks, node_ips, allowed) -> str | None:
    try:
        addr = ipaddress.ip_address(ip)
    except (TypeError, ValueError):
        return f"externalIP {ip!r} is not an IP address"
    special = _special(addr)
    if special:
        article = "an" if special[0] in "aeiou" else "a"
        return f"externalIP {ip} is {article} {special} address, which no Service may take"
    for net in networks:
        if addr in net:
            return f"externalIP {ip} is inside the cluster network {net}"
    if str(addr) in node_ips:
        return (f"externalIP {ip} is an infrastructure address (a node's, OVN central's or "
                "otherwise reserved)")
    if not allowed:
        return (f"externalIP {ip} is not granted: the cluster allows no external IPs "
                "(the administrator names their ranges with --external-ip-cidrs)")
    if not any(addr in net for net in allowed):
        return (f"externalIP {ip} is outside the ranges external IPs may come from "
                f"({', '.join(str(n) for n in allowed)})")
    return None


def _candidates(svc: dict, networks, node_ips, allowed, port_range, problems: list[str]):
    spec = svc.get("spec") or {}
    cips = _cluster_ips(svc)
    if not cips:
        return
    local = spec.get("externalTrafficPolicy") == "Local"
    good_ips = []
    for ip in spec.get("externalIPs") or []:
        why = _external_ip_problem(ip, networks, node_ips, allowed)
        ip = canonical(ip) or ip
        version = 6 if ":" in str(ip) else 4
        if not why and version not in cips:
            why = (f"externalIP {ip} is IPv{version} and the Service has no IPv{version} "
                   "cluster IP to send it to")
        if why:
            problems.append(why)
        else:
            good_ips.append(ip)
    for p in spec.get("ports") or []:
        proto = p.get("protocol") or "TCP"
        if proto not in PROTOCOLS or not p.get("port"):
            continue         # the controller's balancer already reports the protocol
        common = dict(service=_key(svc), protocol=PROTOCOLS[proto], cluster_ip=cips.get(4),
                      service_port=int(p["port"]), port_name=p.get("name") or "", local=local)
        for ip in good_ips:
            yield Frontend(kind=EXTERNAL_IP, ip=ip, port=int(p["port"]), cluster_ip6=cips.get(6),
                           **common)
        np = p.get("nodePort")
        if np and spec.get("type") in ("NodePort", "LoadBalancer"):
            if port_range[0] <= int(np) <= port_range[1]:
                yield Frontend(kind=NODE_PORT, ip=None, port=int(np), cluster_ip6=cips.get(6),
                               **common)
            else:
                problems.append(f"nodePort {np} ({proto}) is outside the node port range "
                                f"{port_range[0]}-{port_range[1]}")


def _namespace(key: str) -> str:
    return key.split("/", 1)[0]


def exposures(services: list[dict], cluster_cidrs=(), node_ips=(), allowed=None,
              port_range: tuple[int, int] = NODE_PORT_RANGE,
              per_namespace: int = names.EXTERNAL_IPS_PER_NAMESPACE
              ) -> tuple[list[Frontend], dict[str, list[str]]]:
    """(the frontends granted, sorted; Service key -> what was refused and why).
    node_ips: every infrastructure address (nodes, OVN central); allowed: the
    CIDRs external IPs may come from (None or empty: none may); per_namespace:
    how many external IPs one namespace's Services may hold, its oldest
    Services' first (0: no bound), so that no tenant takes every granted
    address from the others."""
    networks = []
    for c in cluster_cidrs:
        try:
            networks.append(ipaddress.ip_network(c, strict=False))
        except (TypeError, ValueError):
            continue
    allowed_nets = None if allowed is None else [ipaddress.ip_network(a, strict=False)
                                                 for a in allowed]
    node_ips = {canonical(a) or a for a in node_ips}
    granted: dict[tuple, Frontend] = {}
    owner: dict[str, str] = {}               # external IP -> the namespace it belongs to
    held: dict[str, int] = {}                # namespace -> how many external IPs it owns
    refused: dict[str, list[str]] = {}
    for svc in sorted(services, key=_age):
        problems: list[str] = []
        for fe in _candidates(svc, networks, node_ips, allowed_nets, port_range, problems):
            ns = _namespace(fe.service)
            if fe.kind == EXTERNAL_IP and fe.ip not in owner and per_namespace and \
                    held.get(ns, 0) >= per_namespace:
                why = (f"externalIP {fe.ip}: the namespace holds its {per_namespace} external "
                       "IPs already (an administrator sets --external-ips-per-namespace)")
                if why not in problems:
                    problems.append(why)
                continue
            if fe.kind == EXTERNAL_IP and fe.ip not in owner:
                held[ns] = held.get(ns, 0) + 1
            if fe.kind == EXTERNAL_IP and owner.setdefault(fe.ip, ns) != ns:
                why = f"externalIP {fe.ip} belongs to another namespace"
                if why not in problems:
                    problems.append(why)
                continue
            where = (fe.ip, fe.protocol, fe.port)
            holder = granted.get(where)
            if holder is None:
                granted[where] = fe
            elif holder.service != fe.service:
                what = (f"externalIP {fe.ip}" if fe.kind == EXTERNAL_IP else "nodePort")
                by = (f"Service {holder.service} (older)" if _namespace(holder.service) == ns
                      else "a Service of another namespace")
                problems.append(f"{what} {fe.protocol.upper()}/{fe.port} is already used by {by}")
        if problems:
            refused[_key(svc)] = problems
    return sorted(granted.values()), refused


ADDRESS_TYPES = {4: "IPv4", 6: "IPv6"}      # an EndpointSlice's addressType per IP version


def host_port(ip: str, port) -> str:
    """"10.0.0.1:80", "[fd00::1]:80": an address and port as OVN's VIPs and
    backends spell them."""
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def split_host_port(text: str) -> tuple[str, int]:
    """The inverse of host_port."""
    ip, _, port = text.rpartition(":")
    return ip.strip("[]"), int(port)


def ready_backends(slices: list[dict], port_name: str, protocol: str,
                   version: int = 4) -> list[str]:
    """host_port() of every ready, not terminating endpoint of IP `version`
    (the slices of its addressType) for the port."""
    out = set()
    for s in slices:
        if s.get("addressType", "IPv4") != ADDRESS_TYPES[version]:
            continue
        ports = [p for p in s.get("ports") or []
                 if (p.get("name") or "") == port_name and (p.get("protocol") or "TCP") == protocol
                 and p.get("port")]
        if not ports:
            continue
        for ep in s.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            if cond.get("ready") is False or cond.get("terminating") is True:
                continue
            for addr in ep.get("addresses") or []:
                for p in ports:
                    out.add(host_port(addr, p["port"]))
    return sorted(out, key=_sort_key)


def confine(slices: list[dict], namespace: str, namespace_of) -> tuple[list[dict], list[str]]:
    """The slices of a Service of `namespace` with only the endpoint addresses
    of pods Pacific allocated in that namespace (``namespace_of(ip)`` -> the
    namespace of the pod holding ip, None when no pod does), and the addresses
    left out, sorted.  A hand-written EndpointSlice (or Endpoints object,
    mirrored into one) is the tenant's request: it cannot make another
    tenant's pod, a node or OVN central a backend of its Service."""
    out, ignored = [], set()
    for s in slices:
        endpoints = []
        for ep in s.get("endpoints") or []:
            addrs = ep.get("addresses") or []
            mine = [a for a in addrs if namespace_of(a) == namespace]
            ignored.update(a for a in addrs if a not in mine)
            if mine:
                endpoints.append({**ep, "addresses": mine})
        out.append({**s, "endpoints": endpoints})
    return out, sorted(ignored)


def _sort_key(backend: str):
    ip, port = split_host_port(backend)
    return (ipaddress.ip_address(ip), port)


def parse_port_range(text: str) -> tuple[int, int]:
    """"30000-32767" -> (30000, 32767), as kube-apiserver's --service-node-port-range."""
    try:
        lo, hi = (int(x) for x in text.split("-", 1))
    except ValueError:
        raise ValueError(f"node port range {text!r} is not FIRST-LAST") from None
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"node port range {text!r} is not within 1-65535, first <= last")
    return lo, hi


def parse_cidrs(text: str | None) -> list[str]:
    """"203.0.113.0/24,198.51.100.0/24" -> the list; None or "" -> [] (no
    address may be an external IP: deny by default)."""
    if not text or not text.strip():
        return []
    out = []
    for item in text.split(","):
        try:
            out.append(str(ipaddress.ip_network(item.strip(), strict=False)))
        except ValueError:
            raise ValueError(f"external IP range {item.strip()!r} is not a CIDR") from None
    return out


def parse_ips(text: str | None) -> list[str]:
    """"192.168.77.254,192.168.77.53" -> the list (--infrastructure-ips)."""
    out = []
    for item in (text or "").split(","):
        if item.strip():
            try:
                out.append(str(ipaddress.ip_address(item.strip())))
            except ValueError:
                raise ValueError(f"infrastructure address {item.strip()!r} is not an IP "
                                 "address") from None
    return out
