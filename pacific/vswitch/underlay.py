"""The node's underlay address on the userspace datapath's bridge, and back.

With the userspace (netdev) datapath, Geneve leaves through ovs-vswitchd, which
routes and ARPs only through an OVS bridge that owns the node's address: the
underlay interface (`eth0`) becomes a port of `br-phy` and its addresses and
routes move to br-phy's tap device.  That tap belongs to ovs-vswitchd: the
addresses go onto it again after every start of ovs-vswitchd (a crash, a
replacement), and back to the interface when Open vSwitch is stopped for good
(`pacific-vswitch --stop`, or a pod whose daemons would not outlive it).

What was taken from the interface is kept in a file in the run directory, so a
restarted pacific-vswitch knows it even while it is on neither device.  The
bridge takes the interface's MAC too, so the underlay neighbours' ARP caches
stay right whichever of the two has the address.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass, field

from pyroute2 import IPRoute

LOG = logging.getLogger(__name__)
RTPROT_KERNEL = 2
MAIN_TABLE = 254


@dataclass
class Underlay:
    interface: str
    addresses: list[list] = field(default_factory=list)     # [address, prefixlen]
    routes: list[dict] = field(default_factory=list)        # {dst, gateway, priority}
    mtu: int = 1500
    mac: str | None = None       # the bridge takes it: neighbours' caches stay right

    def save(self, path: str) -> None:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(asdict(self), f)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> "Underlay | None":
        try:
            with open(path) as f:
                return cls(**json.load(f))
        except FileNotFoundError:
            return None


def _index(ipr: IPRoute, ifname: str) -> int | None:
    found = ipr.link_lookup(ifname=ifname)
    return found[0] if found else None


def capture(interface: str) -> Underlay | None:
    """The interface's global addresses and the routes through it (None if it
    has no address)."""
    with IPRoute() as ipr:
        idx = _index(ipr, interface)
        if idx is None:
            raise RuntimeError(f"underlay interface {interface} does not exist")
        addrs = [[a.get("IFA_ADDRESS"), a["prefixlen"]] for a in ipr.get_addr(index=idx)
                 if a["scope"] == 0]
        if not addrs:
            return None
        routes = [{"dst": f"{r.get('RTA_DST')}/{r['dst_len']}" if r["dst_len"] else "default",
                   "gateway": r.get("RTA_GATEWAY"), "priority": r.get("RTA_PRIORITY")}
                  for r in ipr.get_routes(table=MAIN_TABLE, oif=idx)
                  if r["proto"] != RTPROT_KERNEL and r.get("RTA_GATEWAY")]
        link = ipr.get_links(idx)[0]
    return Underlay(interface, addrs, routes, link.get("IFLA_MTU"), link.get("IFLA_ADDRESS"))


def has_addresses(device: str, u: Underlay) -> bool | None:
    """None if `device` does not exist."""
    with IPRoute() as ipr:
        idx = _index(ipr, device)
        if idx is None:
            return None
        have = {a.get("IFA_ADDRESS") for a in ipr.get_addr(index=idx)}
    return all(a in have for a, _ in u.addresses)


def move(u: Underlay, src: str, dst: str) -> None:
    """The addresses and routes of `u` onto `dst` (up), off `src` (if it exists)."""
    with IPRoute() as ipr:
        di = _index(ipr, dst)
        if di is None:
            raise RuntimeError(f"{dst} does not exist")
        ipr.link("set", index=di, state="up")
        for addr, plen in u.addresses:
            ipr.addr("replace", index=di, address=addr, prefixlen=plen)
        si = _index(ipr, src)
        if si is not None:
            for addr, plen in u.addresses:
                try:
                    ipr.addr("del", index=si, address=addr, prefixlen=plen)
                except Exception:  # noqa: BLE001 - not there
                    pass
        for r in u.routes:
            kw = {"dst": r["dst"], "gateway": r["gateway"], "oif": di}
            if r.get("priority") is not None:
                kw["priority"] = r["priority"]
            ipr.route("replace", **kw)
    LOG.info("underlay %s now on %s (was on %s)",
             ", ".join(f"{a}/{p}" for a, p in u.addresses), dst, src)


def neighbours(device: str, ips: list[str]) -> dict[str, str]:
    """The kernel's MAC of each of `ips` on `device` (those it has resolved)."""
    with IPRoute() as ipr:
        idx = _index(ipr, device)
        if idx is None:
            return {}
        out = {}
        for n in ipr.get_neighbours(ifindex=idx):
            ip, mac = n.get("NDA_DST"), n.get("NDA_LLADDR")
            if ip in ips and mac and mac != "00:00:00:00:00:00":
                out[ip] = mac
    return out


def resolve(device: str, ips: list[str], timeout: float = 1.0) -> dict[str, str]:
    """Have the kernel resolve `ips` (a datagram to each starts ARP through
    `device`'s route) and return the MACs it learnt within `timeout`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for ip in ips:
            try:
                s.sendto(b"", (ip, 9))       # discard: nobody need answer
            except OSError:
                pass
    deadline = time.monotonic() + timeout
    while True:
        found = neighbours(device, ips)
        if len(found) == len(ips) or time.monotonic() > deadline:
            return found
        time.sleep(0.01)
