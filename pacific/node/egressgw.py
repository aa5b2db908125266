"""The node's side of centralized egress gateways (controller/gateway.py).

Every node has a bridge `br-egress` (ovn-bridge-mappings
`pacific-egress:br-egress`) with an internal port `pegress0` of one fixed MAC,
the same on every node: when a node is the active gateway of a centralized
Subnet, OVN delivers that Subnet's outbound packets there, from the Subnet's
transit switch's localnet port.  For each centralized Subnet whose gateway
nodes (the controller's record, `status.egressGateway.nodes`) name this node:

* `pegress0` holds the transit host address (`.2` of the Subnet's transit /24;
  a Subnet with IPv6 also `::2` of its transit /64), and answers ARP for its
  own addresses only, `br-egress` for none (the router binds the host's MAC
  statically anyway: decision 0052);
* route table EGRESS_ROUTE_TABLE sends the Subnet's CIDR back via the transit
  router address (`.1`, `::1`) on `pegress0`.

Egress SNAT to Services' external IPs and EgressIPs (node/egresssnat.py)
adds its own: the transit host address of each gateway and a /32 route back
for each of its endpoints; for an IPv6 EgressIP, the IPv6 transit host
address (EGRESS_TRANSIT_CIDR6, without duplicate address detection) and a
/128 route back for each member, in the same table, with an IPv6 rule too.

The host firewall marks connections that came in on `pegress0`, and an `ip
rule` sends their replies (marked EGRESS_FWMARK) to that table: the answers
re-enter OVN where the requests left it, so OVN's conntrack sees both
directions (entering through `ovn0` instead, a reply would meet a zone that
never saw the request: invalid, dropped).  The host routes the packets out and
masquerades them for natOutgoing Subnets (the firewall's nat_cidrs).

Level triggered: a Subnet event or the periodic repair (a restarted
ovs-vswitchd re-creates `pegress0` down, without its addresses) converges all.
"""
from __future__ import annotations

import ipaddress
import logging

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from pacific import contract, names
from pacific.node import sysctl
from pacific.node.feature import SUBNETS, NodeFeature

log = logging.getLogger(__name__)
REPAIR = 5.0
RT_PROTO_STATIC = 4
IFA_F_NODAD = 0x02
TRANSIT_CIDRS = (names.EGRESS_TRANSIT_CIDR, names.EGRESS_TRANSIT_CIDR6)
MAPPINGS = "ovn-bridge-mappings"


def wanted(subnets: list[dict], node: str) -> dict[str, tuple[str, str]]:
    """Subnet CIDR -> (host address/prefix, transit router address) for every
    centralized Subnet this node is a gateway of (the controller's record):
    its IPv4 CIDR by `transit`, its IPv6 one by `transit6`."""
    out = {}
    for s in subnets:
        rec = (s.get("status") or {}).get(names.STATUS_EGRESS) or {}
        if node not in (rec.get("nodes") or []):
            continue
        for version, field, base in ((4, "transit", names.EGRESS_TRANSIT_CIDR),
                                     (6, "transit6", names.EGRESS_TRANSIT_CIDR6)):
            cidr = contract.subnet_cidr_in_effect(s, version)
            try:
                router = ipaddress.ip_interface(rec.get(field))
            except (TypeError, ValueError):
                continue
            if not cidr or router.version != version or router.ip not in ipaddress.ip_network(base):
                continue          # not an address the controller hands out: ignored
            host = ipaddress.ip_interface(f"{router.ip + 1}/{router.network.prefixlen}")
            out[cidr] = (str(host), str(router.ip))
    return out


def merged_mappings(current: str | None) -> str:
    pairs = [p for p in (current or "").split(",") if p and not p.startswith(
        names.EGRESS_PHYSNET + ":")]
    return ",".join(pairs + [f"{names.EGRESS_PHYSNET}:{names.EGRESS_BRIDGE}"])


