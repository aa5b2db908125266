"""Restart: rebuild IPAM from IP objects and NB, then queue every known key.

A new leader knows nothing: it may follow a SIGKILL at any point of a
reconcile.  Before any worker runs, `rebuild()`:

1. adds every valid Subnet to IPAM (oldest first, so overlaps resolve as
   before; the subnet reconciler reports refusals);
2. restores every IP object's address for its pod key (IP objects are created
   before the port and the annotations, so every address a pod may use has
   one), and every node's join address from its NB port (owner Node);
3. an IP object whose address is already held (should never happen) is
   logged; its pod is reconciled like any other.

`queue_everything()` then queues every pod, node and subnet key found in the
caches, in the IP objects and in the NB rows the controller owns, so the
reconcilers (which treat "object missing" as "remove what it owned") delete
stale ports/switches/IP objects and create missing ones.  It runs again every
--gc-interval seconds as a safety net.
"""
from __future__ import annotations

import logging
import time

from pacific import names
from pacific.controller import model
from pacific.ipam import errors as ipam_errors
from pacific.ovn import ensure

LOG = logging.getLogger(__name__)


def rebuild(ctl) -> dict:
    t0 = time.monotonic()
    stats = {"subnets": 0, "ips": 0, "nodes": 0, "conflicts": 0}
    subnets = sorted(ctl.inf_subnets.list(),
                     key=lambda s: (model.meta(s).get("creationTimestamp") or "", model.meta(s)["name"]))
    with ctl.ipam_lock:
        for obj in subnets:
            if model.meta(obj).get("name") == ctl.cfg.join_switch:
                continue
            try:
                spec = model.parse_subnet(obj, reserved_names=(ctl.cfg.join_switch,))
                ctl.ipam.add_subnet(spec.name, spec.cidr, gateway=spec.gateway, exclude=spec.exclude)
            except (model.SubnetSpecError, ipam_errors.IPAMError):
                continue  # the subnet reconciler reports it
            stats["subnets"] += 1  # "applied" only once the subnet reconciler made its switch
        for ip in ctl.inf_ips.list():
            spec = ip.get("spec") or {}
            if not (spec.get("namespace") and spec.get("pod")):
                stats["conflicts"] += 1
                LOG.error("rebuild: IP object %s names no pod (spec.namespace/spec.pod missing); "
                          "its address %s is not held", model.meta(ip).get("name"), spec.get("ipAddress"))
                continue
            try:
                ctl.ipam.restore(spec.get("subnet"), model.pod_key(spec.get("namespace"), spec.get("pod")),
                                 spec.get("ipAddress"), spec.get("macAddress"))
                stats["ips"] += 1
            except ipam_errors.IPAMError as exc:
                stats["conflicts"] += 1
                LOG.error("rebuild: IP object %s not restored: %s", model.meta(ip).get("name"), exc)
        for row in ctl.nb.rows_owned(ensure.LSP, names.OWNER_KIND_NODE):
            node = row.external_ids.get(names.EXT_OWNER)
            try:
                mac, ip = row.addresses[0].split()[:2]
                ctl.ipam.restore(ctl.cfg.join_switch, model.node_owner_key(node), ip, mac)
                stats["nodes"] += 1
            except (IndexError, ValueError, ipam_errors.IPAMError) as exc:
                LOG.warning("rebuild: node port %s not restored (%s); the node gets a new address",
                            row.name, exc)
    stats["seconds"] = round(time.monotonic() - t0, 3)
    LOG.info("IPAM rebuilt in %.3fs: %d subnets, %d pod addresses, %d node addresses, %d conflicts",
             stats["seconds"], stats["subnets"], stats["ips"], stats["nodes"], stats["conflicts"])
    queue_everything(ctl)
    return stats


def queue_everything(ctl) -> None:
    """Queue every key the caches, IP objects and owned NB rows mention."""
    for s in ctl.inf_subnets.list():
        ctl.subnet_q.add(model.meta(s)["name"])
    for row in ctl.nb.rows_owned(ensure.LS, names.OWNER_KIND_SUBNET):
        ctl.subnet_q.add(row.external_ids.get(names.EXT_OWNER))
    for n in ctl.inf_nodes.list():
        ctl.node_q.add(model.meta(n)["name"])
    for row in ctl.nb.rows_owned(ensure.LSP, names.OWNER_KIND_NODE):
        ctl.node_q.add(row.external_ids.get(names.EXT_OWNER))
    keys = {f"{model.meta(p).get('namespace')}/{model.meta(p)['name']}" for p in ctl.inf_pods.list()}
    for ip in ctl.inf_ips.list():
        spec = ip.get("spec") or {}
        keys.add(model.pod_key(spec.get("namespace"), spec.get("pod")))
    for row in ctl.nb.rows_owned(ensure.LSP, names.OWNER_KIND_POD):
        keys.add(row.external_ids.get(names.EXT_OWNER))
    for key in keys:
        if key and "/" in key:
            ctl.pod_q.add(key)
    LOG.info("queued %d pods, %d nodes, %d subnets for reconciliation", len(keys),
             len(ctl.inf_nodes.list()), len(ctl.inf_subnets.list()))
