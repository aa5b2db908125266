"""Tenant isolation between namespaces, in OVN port groups and ACLs.

Model.  Each namespace is a tenant of its own, unless it carries the label
`pacific.io/tenant: NAME`: namespaces with the same value form one tenant.  The
value `global` makes a namespace global: its pods reach, and are reached by,
every tenant.  The namespaces of `--global-namespaces` (kube-system and
Pacific's own by default) are global unless labelled otherwise.  A namespace's
NAME grants nothing: the own tenant of an unlabelled namespace is
`ns:<namespace>` (own_tenant), which no label value can spell (label values
hold no ':'), so a namespace named `acme` does not join the tenant of the
namespaces labelled `acme`, and one named `global` is not global.  Only the
label and `--global-namespaces` (the administrator's) grant.
`--no-isolation` switches it all off (no rows at all).

OVN form (rows grow with tenants, not pods):

* port group `pacific_isolated`: the ports of every pod of a non-global
  namespace (OVN keeps the address set `$pacific_isolated_ip4` of it);
* per tenant T, port group `pt_<hash of T>` with its pods' ports and two
  ACLs (four with IPv6), to-lport, priority names.PRIO_ACL_ISOLATION_DROP (above every
  NetworkPolicy ACL: no policy admits traffic between tenants), both -> drop:
  - `outport == @pt_T && ip4 && ip4.src == $pacific_isolated_ip4 &&
    ip4.src != $pt_T_ip4`: IPv4, also routed from another Subnet's switch;
  - `outport == @pt_T && arp && arp.spa == $pacific_isolated_ip4 &&
    arp.spa != $pt_T_ip4`: ARP, broadcast or unicast, on the sender's switch.
  - in a cluster with IPv6 (pods may have it), the same by ip6.src, and
  - `outport == @pt_T && ip6 && ip6.src == {::, fe80::/10}`: IPv6 from a
    source no set can place (link-local, unspecified).
  A pod's port security admits nothing else: ARP only with the pod's own MAC
  and address (so arp.spa says who sent it, like ip4.src), IPv6 only from its
  own addresses (and the link-local one of its MAC, `::`), no other Ethernet
  type.  Not by `inport`: ovn-controller expands `inport == @group`
  in a to-lport ACL to the ports of the receiving chassis only (a sender on
  another node never matched), and OVN matches no `!ip4`, `eth.type !=` or
  `inport != @group` (nominal fields are tested positively only; such an ACL
  installs no flow at all).
  So a pod of T receives no frame from a pod of another isolated tenant, in
  either direction; global pods, nodes (join addresses), router ports (ARP of
  the gateway) and anything outside the pod network are not matched.
* when an administrator audits T's isolation (`pacific.io/audit: deny` on a
  namespace of T), the drops log through T's meter, and one more drop records
  what another tenant's pod on T's switch tries first: its ARP request for a
  pod of T is answered by the switch itself (OVN's ARP responder, for the
  pod), and that answer is dropped at the asking pod's port, by the ASKER's
  isolation, which T's audit does not log (issue 51: no record at all).  At
  names.PRIO_ACL_ISOLATION_ANSWER, to-lport, `outport == @pacific_isolated &&
  arp && arp.op == 2 && arp.spa == $pt_T_ip4 && arp.tpa ==
  $pacific_isolated_ip4`: an answer for a pod of T to an isolated pod,
  dropped (as the asker's drop would) and logged as T's; just above it
  `outport == @pt_T && arp && arp.op == 2 && arp.spa == $pt_T_ip4` allows
  T's answers to T's own pods, as they are without audit.  (Not one ACL with
  `arp.tpa != $pt_T_ip4`: ovn-controller 26.03 does not update the flows of
  a match naming one address set twice when the set changes, only on a full
  recompute.)  IPv6's neighbour discovery is exempt from ACLs: another
  tenant's packets reach T's ip6 drop, which logs.

A pod's port joins its groups in the transaction that creates it (the pod
feature asks every feature for `port_builders`).  A namespace whose tenant
changes moves all its pods in ONE transaction (remove from the old group, add
to the new one, isolated-set membership): no moment where traffic is open that
should not be, or cut that should not be.  Groups of tenants left without
namespaces are removed by the resync.
"""
from __future__ import annotations

