"""The node's management port `ovn0`: the host's leg on the join switch.

The controller annotates the Node with its join address, MAC, gateway and
logical switch port (names.ANN_NODE_*).  This reconciler makes `ovn0` an OVS
internal port on br-int bound to that port, gives it the MAC and address, and
routes every Subnet's CIDR in effect (status.cidrBlock, which only the
controller writes once it applied the Subnet: a refused one is never routed)
through the join gateway, except one overlapping a network of the node itself.
A dual-stack join network gives ovn0 an IPv6 address too: then the Subnets'
IPv6 CIDRs and the IPv6 service CIDR are routed through the IPv6 gateway.  It is level
triggered: any event of this Node or of a Subnet wakes one loop (a node feature,
feature.py) that converges the whole state, so a missed or repeated event is
harmless.
"""
from __future__ import annotations

import ipaddress
import logging
import socket
import threading

from pyroute2 import IPRoute

from pacific import exposure, names
from pacific.contract import ContractError, NodeRecord, subnet_cidrs_in_effect
from pacific.node import sysctl
from pacific.node.feature import SUBNETS, THIS_NODE, NodeFeature, service_cidrs
from pacific.ovn.base import Owner

log = logging.getLogger(__name__)
RT_PROTO_STATIC = 4
FAMILY = {4: socket.AF_INET, 6: socket.AF_INET6}
IFA_F_NODAD = 0x02


