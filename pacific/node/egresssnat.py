"""Egress SNAT to a Service's external IP, on a node labelled
`pacific.io/egress-gateway: "true"` (controller/egress_snat.py writes the
gateway rows; pacific.servicesnat says which pods leave as which address).

The node keeps a replica of the part of SB it needs (pacific.ovn.sb, one
connection, only while it is labelled): which chassis holds each Service's
gateway port (`cr-lrp:egw:svc:<ns>/<name>`), the transit network of that port
and the members the controller admitted.  A change there, or of the Services,
EndpointSlices or the node, wakes the loop at once.  For the Services whose
port this node holds, it:

* holds the external IP on its underlay interface (the one with the node's
  address), labelled `<ifname>:pe`, and announces it with gratuitous ARP when
  it takes it over; it gives the address up when another node holds the port.
  An IPv6 EgressIP address is held as a /128 marked IFA_PROTO
  names.EGRESS_ADDR_PROTO (IPv6 addresses have no labels), without duplicate
  address detection, and announced by unsolicited neighbour advertisements;
* provides the host firewall's `snat` chain: the endpoints' traffic to the
  outside leaves with the external IP;
* provides pacific.node.egressgw with the transit host address and the
  return routes (each endpoint /32, or IPv6 /128, back via the transit router
  address of its family), so replies re-enter OVN where the requests left it.

What comes to the external IP from outside arrives here too (this node
answers ARP for it) and reaches the Service through the firewall's Service
frontends: one node carries both directions.

Services of a namespace sharing an address have one grant, the oldest one's
(pacific.servicesnat), and so one port and one members' set; a Service the
controller refused a transit network (its namespace's bound, the reserve:
controller/egress_snat.py) has no port in SB, so no node holds its address or
SNATs its endpoints, whose traffic the controller's policy drops.
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

from pacific import egressip, names, servicesnat
from pacific.node import frontends
from pacific.node.bfd import SETTLE, BfdSessions
from pacific.node.feature import NodeFeature
from pacific.ovn.errors import OvnError
from pacific.ovn.sb import SbView, SouthboundWatch

log = logging.getLogger(__name__)
RECHECK = 5.0       # s between passes (and re-reads of the held addresses) when nothing changed
LABEL_SUFFIX = ":pe"
IFA_F_NODAD = 0x02
GARP_AGAIN = (0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0)   # s after a takeover: announce again


def gateways(view: SbView, keys=()) -> tuple[dict[str, tuple[str | None, str, str | None]],
                                              dict[str, set[str]]]:
    """(Service key -> (the chassis holding its gateway port or None, the
    transit router address, its IPv6 one or None); Service key of `keys` ->
    the members the controller admitted: its address set, which names only
    pods of the Service's own namespace), from the SB replica."""
    prefix = names.router_port_name(names.egress_switch_name(names.SNAT_GATEWAY_PREFIX))
    holders = view.held_under("cr-" + prefix)
    members = {key: set(view.address_sets.get(servicesnat.set_name(key), ())) for key in keys}
    six = view.transits_under(prefix, 6)
    out = {key: (holders.get(key), ip, six.get(key))
           for key, ip in view.transits_under(prefix).items()}
    # EgressIPs', under the key egress_ip_grants gives them
    prefix = names.router_port_name(names.egress_switch_name(""))
    holders, six = view.held_under("cr-" + prefix), view.transits_under(prefix, 6)
    out.update({key: (holders.get(key), ip, six.get(key))
                for key, ip in view.transits_under(prefix).items()
                if key.startswith(names.EIP_GATEWAY_PREFIX)})
    return out, members


def egress_ip_grants(view: SbView) -> dict[str, servicesnat.SnatGrant]:
    """EgressIP gateways (controller/egress_ip.py) from the SB replica alone:
    gateway key "<name>/<ip>" -> the address (from the port's name) and the
    members (its address set, which the controller writes from the
    administrator's selectors).  Keyed "eip:<name>/<ip>"."""
    prefix = names.router_port_name(names.egress_switch_name(names.EIP_GATEWAY_PREFIX))
    out = {}
    for key in view.transits_under(prefix):
        ip = egressip.ip_of_key(key)
        if ip is not None:
            out[egressip.gateway_name(key)] = servicesnat.SnatGrant(
                egressip.gateway_name(key), ip,
                tuple(sorted(view.address_sets.get(egressip.address_set_name(key), ()))))
    return out


def garp(ifname: str, mac: str, ip: str) -> None:
    """Announce that `mac` on `ifname` now has `ip`: one gratuitous ARP request
    (IPv4) or one unsolicited neighbour advertisement (IPv6, RFC 4861 7.2.6:
    to all nodes, override flag set, the target's link-layer address)."""
    hw = bytes.fromhex(mac.replace(":", ""))
    if ":" in ip:
        idx = socket.if_nametoindex(ifname)
        na = (struct.pack("!BBHI", 136, 0, 0, 0x20000000) + socket.inet_pton(socket.AF_INET6, ip)
              + bytes((2, 1)) + hw)       # the kernel computes an ICMPv6 socket's checksum
        with socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6) as s:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, idx)
            s.bind((ip, 0, 0, 0))
            s.sendto(na, ("ff02::1", 0, 0, idx))
        return
    addr = socket.inet_aton(ip)
    frame = (b"\xff" * 6 + hw + struct.pack("!H", 0x0806)
             + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + hw + addr + b"\x00" * 6 + addr)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((ifname, 0))
        s.send(frame)