class EgressGateway(NodeFeature):
    name, repair = "egress-gateway", REPAIR
    expected = (RuntimeError, OSError, NetlinkError, ValueError)
    informers = {"subnets": SUBNETS}
    wakes_on = ("subnets",)
    # routes() -> {cidr: (host address, via)} of egress SNAT's endpoints (it
    # kicks this feature when they change); None where egress SNAT is off
    uses = {"snat": "egress-snat"}

    def __init__(self, ctx):
        super().__init__(ctx)
        self.ovs, self.subnets, self.node_name = ctx.ovs, self.informer("subnets"), ctx.node_name
        self.datapath_type = ctx.args.datapath_type or "system"
        self._last: dict | None = None

    # -- OVS: the bridge, its port, the mapping ---------------------------------------
    def _ensure_bridge(self) -> None:
        ids = self.ovs.get_ovs_external_ids()
        if ids.get(MAPPINGS) != merged_mappings(ids.get(MAPPINGS)):
            self.ovs.commit(self.ovs.set_ovs_external_ids(
                {MAPPINGS: merged_mappings(ids.get(MAPPINGS))}))
        iface = self.ovs.get_interface(names.EGRESS_PORT)
        if iface is None or iface.mac != [names.EGRESS_PORT_MAC]:
            with self.ovs.transaction() as txn:
                txn.add(self.ovs.add_br(names.EGRESS_BRIDGE, may_exist=True,
                                        datapath_type=self.datapath_type))
                txn.add(self.ovs.add_interface_port(names.EGRESS_BRIDGE, names.EGRESS_PORT,
                                                    type="internal"))
            self.ovs.commit(self.ovs.db_set("Interface", names.EGRESS_PORT,
                                            ("mac", names.EGRESS_PORT_MAC)))
            log.info("%s on %s (MAC %s), mapped as %s", names.EGRESS_PORT, names.EGRESS_BRIDGE,
                     names.EGRESS_PORT_MAC, names.EGRESS_PHYSNET)

    # -- the host: addresses, the return route, the rule ---------------------------
    def converge(self) -> dict:
        want = wanted(self.subnets.list(), self.node_name)
        if self.snat is not None:
            want.update(self.snat.routes())
        self._ensure_bridge()
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=names.EGRESS_PORT)
            if not found:
                raise RuntimeError(f"{names.EGRESS_PORT} not created by ovs-vswitchd yet")
            idx = found[0]
            for ifname in (names.EGRESS_BRIDGE, names.EGRESS_PORT):
                for i in ipr.link_lookup(ifname=ifname):
                    if not ipr.link("get", index=i)[0]["flags"] & 1:
                        ipr.link("set", index=i, state="up")
                # ARP on the transit segment for an address of that interface
                # only, from an address of it: the bridge's own port answers
                # nothing, `pegress0` only for its transit host addresses
                # (not for the node's others, decision 0052)
                sysctl.ipv4_conf(ifname, arp_ignore="1", arp_announce="2")
            bases = [ipaddress.ip_network(c) for c in TRANSIT_CIDRS]
            addrs = {h for h, _ in want.values()}
            families = [2] + ([10] if any(":" in a for a in addrs) else [])   # wanted
            if 10 in families:   # ovs-vswitchd creates it with the netns' default: maybe off
                sysctl.ipv6_conf(names.EGRESS_PORT, disable_ipv6="0", accept_ra="0")
            have = {f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}"
                    for fam in (2, 10) for a in ipr.addr("dump", index=idx, family=fam)}
            for a in have - addrs:
                if any(ipaddress.ip_interface(a).ip in b for b in bases):
                    ipr.addr("del", index=idx, address=a.split("/")[0],
                             prefixlen=int(a.split("/")[1]))
            for a in addrs - have:
                ipr.addr("add", index=idx, address=a.split("/")[0], prefixlen=int(a.split("/")[1]),
                         **({"flags": IFA_F_NODAD} if ":" in a else {}))
            routes = {}
            for fam in (2, 10):
                for rt in ipr.route("dump", table=names.EGRESS_ROUTE_TABLE, family=fam):
                    if rt.get_attr("RTA_TABLE") == names.EGRESS_ROUTE_TABLE and rt["dst_len"] > 0:
                        routes[f"{rt.get_attr('RTA_DST')}/{rt['dst_len']}"] = \
                            rt.get_attr("RTA_GATEWAY")
            for cidr, (_, via) in want.items():
                if routes.get(cidr) != via:
                    ipr.route("replace", dst=cidr, gateway=via, oif=idx,
                              table=names.EGRESS_ROUTE_TABLE, proto=RT_PROTO_STATIC)
            for cidr in set(routes) - set(want):
                ipr.route("del", dst=cidr, table=names.EGRESS_ROUTE_TABLE)
            for fam in families:
                if not [r for r in ipr.get_rules(family=fam)
                        if r.get_attr("FRA_FWMARK") == names.EGRESS_FWMARK]:
                    ipr.rule("add", family=fam, fwmark=names.EGRESS_FWMARK,
                             table=names.EGRESS_ROUTE_TABLE, priority=1000)
        if want != self._last:
            log.info("egress gateway of %s", ", ".join(
                f"{c} (transit {h}, back via {v})" for c, (h, v) in sorted(want.items())) or
                "no centralized Subnet")
            self._last = want
        return want
