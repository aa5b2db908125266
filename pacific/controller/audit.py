"""The rows audit shares (pacific/audit.py, decision 0039): the fair meter
names.METER_AUDIT that every logged ACL names (--audit-rate, --audit-burst),
and the dry-run policies' observers on every Subnet switch.

The policy features compute a dry-run policy's ACLs as usual and hand their
observers here (`publish(owner, specs)`) instead of writing them; one reconcile
("*") makes every Subnet switch hold exactly the published observers (scoped by
owner-kind DryRun, beside the Subnet's own ACLs) and the meter its band.  A
new Subnet gets them when its switch appears.
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
METER_IDS = {names.EXT_OWNER_KIND: "Audit", names.EXT_CREATED_BY: names.CONTROLLER_NAME}


class AuditFeature(Feature):
    name = "audit"
    informers = {"subnets": informers.SUBNETS}

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self._observers: dict[str, tuple] = {}      # owner -> its observers

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
        return [audit.logged(s, mode) for s in specs]

    def observing(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._observers.values())

    def reconcile(self, key: str) -> None:
        cfg, nb = self.ctl.cfg, self.ctl.nb
        with self._lock:
            specs = [s for owner in sorted(self._observers) for s in self._observers[owner]]
        cmds = []
        if not ensure.meter_is(nb, names.METER_AUDIT, cfg.audit_rate, cfg.audit_burst):
            cmds.append(lambda api: ensure.EnsureMeter(api, names.METER_AUDIT, cfg.audit_rate,
                                                       cfg.audit_burst, METER_IDS))
        switches = sorted(row.name for row in nb.rows_owned(ensure.LS, names.OWNER_KIND_SUBNET))
        for ls in switches:
            if not acl.acls_are(nb, ls, specs, table=ensure.LS, scope=SCOPE):
                cmds.append(lambda api, ls=ls: acl.EnsureACLs(api, ls, specs, table=ensure.LS,
                                                              scope=SCOPE))
        if not cmds:
            return
        self.ctl.writer.run(cmds, what="audit meter and dry-run observers")
        LOG.info("audit: meter %s %d/s burst %d; %d dry-run observers on %d switches",
                 names.METER_AUDIT, cfg.audit_rate, cfg.audit_burst, len(specs), len(switches))
