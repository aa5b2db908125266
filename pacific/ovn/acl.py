"""ACLs on port groups, and reads of port-group membership.

    spec = AclSpec("to-lport", 3000, "outport == @pg && ...", "drop", name="tenant:a",
                   external_ids={...})
    txn.add(EnsurePortGroupACLs(api, "pg", [spec]))     # the group's ACLs become exactly these

An ACL is identified by (direction, priority, match, action): the command keeps
matching rows (converging name, external_ids, log), inserts missing ones and
removes the group's other ACLs (ACL rows are not root rows: dropping the
reference deletes them).  The port group may be created earlier in the same
transaction (ensure.EnsurePortGroup).  The read helpers take the connection
lock, so worker threads use them to skip no-op submissions.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ovsdbapp.backend.ovs_idl import idlutils

from pacific.ovn.ensure import LS, LSP, PG, Command, find, has_uuid  # noqa: F401 (LS for callers)

ACL = "ACL"


@dataclass(frozen=True)
class AclSpec:
    direction: str            # "to-lport" | "from-lport"
    priority: int             # 0..32767
    match: str
    action: str               # "allow-related" | "allow" | "drop" | "reject" | ...
    name: str = ""            # <= 63 characters
    external_ids: dict = field(default_factory=dict, compare=False, hash=False)
    log: bool = False
    tier: int = 0             # OVN's ACL tier (0-3; OVN >= 23.09, pacific.ovn.capabilities)
    severity: str = ""        # of its log records (with log): alert ... debug
    meter: str = ""           # the Meter that limits its log records
    # from-lport only: evaluated after load balancing (options:apply-after-lb).  By
    # default every from-lport ACL is: a policy judges a connection to a Service by
    # the endpoint it reaches, as Kubernetes' NetworkPolicy says, and all enforcing
    # from-lport ACLs share that one stage so that OVN's tiers order them all
    # (decision 0042).  Only the dry-run observers say False (pacific.audit).
    after_lb: bool | None = None

    def __post_init__(self):
        if self.after_lb is None:
            object.__setattr__(self, "after_lb", self.direction == "from-lport")

    @property
    def key(self) -> tuple:
        return (self.direction, self.priority, self.match, self.action, self.tier,
                self.after_lb)


def _key(row) -> tuple:
    # a server without ACL tiers has no such column: everything is tier 0
    return (row.direction, row.priority, row.match, row.action, getattr(row, "tier", 0) or 0,
            row.options.get("apply-after-lb") == "true")


def _opt(value: str) -> list:
    return [value] if value else []


def _same_extras(row, spec: AclSpec) -> bool:
    return (list(row.name) == _opt(spec.name)
            and dict(row.external_ids) == spec.external_ids and bool(row.log) == spec.log
            and list(row.severity) == _opt(spec.severity if spec.log else "")
            and list(row.meter) == _opt(spec.meter if spec.log else ""))


class EnsureACLs(Command):
    """The ACLs of port group (or logical switch, table=LS) `group` become
    exactly `specs`; with `scope` (external_ids items), only its ACLs carrying
    all of them do (owners sharing one group leave each other's alone)."""

    def __init__(self, api, group: str, specs: list[AclSpec], table: str = PG,
                 scope: dict | None = None):
        super().__init__(api)
        self.group, self.specs, self.table = group, list(specs), table
        self.scope = dict(scope or {})

    def describe(self):
        return f"{self.table} {self.group}: {len(self.specs)} ACLs"

    def run_idl(self, txn):
        pg = find(self.api, txn, self.table, self.group)
        if pg is None:
            raise idlutils.RowNotFound(table=self.table, col="name", match=self.group)
        want = {s.key: s for s in self.specs}
        kept = set()
        for row in list(pg.acls):
            if not _in_scope(row, self.scope):
                continue
            spec = want.get(_key(row))
            if spec is None or spec.key in kept:
                pg.delvalue("acls", row)
                continue
            kept.add(spec.key)
            if not _same_extras(row, spec):
                self._converge(row, spec)
        for key, spec in want.items():
            if key not in kept:
                row = txn.insert(self.api.tables[ACL])
                row.direction, row.priority, row.match, row.action = key[:4]
                if spec.tier:
                    row.tier = spec.tier
                if spec.after_lb:
                    row.options = {"apply-after-lb": "true"}
                self._converge(row, spec)
                pg.addvalue("acls", row.uuid)
        self.result = len(want) - len(kept)

    @staticmethod
    def _converge(row, spec: AclSpec) -> None:
        row.name = _opt(spec.name)
        row.external_ids = dict(spec.external_ids)
        row.log = spec.log
        row.severity = _opt(spec.severity if spec.log else "")
        row.meter = _opt(spec.meter if spec.log else "")


def _in_scope(row, scope: dict) -> bool:
    ids = row.external_ids
    return all(ids.get(k) == v for k, v in scope.items())


def EnsurePortGroupACLs(api, group: str, specs: list[AclSpec],
                        scope: dict | None = None) -> EnsureACLs:
    return EnsureACLs(api, group, specs, PG, scope)


def acls_are(api, group: str, specs: list[AclSpec], table: str = PG,
             scope: dict | None = None) -> bool:
    """Does the replica hold port group (or switch) `group` with exactly these
    ACLs (of those carrying `scope`'s external_ids)?"""
    with api.ovsdb_connection.lock:
        try:
            pg = api.lookup(table, group)
        except idlutils.RowNotFound:
            return False
        mine = [r for r in pg.acls if _in_scope(r, scope or {})]
        rows = {_key(r): r for r in mine}
        if set(rows) != {s.key for s in specs} or len(rows) != len(mine):
            return False
        return all(_same_extras(rows[s.key], s) for s in specs)


def groups_holding(api, ports: list[str], groups: list[str]) -> dict[str, frozenset[str]]:
    """port name -> the names (of `groups`) of the port groups it is in, for
    the ports the replica holds: a port not (yet) in NB is left out (a
    membership command naming it would fail its whole transaction)."""
    out: dict[str, frozenset[str]] = {}
    same: dict[frozenset[str], frozenset[str]] = {}    # 100,000 ports, a few distinct answers
    with api.ovsdb_connection.lock:
        pgs = []
        for g in groups:
            try:
                pgs.append(api.lookup(PG, g))
            except idlutils.RowNotFound:
                pass
        for p in ports:
            uuid = api.row_uuid(LSP, p)
            if uuid is None:
                continue
            held = frozenset(pg.name for pg in pgs if has_uuid(pg, "ports", uuid))
            out[p] = same.setdefault(held, held)
    return out


def meters_named(api, prefix: str) -> set[str]:
    """The meters starting with `prefix` that logging ACLs of the replica name."""
    with api.ovsdb_connection.lock:
        rows = api.tables[ACL].rows.values() if ACL in api.tables else ()
        return {m for row in rows if row.log for m in row.meter if m.startswith(prefix)}
