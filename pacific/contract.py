"""The controller <-> node daemon contract: every value one writes and the other reads.

The controller decides, the node daemon plumbs.  What passes between them lives
on Kubernetes objects, which users can also write, so the format is built and
parsed here and nowhere else (controller, node daemon and the tests' fakes all
call this module):

* `PodRecord`: the controller's record of a pod's allocation, ONE annotation
  (`names.ANN_ALLOCATION`, compact JSON).  It names the pod's UID and the
  logical switch port derived from the pod's namespace and name.  A record
  copied onto another pod (from `kubectl get -o yaml`, a backup restore, or
  on purpose) names the wrong UID, so `PodRecord.belongs_to(pod)` is False and
  the node daemon does not plumb it; the controller replaces or removes what
  it did not write.  A user's requests (`ANN_IP_ADDRESS`, `ANN_MAC_ADDRESS`,
  `ANN_LOGICAL_SWITCH`) are separate keys the controller only reads.
* `NodeRecord`: the node's management-port allocation on the join switch.
* `allocation_error(pod)`: why the controller refused a pod.
* `QosRecord`: the bandwidth the controller decided for a pod (ONE annotation,
  `names.ANN_QOS`), from the pod's and its namespace's requests.

Parsing never trusts its input: anything malformed raises `ContractError`
naming the annotation and what is wrong with it.
"""
from __future__ import annotations

import ipaddress
import json
import re
import sys
from dataclasses import asdict, dataclass

from pacific import names

_MAC = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
MAX_RECORD = 1024   # bytes: a record is ~250; anything longer is not ours


class ContractError(ValueError):
    """A contract value is malformed; str() names the annotation and the problem."""


def _meta(obj: dict | None) -> dict:
    return (obj or {}).get("metadata") or {}


def _annotations(obj: dict | None) -> dict:
    return _meta(obj).get("annotations") or {}


def _json_object(text, key: str) -> dict:
    """The JSON object a record annotation holds; ContractError naming `key`."""
    if not isinstance(text, str) or len(text) > MAX_RECORD:
        raise ContractError(f"annotation {key} is not a record of at most {MAX_RECORD} bytes")
    try:
        raw = json.loads(text)
    except ValueError:
        raise ContractError(f"annotation {key} is not JSON") from None
    if not isinstance(raw, dict):
        raise ContractError(f"annotation {key} is not a JSON object")
    return raw


def _mac(value, key: str) -> str:
    mac = value.lower() if isinstance(value, str) else ""
    if not _MAC.match(mac) or int(mac[:2], 16) & 1:
        raise ContractError(f"annotation {key}: {value!r} is not a unicast MAC address")
    return mac


