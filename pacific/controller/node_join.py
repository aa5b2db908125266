"""Nodes -> join address, MAC and a port on the join switch, node annotations.

Per Node (key: its name), level-triggered: the node's join address (IPAM owner
``node:<name>``; an address already recorded on the node is kept), a switch
port ``node:<name>`` on the join switch with that MAC/IP, and the record the
node daemon reads to create its management port ``ovn0`` (contract.NodeRecord:
join address "100.64.0.2/16", MAC, gateway, port).  A second join address
(owner ``node:<name>:service-source``, on the same port) is the source the
node gives its connections into the service CIDR: not on ovn0, so a Service
whose endpoint is outside OVN (a host-network pod, the API server) can be
sent back out to the node and its answers still come back through OVN.  A
deleted node releases both addresses and loses its port.
"""
from __future__ import annotations

import logging

from pacific import names
from pacific.contract import ContractError, NodeRecord
from pacific.controller import informers, model, rebuild
from pacific.controller.feature import Feature
from pacific.ipam import errors as ipam_errors
from pacific.kube import errors as kerr
from pacific.kube import resources as r
from pacific.ovn import ensure

LOG = logging.getLogger(__name__)


def node_ids(node: str, switch: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_NODE, names.EXT_OWNER: node,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, names.EXT_SUBNET: switch}


def port_addresses(alloc, source) -> str:
    """The node port's addresses: "MAC join service-source", and in a
    dual-stack join network their IPv6 twins after them ("MAC v4 src v6 src6":
    rebuild.restore_node_addresses reads them so)."""
    return " ".join((alloc.mac, alloc.ip, source.ip, *(m[0] for m in alloc.more),
                     *(m[0] for m in source.more)))


def _ip6(alloc) -> str:
    """A dual-stack allocation's IPv6 address ("" without one)."""
    return next((m[0] for m in alloc.more if ":" in m[0]), "")


def source_set_builders(source, op) -> list:
    """Add (or remove, by `op`) a node's service source to the set of each
    of its addresses' family (a set holds one family: OVN drops a flow whose
    set mixes them)."""
    return [lambda api, ip=ip: op(api, names.family_set_name(
        names.SERVICE_SOURCES_SET, 6 if ":" in ip else 4), [ip]) for ip in source.ips]


class NodeFeature(Feature):
    name = "node"
    informers = {"nodes": informers.NODES}

    def handlers(self):
        return {"nodes": lambda old, new: [model.meta(new or old).get("name")]}

    def prepare(self) -> None:
        rebuild.restore_node_addresses(self.ctl)

    def resync_keys(self):
        yield from (model.meta(n)["name"] for n in self.ctl.informer("nodes").list())
        for row in self.ctl.nb.rows_owned(ensure.LSP, names.OWNER_KIND_NODE):
            yield row.external_ids.get(names.EXT_OWNER)

    def reconcile(self, name: str) -> None:
        ctl, cfg = self.ctl, self.ctl.cfg
        key = model.node_owner_key(name)
        lsp = names.node_lsp_name(name)
        node = ctl.informer("nodes").get(name)
        if node is None:
            with ctl.ipam_lock:
                released = ctl.ipam.lookup(key)
                ctl.ipam.release(key)
                source = ctl.ipam.release(model.node_source_key(name))
            ctl.writer.run([lambda api: ensure.DeletePort(api, lsp, cfg.join_switch),
                            *(source_set_builders(source, ensure.AddressSetRemoveAddresses)
                              if source else [])],
                           what=f"delete node port {lsp}")
            if released:
                LOG.info("node %s gone: released join address %s", name, released.ip)
            return
        ann = model.annotations(node)
        with ctl.ipam_lock:
            alloc = ctl.ipam.lookup(key)
            if alloc is None:
                try:
                    prev = NodeRecord.of(node)   # kept across a controller restart
                except ContractError as exc:
                    LOG.warning("node %s: %s; allocating a new join address", name, exc)
                    prev = None
                want_ip, want_mac = (",".join(filter(None, (prev.address(4), prev.address(6)))),
                                     prev.mac) if prev else (None, None)
                try:
                    alloc = ctl.ipam.allocate(cfg.join_switch, key, ip=want_ip, mac=want_mac)
                except ipam_errors.IPAMError as exc:
                    if want_ip is None and want_mac is None:
                        raise
                    LOG.warning("node %s: annotated join address %s/%s not reusable (%s); "
                                "allocating a new one", name, want_ip, want_mac, exc)
                    alloc = ctl.ipam.allocate(cfg.join_switch, key)
            source = self._source(name, node)
        ctl.writer.run([lambda api: ensure.EnsurePort(
            api, cfg.join_switch, lsp, [port_addresses(alloc, source)], [],
            node_ids(name, cfg.join_switch)),
            # an exit of the cluster (distributed egress): egress firewalls apply there
            lambda api: ensure.PortGroupAddPorts(api, names.EFW_EXITS_GROUP, [lsp]),
            *source_set_builders(source, ensure.AddressSetAddAddresses)],
            what=f"node port {lsp}")
        six = [(ip, cidr, gw) for ip, cidr, gw in alloc.more if ":" in ip]
        rec = NodeRecord(ip_cidr=f"{alloc.ip}/{cfg.join_prefixlen}", mac=alloc.mac,
                         gateway=cfg.join_gateway, port=lsp, service_source=source.ip,
                         ip6_cidr=f"{six[0][0]}/{six[0][1].split('/')[1]}" if six else "",
                         gateway6=six[0][2] if six else "",
                         service_source6=_ip6(source) if six else "")
        want = rec.annotations()
        if any(ann.get(k) != v for k, v in want.items()):
            try:
                r.patch_merge(ctl.kube, r.NODES, name, {"metadata": {"annotations": want}})
            except kerr.NotFound:
                return
            LOG.info("node %s: join address %s mac %s port %s, service source %s", name,
                     rec.ip_cidr, alloc.mac, lsp, rec.service_source)

    def _source(self, name: str, node: dict):
        """The node's service source address (held: ipam_lock), the recorded one
        kept across a controller restart.  On the wire it has the port's MAC;
        the MAC IPAM pairs with it is only reserved."""
        ctl, key = self.ctl, model.node_source_key(name)
        alloc = ctl.ipam.lookup(key)
        if alloc is not None:
            return alloc
        ann = model.annotations(node)
        want = ",".join(filter(None, (ann.get(names.ANN_NODE_SERVICE_SOURCE),
                                      ann.get(names.ANN_NODE_SERVICE_SOURCE6)))) or None
        try:
            return ctl.ipam.allocate(ctl.cfg.join_switch, key, ip=want)
        except ipam_errors.IPAMError as exc:
            if want is None:
                raise
            LOG.warning("node %s: annotated service source %s not reusable (%s); allocating "
                        "a new one", name, want, exc)
            return ctl.ipam.allocate(ctl.cfg.join_switch, key)