class EgressSnat(NodeFeature):
    name, repair = "egress-snat", RECHECK
    expected = (OvnError, OSError, NetlinkError, ValueError)
    # this Node (its label) and the Service frontends' caches
    informers = dict(frontends.INFORMERS)
    wakes_on = ("node", "subnets", "services", "endpointslices", "nodes")
    # the readers of rules() (the firewall's snat chain) and routes() (the
    # gateway's return routes), kicked when those change; without the firewall
    # there is no SNAT: an error at start, not a feature to do without
    needs = {"firewall": "host-firewall"}
    uses = {"gateway": "egress-gateway"}

    @classmethod
    def disabled(cls, args) -> str | None:
        if not args.host_firewall:
            return "--no-host-firewall (its SNAT rules are the host firewall's)"
        if not (args.ovn_remote and args.encap_ip):
            return "no --ovn-remote/--encap-ip"     # it reads SB; the underlay address
        return None

    def __init__(self, ctx):
        super().__init__(ctx)
        a = ctx.args
        if a.ovn_remote.startswith("ssl:") and a.ovn_ssl_key:
            from pacific.ovn.base import configure_ssl
            configure_ssl(a.ovn_ssl_key, a.ovn_ssl_cert, a.ovn_ssl_ca)
        self.sb_remote, self.node_name = a.ovn_remote, ctx.node_name
        self.nodes = self.informer("node")
        self.frontends, self.underlay_ip = frontends.view(self), a.encap_ip
        self._sb: SouthboundWatch | None = None     # while the node is labelled
        self._lock = threading.Lock()
        self._routes: dict[str, tuple[str, str]] = {}     # for egressgw: cidr -> (host, via)
        self._rules: list[tuple[str, list]] | None = None  # the snat chain, None: not known
        self._held: set[str] = set()
        self._checked = float("-inf")     # monotonic time _held was last read from the kernel
        self._networks: list | None = None     # the underlay interface's networks, once read
        self._off_underlay: set[str] = set()      # EgressIP addresses said so once
        self._stopping = threading.Event()        # ends the repeated announcements
        # this chassis' BFD sessions: OVN's claim race on a node coming back (bfd.py)
        self.bfd = BfdSessions(self.kick)
        if ctx.ovs is not None:
            self.bfd.watch(ctx.ovs)
        self._said: dict[str, str] = {}           # address -> the last deferral logged

    def stop(self) -> None:
        self._stopping.set()
        super().stop()
        self._watch(False)
        if self.ctx.ovs is not None:
            self.bfd.unwatch(self.ctx.ovs)

    def _watch(self, on: bool) -> SbView | None:
        """Keep the SB replica while the node is labelled; what it says now."""
        if on and self._sb is None:
            self._sb = SouthboundWatch(self.sb_remote,
                                       address_sets=names.SNAT_ADDRESS_SET_PREFIX)
            self._sb.subscribe(self.kick)
            self._sb.start()
        elif not on and self._sb is not None:
            self._sb.stop()
            self._sb = None
        return self._sb.view() if self._sb is not None else None

    # -- what the firewall and egressgw read ------------------------------------
    def rules(self) -> list[tuple[str, list]] | None:
        with self._lock:
            return None if self._rules is None else list(self._rules)

    def routes(self) -> dict[str, tuple[str, str]]:
        with self._lock:
            return dict(self._routes)

    # -- the loop -----------------------------------------------------------------
    def labelled(self) -> bool:
        """May this node hold a Service's external IP or an EgressIP address?"""
        node = self.nodes.get(self.node_name) or {}
        labels = (node.get("metadata") or {}).get("labels") or {}
        return labels.get(names.LABEL_EGRESS_GATEWAY) == "true" or \
            names.LABEL_EGRESS_ASSIGNABLE in labels

    def converge(self) -> None:
        if not self.frontends.synced():
            return
        labelled = self.labelled()
        view = self._watch(labelled)
        if labelled and view is None:
            return          # SB not read yet: keep what is held (the connection kicks)
        if labelled:
            fe = self.frontends
            grants, _ = servicesnat.egress_ips(fe.services.list(), fe.slices.list(),
                                               fe.cluster_cidrs(), fe.taken_ips(), fe.allowed,
                                               fe.per_namespace)
            sb, admitted = gateways(view, sorted(grants))
            # only the members the controller admitted (its own namespace's
            # pods): a hand-written EndpointSlice naming another tenant's pod
            # must not SNAT or re-route that pod's traffic here
            grants = {k: dataclasses.replace(g, sources=tuple(
                s for s in g.sources if s in admitted.get(k, ()))) for k, g in grants.items()}
            # EgressIPs first: their rules and return routes win for a pod that is
            # also a Service's member, as their router policy does (PRIO_POLICY_EGRESS_IP)
            grants = {**egress_ip_grants(view), **grants}
        else:
            sb, grants = {}, {}
        rules, routes, hold, keep = [], {}, set(), set()
        for key, g in grants.items():
            holder, router_ip, router_ip6 = sb.get(servicesnat.gateway_key(key), (None, None, None))
            eip = key.startswith(names.EIP_GATEWAY_PREFIX)
            if ":" in g.ip:       # an IPv6 EgressIP: its members and return routes are IPv6
                router_ip, plen, host_plen = router_ip6, 128, 64
            else:
                plen, host_plen = 32, 24
            if router_ip is None or not (g.sources or eip):
                continue        # an EgressIP address is held even while it has no pods
            if g.sources:
                rules.append(snat_rule(g))
            host = f"{ipaddress.ip_address(router_ip) + 1}/{host_plen}"
            for src in g.sources:
                routes.setdefault(f"{src}/{plen}", (host, router_ip))
            claim = self._claim(g.ip, holder)
            if claim and eip and not self._on_underlay(g.ip):
                continue          # not on this node's network: never held here
            if claim == "hold":
                hold.add(g.ip)
            elif claim == "keep":
                keep.add(g.ip)
        with self._lock:
            changed = (routes != self._routes) or (rules != self._rules)
            self._routes, self._rules = routes, rules
        self._hold(hold, keep)
        if changed:
            self.firewall.kick()
            if self.gateway is not None:
                self.gateway.kick()

    def _claim(self, ip: str, holder: str | None) -> str:
        """"hold" (take or keep the address), "keep" (keep it if held, do not
        take it) or "" (give it up), from Southbound's holder and this
        chassis' BFD sessions (bfd.py: OVN's claim race)."""
        if holder == self.node_name:
            if ip in self._held or self.bfd.settled():
                return self._say(ip, "hold", "")
            # just back (link, ovs-vswitchd): its ovn-controller may claim every
            # group before it sees the chassis that took over; take nothing yet
            self.again_in(self.bfd.settles_in() or RECHECK)
            return self._say(ip, "keep", "claimed here while this node's BFD sessions are "
                             "not yet up for %.0f s: held once they are" % SETTLE)
        if holder is None:
            # a port between two chassis (released, not yet claimed) has no holder:
            # what this node holds it keeps until another node holds it, instead
            # of giving it up and announcing it again tens of milliseconds later
            return self._say(ip, "hold" if ip in self._held else "", "")
        if ip in self._held and self.bfd.settled() and not self.bfd.peer_settled(holder):
            self.again_in(SETTLE)
            return self._say(ip, "keep", f"claimed by {holder}, whose BFD session with this "
                             "node has just come up (a node coming back): kept")
        return self._say(ip, "", "")

    def _say(self, ip: str, claim: str, why: str) -> str:
        if why and self._said.get(ip) != why:
            log.info("egress SNAT: %s %s", ip, why)
        self._said[ip] = why
        return claim

    def _announce_again(self, ifname: str, mac: str, ip: str) -> None:
        """Gratuitous ARPs again GARP_AGAIN s after the takeover, while the
        address is still held here: a switch or neighbour that missed or
        ignored the first ones (ovn-kubernetes #6553: a 4-hour outage) learns
        the new holder anyway."""
        def run():
            start = time.monotonic()
            for at in GARP_AGAIN:
                self._stopping.wait(max(0.0, start + at - time.monotonic()))
                if self._stopping.is_set() or ip not in self._held:
                    return
                try:
                    garp(ifname, mac, ip)
                except OSError as e:
                    log.warning("egress SNAT: gratuitous ARP for %s on %s: %s", ip, ifname, e)
                    return
        threading.Thread(target=run, name=f"garp-{ip}", daemon=True).start()

    def _on_underlay(self, ip: str) -> bool:
        """An EgressIP address must be on this node's underlay network: held
        anywhere else, nobody would route it here (the controller checks
        --egress-ip-cidrs; this is the node's own word)."""
        if self._networks is None:
            with IPRoute() as ipr:
                idx = self._underlay_index(ipr)
                # its global addresses of both families, not the ones held here
                self._networks = [ipaddress.ip_interface(
                    f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}").network
                    for a in ipr.addr("dump", index=idx)
                    if a["scope"] == 0 and not _held_here(a, idx, ipr)]
        addr = ipaddress.ip_address(ip)
        if any(addr.version == n.version and addr in n for n in self._networks):
            return True
        if ip not in self._off_underlay:
            self._off_underlay.add(ip)
            log.error("EgressIP address %s is outside this node's underlay networks %s: not "
                      "held (fix --egress-ip-cidrs or the node's %s label)", ip,
                      ", ".join(map(str, self._networks)) or "(none)",
                      names.LABEL_EGRESS_ASSIGNABLE)
        return False

    def _underlay_index(self, ipr) -> int:
        for a in ipr.addr("dump", family=2):
            if a.get_attr("IFA_ADDRESS") == self.underlay_ip:
                return a["index"]
        raise ValueError(f"no interface holds the node's address {self.underlay_ip}")

    def _hold(self, want: set[str], keep: set[str] = frozenset()) -> None:
        """Hold `want` on the underlay interface, and of `keep` what is held."""
        # a netlink dump every pass on every node (labelled or not) cost each
        # pacific-node ~6 % of a core at idle: the kernel is read when the wanted
        # set changes, and every RECHECK seconds to repair what someone removed
        if not keep and want == self._held and time.monotonic() - self._checked < RECHECK:
            return
        with IPRoute() as ipr:
            idx = self._underlay_index(ipr)
            link = ipr.link("get", index=idx)[0]
            ifname, mac = link.get_attr("IFLA_IFNAME"), link.get_attr("IFLA_ADDRESS")
            have = {a.get_attr("IFA_ADDRESS") for a in ipr.addr("dump", index=idx)
                    if _held_here(a, idx, ipr, ifname)}
            for ip in have - want - keep:
                ipr.addr("del", index=idx, address=ip, prefixlen=128 if ":" in ip else 32)
                log.info("egress SNAT: %s given up (another node holds it)", ip)
            for ip in sorted(want - have):
                if ":" in ip:       # usable at once: no duplicate address detection
                    ipr.addr("add", index=idx, address=ip, prefixlen=128, flags=IFA_F_NODAD,
                             proto=names.EGRESS_ADDR_PROTO)
                else:
                    ipr.addr("add", index=idx, address=ip, prefixlen=32,
                             label=(ifname + LABEL_SUFFIX)[:15])
                for _ in range(2):
                    garp(ifname, mac, ip)
                self._announce_again(ifname, mac, ip)
                log.info("egress SNAT: %s held on %s, announced by %s", ip, ifname,
                         "unsolicited neighbour advertisement" if ":" in ip else "gratuitous ARP")
        self._held, self._checked = want | (keep & have), time.monotonic()


