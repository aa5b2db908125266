"""The node's management port `ovn0`: the host's leg on the join switch.

The controller annotates the Node with its join address, MAC, gateway and
logical switch port (names.ANN_NODE_*).  This reconciler makes `ovn0` an OVS
internal port on br-int bound to that port, gives it the MAC and address, and
routes every Subnet's CIDR in effect (status.cidrBlock, which only the
controller writes once it applied the Subnet: a refused one is never routed)
through the join gateway, except one overlapping a network of the node itself.  It is level
triggered: any event of this Node or of a Subnet wakes one loop (a node feature,
feature.py) that converges the whole state, so a missed or repeated event is
harmless.
"""
from __future__ import annotations

import ipaddress
import logging
import threading

from pyroute2 import IPRoute

from pacific import exposure, names
from pacific.contract import ContractError, NodeRecord, subnet_cidr_in_effect
from pacific.node.feature import SUBNETS, THIS_NODE, NodeFeature
from pacific.ovn.base import Owner

log = logging.getLogger(__name__)
RT_PROTO_STATIC = 4


class MgmtPort(NodeFeature):
    name = "mgmt-port"            # converges when kicked (Node and Subnet events)
    informers = {"node": THIS_NODE, "subnets": SUBNETS}
    wakes_on = ("node", "subnets")

    def __init__(self, ctx):
        super().__init__(ctx)
        self.ovs, self.node_name = ctx.ovs, ctx.node_name
        self.nodes, self.subnets = self.informer("node"), self.informer("subnets")
        self.service_cidr = ctx.args.service_cidr or None
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
        iface_ip = ipaddress.ip_interface(rec.ip_cidr)
        gateway = ipaddress.ip_address(rec.gateway)
        mac, lsp = rec.mac, rec.port
        want_routes = set()
        for sub in self.subnets.list():
            # only what the controller applied (status), never a refused spec
            cidr = subnet_cidr_in_effect(sub)
            if cidr is None:
                continue
            net = ipaddress.ip_network(cidr)
            if net.version == gateway.version and net != iface_ip.network:
                want_routes.add(str(net))
        if self.service_cidr:   # ClusterIPs: OVN's load balancers on the join switch
            want_routes.add(str(ipaddress.ip_network(self.service_cidr)))
        prefsrc = {}
        if rec.service_source:
            # the source of this node's connections to Services (host firewall,
            # chain service-source): their answers come back through the cluster
            # router, as OVN answers no ARP of a port for its own address.  What
            # this node answers to it (a local endpoint of a Service, reached
            # through OVN) leaves from the node's address, which the request was
            # sent to: a UDP server bound to 0.0.0.0 answers from the route's source
            dst = f"{rec.service_source}/32"
            want_routes.add(dst)
            node_ips = sorted(exposure.internal_ips(self.nodes.get(self.node_name)))
            if node_ips:
                prefsrc[dst] = node_ips[0]

        iface = self.ovs.get_interface(self.ifname)
        ids = {names.OVS_IFACE_ID: lsp, names.OVS_ATTACHED_MAC: mac.lower()}
        if iface is None or any(iface.external_ids.get(k) != v for k, v in ids.items()) \
                or iface.mac != [mac.lower()]:
            self.ovs.commit(self.ovs.add_interface_port(
                self.bridge, self.ifname, type="internal", external_ids=ids,
                mtu_request=self.mtu, owner=Owner(names.OWNER_KIND_NODE, self.node_name)))
            self.ovs.commit(self.ovs.db_set("Interface", self.ifname, ("mac", mac.lower())))
            log.info("%s: OVS internal port bound to %s, MAC %s", self.ifname, lsp, mac)
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
            have = {(a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in ipr.addr("dump", index=idx)
                    if a["family"] == (2 if iface_ip.version == 4 else 10)}
            want = (str(iface_ip.ip), iface_ip.network.prefixlen)
            for addr, plen in have - {want}:
                ipr.addr("del", index=idx, address=addr, prefixlen=plen)
            if want not in have:
                ipr.addr("add", index=idx, address=want[0], prefixlen=want[1])
            # never route a host network of this node into ovn0 (a Subnet that
            # covers the node's own address would cut the node off)
            host_nets = [ipaddress.ip_interface(f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}").network
                         for a in ipr.addr("dump") if a["index"] != idx
                         and a["family"] == (2 if iface_ip.version == 4 else 10)
                         and not ipaddress.ip_address(a.get_attr("IFA_ADDRESS")).is_loopback]
            for dst in sorted(want_routes):
                clash = [str(h) for h in host_nets if ipaddress.ip_network(dst).overlaps(h)]
                if clash:
                    want_routes.discard(dst)
                    log.warning("%s: no route for subnet %s: it overlaps this node's network %s",
                                self.ifname, dst, ", ".join(clash))
            current = {}
            for r in ipr.route("dump"):
                if r.get_attr("RTA_OIF") == idx and r["proto"] == RT_PROTO_STATIC \
                        and r["dst_len"] > 0:
                    current[f"{r.get_attr('RTA_DST')}/{r['dst_len']}"] = (
                        r.get_attr("RTA_GATEWAY"), r.get_attr("RTA_PREFSRC"))
            for dst in sorted(want_routes):
                if current.get(dst) != (str(gateway), prefsrc.get(dst)):
                    extra = {"prefsrc": prefsrc[dst]} if dst in prefsrc else {}
                    ipr.route("replace", dst=dst, gateway=str(gateway), oif=idx,
                              proto=RT_PROTO_STATIC, **extra)
                    log.info("%s: route %s via %s%s", self.ifname, dst, gateway,
                             f" src {prefsrc[dst]}" if dst in prefsrc else "")
            for dst in set(current) - want_routes:
                ipr.route("del", dst=dst, oif=idx, proto=RT_PROTO_STATIC)
                log.info("%s: removed route %s (no such subnet any more)", self.ifname, dst)
        return True