class MgmtPort(NodeFeature):
    name = "mgmt-port"            # converges when kicked (Node and Subnet events)
    informers = {"node": THIS_NODE, "subnets": SUBNETS}
    wakes_on = ("node", "subnets")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.ovs, self.node_name = ctx.ovs, ctx.node_name
        self.nodes, self.subnets = self.informer("node"), self.informer("subnets")
        self.service_cidrs = service_cidrs(ctx.args)
        self.mtu, self.bridge, self.ifname = ctx.mtu, names.INTEGRATION_BRIDGE, names.MGMT_PORT
        self.converged = threading.Event()   # read by the metrics (pacific_node_mgmt_port_ready)

    def converge(self) -> None:
        if self.reconcile():
            self.converged.set()
        else:
            self.converged.clear()

    def failed(self, error: Exception) -> None:
        self.converged.clear()

    def reconcile(self) -> bool:
        """Converge ovn0; False if the node is not annotated yet."""
        try:
            rec = NodeRecord.of(self.nodes.get(self.node_name))
        except ContractError as e:
            raise ValueError(f"node {self.node_name}: {e}") from None
        if rec is None:
            log.debug("%s: node %s not annotated yet", self.ifname, self.node_name)
            return False
        # ovn0's address and the cluster router's per family (IPv6 with a
        # dual-stack join network)
        fams = {i.version: (i, gw) for i, gw in ((ipaddress.ip_interface(c), g)
                                                  for c, g in rec.interfaces)}
        mac, lsp = rec.mac, rec.port
        want_routes: dict[str, str] = {}        # destination -> gateway
        for sub in self.subnets.list():
            # only what the controller applied (status), never a refused spec
            for cidr in subnet_cidrs_in_effect(sub):
                net = ipaddress.ip_network(cidr)
                if net.version in fams and net != fams[net.version][0].network:
                    want_routes[str(net)] = fams[net.version][1]
        for cidr in self.service_cidrs:   # ClusterIPs: OVN's load balancers on the join switch
            net = ipaddress.ip_network(cidr)
            if net.version in fams:
                want_routes[str(net)] = fams[net.version][1]
        prefsrc = {}
        if rec.source(4) or rec.source(6):
            # the source of this node's connections to Services (host firewall,
            # chain service-source): their answers come back through the cluster
            # router, as OVN answers no ARP of a port for its own address.  What
            # this node answers to it (a local endpoint of a Service, reached
            # through OVN) leaves from the node's address, which the request was
            # sent to: a UDP server bound to 0.0.0.0 answers from the route's
            # source.  The same for its IPv6 twin (a dual-stack join network)
            node_ips = sorted(exposure.internal_ips(self.nodes.get(self.node_name)))
            for source, plen, gateway in ((rec.source(4), 32, rec.gateway_of(4)),
                                          (rec.source(6), 128, rec.gateway_of(6))):
                if not source or ipaddress.ip_address(source).version not in fams:
                    continue
                dst = f"{source}/{plen}"
                want_routes[dst] = gateway
                own = [a for a in node_ips if ipaddress.ip_address(a).version
                       == ipaddress.ip_address(source).version]
                if own:
                    prefsrc[dst] = own[0]

        iface = self.ovs.get_interface(self.ifname)
        ids = {names.OVS_IFACE_ID: lsp, names.OVS_ATTACHED_MAC: mac.lower()}
        if iface is None or any(iface.external_ids.get(k) != v for k, v in ids.items()) \
                or iface.mac != [mac.lower()]:
            self.ovs.commit(self.ovs.add_interface_port(
                self.bridge, self.ifname, type="internal", external_ids=ids,
                mtu_request=self.mtu, owner=Owner(names.OWNER_KIND_NODE, self.node_name)))
            self.ovs.commit(self.ovs.db_set("Interface", self.ifname, ("mac", mac.lower())))
            log.info("%s: OVS internal port bound to %s, MAC %s", self.ifname, lsp, mac)
        if 6 in fams:
            self._enable_ipv6()
        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=self.ifname)
            if not found:
                raise RuntimeError(f"{self.ifname} not created by ovs-vswitchd yet")
            idx = found[0]
            link = ipr.link("get", index=idx)[0]
            if (link.get_attr("IFLA_ADDRESS") or "").lower() != mac.lower():
                ipr.link("set", index=idx, address=mac.lower())
            if not link["flags"] & 1:
                ipr.link("set", index=idx, state="up")
            addrs = list(ipr.addr("dump"))
            for version in FAMILY:       # a family no longer on the join network: none
                self._address(ipr, idx, addrs, version, fams[version][0] if version in fams
                              else None)
            # never route a host network of this node into ovn0 (a Subnet that
            # covers the node's own address would cut the node off)
            host_nets = [ipaddress.ip_interface(f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}").network
                         for a in addrs if a["index"] != idx and a["family"] in FAMILY.values()
                         and not ipaddress.ip_address(a.get_attr("IFA_ADDRESS")).is_loopback
                         and not ipaddress.ip_address(a.get_attr("IFA_ADDRESS")).is_link_local]
            for dst in sorted(want_routes):
                clash = [str(h) for h in host_nets if ipaddress.ip_network(dst).overlaps(h)
                         and h.version == ipaddress.ip_network(dst).version]
                if clash:
                    del want_routes[dst]
                    log.warning("%s: no route for subnet %s: it overlaps this node's network %s",
                                self.ifname, dst, ", ".join(clash))
            current = {}
            for r in ipr.route("dump"):
                if r.get_attr("RTA_OIF") == idx and r["proto"] == RT_PROTO_STATIC \
                        and r["dst_len"] > 0:
                    current[f"{r.get_attr('RTA_DST')}/{r['dst_len']}"] = (
                        r.get_attr("RTA_GATEWAY"), r.get_attr("RTA_PREFSRC"))
            for dst, gateway in sorted(want_routes.items()):
                if current.get(dst) != (gateway, prefsrc.get(dst)):
                    extra = {"prefsrc": prefsrc[dst]} if dst in prefsrc else {}
                    ipr.route("replace", dst=dst, gateway=gateway, oif=idx,
                              proto=RT_PROTO_STATIC,
                              family=FAMILY[ipaddress.ip_network(dst).version], **extra)
                    log.info("%s: route %s via %s%s", self.ifname, dst, gateway,
                             f" src {prefsrc[dst]}" if dst in prefsrc else "")
            for dst in set(current) - set(want_routes):
                ipr.route("del", dst=dst, oif=idx, proto=RT_PROTO_STATIC,
                          family=FAMILY[ipaddress.ip_network(dst).version])
                log.info("%s: removed route %s (no such subnet any more)", self.ifname, dst)
        return True

    def _address(self, ipr, idx: int, addrs: list, version: int, iface_ip) -> None:
        """ovn0 holds exactly `iface_ip` of IP `version`, or none (IPv6:
        without duplicate address detection, as the pods: OVN's port security
        makes a duplicate impossible; its link-local address stays)."""
        family = FAMILY[version]
        have = {(a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in addrs
                if a["index"] == idx and a["family"] == family
                and not ipaddress.ip_address(a.get_attr("IFA_ADDRESS")).is_link_local}
        want = (str(iface_ip.ip), iface_ip.network.prefixlen) if iface_ip else None
        for addr, plen in have - {want}:
            ipr.addr("del", index=idx, address=addr, prefixlen=plen, family=family)
        if want and want not in have:
            extra = {"flags": IFA_F_NODAD} if version == 6 else {}
            ipr.addr("add", index=idx, address=want[0], prefixlen=want[1], family=family, **extra)
            log.info("%s: address %s/%d", self.ifname, *want)

    def _enable_ipv6(self) -> None:
        """IPv6 on ovn0 (a node may run with IPv6 off by default), without
        router advertisements (its routes are Pacific's) or DAD delay."""
        sysctl.ipv6_conf(self.ifname, disable_ipv6="0", accept_ra="0", accept_dad="0")