def _held_here(a, idx: int, ipr, ifname: str | None = None) -> bool:
    """Is address message `a` one this feature holds: IPv4 labelled
    `<ifname>:pe`, IPv6 marked names.EGRESS_ADDR_PROTO."""
    if a["family"] == socket.AF_INET6:
        return a.get_attr("IFA_PROTO") == names.EGRESS_ADDR_PROTO
    if ifname is None:
        ifname = ipr.link("get", index=idx)[0].get_attr("IFLA_IFNAME")
    return a.get_attr("IFA_LABEL") == (ifname + LABEL_SUFFIX)[:15]


def snat_rule(g: servicesnat.SnatGrant) -> tuple[str, list]:
    fam, cluster = ("ip6", "@cluster_cidrs6") if ":" in g.ip else ("ip", "@cluster_cidrs")
    expr = [{"match": {"op": "==", "left": {"payload": {"protocol": fam, "field": "saddr"}},
                       "right": {"set": list(g.sources)}}},
            {"match": {"op": "!=", "left": {"payload": {"protocol": fam, "field": "daddr"}},
                       "right": cluster}},
            {"snat": {"family": fam, "addr": g.ip}}]
    digest = hashlib.sha1(json.dumps(expr, sort_keys=True).encode()).hexdigest()[:10]
    return f"{g.service} snat {g.ip} #{digest}"[-128:], expr
