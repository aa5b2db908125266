"""Multicast per namespace (model and OVN form: pacific/multicast.py).

What this feature writes:
- key CLUSTER_KEY: port groups `pacific_mcast` / `pacific_mcast_off` and the
  gate's ACLs on them (`--no-multicast`: both groups removed);
- key <namespace>: its pods' ports in the one group its annotation says,
  moved in ONE transaction (never in both, never in neither);
- a new pod's port joins its group in the transaction that creates it
  (port_builders), so it never sends or receives a group before the gate
  holds for it.
Snooping, the querier (the Subnet feature writes them on each switch) and the
router's relay (the cluster router) follow `--no-multicast` too.  A namespace
whose annotation is neither "true" nor "false" stays off, with an Event.
"""
from __future__ import annotations

import logging

from pacific import multicast, names
from pacific.controller import informers, model
from pacific.controller.feature import Feature, OnceEvents
from pacific.ovn import acl, ensure

LOG = logging.getLogger(__name__)
CLUSTER_KEY = "*"
GROUPS = (names.PG_MCAST, names.PG_MCAST_OFF)


def multicast_ids() -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_MULTICAST, names.EXT_OWNER: "cluster",
            names.EXT_CREATED_BY: names.CONTROLLER_NAME}


def gate_acls(group: str, ipv6: bool = False) -> list[acl.AclSpec]:
    # from-lport: in the stage of the policies' egress ACLs (AclSpec.after_lb),
    # which the gate's IGMP allow is above
    return [acl.AclSpec(direction, prio, match, action, name=rule,
                        external_ids={**multicast_ids(), names.EXT_RULE: rule})
            for g, direction, prio, match, action, rule in multicast.gate(ipv6) if g == group]


def group_builders(group: str, ipv6: bool = False) -> list:
    """One of the two groups with its ACLs (idempotent); `ipv6`: with the
    gate's IPv6 twins (a cluster with IPv6 Subnets)."""
    specs = gate_acls(group, ipv6)
    return [lambda api: ensure.EnsurePortGroup(api, group, multicast_ids()),
            lambda api: acl.EnsurePortGroupACLs(api, group, specs)]


class MulticastFeature(Feature):
    name = "multicast"
    informers = {"namespaces": informers.NAMESPACES}
    uses = {"tenants": "tenant"}       # its index of each namespace's pod ports

    def __init__(self, ctl):
        super().__init__(ctl)
        self._warnings = OnceEvents(ctl, "InvalidMulticast", LOG)
        self.ipv6 = ctl.cfg.ipv6          # the gate's IPv6 twins (a cluster with IPv6)

    def handlers(self):
        return {"namespaces": self._on_namespace}

    def _on_namespace(self, old, new):
        if old is not None and new is not None and \
                multicast.enabled(old) == multicast.enabled(new):
            return ()
        return (model.meta(new or old).get("name"),)

    def resync_keys(self):
        return [CLUSTER_KEY, *(model.meta(n)["name"] for n in self.ctl.informer("namespaces").list())]

    def prepare(self) -> None:
        self.queue.add(CLUSTER_KEY)

    def enabled(self, ns: str) -> bool:
        return multicast.enabled(self.ctl.informer("namespaces").get(ns))[0]

    # -- the pod feature's hook ---------------------------------------------------
    def port_builders(self, pod: dict, lsp: str) -> list:
        if not self.ctl.cfg.multicast:
            return []
        group = multicast.group_of(self.enabled(model.meta(pod)["namespace"]))
        return [*group_builders(group, self.ipv6),
                lambda api: ensure.PortGroupAddPorts(api, group, [lsp])]

    # -- reconcile --------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        if key == CLUSTER_KEY:
            self._cluster()
            return
        ns_obj = self.ctl.informer("namespaces").get(key)
        on, problem = multicast.enabled(ns_obj)
        self._warnings.report(ns_obj, key, problem, f"namespace {key}: {problem}")
        if not self.ctl.cfg.multicast or ns_obj is None:
            return            # a deleted namespace's ports go with their pods
        want = multicast.group_of(on)
        # only ports NB has (as the tenant feature): the others join in their own
        # transaction
        holding = acl.groups_holding(self.ctl.nb, self.tenants.ports_of(key), list(GROUPS))
        changes = []
        for lsp, held in holding.items():
            for g in held - {want}:
                changes.append(lambda api, g=g, p=lsp: ensure.PortGroupRemovePorts(api, g, [p]))
            if want not in held:
                changes.append(lambda api, p=lsp: ensure.PortGroupAddPorts(api, want, [p]))
        if not changes:
            return
        self.ctl.writer.run([*group_builders(want, self.ipv6), *changes],
                            what=f"multicast of namespace {key}")
        LOG.info("namespace %s: multicast %s for %d pod ports", key, "on" if on else "off",
                 sum(want not in held for held in holding.values()))

    def _cluster(self) -> None:
        there = {row.name for row in self.ctl.nb.rows_owned(ensure.PG, names.OWNER_KIND_MULTICAST)}
        if not self.ctl.cfg.multicast:
            if there:
                self.ctl.writer.run([lambda api, g=g: ensure.DeletePortGroup(api, g)
                                     for g in sorted(there)],
                                    what="multicast off: its port groups")
                LOG.info("multicast off (--no-multicast): removed %s", ", ".join(sorted(there)))
            return
        if all(g in there and acl.acls_are(self.ctl.nb, g, gate_acls(g, self.ipv6))
               for g in GROUPS):
            return
        self.ctl.writer.run([b for g in GROUPS for b in group_builders(g, self.ipv6)],
                            what="multicast gate")
        LOG.info("multicast: port groups %s with their gate", ", ".join(GROUPS))
