"""Egress SNAT to a Service's external IP, on a node labelled
`pacific.io/egress-gateway: "true"` (controller/egress_snat.py writes the
gateway rows; pacific.egressip says which pods leave as which address).

Every POLL seconds the node reads from SB which chassis holds each Service's
gateway port (`cr-lrp:egw:svc:<ns>/<name>`) and the transit network of that
port.  For the Services whose port this node holds, it:

* holds the external IP on its underlay interface (the one with the node's
  address), labelled `<ifname>:pe`, and announces it with gratuitous ARP when
  it takes it over; it gives the address up when another node holds the port;
* provides the host firewall's `snat` chain: the endpoints' traffic to the
  outside leaves with the external IP;
* provides pacific.node.egressgw with the transit host address and the
  return routes (each endpoint /32 back via the transit router address), so
  replies re-enter OVN where the requests left it.

What comes to the external IP from outside arrives here too (this node
answers ARP for it) and reaches the Service through the firewall's Service
frontends: one node carries both directions.
"""
from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import json
import logging
import socket
import struct
import threading
import time

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from pacific import egressip, names
from pacific.ovn.query import Query, QueryError, as_list

log = logging.getLogger(__name__)
POLL = 0.1          # s between SB reads: part of the failover time
RECHECK = 5.0       # s between re-reads of the held addresses when nothing changed
LABEL_SUFFIX = ":pe"


def gateways_in_sb(sb_remote: str, keys=(), timeout: float = 2.0
                   ) -> tuple[dict[str, tuple[str | None, str]], dict[str, set[str]]]:
    """(Service key -> (the chassis holding its gateway port or None, the
    transit router address); Service key of `keys` -> the members the
    controller admitted: its address set, which names only pods of the
    Service's own namespace), from SB."""
    prefix = names.router_port_name(names.egress_switch_name(names.SNAT_GATEWAY_PREFIX))
    with Query(sb_remote, "OVN_Southbound", timeout=timeout) as sb:
        ports = sb.select("Port_Binding", ["logical_port", "chassis", "mac", "type"],
                          [["type", "==", "chassisredirect"]]) + \
            sb.select("Port_Binding", ["logical_port", "chassis", "mac", "type"],
                      [["type", "==", "patch"]])
        chassis = {c["_uuid"]: c["name"] for c in sb.select("Chassis", ["_uuid", "name"])}
        members = {}
        for key in keys:
            row = sb.one("Address_Set", ["addresses"],
                         [["name", "==", egressip.address_set_name(key)]])
            members[key] = set(as_list(row.get("addresses"))) if row else set()
    holders, transits = {}, {}
    for p in ports:
        lp = p["logical_port"]
        if p["type"] == "chassisredirect" and lp.startswith("cr-" + prefix):
            held = as_list(p.get("chassis"))
            holders[lp[len("cr-" + prefix):]] = chassis.get(held[0]) if held else None
        elif lp.startswith(prefix):
            for m in as_list(p.get("mac")):
                parts = m.split()
                if len(parts) > 1:
                    transits[lp[len(prefix):]] = str(ipaddress.ip_interface(parts[1]).ip)
    return {k: (holders.get(k), v) for k, v in transits.items()}, members


def garp(ifname: str, mac: str, ip: str) -> None:
    """One gratuitous ARP request for `ip` from `mac` on `ifname`."""
    hw = bytes.fromhex(mac.replace(":", ""))
    addr = socket.inet_aton(ip)
    frame = (b"\xff" * 6 + hw + struct.pack("!H", 0x0806)
             + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + hw + addr + b"\x00" * 6 + addr)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((ifname, 0))
        s.send(frame)