@dataclass(frozen=True)
class PodRecord:
    uid: str          # metadata.uid of the pod the allocation was made for
    port: str         # its logical switch port, names.pod_lsp_name(namespace, name)
    ip: str
    mac: str
    cidr: str         # the subnet's CIDR
    gateway: str | None
    subnet: str
    # dual-stack: every family's address, CIDR and gateway, IPv4 first (the
    # first is ip/cidr/gateway again); () for one family, and then not written
    ips: tuple[str, ...] = ()
    cidrs: tuple[str, ...] = ()
    gateways: tuple[str | None, ...] = ()

    @property
    def ip_cidr(self) -> str:
        return f"{self.ip}/{ipaddress.ip_network(self.cidr).prefixlen}"

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every family's address, IPv4 first (one record of one family: its ip)."""
        return self.ips or (self.ip,)

    def address(self, version: int) -> str | None:
        """The address of IP `version`, None without one."""
        return next((a for a in self.addresses if (":" in a) == (version == 6)), None)

    def families(self) -> list[tuple[str, str, str | None]]:
        """(address/prefix, cidr, gateway) of each family, IPv4 first."""
        ips, cidrs, gws = self.addresses, self.cidrs or (self.cidr,), \
            self.gateways or (self.gateway,)
        return [(f"{i}/{ipaddress.ip_network(c).prefixlen}", c, g) for i, c, g in zip(ips, cidrs, gws)]

    # -- writing (controller) ------------------------------------------------
    def annotations(self) -> dict:
        """The merge-patch annotations that record this allocation: the record,
        no refusal, none of the legacy keys."""
        out = {names.ANN_ALLOCATION: self.to_json(), names.ANN_ALLOCATION_ERROR: None}
        out.update({k: None for k in names.ANN_LEGACY_RECORD})
        return out

    def to_json(self) -> str:
        raw = asdict(self)
        for k in _DUAL_FIELDS:
            if not raw[k]:
                del raw[k]
            else:
                raw[k] = list(raw[k])
        return json.dumps(raw, sort_keys=True, separators=(",", ":"))

    # -- reading (node daemon, controller) ---------------------------------------
    @classmethod
    def parse(cls, text) -> "PodRecord":
        key = names.ANN_ALLOCATION
        raw = _json_object(text, key)
        fields = ("uid", "port", "ip", "mac", "cidr", "gateway", "subnet")
        unknown = sorted(set(raw) - set(fields) - set(_DUAL_FIELDS))
        if unknown:
            raise ContractError(f"annotation {key} has unknown fields {unknown}")
        for f in fields:
            v = raw.get(f)
            if f == "gateway" and v is None:
                continue
            if not isinstance(v, str) or not v:
                raise ContractError(f"annotation {key}: field {f!r} is missing or not a string")
        try:
            ip = ipaddress.ip_address(raw["ip"])
            net = ipaddress.ip_network(raw["cidr"], strict=True)
        except ValueError as e:
            raise ContractError(f"annotation {key}: {e}") from None
        if ip not in net:
            raise ContractError(f"annotation {key}: ip {ip} is outside cidr {net}")
        gw = raw.get("gateway")
        if gw is not None:
            try:
                gw_ip = ipaddress.ip_address(gw)
            except ValueError:
                raise ContractError(f"annotation {key}: gateway {gw!r} is not an address") from None
            if gw_ip not in net:
                raise ContractError(f"annotation {key}: gateway {gw} is outside cidr {net}")
        dual = _dual(raw, key, str(ip), str(net), gw) if any(k in raw for k in _DUAL_FIELDS) else {}
        # the address and port name are kept per pod by several features (and the
        # IP object, IPAM and NB replica): one interned copy for all
        return cls(uid=raw["uid"], port=sys.intern(raw["port"]), ip=sys.intern(str(ip)),
                   mac=_mac(raw["mac"], key), cidr=str(net), gateway=gw, subnet=raw["subnet"],
                   **dual)

    @classmethod
    def of(cls, pod: dict) -> "PodRecord | None":
        """The record on `pod`, None if there is none; ContractError if malformed."""
        text = _annotations(pod).get(names.ANN_ALLOCATION)
        return None if text is None else cls.parse(text)

    def why_not_for(self, pod: dict) -> str | None:
        """None if this record was made for `pod`, else why not (for logs and
        Events).  Only a record that names the pod's own UID and its own port
        is ever plumbed."""
        m = _meta(pod)
        want_port = names.pod_lsp_name(m.get("namespace", ""), m.get("name", ""))
        if self.uid != m.get("uid"):
            return (f"the {names.ANN_ALLOCATION} record names pod uid {self.uid}, not this pod's "
                    f"uid {m.get('uid')} (copied from another pod?)")
        if self.port != want_port:
            return (f"the {names.ANN_ALLOCATION} record names port {self.port!r}, not this pod's "
                    f"port {want_port!r}")
        return None

    def belongs_to(self, pod: dict) -> bool:
        return self.why_not_for(pod) is None


_DUAL_FIELDS = ("ips", "cidrs", "gateways")


