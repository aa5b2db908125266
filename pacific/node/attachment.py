"""`PodAttachment`: one pod interface as the node daemon plumbs it.

Pure data: built from the controller's record on the pod (contract.PodRecord) on ADD, recorded in the
OVS Interface's external_ids (so the daemon rebuilds its view from OVS after a
restart), rendered as the canonical CNI result the plugin converts.
"""
from __future__ import annotations

from dataclasses import dataclass

from pacific import names
from pacific.cni import plugin as proto
from pacific.contract import PodRecord


def host_ifname(container_id: str, ifname: str) -> str:
    """Host end of the pod's veth (and OVS port name), 14 characters: a hash of
    the container id AND the interface name, so ids with a common prefix
    (cnitool's "cnitool-<hex>") and a second interface of one container (net1,
    as Multus adds) get names of their own.  Ports plumbed before this scheme
    keep their names: OVS records them (PodAttachment.host).  The formula lives
    in the plugin, whose DEL uses it when the daemon is down."""
    return proto.host_veth_name(container_id, ifname)


@dataclass
class PodAttachment:
    container_id: str
    ifname: str
    netns: str
    pod: str            # "namespace/name"
    lsp: str            # logical switch port (OVS iface-id)
    mac: str
    ip_cidr: str        # "10.16.0.5/16"
    gateway: str | None
    mtu: int
    host: str = ""      # the OVS port's name when read from OVS (may predate host_ifname)
    more: tuple = ()    # dual-stack: ((ip_cidr, gateway),) of the other family

    def addresses(self) -> list[tuple[str, str | None]]:
        """(address/prefix, gateway) of each family, IPv4 first."""
        return [(self.ip_cidr, self.gateway), *self.more]

    @property
    def host_ifname(self) -> str:
        return self.host or host_ifname(self.container_id, self.ifname)

    @property
    def ip(self) -> str:
        return self.ip_cidr.split("/")[0]

    @property
    def prefixlen(self) -> int:
        return int(self.ip_cidr.split("/")[1])

    @classmethod
    def from_record(cls, rec: PodRecord, *, container_id: str, ifname: str, netns: str,
                    pod: str, mtu: int) -> "PodAttachment":
        """The attachment the controller's record asks for (contract.PodRecord,
        already validated and checked to belong to the pod)."""
        fams = rec.families()
        return cls(container_id=container_id, ifname=ifname, netns=netns, pod=pod,
                   lsp=rec.port, mac=rec.mac, ip_cidr=rec.ip_cidr, gateway=rec.gateway, mtu=mtu,
                   more=tuple((a, g) for a, _, g in fams[1:]))

    def ovs_external_ids(self) -> dict[str, str]:
        ids = {names.OVS_IFACE_ID: self.lsp, names.OVS_IFACE_STATUS: "active",
               names.OVS_ATTACHED_MAC: self.mac, names.OVS_CONTAINER_ID: self.container_id,
               names.OVS_POD: self.pod, names.OVS_IFNAME: self.ifname,
               names.OVS_NETNS: self.netns, names.OVS_IP_ADDRESS: self.ip_cidr}
        if self.gateway:
            ids[names.OVS_GATEWAY] = self.gateway
        if self.more:
            ids[names.OVS_MORE_ADDRESSES] = ",".join(f"{a} {g or ''}".strip() for a, g in self.more)
        return ids

    @classmethod
    def from_ovs(cls, external_ids: dict, mtu: int, name: str = "") -> "PodAttachment | None":
        """Rebuild from an OVS Interface (its external_ids and name); None if not a
        pod port."""
        try:
            return cls(container_id=external_ids[names.OVS_CONTAINER_ID],
                       ifname=external_ids[names.OVS_IFNAME],
                       netns=external_ids.get(names.OVS_NETNS, ""),
                       pod=external_ids.get(names.OVS_POD, ""),
                       lsp=external_ids.get(names.OVS_IFACE_ID, ""),
                       mac=external_ids.get(names.OVS_ATTACHED_MAC, ""),
                       ip_cidr=external_ids.get(names.OVS_IP_ADDRESS, ""),
                       gateway=external_ids.get(names.OVS_GATEWAY), mtu=mtu, host=name,
                       more=_more(external_ids.get(names.OVS_MORE_ADDRESSES, "")))
        except KeyError:
            return None

    def result(self, host_mac: str = "") -> dict:
        """Canonical CNI result (1.1.0 shape plus ips[].version for old versions)."""
        host = {"name": self.host_ifname}
        if host_mac:
            host["mac"] = host_mac
        ips, routes = [], []
        for address, gateway in self.addresses():
            ip = {"address": address, "interface": 1, "version": "6" if ":" in address else "4"}
            if gateway:
                ip["gateway"] = gateway
                routes.append({"dst": "::/0" if ":" in gateway else "0.0.0.0/0", "gw": gateway})
            ips.append(ip)
        return {"interfaces": [host, {"name": self.ifname, "mac": self.mac,
                                      "sandbox": self.netns, "mtu": self.mtu}],
                "ips": ips, "routes": routes, "dns": {}}


def _more(text: str) -> tuple:
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        address, _, gateway = item.partition(" ")
        out.append((address, gateway or None))
    return tuple(out)