import logging
import threading

from pacific import audit, contract, names
from pacific.controller import informers, model
from pacific.controller.feature import Feature, OnceEvents
from pacific.ovn import acl, ensure
from pacific.tenancy import GLOBAL, group_name, tenant_of

LOG = logging.getLogger(__name__)
KEY_ALL = "*"                 # queue key: every namespace (e.g. after a resync)


def tenant_ids(tenant: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_TENANT, names.EXT_OWNER: tenant,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME}


def isolation_match(tenant: str, family: int = 4) -> str:
    """IPv4 (or IPv6) from another isolated tenant, by source address (also
    routed; OVN keeps each port group's `_ip4` and `_ip6` address sets)."""
    pg, ip = group_name(tenant), f"ip{family}"
    return (f"outport == @{pg} && {ip} && {ip}.src == ${names.PG_ISOLATED}_{ip} && "
            f"{ip}.src != ${pg}_{ip}")


def isolation_local_match(tenant: str) -> str:
    """IPv6 from a link-local or the unspecified source, which no address set
    says the tenant of: port security admits them from every pod (the
    link-local address derived from its MAC, `::` for duplicate address
    detection), so they reach a tenant's pods from nowhere else (pods'
    neighbour discovery uses their global addresses; routers' answers come
    from the gateway's)."""
    return f"outport == @{group_name(tenant)} && ip6 && ip6.src == {{::, fe80::/10}}"


def isolation_frame_match(tenant: str) -> str:
    """ARP from another isolated tenant, by its sender address (which port
    security pins to the sender's own, as it does ip4.src)."""
    pg = group_name(tenant)
    return (f"outport == @{pg} && arp && arp.spa == ${names.PG_ISOLATED}_ip4 && "
            f"arp.spa != ${pg}_ip4")


def isolation_answer_match(tenant: str, own: bool = False) -> str:
    """The switch's ARP answers for a pod of the tenant to an isolated pod
    (`own`: to a pod of the tenant; see the module doc)."""
    pg, iso = group_name(tenant), names.PG_ISOLATED
    to = f"outport == @{pg}" if own else f"outport == @{iso}"
    return f"{to} && arp && arp.op == 2 && arp.spa == ${pg}_ip4" + (
        "" if own else f" && arp.tpa == ${iso}_ip4")


def isolation_acls(tenant: str, mode: audit.Audit = audit.OFF,
                   ipv6: bool = False) -> list[acl.AclSpec]:
    """The drops; logged when an administrator asked (`pacific.io/audit: deny`
    on a namespace of the tenant), with the ARP answers' drop that records
    another tenant's first try.  IPv6's only where pods may have IPv6 (the
    controller's --ipv6-subnets): elsewhere port security admits none."""
    ids = {**tenant_ids(tenant), names.EXT_RULE: "isolation"}
    matches = [(names.PRIO_ACL_ISOLATION_DROP, m, "drop") for m in (
        isolation_match(tenant), isolation_frame_match(tenant),
        *((isolation_match(tenant, 6), isolation_local_match(tenant)) if ipv6 else ()))]
    if mode.deny:
        matches += [(names.PRIO_ACL_ISOLATION_ANSWER, isolation_answer_match(tenant), "drop"),
                    (names.PRIO_ACL_ISOLATION_OWN_ANSWER, isolation_answer_match(tenant, True),
                     "allow")]
    meter = audit.meter_name("tenant", tenant)    # the administrator's, one per tenant
    return [audit.logged(acl.AclSpec("to-lport", prio, m, action, name=f"tenant:{tenant}"[:63],
                                     external_ids=ids), mode, meter)
            for prio, m, action in matches]


def isolated_builders() -> list:
    ids = tenant_ids(names.PG_ISOLATED)
    return [lambda api: ensure.EnsurePortGroup(api, names.PG_ISOLATED, ids)]


