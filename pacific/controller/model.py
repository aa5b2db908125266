"""Pure decisions of the controller: no I/O, unit-tested.

Which pods need a network, which subnet a pod belongs to, how a StatefulSet pod
is identified, what a Subnet spec means, and the exact annotations and IP
objects the controller writes.  Objects are plain dicts as the API returns them.
"""
from __future__ import annotations

import hashlib
import ipaddress
import re
import sys
from dataclasses import dataclass, field

from pacific import names
from pacific.controller import slim

TERMINAL_PHASES = ("Succeeded", "Failed")
OWNER_KIND_STATEFULSET = names.OWNER_KIND_STATEFULSET


def meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def annotations(obj: dict) -> dict:
    return meta(obj).get("annotations") or {}


def labels_of(obj: dict) -> dict:
    return meta(obj).get("labels") or {}


def object_key(namespace: str, name: str) -> str:
    """Work-queue / informer key of a namespaced object (pod, NetworkPolicy, ...);
    for a pod also the IPAM owner key of its address."""
    return f"{namespace}/{name}"


def node_owner_key(node: str) -> str:
    """IPAM owner key of a node's join address (cannot clash with 'ns/name')."""
    return f"node:{node}"


def node_source_key(node: str) -> str:
    """IPAM owner key of a node's service source address (contract.NodeRecord)."""
    return f"node:{node}:service-source"


MAX_OBJECT_NAME = 253   # a DNS-1123 subdomain


def ip_object_name(namespace: str, name: str) -> str:
    """Name of the cluster-scoped IP object of a pod: '<pod>.<namespace>'.

    For a StatefulSet pod this is also the '<statefulset>-<ordinal>.<namespace>'
    identity that outlives the pod, so a re-created pod finds its address.  A name
    longer than an object name may be (253) keeps a readable prefix and a hash of
    the full identity, so it stays unique and deterministic."""
    full = f"{name}.{namespace}"
    if len(full) <= MAX_OBJECT_NAME:
        return full
    digest = hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:12]
    room = MAX_OBJECT_NAME - len(namespace) - len(digest) - 2
    return f"{name[:room].rstrip('.-')}-{digest}.{namespace}"


def needs_network(pod: dict) -> bool:
    """A pod gets an address once scheduled, unless host-network or finished."""
    spec = pod.get("spec") or {}
    if spec.get("hostNetwork"):
        return False
    if not spec.get("nodeName"):
        return False
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def statefulset_of(pod: dict) -> tuple[str, int] | None:
    """(statefulset name, ordinal) if the pod is owned by a StatefulSet."""
    for ref in meta(pod).get("ownerReferences") or []:
        if ref.get("kind") == OWNER_KIND_STATEFULSET and ref.get("controller", True):
            sts = ref.get("name") or ""
            m = re.fullmatch(re.escape(sts) + r"-(\d+)", meta(pod).get("name", ""))
            if sts and m:
                return sts, int(m.group(1))
    return None


def statefulset_keeps(sts: dict | None, ordinal: int) -> bool:
    """Does this StatefulSet still have `ordinal` (so its address is kept)?"""
    if sts is None or meta(sts).get("deletionTimestamp"):
        return False
    replicas = (sts.get("spec") or {}).get("replicas")
    replicas = 1 if replicas is None else int(replicas)
    start = int(((sts.get("spec") or {}).get("ordinals") or {}).get("start", 0))
    return start <= ordinal < start + replicas


def namespace_subnets(subnets: list[dict]) -> dict[str, str]:
    """namespace -> subnet name from Subnet.spec.namespaces (oldest subnet wins)."""
    out: dict[str, str] = {}
    for s in sorted(subnets, key=lambda s: (meta(s).get("creationTimestamp") or "", meta(s).get("name"))):
        for ns in (s.get("spec") or {}).get("namespaces") or []:
            out.setdefault(ns, meta(s)["name"])
    return out


