"""Restart: rebuild IPAM from IP objects and NB before any worker runs.

A new leader knows nothing: it may follow a SIGKILL at any point of a
reconcile.  The features' `prepare()` call these, in feature order:

1. `restore_subnets` (subnet feature): every valid Subnet into IPAM (oldest
   first, so overlaps resolve as before; the subnet reconciler reports
   refusals), and rows named by an older naming scheme removed (their
   reconcilers write them again under today's names);
2. `restore_node_addresses` (node feature): every node's join address from
   its NB port (owner Node);
3. `restore_pod_addresses` (pod feature): every IP object's address for its
   pod key (an IP object is written before the record, while NB commits the
   port, so every address a pod may use has one; a port committed by a
   controller that stopped before the IP object is rewritten by its pod's
   reconcile, its pod never having been plumbed); one whose address is already
   held (should never happen) is logged, and its pod is reconciled like any
   other.

4. the quarantine of released addresses (ipam/quarantine.py) is not
   rebuilt: a released address has no IP object left to tell when it was
   released.  The service feature's `prepare()` quarantines afresh, for one
   whole period, every address an EndpointSlice names that nothing holds (the
   addresses whose old holder's exposure could reach a new one); any other
   free address is free at once, pod-keyed decisions (tenant, policy and
   EgressIP sets) being rebuilt from the pods themselves.

Then `Controller.resync()` queues every key each feature names (caches, IP
objects, owned NB rows), so the level-triggered reconcilers delete what is
stale and create what is missing.
"""
from __future__ import annotations

import logging
import time

from pacific import names
from pacific.controller import model
from pacific.ipam import errors as ipam_errors
from pacific.ovn import ensure

LOG = logging.getLogger(__name__)


def restore_subnets(ctl) -> int:
    n = 0
    subnets = sorted(ctl.informer("subnets").list(),
                     key=lambda s: (model.meta(s).get("creationTimestamp") or "", model.meta(s)["name"]))
    with ctl.ipam_lock:
        for obj in subnets:
            if model.meta(obj).get("name") == ctl.cfg.join_switch:
                continue
            try:
                spec = model.parse_subnet(obj, reserved_names=(ctl.cfg.join_switch,),
                                          ipv6=ctl.cfg.ipv6)
                ctl.ipam.add_subnet(spec.name, spec.cidr_block, gateway=spec.gateway_list,
                                    exclude=spec.exclude)
            except (model.SubnetSpecError, ipam_errors.IPAMError):
                continue  # the subnet reconciler reports it
            n += 1  # "applied" only once the subnet reconciler made its switch
    remove_legacy_links(ctl)
    return n


def _legacy(row, prefix: str) -> bool:
    return not row.name.startswith(prefix)


def remove_legacy_links(ctl) -> None:
    """Router links and node ports written before port names had per-kind
    prefixes (names.PORT_PREFIX_*): removed, so the subnet and node reconcilers
    write them again under names that cannot collide."""
    kinds = (names.OWNER_KIND_SUBNET, names.OWNER_KIND_CLUSTER)
    lrps = [r.name for k in kinds for r in ctl.nb.rows_owned(ensure.LRP, k)
            if _legacy(r, names.PORT_PREFIX_ROUTER)]
    lsps = [r.name for k in kinds for r in ctl.nb.rows_owned(ensure.LSP, k)
            if r.type == "router" and _legacy(r, names.PORT_PREFIX_ROUTER_LINK)]
    lsps += [r.name for r in ctl.nb.rows_owned(ensure.LSP, names.OWNER_KIND_NODE)
             if _legacy(r, names.PORT_PREFIX_NODE)]
    if not (lrps or lsps):
        return
    LOG.warning("removing %d router and %d switch ports named before per-kind prefixes: %s",
                len(lrps), len(lsps), ", ".join(sorted(lrps + lsps)[:10]))
    ctl.writer.run([*(lambda api, p=p: ensure.DeleteRouterPort(api, names.CLUSTER_ROUTER, p)
                      for p in lrps),
                    *(lambda api, p=p: ensure.DeletePort(api, p, None) for p in lsps)],
                   what="legacy port names")


def restore_node_addresses(ctl) -> int:
    n = 0
    with ctl.ipam_lock:
        for row in ctl.nb.rows_owned(ensure.LSP, names.OWNER_KIND_NODE):
            node = row.external_ids.get(names.EXT_OWNER)
            try:
                # "MAC join source" of the join network's family, dual-stack
                # "MAC v4 source v6 source6" (node_join.port_addresses)
                mac, *addrs = row.addresses[0].split()
                fams = [f for f in ([a for a in addrs if (":" in a) == six]
                                    for six in (False, True)) if f]     # IPv4 first
                ctl.ipam.restore(ctl.cfg.join_switch, model.node_owner_key(node),
                                 ",".join(f[0] for f in fams), mac)
                if len(fams[0]) > 1:
                    ctl.ipam.restore(ctl.cfg.join_switch, model.node_source_key(node),
                                     ",".join(f[1] for f in fams if len(f) > 1))
                n += 1
            except (IndexError, ValueError, ipam_errors.IPAMError) as exc:
                LOG.warning("rebuild: node port %s not restored (%s); the node gets a new address",
                            row.name, exc)
    return n


def restore_pod_addresses(ctl) -> dict:
    t0 = time.monotonic()
    stats = {"ips": 0, "conflicts": 0}
    with ctl.ipam_lock:
        for ip in ctl.informer("ips").list():
            spec = ip.get("spec") or {}
            if not (spec.get("namespace") and spec.get("pod")):
                stats["conflicts"] += 1
                LOG.error("rebuild: IP object %s names no pod (spec.namespace/spec.pod missing); "
                          "its address %s is not held", model.meta(ip).get("name"), spec.get("ipAddress"))
                continue
            try:
                ips = spec.get("ipAddresses")     # dual-stack: every family's
                ctl.ipam.restore(spec.get("subnet"), model.object_key(spec.get("namespace"), spec.get("pod")),
                                 ",".join(map(str, ips)) if isinstance(ips, (list, tuple)) and ips
                                 else spec.get("ipAddress"), spec.get("macAddress"))
                stats["ips"] += 1
            except ipam_errors.IPAMError as exc:
                stats["conflicts"] += 1
                LOG.error("rebuild: IP object %s not restored: %s", model.meta(ip).get("name"), exc)
    stats["seconds"] = round(time.monotonic() - t0, 3)
    LOG.info("IPAM rebuilt in %.3fs: %d pod addresses, %d conflicts", stats["seconds"],
             stats["ips"], stats["conflicts"])
    return stats