class TenantFeature(Feature):
    name = "tenant"
    informers = {"namespaces": informers.NAMESPACES, "pods": informers.PODS}
    uses = {"audit": "audit"}

    def __init__(self, ctl):
        super().__init__(ctl)
        self.globals = frozenset(ctl.cfg.global_namespaces)
        self.ipv6 = ctl.cfg.ipv6          # IPv6's drops too (a cluster with IPv6)
        self._warnings = OnceEvents(ctl, "InvalidTenantLabel", LOG)
        self._audit_warnings = OnceEvents(ctl, "InvalidAudit", LOG)
        self._lock = threading.Lock()
        self._ports: dict[str, dict[str, str]] = {}   # namespace -> pod name -> its port

    # -- feature wiring --------------------------------------------------------------
    def handlers(self):
        return {"namespaces": self._on_namespace, "pods": self._on_pod}

    def _on_pod(self, old, new):
        """Index the ports of each namespace's pods (no keys: a new port joins its
        groups through port_builders, in the pod's own transaction)."""
        m = model.meta(new or old)
        ns, name = m.get("namespace"), m.get("name")
        rec = contract.own_record(new) if new is not None else None
        with self._lock:
            pods = self._ports.setdefault(ns, {})
            if rec is None:
                pods.pop(name, None)
            else:
                pods[name] = rec.port
        return ()

    def _on_namespace(self, old, new):
        if old is not None and new is not None and \
                model.labels_of(old).get(names.LABEL_TENANT) == model.labels_of(new).get(names.LABEL_TENANT) \
                and audit.of(old, policy=False) == audit.of(new, policy=False):
            return ()
        return (model.meta(new or old).get("name"),)

    def tenant(self, ns_name: str) -> str:
        t, _ = tenant_of(self.ctl.informer("namespaces").get(ns_name), ns_name, self.globals)
        return t

    def resync_keys(self):
        keys = [model.meta(n)["name"] for n in self.ctl.informer("namespaces").list()]
        return [*keys, KEY_ALL]

    # -- the pod feature's hook: a new port joins its groups in its own transaction --------
    def port_builders(self, pod: dict, lsp: str) -> list:
        if not self.ctl.cfg.isolation:
            return []
        t = self.tenant(model.meta(pod)["namespace"])
        if t == GLOBAL:
            return []
        return [*isolated_builders(), *self.group_builders(t),
                lambda api: ensure.PortGroupAddPorts(api, names.PG_ISOLATED, [lsp]),
                lambda api: ensure.PortGroupAddPorts(api, group_name(t), [lsp])]

    # -- reconcile -------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        if key == KEY_ALL:
            self._collect_stale()
            return
        ns_obj = self.ctl.informer("namespaces").get(key)
        want, problem = tenant_of(ns_obj, key, self.globals)
        self._warnings.report(ns_obj, key, problem,
                              f"namespace {key}: {problem}; it stays its own tenant")
        problems = "; ".join(audit.of(ns_obj, policy=False)[1])
        self._audit_warnings.report(ns_obj, key, problems or None, f"namespace {key}: {problems}")
        if not self.ctl.cfg.isolation or ns_obj is None:
            want = None
        isolated_want = want not in (None, GLOBAL)
        groups = {self._tenant_of_group(row): row.name for row in self._groups()}
        groups.pop(names.PG_ISOLATED, None)
        ports = self.ports_of(key)
        # only ports NB has: one that is not there yet joins its groups in the
        # transaction that creates it (port_builders); naming it here would fail
        # this whole transaction (a restart on an emptied NB: 100,000 of them,
        # retried until the pod feature had re-created every port)
        holding = acl.groups_holding(self.ctl.nb, ports, [*groups.values(), names.PG_ISOLATED])
        tenant_by_group = {g: t for t, g in groups.items()}
        changes, moved = [], 0
        for lsp, held in holding.items():
            now_in = {tenant_by_group[g] for g in held if g in tenant_by_group}
            for t in now_in - {want}:
                changes.append(lambda api, g=group_name(t), p=lsp: ensure.PortGroupRemovePorts(api, g, [p]))
            if isolated_want and want not in now_in:
                changes.append(lambda api, g=group_name(want), p=lsp: ensure.PortGroupAddPorts(api, g, [p]))
            if (names.PG_ISOLATED in held) != isolated_want:
                cmd = ensure.PortGroupAddPorts if isolated_want else ensure.PortGroupRemovePorts
                changes.append(lambda api, c=cmd, p=lsp: c(api, names.PG_ISOLATED, [p]))
            moved += bool(now_in - {want}) or (isolated_want and want not in now_in)
        setup = []   # a tenant's group exists once it has a pod (port_builders makes it too)
        if isolated_want and (ports or want in groups) and not (
                self._has_isolated() and self._group_ok(want)):
            setup = [*isolated_builders(), *self.group_builders(want)]
        if isolated_want and not setup and not changes:
            self.audit.named(f"tenant:{want}", self.isolation_acls(want))
        if not setup and not changes:
            return
        # ONE transaction: the namespace is never in two tenants, or in none
        self.ctl.writer.run(setup + changes, what=f"tenant of namespace {key}")
        if setup:
            self.audit.named(f"tenant:{want}", self.isolation_acls(want))
        if moved:
            LOG.info("namespace %s: %d pod ports now in tenant %s", key, moved,
                     want or "(isolation off)")

    def isolation_acls(self, tenant: str) -> list[acl.AclSpec]:
        return isolation_acls(tenant, self.audit_of(tenant), self.ipv6)

    def group_builders(self, tenant: str) -> list:
        """The tenant's port group, the meter of its audit if asked, and its
        isolation ACLs (idempotent)."""
        pg, ids, specs = group_name(tenant), tenant_ids(tenant), self.isolation_acls(tenant)
        return [lambda api: ensure.EnsurePortGroup(api, pg, ids),
                *self.audit.meter_builders(specs),
                lambda api: acl.EnsurePortGroupACLs(api, pg, specs)]

    def _group_ok(self, tenant: str) -> bool:
        return acl.acls_are(self.ctl.nb, group_name(tenant), self.isolation_acls(tenant))

    def audit_of(self, tenant: str) -> audit.Audit:
        """What the tenant's namespaces ask of its isolation's drops: logged if
        any namespace of it says `pacific.io/audit: deny` (or all)."""
        asked = [audit.of(n, policy=False)[0] for n in self.ctl.informer("namespaces").list()
                 if names.ANN_AUDIT in (model.meta(n).get("annotations") or {})
                 and tenant_of(n, model.meta(n)["name"], self.globals)[0] == tenant]
        deny = [a for a in asked if a.deny]
        return audit.Audit(deny=True, severity=deny[0].severity) if deny else audit.OFF

    def _has_isolated(self) -> bool:
        return any(self._tenant_of_group(r) == names.PG_ISOLATED for r in self._groups())

    def _collect_stale(self) -> None:
        """Groups of tenants no namespace has any more (or all, isolation off)."""
        live = set()
        if self.ctl.cfg.isolation:
            live = {self.tenant(model.meta(n)["name"]) for n in self.ctl.informer("namespaces").list()}
            live.add(names.PG_ISOLATED)
        stale = [row for row in self._groups() if self._tenant_of_group(row) not in live]
        if stale:
            self.ctl.writer.run([lambda api, n=row.name: ensure.DeletePortGroup(api, n)
                                 for row in stale], what="stale tenant groups")
            LOG.info("removed %d port groups of tenants without namespaces", len(stale))
        for row in stale:
            self.audit.named(f"tenant:{self._tenant_of_group(row)}", ())

    # -- reads ----------------------------------------------------------------------------
    def _groups(self) -> list:
        return self.ctl.nb.rows_owned(ensure.PG, names.OWNER_KIND_TENANT)

    @staticmethod
    def _tenant_of_group(row) -> str:
        return row.external_ids.get(names.EXT_OWNER, "")

    def ports_of(self, ns: str) -> list[str]:
        """Ports of the namespace's pods that have one (the controller's record)."""
        with self._lock:
            return sorted(self._ports.get(ns, {}).values())