class EgressSnat:
    def __init__(self, sb_remote: str, node_name: str, nodes, frontends, underlay_ip: str,
                 on_change=lambda: None, poll: float = POLL):
        self.sb_remote, self.node_name, self.nodes = sb_remote, node_name, nodes
        self.frontends, self.underlay_ip, self.poll = frontends, underlay_ip, poll
        self.on_change = on_change
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._routes: dict[str, tuple[str, str]] = {}     # for egressgw: cidr -> (host, via)
        self._rules: list[tuple[str, list]] | None = None  # the snat chain, None: not known
        self._held: set[str] = set()
        self._checked = float("-inf")     # monotonic time _held was last read from the kernel

    def start(self) -> "EgressSnat":
        self._thread = threading.Thread(target=self._loop, name="egress-snat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)

    # -- what the firewall and egressgw read ------------------------------------
    def rules(self) -> list[tuple[str, list]] | None:
        with self._lock:
            return None if self._rules is None else list(self._rules)

    def routes(self) -> dict[str, tuple[str, str]]:
        with self._lock:
            return dict(self._routes)

    # -- the loop -----------------------------------------------------------------
    def labelled(self) -> bool:
        node = self.nodes.get(self.node_name) or {}
        return ((node.get("metadata") or {}).get("labels") or {}).get(
            names.LABEL_EGRESS_GATEWAY) == "true"

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.converge()
            except (QueryError, OSError, NetlinkError, ValueError) as e:
                log.warning("egress SNAT not converged (retrying): %s", e)
            self._stop.wait(self.poll)

    def converge(self) -> None:
        if not self.frontends.synced():
            return
        if self.labelled():
            fe = self.frontends
            grants, _ = egressip.egress_ips(fe.services.list(), fe.slices.list(),
                                            fe.cluster_cidrs(), fe.node_ips(), fe.allowed)
            sb, admitted = gateways_in_sb(self.sb_remote, sorted(grants))
            # only the members the controller admitted (its own namespace's
            # pods): a hand-written EndpointSlice naming another tenant's pod
            # must not SNAT or re-route that pod's traffic here
            grants = {k: dataclasses.replace(g, sources=tuple(
                s for s in g.sources if s in admitted.get(k, ()))) for k, g in grants.items()}
        else:
            sb, grants = {}, {}
        rules, routes, hold = [], {}, set()
        for key, g in sorted(grants.items()):
            holder, router_ip = sb.get(key, (None, None))
            if router_ip is None or not g.sources:
                continue
            rules.append(snat_rule(g))
            host = f"{ipaddress.ip_address(router_ip) + 1}/24"
            for src in g.sources:
                routes[f"{src}/32"] = (host, router_ip)
            if holder == self.node_name:
                hold.add(g.ip)
        with self._lock:
            changed = (routes != self._routes) or (rules != self._rules)
            self._routes, self._rules = routes, rules
        self._hold(hold)
        if changed:
            self.on_change()

    def _hold(self, want: set[str]) -> None:
        # a netlink dump every POLL on every node (labelled or not) cost each
        # pacific-node ~6 % of a core at idle: the kernel is read when the wanted
        # set changes, and every RECHECK seconds to repair what someone removed
        if want == self._held and time.monotonic() - self._checked < RECHECK:
            return
        with IPRoute() as ipr:
            idx = ifname = mac = None
            for a in ipr.addr("dump", family=2):
                if a.get_attr("IFA_ADDRESS") == self.underlay_ip:
                    idx = a["index"]
            if idx is None:
                raise ValueError(f"no interface holds the node's address {self.underlay_ip}")
            link = ipr.link("get", index=idx)[0]
            ifname, mac = link.get_attr("IFLA_IFNAME"), link.get_attr("IFLA_ADDRESS")
            label = (ifname + LABEL_SUFFIX)[:15]
            have = {a.get_attr("IFA_ADDRESS") for a in ipr.addr("dump", index=idx, family=2)
                    if a.get_attr("IFA_LABEL") == label}
            for ip in have - want:
                ipr.addr("del", index=idx, address=ip, prefixlen=32)
                log.info("egress SNAT: %s given up (another node holds it)", ip)
            for ip in sorted(want - have):
                ipr.addr("add", index=idx, address=ip, prefixlen=32, label=label)
                for _ in range(2):
                    garp(ifname, mac, ip)
                log.info("egress SNAT: %s held on %s, announced by gratuitous ARP", ip, ifname)
        self._held, self._checked = want, time.monotonic()


def snat_rule(g: egressip.EgressIP) -> tuple[str, list]:
    expr = [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "saddr"}},
                       "right": {"set": list(g.sources)}}},
            {"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                       "right": "@cluster_cidrs"}},
            {"snat": {"family": "ip", "addr": g.ip}}]
    digest = hashlib.sha1(json.dumps(expr, sort_keys=True).encode()).hexdigest()[:10]
    return f"{g.service} snat {g.ip} #{digest}"[-128:], expr
