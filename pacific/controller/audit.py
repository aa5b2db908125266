"""The rows audit shares (pacific/audit.py, decisions 0039, 0050): the
meters of the audited scopes, and the dry-run policies' observers on every
Subnet switch.

Meters: every logged ACL names the meter of its scope (audit.meter_name: a
namespace's NetworkPolicies, a tenant's isolation, a ClusterNetworkPolicy, an
EgressFirewall), `fair=false`, so the scope's ACLs share one bucket however
many they are.  A feature writing logged ACLs puts `meter_builders(specs)` in
the same transaction (a meter exists before an ACL names it) and says which
meters its ACLs name once written (`named(user, specs)`); the reconcile ("*")
gives every meter some logging ACL of NB names the band of the node-wide cap
(audit.meter_band: --audit-rate, --audit-burst, --audit-node-cap over the
number of meters) and removes the meters no ACL names any more.

Observers: the policy features compute a dry-run policy's ACLs as usual and
hand their observers here (`publish(owner, specs)`) instead of writing them;
the same reconcile makes every Subnet switch hold exactly the published
observers (scoped by owner-kind DryRun, beside the Subnet's own ACLs).  A new
Subnet gets them when its switch appears.
"""
from __future__ import annotations

import logging
import threading

from pacific import audit, names
from pacific.controller import informers
from pacific.controller.feature import Feature
from pacific.ovn import acl, ensure

LOG = logging.getLogger(__name__)
KEY = "*"
SCOPE = {names.EXT_OWNER_KIND: names.OWNER_KIND_DRY_RUN}
METER_IDS = {names.EXT_OWNER_KIND: names.OWNER_KIND_AUDIT, names.EXT_CREATED_BY: names.CONTROLLER_NAME}
SETTLE = 1.0       # s after a user's meters changed: its write has committed


class AuditFeature(Feature):
    name = "audit"
    informers = {"subnets": informers.SUBNETS}

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self._observers: dict[str, tuple] = {}      # owner -> its observers
        self._named: dict[str, frozenset] = {}      # user -> the meters its ACLs name

    def handlers(self):
        # a Subnet's switch appears (or its spec changes: re-check, cheap)
        return {"subnets": lambda old, new: [KEY]}

    def prepare(self) -> None:
        self.queue.add(KEY)

    def resync_keys(self):
        return [KEY]

    def publish(self, owner: str, specs: list) -> None:
        """The observers of dry-run policy `owner` become `specs` ([]: none)."""
        specs = tuple(sorted(specs, key=lambda s: s.key))
        with self._lock:
            if self._observers.get(owner, ()) == specs:
                return
            if specs:
                self._observers[owner] = specs
            else:
                self._observers.pop(owner, None)
        self.queue.add(KEY)

    def enforcing(self, owner: str, specs: list, mode: audit.Audit) -> list:
        """The ACLs of policy `owner` to write where they decide: all of them,
        logged as `mode` asks; or, for a dry-run policy, none, its observers
        held here instead (and otherwise none held for it)."""
        if mode.dry_run:
            self.publish(owner, audit.observers(specs, mode, owner))
            return []
        self.publish(owner, [])
        return [audit.logged(s, mode, audit.meter_of(owner)) for s in specs]

    # -- meters ----------------------------------------------------------------------------
    def band(self, meters: int) -> tuple[int, int]:
        cfg = self.ctl.cfg
        return audit.meter_band(meters, cfg.audit_rate, cfg.audit_burst, cfg.audit_node_cap)

    def meter_builders(self, specs) -> list:
        """Commands creating the meters that the logging ACLs among `specs`
        name and NB does not hold yet (in the transaction writing them), each
        with its share as if it were one more meter; the reconcile evens them out."""
        nb = self.ctl.nb
        new = sorted(m for m in audit.meters_of(specs) if not ensure.row_exists(nb, ensure.METER, m))
        if not new:
            return []
        rate, burst = self.band(len(nb.rows_owned(ensure.METER, names.OWNER_KIND_AUDIT)) + len(new))
        return [lambda api, m=m: ensure.EnsureMeter(api, m, rate, burst, METER_IDS) for m in new]

    def named(self, user: str, specs) -> None:
        """The ACLs `user` wrote (and NB committed) now log through the meters
        `specs` name: a change re-balances the meters (and may free one)."""
        meters = audit.meters_of(specs)
        with self._lock:
            if self._named.get(user, frozenset()) == meters:
                return
            if meters:
                self._named[user] = meters
            else:
                self._named.pop(user, None)
        self.queue.add_after(KEY, SETTLE)

    def observing(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._observers.values())

    def reconcile(self, key: str) -> None:
        cfg, nb = self.ctl.cfg, self.ctl.nb
        with self._lock:
            specs = [s for owner in sorted(self._observers) for s in self._observers[owner]]
        wanted = acl.meters_named(nb, names.METER_AUDIT) | audit.meters_of(specs)
        rate, burst = self.band(len(wanted))
        cmds = [lambda api, m=m: ensure.EnsureMeter(api, m, rate, burst, METER_IDS)
                for m in sorted(wanted) if not ensure.meter_is(nb, m, rate, burst)]
        gone = sorted(row.name for row in nb.rows_owned(ensure.METER, names.OWNER_KIND_AUDIT)
                      if row.name not in wanted)
        cmds += [lambda api, m=m: ensure.DeleteMeter(api, m) for m in gone]
        switches = sorted(row.name for row in nb.rows_owned(ensure.LS, names.OWNER_KIND_SUBNET))
        for ls in switches:
            if not acl.acls_are(nb, ls, specs, table=ensure.LS, scope=SCOPE):
                cmds.append(lambda api, ls=ls: acl.EnsureACLs(api, ls, specs, table=ensure.LS,
                                                              scope=SCOPE))
        if not cmds:
            return
        self.ctl.writer.run(cmds, what="audit meters and dry-run observers")
        if rate * len(wanted) > cfg.audit_node_cap:
            LOG.warning("audit: %d audited scopes at 1/s each exceed --audit-node-cap %d/s",
                        len(wanted), cfg.audit_node_cap)
        LOG.info("audit: %d meters of %d/s burst %d (cap %d/s a node), %d removed; "
                 "%d dry-run observers on %d switches", len(wanted), rate, burst,
                 cfg.audit_node_cap, len(gone), len(specs), len(switches))