def _dual(raw: dict, key: str, ip: str, cidr: str, gw: str | None) -> dict:
    """A dual-stack record's lists, checked: one entry per family (two), IPv4
    first, each address and gateway inside its family's CIDR, the first equal
    to ip/cidr/gateway."""
    lists = {k: raw.get(k) for k in _DUAL_FIELDS}
    if not all(isinstance(v, list) and len(v) == 2 for v in lists.values()):
        raise ContractError(f"annotation {key}: ips, cidrs and gateways must be lists of two "
                            "(one per family)")
    try:
        ips = [ipaddress.ip_address(v) for v in lists["ips"]]
        nets = [ipaddress.ip_network(v, strict=True) for v in lists["cidrs"]]
        gws = [None if v is None else ipaddress.ip_address(v) for v in lists["gateways"]]
    except (TypeError, ValueError) as e:
        raise ContractError(f"annotation {key}: {e}") from None
    if [n.version for n in nets] != [4, 6]:
        raise ContractError(f"annotation {key}: cidrs must be one IPv4 and one IPv6, IPv4 first")
    for i, n, g in zip(ips, nets, gws):
        if i not in n or (g is not None and g not in n):
            raise ContractError(f"annotation {key}: {i} or its gateway {g} is outside {n}")
    if (str(ips[0]), str(nets[0]), None if gws[0] is None else str(gws[0])) != (ip, cidr, gw):
        raise ContractError(f"annotation {key}: ips/cidrs/gateways do not start with ip/cidr/gateway")
    return {"ips": tuple(sys.intern(str(i)) for i in ips), "cidrs": tuple(str(n) for n in nets),
            "gateways": tuple(None if g is None else str(g) for g in gws)}


def own_record(pod: dict) -> PodRecord | None:
    """The pod's record if it is valid and made for this pod, else None."""
    try:
        rec = PodRecord.of(pod)
    except ContractError:
        return None
    return rec if rec is not None and rec.belongs_to(pod) else None


def allocation_error(pod: dict) -> str | None:
    """The controller's refusal message on `pod`, if any."""
    err = _annotations(pod).get(names.ANN_ALLOCATION_ERROR)
    return err if isinstance(err, str) and err else None


def refusal_annotations(message: str) -> dict:
    """Merge-patch annotations of a refused pod: the reason, and no record."""
    out = {names.ANN_ALLOCATION_ERROR: message, names.ANN_ALLOCATION: None}
    out.update({k: None for k in names.ANN_LEGACY_RECORD})
    return out


def foreign_record_keys(pod: dict, mine: PodRecord | None) -> list[str]:
    """Record annotations on `pod` that are not the controller's record `mine`
    (a copied or edited record, legacy keys): what the controller replaces or
    removes."""
    ann = _annotations(pod)
    out = [k for k in names.ANN_LEGACY_RECORD if k in ann]
    have = ann.get(names.ANN_ALLOCATION)
    if have is not None and (mine is None or have != mine.to_json()):
        out.append(names.ANN_ALLOCATION)
    return out


# --- bandwidth -----------------------------------------------------------------

@dataclass(frozen=True)
class QosRecord:
    """The controller's decision on a pod's bandwidth, in kbit/s; None = no
    limit.  ingress: into the pod; egress: out of it.  It names the pod's UID,
    so a copy on another pod is ignored like a copied allocation record."""
    uid: str
    ingress_kbps: int | None
    egress_kbps: int | None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @property
    def limited(self) -> bool:
        return self.ingress_kbps is not None or self.egress_kbps is not None

    @classmethod
    def parse(cls, text) -> "QosRecord":
        key = names.ANN_QOS
        raw = _json_object(text, key)
        if set(raw) != {"uid", "ingress_kbps", "egress_kbps"}:
            raise ContractError(f"annotation {key} must have exactly uid, ingress_kbps, egress_kbps")
        if not isinstance(raw["uid"], str) or not raw["uid"]:
            raise ContractError(f"annotation {key}: uid is not a string")
        limit = names.QOS_MAX_MBPS * 1000
        for f in ("ingress_kbps", "egress_kbps"):
            v = raw[f]
            if v is not None and (type(v) is not int or not 0 < v <= limit):
                raise ContractError(f"annotation {key}: {f} {v!r} is not an integer in 1..{limit}")
        return cls(uid=raw["uid"], ingress_kbps=raw["ingress_kbps"], egress_kbps=raw["egress_kbps"])