def subnets_of_namespace(ns: str, namespace: dict | None, subnets: list[dict],
                         default_subnet: str) -> set[str]:
    """The Subnets a pod of `ns` may ask for by annotation: those the
    administrator bound to the namespace (Subnets listing it, the namespace's
    own annotation), else the default one.  A pod annotation is a request: it
    never reaches another namespace's Subnet (private, centralized or not)."""
    out = {meta(s).get("name") for s in subnets
           if ns in ((s.get("spec") or {}).get("namespaces") or [])}
    if namespace is not None and annotations(namespace).get(names.ANN_LOGICAL_SWITCH):
        out.add(annotations(namespace)[names.ANN_LOGICAL_SWITCH])
    return out or {default_subnet}


def choose_subnet(pod: dict, namespace: dict | None, ns_binding: dict[str, str],
                  default_subnet: str) -> tuple[str, str]:
    """(subnet name, why) for a pod: its annotation, else its namespace's
    annotation, else a Subnet listing the namespace, else the default."""
    want = annotations(pod).get(names.ANN_LOGICAL_SWITCH)
    if want:
        return want, f"pod annotation {names.ANN_LOGICAL_SWITCH}"
    if namespace is not None:
        want = annotations(namespace).get(names.ANN_LOGICAL_SWITCH)
        if want:
            return want, f"namespace annotation {names.ANN_LOGICAL_SWITCH}"
    ns = meta(pod).get("namespace", "default")
    if ns in ns_binding:
        return ns_binding[ns], f"Subnet {ns_binding[ns]} lists namespace {ns}"
    return default_subnet, "default subnet"


# --- informer cache trimming ----------------------------------------------------
# The controller caches every Pod and IP object of the cluster; whole Pod
# objects (containers, volumes, status, managedFields) cost ~10 KiB each in
# Python dicts.  These transforms keep exactly what the reconcilers and Events
# read, with repeated strings (namespace, node, subnet, phase...) interned so
# 100,000 pods share one copy of each.  Keep them in step with the readers:
# needs_network, statefulset_of, choose_subnet, the contract record and
# requests the pod reconciler compares, labels (selected by features), and
# r.create_event's involvedObject.  What is kept is held in one compact
# read-only Mapping per object (pacific.controller.slim: ~0.7 KB a Pod, ~0.6 KB
# an IP object, against ~1.4 and ~1.6 KB as trimmed dicts).

_intern = sys.intern
_SHARED_ANN = frozenset((names.ANN_LOGICAL_SWITCH,))
_K8S_ANN = frozenset((names.ANN_K8S_INGRESS_BANDWIDTH, names.ANN_K8S_EGRESS_BANDWIDTH))
# (shared with other objects: the address and MAC are also IPAM's, the address the record's)
_SHARED_IP_SPEC = frozenset(("namespace", "subnet", "nodeName", "ownerKind", "pod", "ownerName",
                             "ipAddress", "macAddress"))


def _kept_annotations(m: dict) -> tuple | None:
    ann = [x for k, v in (m.get("annotations") or {}).items()
           if k.startswith(names.ANN_PREFIX) or k in _K8S_ANN
           for x in (_intern(k), _intern(v) if k in _SHARED_ANN and isinstance(v, str) else v)]
    return tuple(ann) or None


def _name(m: dict):
    # a pod's name recurs in its IP object (spec.pod, spec.ownerName): one copy
    n = m.get("name")
    return _intern(n) if isinstance(n, str) else n


