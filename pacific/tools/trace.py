"""`pacific trace`: ovn-trace in Kubernetes terms.

    ends = Ends.resolve(kube, nb, "a/client", "a/web", proto="tcp", port=80)
    result = trace(ends, sb_remote, nb)      # request, then the reply
    print(render(result))

The source is a pod (`ns/pod`, `pod/ns/pod`) or a node (`node/NAME`: its
management port ovn0); the destination a pod, a node, a Service (`ns/svc` or
`svc/ns/name`: its ClusterIP and port) or an address.  Every endpoint is read
from what the controller recorded (the pod's allocation record, the node's
join annotations), never from what a user asked for.

Each direction runs `ovn-trace --detailed` (first packet: ct new; reply: ct
est+rpl), parsed by pacific.tools.traceparse.  An ACL step is named through
its logical flow's stage-hint (the NB ACL's uuid) and that ACL's
external_ids (owner kind, owner, rule: pacific.names.EXT_*); a load-balancing
step through the NB Load_Balancer holding the VIP.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import subprocess
from dataclasses import dataclass, field

from pacific import contract, names
from pacific.kube import resources as r
from pacific.tools import traceparse
from pacific.tools.explain import Hop, Namer
from pacific.ovn.query import Query, ssl_argv

PROTOCOLS = ("icmp", "tcp", "udp")
SOURCE_PORT = 40000          # ephemeral port of the traced connection


class TraceError(Exception):
    """An endpoint that cannot be traced (not found, no network), said plainly."""


@dataclass
class Endpoint:
    kind: str                 # pod | node | service | address
    name: str                 # ns/name, node name, or the address
    ip: str                   # the address traced (in_family() picks it)
    mac: str | None = None    # None: not a port of ours (a Service VIP, an address)
    port: str | None = None   # logical switch port
    switch: str | None = None
    node: str | None = None
    namespace: str | None = None
    service_port: int | None = None
    ips: tuple[str, ...] = ()  # every address (IPv4 first); () means (ip,)

    def in_family(self, version: int) -> "Endpoint":
        """The endpoint by its address of IP `version`; TraceError naming it
        when it has none (an IPv4-only pod traced with -6)."""
        ip = next((a for a in self.ips or (self.ip,)
                   if ipaddress.ip_address(a).version == version), None)
        if ip is None:
            raise TraceError(f"{self} has no IPv{version} address"
                             + ("" if version == 6 else " (trace IPv6 with -6)"))
        return dataclasses.replace(self, ip=ip)

    def __str__(self):
        if self.kind == "address":
            return f"address {self.ip}"
        where = f" on {self.node}" if self.node and self.kind == "pod" else ""
        return f"{self.kind} {self.name} ({self.ip}{where})"


def _split(ref: str) -> tuple[str | None, str]:
    for kind in ("pod", "node", "svc", "service"):
        if ref.startswith(kind + "/"):
            return ("svc" if kind == "service" else kind), ref[len(kind) + 1:]
    return None, ref


def _pod_endpoint(pod: dict) -> Endpoint:
    md = pod["metadata"]
    key = f"{md['namespace']}/{md['name']}"
    if (pod.get("spec") or {}).get("hostNetwork"):
        raise TraceError(f"pod {key} uses the host network: trace its node (node/"
                         f"{pod['spec'].get('nodeName')}) instead")
    rec = contract.own_record(pod)
    if rec is None:
        raise TraceError(f"pod {key} has no network: the controller has not recorded an "
                         f"allocation for it (see its {names.ANN_ALLOCATION_ERROR} annotation "
                         "and Events)")
    return Endpoint("pod", key, rec.ip, rec.mac, rec.port, rec.subnet,
                    pod["spec"].get("nodeName"), md["namespace"], ips=rec.addresses)


def _node_endpoint(node: dict) -> Endpoint:
    name = node["metadata"]["name"]
    try:
        rec = contract.NodeRecord.of(node)
    except contract.ContractError as e:
        raise TraceError(f"node {name} has no management port yet: {e}") from None
    return Endpoint("node", name, rec.ip, rec.mac, rec.port, names.JOIN_SWITCH, name,
                    ips=tuple(c.split("/")[0] for c, _ in rec.interfaces))   # ovn0's, per family


def resolve(kube, ref: str, role: str, port: int | None = None) -> Endpoint:
    """`ref` as an endpoint; `role` is "source" or "destination" (a Service or
    an address can only be a destination)."""
    kind, rest = _split(ref)
    if kind in (None, "pod") and "/" not in rest and kind is None:
        try:
            ipaddress.ip_address(rest)
        except ValueError:
            raise TraceError(f"{ref!r}: expected NS/POD, pod/NS/POD, node/NAME, "
                             "svc/NS/NAME or an address") from None
        if role == "source":
            raise TraceError(f"{ref}: an address cannot be a source; give a pod or a node")
        pods, _ = r.list_(kube, r.PODS, field_selector=f"status.podIP={rest}")
        pods = [p for p in pods if not (p.get("spec") or {}).get("hostNetwork")]
        if pods:
            return _pod_endpoint(pods[0])
        return Endpoint("address", rest, rest)
    if kind == "node":
        node = r.get(kube, r.NODES, rest)
        if node is None:
            raise TraceError(f"node {rest} does not exist")
        return _node_endpoint(node)
    ns, sep, name = rest.partition("/")
    if not sep or not ns or not name:
        raise TraceError(f"{ref!r}: expected NS/NAME")
    if kind in (None, "pod"):
        pod = r.get(kube, r.PODS, name, ns)
        if pod is not None:
            return _pod_endpoint(pod)
        if kind == "pod":
            raise TraceError(f"pod {rest} does not exist")
    svc = r.get(kube, r.SERVICES, name, ns)
    if svc is None:
        raise TraceError(f"{rest}: no pod{' or Service' if role == 'destination' else ''} "
                         "of that name")
    if role == "source":
        raise TraceError(f"{rest} is a Service: a source is a pod or a node")
    spec = svc.get("spec") or {}
    ip = spec.get("clusterIP")
    if not ip or ip == "None":
        raise TraceError(f"Service {rest} has no ClusterIP (headless): trace one of its pods")
    ips = tuple(spec.get("clusterIPs") or [ip])
    ports = [p.get("port") for p in (svc["spec"].get("ports") or [])]
    if port is None:
        raise TraceError(f"Service {rest}: give the port with --tcp or --udp "
                         f"(it serves {', '.join(map(str, ports)) or 'no port'})")
    return Endpoint("service", rest, ip, namespace=ns, service_port=port, ips=ips)


@dataclass
class Direction:
    title: str
    verdict: str
    ok: bool
    hops: list[Hop] = field(default_factory=list)
    raw: str = ""


@dataclass
class Result:
    src: Endpoint
    dst: Endpoint
    proto: str
    port: int | None
    request: Direction
    reply: Direction | None

    @property
    def ok(self) -> bool:
        return self.request.ok and (self.reply is None or self.reply.ok)


def _router_mac(nb: Query, switch: str) -> str:
    row = nb.one("Logical_Router_Port", ["mac"], [["name", "==", names.router_port_name(switch)]])
    if row is None:
        raise TraceError(f"switch {switch} has no port on the cluster router "
                         f"({names.router_port_name(switch)} missing in NB)")
    return row["mac"]


def microflow(src: Endpoint, dst_ip: str, dst_mac: str, proto: str, sport: int,
              dport: int | None) -> str:
    """ovn-trace's microflow of the first packet, in the family of src.ip (an
    ICMP echo request is ICMPv6 type 128 in IPv6)."""
    v = ipaddress.ip_address(src.ip).version
    parts = [f'inport == "{src.port}"', f"eth.src == {src.mac}", f"eth.dst == {dst_mac}",
             f"ip{v}.src == {src.ip}", f"ip{v}.dst == {dst_ip}", "ip.ttl == 64"]
    if proto == "icmp":
        parts.append("icmp4.type == 8 && icmp4.code == 0" if v == 4 else
                     "icmp6.type == 128 && icmp6.code == 0")
    else:
        parts += [proto, f"{proto}.src == {sport}", f"{proto}.dst == {dport}"]
    return " && ".join(parts)


def run_ovn_trace(sb_remote: str, switch: str, flow: str, ct: str, ovs: str | None = None,
                  timeout: float = 30.0) -> str:
    argv = ["ovn-trace", f"--db={sb_remote}", "--detailed", *ssl_argv(), *[f"--ct={ct}"] * 12]
    if ovs:
        argv.append(f"--ovs={ovs}")
    cp = subprocess.run([*argv, switch, flow], capture_output=True, text=True, timeout=timeout)
    if cp.returncode != 0:
        raise TraceError(f"ovn-trace failed: {cp.stderr.strip() or cp.stdout.strip()}")
    return cp.stdout


def _dst_mac(nb: Query, src: Endpoint, dst: Endpoint) -> str:
    """The L2 destination the source's kernel uses: the peer itself on the same
    switch, else the cluster router's port on the source's switch (its gateway)."""
    if dst.mac and dst.switch == src.switch:
        return dst.mac
    return _router_mac(nb, src.switch)


def _direction(title, namer, nb, sb_remote, src, dst, dst_ip, proto, sport, dport, ct, ovs):
    flow = microflow(src, dst_ip, _dst_mac(nb, src, dst), proto, sport, dport)
    raw = run_ovn_trace(sb_remote, src.switch, flow, ct, ovs)
    hops, verdict, ok, reached = namer.explain(traceparse.parse(raw), src, dst)
    return Direction(title, verdict, ok, hops, raw), reached


def trace(kube, nb_remote: str, sb_remote: str, src_ref: str, dst_ref: str,
          proto: str = "icmp", port: int | None = None, ovs: str | None = None,
          global_namespaces=frozenset(), family: int | None = 4) -> Result:
    """Trace the first packet from src to dst and, if it arrives at a pod or
    node of ours, the reply; over IP `family` (each end by its address of it;
    None: an address destination's family, else the source's first address's)."""
    if proto not in PROTOCOLS:
        raise TraceError(f"protocol {proto!r}: expected one of {', '.join(PROTOCOLS)}")
    if proto != "icmp" and not (port and 0 < port < 65536):
        raise TraceError(f"{proto}: a port 1-65535 is needed")
    src = resolve(kube, src_ref, "source")
    dst = resolve(kube, dst_ref, "destination", port if proto != "icmp" else None)
    if family is None:
        family = ipaddress.ip_address(dst.ip if dst.kind == "address" else src.ip).version
    src, dst = src.in_family(family), dst.in_family(family)
    with Query(nb_remote, "OVN_Northbound") as nb, Query(sb_remote, "OVN_Southbound") as sb:
        namer = Namer(nb, sb, kube, global_namespaces)
        request, reached = _direction("request", namer, nb, sb_remote, src, dst, dst.ip, proto,
                                      SOURCE_PORT, port, "trk,new", ovs)
        reply = None
        if request.ok and reached:
            back = _reached_endpoint(kube, reached, dst).in_family(family)
            reply, _ = _direction("reply", namer, nb, sb_remote, back, src, src.ip, proto,
                                  port or 0, SOURCE_PORT, "trk,est,rpl", ovs)
    return Result(src, dst, proto, port, request, reply)


def _reached_endpoint(kube, port: str, dst: Endpoint) -> Endpoint:
    """The endpoint behind the port a request reached (a Service's backend)."""
    if dst.port == port:
        return dst
    if port.startswith(names.PORT_PREFIX_POD):
        return resolve(kube, "pod/" + port[len(names.PORT_PREFIX_POD):], "source")
    if port.startswith(names.PORT_PREFIX_NODE):
        return resolve(kube, "node/" + port[len(names.PORT_PREFIX_NODE):], "source")
    raise TraceError(f"the request reached port {port}, which is not a pod's or a node's")


def render(res: Result, detailed: bool = False) -> str:
    what = res.proto if res.proto == "icmp" else f"{res.proto}/{res.port}"
    lines = [("OK: " if res.ok else "FAIL: ") + res.request.verdict
             + ("" if res.reply is None else
                f"; reply {'delivered' if res.reply.ok else res.reply.verdict}"),
             f"  {res.src} -> {res.dst}, {what}"]
    for d in (res.request, res.reply):
        if d is None:
            continue
        lines.append(f"{d.title}: {d.verdict}")
        lines += [f"  {h.where}: {h.what}" for h in d.hops]
        if detailed:
            lines += ["  | " + ln for ln in d.raw.splitlines()]
    return "\n".join(lines)