def own_qos(pod: dict | None) -> QosRecord | None:
    """The bandwidth the controller decided for this pod; None if none (or a
    record that is malformed or made for another pod)."""
    text = _annotations(pod).get(names.ANN_QOS)
    if text is None:
        return None
    try:
        rec = QosRecord.parse(text)
    except ContractError:
        return None
    return rec if rec.uid == _meta(pod).get("uid") else None


# --- subnets ---------------------------------------------------------------------

def subnet_cidrs_in_effect(subnet: dict | None) -> list[str]:
    """The CIDRs the controller applied for a Subnet (its status, which only
    the controller writes, "a" or dual-stack "a,b"): what nodes route into
    ovn0.  [] if nothing is applied (refused, not yet reconciled) or the value
    is malformed."""
    value = ((subnet or {}).get("status") or {}).get("cidrBlock")
    if not isinstance(value, str):
        return []
    try:
        return [str(ipaddress.ip_network(v.strip(), strict=True)) for v in value.split(",")]
    except ValueError:
        return []


def subnet_cidr_in_effect(subnet: dict | None, version: int = 4) -> str | None:
    """The applied CIDR of IP `version` of a Subnet (subnet_cidrs_in_effect),
    None without one."""
    return next((c for c in subnet_cidrs_in_effect(subnet)
                 if ipaddress.ip_network(c).version == version), None)


# --- node ----------------------------------------------------------------------

def _address_in(value: str, network, annotation: str) -> str:
    """`value` as an address inside `network`; ContractError naming the
    annotation otherwise."""
    try:
        addr = ipaddress.ip_address(value)
        if addr not in network:
            raise ValueError(value)
    except ValueError:
        raise ContractError(f"annotation {annotation}: {value!r} is not an address in "
                            f"{network}") from None
    return str(addr)