def slim_pod(pod: dict) -> slim.SlimPod:
    """The part of a Pod the controller reads (informer transform), as one
    compact read-only Mapping (pacific.controller.slim) that answers like the
    trimmed dict: metadata (name, namespace, uid, resourceVersion,
    deletionTimestamp, labels, Pacific's and the bandwidth annotations,
    StatefulSet ownerReferences), spec (nodeName, hostNetwork, named container
    ports) and status.phase."""
    m = pod.get("metadata") or {}
    labels = None
    if m.get("labels"):
        # NetworkPolicy and tenants select on them; label sets repeat across a
        # Deployment's pods, so keys and values are interned
        labels = {_intern(k): _intern(v) for k, v in m["labels"].items()
                  if isinstance(k, str) and isinstance(v, str)} or None
    refs = tuple((r.get("name"), r.get("controller", True))
                 for r in m.get("ownerReferences") or [] if r.get("kind") == OWNER_KIND_STATEFULSET)
    spec = pod.get("spec") or {}
    named = tuple((_intern(p["name"]), p.get("containerPort"), _intern(p.get("protocol") or "TCP"))
                  for c in spec.get("containers") or [] for p in c.get("ports") or []
                  if isinstance(p, dict) and isinstance(p.get("name"), str))
    phase = (pod.get("status") or {}).get("phase")
    ns = m.get("namespace")
    return slim.SlimPod(
        _intern(pod.get("kind") or "Pod"), _intern(pod.get("apiVersion") or "v1"), _name(m),
        _intern(ns) if ns is not None else None, m.get("uid"), m.get("resourceVersion"),
        deleted=m.get("deletionTimestamp") or None, labels=labels, ann=_kept_annotations(m),
        refs=refs or None, node=_intern(spec["nodeName"]) if spec.get("nodeName") else None,
        host=bool(spec.get("hostNetwork")), ports=named or None,
        phase=_intern(phase) if phase else None)


_IP_SPEC_SHAPES: dict[tuple, tuple] = {}


def slim_ip(ip: dict) -> slim.SlimIP:
    """The part of an IP object the controller reads: name, version and spec,
    as one compact read-only Mapping (pacific.controller.slim)."""
    spec = ip.get("spec") or {}
    keys = tuple(_intern(k) if isinstance(k, str) else k for k in spec)
    keys = _IP_SPEC_SHAPES.setdefault(keys, keys) if len(_IP_SPEC_SHAPES) < 256 else keys
    vals = tuple(_intern(v) if k in _SHARED_IP_SPEC and isinstance(v, str) else v
                 for k, v in spec.items())
    m = ip.get("metadata") or {}
    return slim.SlimIP(_intern(ip.get("kind") or "IP"), _intern(ip.get("apiVersion") or ""),
                       m.get("name"), m.get("uid"), m.get("resourceVersion"),
                       m.get("deletionTimestamp") or None, keys, vals)


def _same_except(a: dict, b: dict, meta_keys: tuple[str, ...]) -> bool:
    if {k: v for k, v in a.items() if k != "metadata"} != {k: v for k, v in b.items() if k != "metadata"}:
        return False
    return ({k: v for k, v in meta(a).items() if k not in meta_keys}
            == {k: v for k, v in meta(b).items() if k not in meta_keys})


def with_annotations(obj: dict, patch: dict) -> dict:
    """`obj` as a merge patch of its annotations would leave it (None removes)."""
    m = dict(meta(obj))
    ann = dict(m.get("annotations") or {})
    for k, v in patch.items():
        if v is None:
            ann.pop(k, None)
        else:
            ann[k] = v
    m["annotations"] = ann
    return {**obj, "metadata": m}


def same_status(old: dict | None, new: dict | None, *fields: str) -> bool:
    """An update (both present) that leaves these status fields as they were
    (a Node's addresses, a Subnet's cidrBlock: not its heartbeats)."""
    if old is None or new is None:
        return False
    a, b = old.get("status") or {}, new.get("status") or {}
    return all(a.get(f) == b.get(f) for f in fields)


def same_for_allocation(a: dict, b: dict) -> bool:
    """Equal in everything the pod reconciler reads (labels and the resource
    version aside)."""
    return _same_except(a, b, ("resourceVersion", "labels"))


def same_but_version(a: dict, b: dict) -> bool:
    """Equal apart from metadata.resourceVersion (an update of fields a
    trimmed cache does not keep)."""
    return _same_except(a, b, ("resourceVersion",))


# --- Subnet spec ----------------------------------------------------------------

class SubnetSpecError(ValueError):
    """A Subnet's spec is malformed; str() says which field and why."""


