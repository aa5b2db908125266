"""Nodes -> join address, MAC and a port on the join switch, node annotations.

Per Node (key: its name), level-triggered: the node's join address (IPAM owner
``node:<name>``; an address already annotated on the node is kept), a switch
port ``node-<name>`` on the join switch with that MAC/IP, and the annotations
the node daemon reads to create its management port ``ovn0`` (ANN_NODE_JOIN_IP
"100.64.0.2/16", ANN_NODE_JOIN_MAC, ANN_NODE_JOIN_GW, ANN_NODE_LSP).  A deleted
node releases the address and loses its port.
"""
from __future__ import annotations

import logging

from pacific import names
from pacific.controller import model
from pacific.ipam import errors as ipam_errors
from pacific.kube import errors as kerr
from pacific.kube import resources as r
from pacific.ovn import ensure

LOG = logging.getLogger(__name__)


def node_ids(node: str, switch: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_NODE, names.EXT_OWNER: node,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, names.EXT_SUBNET: switch}


class NodeReconciler:
    def __init__(self, ctl):
        self.ctl = ctl

    def reconcile(self, name: str) -> None:
        ctl, cfg = self.ctl, self.ctl.cfg
        key = model.node_owner_key(name)
        lsp = names.node_lsp_name(name)
        node = ctl.inf_nodes.get(name)
        if node is None:
            ctl.writer.run([lambda api: ensure.DeletePort(api, lsp, cfg.join_switch)],
                           what=f"delete node port {lsp}")
            with ctl.ipam_lock:
                released = ctl.ipam.lookup(key)
                ctl.ipam.release(key)
            if released:
                LOG.info("node %s gone: released join address %s", name, released.ip)
            return
        ann = model.annotations(node)
        with ctl.ipam_lock:
            alloc = ctl.ipam.lookup(key)
            if alloc is None:
                want_ip = (ann.get(names.ANN_NODE_JOIN_IP) or "").split("/")[0] or None
                want_mac = ann.get(names.ANN_NODE_JOIN_MAC) or None
                try:
                    alloc = ctl.ipam.allocate(cfg.join_switch, key, ip=want_ip, mac=want_mac)
                except ipam_errors.IPAMError as exc:
                    if want_ip is None and want_mac is None:
                        raise
                    LOG.warning("node %s: annotated join address %s/%s not reusable (%s); "
                                "allocating a new one", name, want_ip, want_mac, exc)
                    alloc = ctl.ipam.allocate(cfg.join_switch, key)
        ctl.writer.run([lambda api: ensure.EnsurePort(
            api, cfg.join_switch, lsp, [f"{alloc.mac} {alloc.ip}"], [],
            node_ids(name, cfg.join_switch))], what=f"node port {lsp}")
        want = {
            names.ANN_NODE_JOIN_IP: f"{alloc.ip}/{cfg.join_prefixlen}",
            names.ANN_NODE_JOIN_MAC: alloc.mac,
            names.ANN_NODE_JOIN_GW: cfg.join_gateway,
            names.ANN_NODE_LSP: lsp,
        }
        if any(ann.get(k) != v for k, v in want.items()):
            try:
                r.patch_merge(ctl.kube, r.NODES, name, {"metadata": {"annotations": want}})
            except kerr.NotFound:
                return
            LOG.info("node %s: join address %s mac %s port %s", name, want[names.ANN_NODE_JOIN_IP],
                     alloc.mac, lsp)