@dataclass(frozen=True)
class NodeRecord:
    """The node's management port ovn0: address on the join switch, MAC,
    gateway (the cluster router) and its logical switch port; and the join
    address its connections into the service CIDR leave with (service_source,
    "" from a controller that predates it).  The first family's (IPv4, or
    IPv6 on an IPv6-only join network) in the first annotations, a dual-stack
    join network's IPv6 in the `_ipv6` ones; readers that mean a family ask
    for it (`address(6)`, `gateway_of(4)`, `source(6)`)."""
    ip_cidr: str      # "100.64.0.2/16" ("fd00:64::2/64" on an IPv6-only join network)
    mac: str
    gateway: str
    port: str
    service_source: str = ""
    ip6_cidr: str = ""    # a dual-stack join network: ovn0's IPv6 "fd00:64::2/64"
    gateway6: str = ""    # ... and the cluster router's IPv6 there
    service_source6: str = ""   # ... and the service source's IPv6 twin

    def _of_family(self, family: int) -> tuple[str, str, str]:
        """(address/prefix, gateway, service source) of ovn0 in IP `family`,
        empty strings without one."""
        for cidr, gw, source in ((self.ip_cidr, self.gateway, self.service_source),
                                 (self.ip6_cidr, self.gateway6, self.service_source6)):
            if cidr and ipaddress.ip_interface(cidr).version == family:
                return cidr, gw, source
        return "", "", ""

    def cidr(self, family: int) -> str:
        """ovn0's address with its prefix in IP `family` ("" without one)."""
        return self._of_family(family)[0]

    def address(self, family: int) -> str:
        """ovn0's address in IP `family` ("" without one)."""
        return self._of_family(family)[0].split("/")[0]

    def gateway_of(self, family: int) -> str:
        """The cluster router's address on the join switch in IP `family`."""
        return self._of_family(family)[1]

    def source(self, family: int) -> str:
        """The service source in IP `family` ("" without one)."""
        return self._of_family(family)[2]

    def annotations(self) -> dict:
        out = {names.ANN_NODE_JOIN_IP: self.ip_cidr, names.ANN_NODE_JOIN_MAC: self.mac,
               names.ANN_NODE_JOIN_GW: self.gateway, names.ANN_NODE_LSP: self.port}
        if self.service_source:
            out[names.ANN_NODE_SERVICE_SOURCE] = self.service_source
        if self.ip6_cidr:
            out[names.ANN_NODE_JOIN_IP6] = self.ip6_cidr
            out[names.ANN_NODE_JOIN_GW6] = self.gateway6
        if self.service_source6:
            out[names.ANN_NODE_SERVICE_SOURCE6] = self.service_source6
        return out

    @property
    def ip(self) -> str:
        return self.ip_cidr.split("/")[0]

    @property
    def ip6(self) -> str:
        """ovn0's IPv6 address, "" without one."""
        return self.address(6)

    @property
    def interfaces(self) -> list[tuple[str, str]]:
        """(address/prefix, gateway) of ovn0 per family, the first family first."""
        return [(self.ip_cidr, self.gateway)] + (
            [(self.ip6_cidr, self.gateway6)] if self.ip6_cidr else [])

    @classmethod
    def of(cls, node: dict | None) -> "NodeRecord | None":
        """The record on a Node; None while the controller has not written all of
        it, ContractError naming the annotation when a value is malformed."""
        ann = _annotations(node)
        keys = (names.ANN_NODE_JOIN_IP, names.ANN_NODE_JOIN_MAC, names.ANN_NODE_JOIN_GW,
                names.ANN_NODE_LSP)
        vals = [ann.get(k) for k in keys]
        if not all(vals):
            return None
        ip_cidr, mac, gw, port = vals
        try:
            if "/" not in ip_cidr:
                raise ValueError(ip_cidr)
            iface = ipaddress.ip_interface(ip_cidr)
        except ValueError:
            raise ContractError(f"annotation {names.ANN_NODE_JOIN_IP}: {ip_cidr!r} is not an "
                                "address with a prefix length") from None
        try:
            gateway = ipaddress.ip_address(gw)
        except ValueError:
            raise ContractError(f"annotation {names.ANN_NODE_JOIN_GW}: {gw!r} is not an "
                                "address") from None
        if gateway not in iface.network:
            raise ContractError(f"annotation {names.ANN_NODE_JOIN_GW}: {gw} is outside "
                                f"{iface.network}")
        source = ann.get(names.ANN_NODE_SERVICE_SOURCE) or ""
        if source:
            source = _address_in(source, iface.network, names.ANN_NODE_SERVICE_SOURCE)
        ip6, gw6 = ann.get(names.ANN_NODE_JOIN_IP6) or "", ann.get(names.ANN_NODE_JOIN_GW6) or ""
        if ip6 or gw6:
            try:
                iface6 = ipaddress.ip_interface(ip6)
                if "/" not in ip6 or iface6.version != 6:
                    raise ValueError(ip6)
            except ValueError:
                raise ContractError(f"annotation {names.ANN_NODE_JOIN_IP6}: {ip6!r} is not an "
                                    "IPv6 address with a prefix length") from None
            if iface.version != 4:
                raise ContractError(f"annotation {names.ANN_NODE_JOIN_IP6}: set beside an "
                                    f"IPv6 {names.ANN_NODE_JOIN_IP} ({ip_cidr}); a dual-stack "
                                    "record has IPv4 first")
            ip6, gw6 = str(iface6), _address_in(gw6, iface6.network, names.ANN_NODE_JOIN_GW6)
        source6 = ann.get(names.ANN_NODE_SERVICE_SOURCE6) or ""
        if source6:
            if not ip6:
                raise ContractError(f"annotation {names.ANN_NODE_SERVICE_SOURCE6}: set without "
                                    f"{names.ANN_NODE_JOIN_IP6}")
            source6 = _address_in(source6, ipaddress.ip_interface(ip6).network,
                                  names.ANN_NODE_SERVICE_SOURCE6)
        return cls(ip_cidr=str(iface), mac=_mac(mac, names.ANN_NODE_JOIN_MAC),
                   gateway=str(gateway), port=port, service_source=source,
                   ip6_cidr=ip6, gateway6=gw6, service_source6=source6)