@dataclass(frozen=True)
class SubnetSpec:
    name: str
    cidr: str                             # the first family's (IPv4 when there is one)
    gateway: str
    exclude: tuple[str, ...] = field(default_factory=tuple)
    default: bool = False
    private: bool = False                 # only its own addresses, allow_subnets, nodes
    allow_subnets: tuple[str, ...] = ()   # CIDRs
    cidrs: tuple[str, ...] = ()           # every family's, IPv4 first (() = (cidr,))
    gateways: tuple[str, ...] = ()        # likewise

    def __post_init__(self):
        if not self.cidrs:
            object.__setattr__(self, "cidrs", (self.cidr,))
        if not self.gateways:
            object.__setattr__(self, "gateways", (self.gateway,))

    @property
    def prefixlen(self) -> int:
        return ipaddress.ip_network(self.cidr).prefixlen

    @property
    def families(self) -> tuple[int, ...]:
        return tuple(ipaddress.ip_network(c).version for c in self.cidrs)

    @property
    def cidr_block(self) -> str:
        """Every family's CIDR as the Subnet spells it ("a" or "a,b"; IPAM's form)."""
        return ",".join(self.cidrs)

    @property
    def gateway_list(self) -> str:
        return ",".join(self.gateways)

    def networks(self) -> list[str]:
        """The router port's networks: each family's gateway/prefix."""
        return [f"{g}/{ipaddress.ip_network(c).prefixlen}" for g, c in zip(self.gateways, self.cidrs)]


def parse_subnet(obj: dict, reserved_names: tuple[str, ...] = (), ipv6: bool = False) -> SubnetSpec:
    """Validate a Subnet object's spec (CIDR, gateway, excludeIps).  IPv6 and
    dual-stack CIDRs only with `ipv6` (a cluster with IPv6: Config.ipv6): in
    one whose networks are IPv4 only they are refused."""
    name = meta(obj).get("name", "")
    if name in reserved_names:
        raise SubnetSpecError(f"name {name!r} is reserved for Pacific's own switch")
    spec = obj.get("spec") or {}
    raw = spec.get("cidrBlock")
    if not raw or not isinstance(raw, str):
        raise SubnetSpecError("spec.cidrBlock is required (e.g. 10.17.0.0/16)")
    nets = _per_family(raw, "spec.cidrBlock", _parse_cidr, "CIDRs")
    if 6 in nets and not ipv6:
        # the cluster writes no IPv6 rows (isolation's and policies' IPv6 twins,
        # the nodes' routes): its pods' IPv6 would be unguarded and reach nothing
        raise SubnetSpecError(f"spec.cidrBlock {raw!r} is IPv6{' (dual-stack)' if 4 in nets else ''}"
                              ", and this cluster's networks are IPv4 only: an administrator "
                              "gives the controller's --join-cidr and --service-cidr an IPv6 "
                              "CIDR (docs/dual-stack.md)")
    for version, net in nets.items():
        if net.num_addresses < 4:
            raise SubnetSpecError(f"spec.cidrBlock {str(net)!r} is too small (needs room for a "
                                  "gateway and pods)")
    gw = spec.get("gateway")
    gws = _per_family(str(gw), "spec.gateway", _parse_address, "addresses") if gw else {}
    for version, gw_ip in gws.items():
        if version not in nets:
            raise SubnetSpecError(f"spec.gateway {gw_ip} is IPv{version}, but spec.cidrBlock "
                                  f"{raw!r} has no IPv{version} CIDR")
        inside = nets[version]
        unusable = {inside.network_address} | ({inside.broadcast_address} if version == 4 else set())
        if gw_ip not in inside or gw_ip in unusable:
            raise SubnetSpecError(f"spec.gateway {gw_ip} is not a usable address of {inside}")
    families = sorted(nets)
    cidrs = tuple(str(nets[v]) for v in families)
    gateways = tuple(str(gws.get(v) or nets[v].network_address + 1) for v in families)
    exclude = []
    for item in spec.get("excludeIps") or []:
        item = str(item).strip()
        parts = item.split("..")
        try:
            ips = [ipaddress.ip_address(p.strip()) for p in parts]
        except ValueError:
            raise SubnetSpecError(f"spec.excludeIps entry {item!r} is not an address or a range a..b") from None
        if len(ips) > 2 or (len(ips) == 2 and ips[0] > ips[1]):
            raise SubnetSpecError(f"spec.excludeIps entry {item!r} is not an address or a range a..b")
        exclude.append(item)
    allow = []
    for item in spec.get("allowSubnets") or []:
        try:
            allow.append(str(ipaddress.ip_network(str(item).strip(), strict=False)))
        except ValueError:
            raise SubnetSpecError(f"spec.allowSubnets entry {item!r} is not a CIDR") from None
    return SubnetSpec(name=name, cidr=cidrs[0], gateway=gateways[0], exclude=tuple(exclude),
                      default=bool(spec.get("default")), private=bool(spec.get("private")),
                      allow_subnets=tuple(allow), cidrs=cidrs, gateways=gateways)


def _parse_cidr(text: str, where: str):
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError as exc:
        raise SubnetSpecError(f"{where} {text!r} is not a valid CIDR: {exc}") from None


def _parse_address(text: str, where: str):
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        raise SubnetSpecError(f"{where} {text!r} is not an IP address") from None


def _per_family(raw: str, where: str, parse, what: str) -> dict:
    """A field of one value, or of an IPv4 and an IPv6 one separated by a comma
    (dual-stack, as kube-ovn writes it): IP version -> parsed value.  Two of one
    family, or more than two, are refused naming them."""
    items = [t.strip() for t in raw.split(",")]
    if len(items) > 2:
        raise SubnetSpecError(f"{where} {raw!r} names {len(items)} {what}: at most one IPv4 "
                              f"and one IPv6 (dual-stack)")
    out: dict = {}
    for item in items:
        if not item:
            raise SubnetSpecError(f"{where} {raw!r} has an empty entry")
        value = parse(item, where)
        if value.version in out:
            raise SubnetSpecError(f"{where} {raw!r} names two IPv{value.version} {what}: at most "
                                  f"one per family")
        out[value.version] = value
    return out


def router_mac(gateway: str) -> str:
    """Deterministic MAC of the router port at `gateway` (locally administered,
    prefix 0e:00 which pod MACs never use)."""
    b = ipaddress.ip_address(gateway).packed[-4:]
    return "0e:00:" + ":".join(f"{x:02x}" for x in b)


# --- what the controller writes ----------------------------------------------

def _canonical_ip(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text.strip()))
    except (ValueError, AttributeError):
        return text


def _canonical_mac(text: str) -> str:
    return text.strip().lower().replace("-", ":") if isinstance(text, str) else text


def allocation_fits(alloc, subnet: str, want_ip: str | None, want_mac: str | None) -> bool:
    """Does the held allocation (ip, mac, subnet) satisfy the pod's request?
    Compared in canonical form, so "fd00::0a" asks for "fd00::a" and
    "0A-58-..." for "0a:58:..." (a textual difference is no new request);
    "a,b" asks for an address of each family, one of them for that one."""
    return (alloc.subnet == subnet
            and (not want_ip or {_canonical_ip(t) for t in want_ip.split(",")} <= set(alloc.ips))
            and (not want_mac or _canonical_mac(want_mac) == alloc.mac))


def ip_object(namespace: str, pod: str, subnet: str, ip: str, mac: str, node: str,
              sts: str | None = None, ips: tuple[str, ...] = ()) -> dict:
    """Body of the cluster-scoped IP object that records one allocation
    (`ips`: every family's address of a dual-stack one, IPv4 first: also in
    spec.ipAddresses; spec.ipAddress is the first)."""
    more = {"ipAddresses": list(ips)} if len(ips) > 1 else {}
    return {
        "apiVersion": names.API_VERSION,
        "kind": "IP",
        "metadata": {"name": ip_object_name(namespace, pod),
                     "labels": {names.EXT_SUBNET: subnet}},
        "spec": {
            "pod": pod, "namespace": namespace, "subnet": subnet,
            "ipAddress": ip, "macAddress": mac, "nodeName": node,
            "ownerKind": OWNER_KIND_STATEFULSET if sts else names.OWNER_KIND_POD,
            "ownerName": sts or pod, **more,
        },
    }


def condition(ctype: str, ok: bool, reason: str, message: str, now: str) -> dict:
    return {"type": ctype, "status": "True" if ok else "False", "reason": reason,
            "message": message, "lastTransitionTime": now}
