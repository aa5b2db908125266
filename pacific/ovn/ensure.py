"""Create-or-update ("ensure") commands for OVN NB switches, routers and ports.

ovsdbapp's ``*_add(may_exist=True)`` commands do not update an existing row
(``lrp_add`` even raises on a changed MAC), and its name lookups do not see
rows inserted earlier in the same transaction.  Pacific needs both: one batch
may create a subnet's switch and a pod's port on it, and a reconcile must
converge an existing row to the desired one.  These commands "make it so":

    txn.add(EnsureSwitch(api, "s1", ext))
    txn.add(EnsurePort(api, "s1", "p.ns", ["0a:58:... 10.16.0.5"], [...], ext))
    txn.add(DeletePort(api, "p.ns", switch="s1"))
    txn.add(EnsurePortGroup(api, "pg_ns", ext))
    txn.add(PortGroupAddPorts(api, "pg_ns", ["p.ns"]))      # a mutation
    txn.add(EnsureAddressSet(api, "as_ns", ext))
    txn.add(AddressSetAddAddresses(api, "as_ns", ["10.16.0.5"]))

The controller uses them through its NB writer, with the owner's ids
(``pacific.ovn.base.owner_ids``) as ``external_ids``.

Each is an ovsdbapp ``BaseCommand``.  Rows created in a transaction are
remembered on the transaction object so later commands find them by name.
After the commit an ensure command's ``result`` is a ``RowView`` of its row
(inside the transaction, the row's uuid, usable as a reference).

Port group and address set membership is changed only by mutation
(``PortGroupAddPorts`` / ``PortGroupRemovePorts``, ``AddressSetAddAddresses``
/ ``AddressSetRemoveAddresses``: OVSDB "mutate" insert/delete of the members
named), never by writing the whole column: two batches built from the same
view that each add a member both keep theirs.

Column arguments: a value is the desired content of the column; ``KEEP``
means "not managed": an existing row keeps its value, a new row gets the
schema default.  ``external_ids`` is replaced exactly unless
``merge_ids=True`` (then the given keys are set and other keys kept).
"""
from __future__ import annotations

import netaddr
from ovs.db import data as ovs_data
from ovs.db import types as ovs_types
from ovs.db import idl as ovs_idl
from ovsdbapp.backend.ovs_idl import command as ovs_cmd
from ovsdbapp.backend.ovs_idl import idlutils
from ovsdbapp.backend.ovs_idl import rowview

from pacific.ovn.base import _init_ref_sets
from pacific.ovn.compact import TransientRow

LS = "Logical_Switch"
LSP = "Logical_Switch_Port"
LR = "Logical_Router"
LRP = "Logical_Router_Port"
METER = "Meter"
METER_BAND = "Meter_Band"


class _Keep:
    __slots__ = ()

    def __repr__(self):
        return "KEEP"


KEEP = _Keep()   # column argument: leave the column as it is


def _created(txn) -> dict:
    d = getattr(txn, "_pacific_created", None)
    if d is None:
        d = {}
        txn._pacific_created = d
    return d


def find(api, txn, table: str, name: str):
    """Row named `name` in `table`, including rows inserted in `txn`; or None.
    A compacted row (pacific.ovn.compact) is one TransientRow per transaction,
    so every command of the transaction writes the same object."""
    created = _created(txn)
    row = created.get((table, name))
    if row is not None:
        return row
    try:
        row = api.lookup(table, name)
    except idlutils.RowNotFound:
        return None
    if isinstance(row, TransientRow):
        created[(table, name)] = row
    return row


def insert(api, txn, table: str, name: str):
    """Insert a row named `name` that later commands of `txn` find by name."""
    row = txn.insert(api.tables[table])
    row.name = name
    _created(txn)[(table, name)] = row
    return row


def _set_if_changed(row, column: str, value) -> None:
    # a row inserted in this transaction has no value yet: getattr raises
    if value is not KEEP and getattr(row, column, None) != value:
        setattr(row, column, value)


def has_ref(parent, column: str, child) -> bool:
    """Is `child` in the reference set `parent.<column>` (e.g. a port in a
    switch's ports), counting this transaction's addvalue/delvalue?

    Reading ``parent.ports`` makes the ovs IDL build (and sort) a list of every
    referenced Row, O(ports) per read, and after an addvalue in the same
    transaction several times over: with 10,000 pods on one switch that was most
    of the controller's CPU.  This checks the committed datum and the pending
    mutations directly, O(1).  Falls back to the attribute when the column was
    replaced wholesale in this transaction.

    Reads private state of the ovs IDL Row (``_changes``, ``_mutations``,
    ``_data``, see ovs/db/idl.py Row.__init__): call it from the connection
    thread (a command's run_idl) or under ``api.ovsdb_connection.lock``.
    tests/unit/test_ovn_internals.py fails if ovs changes that layout."""
    return _has(parent, column, child, ovs_data.Atom(ovs_types.UuidType, child.uuid))


def has_uuid(parent, column: str, uuid) -> bool:
    """has_ref for a read outside a transaction, given the child's uuid."""
    return _has(parent, column, uuid, ovs_data.Atom(ovs_types.UuidType, uuid))


def has_value(parent, column: str, value: str) -> bool:
    """Is the string `value` in the set column `parent.<column>` (e.g. an
    address set's addresses), counting this transaction's mutations?  O(1),
    as has_ref."""
    return _has(parent, column, value, ovs_data.Atom(ovs_types.StringType, value))


def _has(parent, column: str, member, atom) -> bool:
    changes = parent._changes
    if changes and column in changes:
        return member in getattr(parent, column)
    mutations = parent._mutations or {}
    if member in mutations.get("_removes", {}).get(column, ()):
        return False
    if member in mutations.get("_inserts", {}).get(column, ()):
        return True
    committed = parent._data
    if not committed or column not in committed:
        return False
    return atom in committed[column].values


def _cancel_pending(row, kind: str, column: str, member) -> None:
    """Forget a pending addvalue (kind "_inserts") or delvalue ("_removes")
    of `member` in this transaction.  The IDL sends a row's removals before
    its insertions whatever their order, so "add X, then remove X" in one
    batch would leave X in; the later command cancels the earlier one."""
    pending = (row._mutations or {}).get(kind, {}).get(column)
    if pending:
        pending.discard(member)


def _mutate_set(row, column: str, member, present: bool, add: bool) -> bool:
    """Make `member` present (add) or absent in set `column` of `row` with a
    mutation (insert/delete on the server: concurrent writers of other
    members do not lose each other's).  `present`: whether the committed
    replica plus this transaction already hold it.  True if a mutation was
    queued."""
    _cancel_pending(row, "_removes" if add else "_inserts", column, member)
    if add == present:
        return False
    (row.addvalue if add else row.delvalue)(column, member)
    return True


def referrers(api, table: str, column: str, child) -> list:
    """Rows of `table` whose reference set `column` holds `child` (connection
    thread or under the connection lock, as has_ref)."""
    return [r for r in api.tables[table].rows.values() if has_ref(r, column, child)]


def port_is(api, switch: str, name: str, addresses: list[str], port_security: list[str],
            external_ids: dict, type: str = "", options: dict | None = None) -> bool:
    """Does the local replica already hold exactly this switch port?  Used
    from worker threads to skip a no-op NB submission, so it reads under the
    connection lock (the IDL thread holds it while it applies updates: rows
    never change under the read).  A missing switch or port answers False;
    anything else (a column not monitored, a changed ovs IDL) raises."""
    with api.ovsdb_connection.lock:
        try:
            row = api.lookup(LSP, name)
            ls = api.lookup(LS, switch)
        except idlutils.RowNotFound:
            return False
        return (has_ref(ls, "ports", row) and row.addresses == list(addresses)
                and row.port_security == list(port_security) and row.type == type
                and row.options == dict(options or {}) and row.external_ids == dict(external_ids))


def row_exists(api, table: str, name: str) -> bool:
    """Does the replica hold a row of `table` named `name`?  Under the
    connection lock, from worker threads (to skip a no-op delete)."""
    with api.ovsdb_connection.lock:
        try:
            api.lookup(table, name)
            return True
        except idlutils.RowNotFound:
            return False


def address_set_addresses(api, name: str) -> set[str] | None:
    """The addresses of address set `name` in the replica (None: no such set);
    under the connection lock, from worker threads."""
    with api.ovsdb_connection.lock:
        try:
            return set(api.lookup(AS, name).addresses)
        except idlutils.RowNotFound:
            return None


def _ids(row) -> dict:
    return dict(getattr(row, "external_ids", None) or {})


class Command(ovs_cmd.BaseCommand):
    """Base of Pacific's NB commands: a readable str() for error messages."""

    def __str__(self):
        return f"{self.__class__.__name__}({self.describe()})"

    __repr__ = __str__

    def describe(self) -> str:  # pragma: no cover - overridden
        return ""


class _Ensure(Command):
    """Create-or-update of one named row: shared column/ids convergence."""

    TABLE = ""

    def __init__(self, api, name: str, external_ids: dict, columns: dict | None,
                 merge_ids: bool):
        super().__init__(api)
        self.name, self.external_ids = name, dict(external_ids)
        self.columns = dict(columns or {})
        self.merge_ids = merge_ids

    def _converge(self, row) -> None:
        for col, val in self.columns.items():
            _set_if_changed(row, col, idlutils.db_replace_record(val))
        want = {**_ids(row), **self.external_ids} if self.merge_ids else self.external_ids
        _set_if_changed(row, "external_ids", want)
        self.result = row.uuid

    def post_commit(self, txn):
        # like ovsdbapp's AddCommand: the real row (new rows had a temporary uuid)
        if isinstance(self.result, (rowview.RowView, ovs_idl.Row)) or self.result is None:
            return
        real = txn.get_insert_uuid(self.result) or self.result
        row = self.api.tables[self.TABLE].rows.get(real)
        if row is not None:   # None: deleted by a later command of the transaction
            self.result = rowview.RowView(row)


class _EnsureParent(_Ensure):
    """A switch or router: found or inserted by name, ids merged by default."""

    def describe(self):
        return self.name

    def run_idl(self, txn):
        row = find(self.api, txn, self.TABLE, self.name)
        if row is None:
            row = insert(self.api, txn, self.TABLE, self.name)
            # empty reference sets, so ovsdbapp commands later in this
            # transaction (acl_add, lr_nat_add, ...) can read them
            _init_ref_sets(self.api.tables[self.TABLE], row)
        self._converge(row)


class EnsureRouter(_EnsureParent):
    """Logical router `name` with these external_ids (merged) and columns."""

    TABLE = LR

    def __init__(self, api, name: str, external_ids: dict, *, columns: dict | None = None,
                 merge_ids: bool = True):
        super().__init__(api, name, external_ids, columns, merge_ids)


class EnsureSwitch(_EnsureParent):
    """Logical switch `name` with these external_ids (merged) and columns;
    `other_config`, when given, replaces the column."""

    TABLE = LS

    def __init__(self, api, name: str, external_ids: dict, other_config: dict | None = None,
                 *, columns: dict | None = None, merge_ids: bool = True):
        columns = dict(columns or {})
        if other_config is not None:
            columns["other_config"] = dict(other_config)
        super().__init__(api, name, external_ids, columns, merge_ids)


class EnsurePort(_Ensure):
    """A switch port with exactly these addresses/port_security/type/options
    (any of them KEEP: not managed) and external_ids.

    A port of the same name on another switch is moved (a pod re-created with
    another subnet, a StatefulSet pod whose subnet changed)."""

    TABLE = LSP

    def __init__(self, api, switch: str, name: str, addresses, port_security,
                 external_ids: dict, type="", options=None, *,
                 columns: dict | None = None, merge_ids: bool = False):
        super().__init__(api, name, external_ids, columns, merge_ids)
        self.switch = switch
        self.addresses = addresses if addresses is KEEP else list(addresses)
        self.port_security = port_security if port_security is KEEP else list(port_security)
        self.type = type
        self.options = options if options is KEEP else dict(options or {})

    def describe(self):
        return f"{self.switch}/{self.name}"

    def run_idl(self, txn):
        ls = find(self.api, txn, LS, self.switch)
        if ls is None:
            # the layer's error model: "RowNotFound: Cannot find Logical_Switch with name=..."
            raise idlutils.RowNotFound(table=LS, col="name", match=self.switch)
        row = _child_of(self.api, txn, ls, LS, LSP, self.name)
        _set_if_changed(row, "addresses", self.addresses)
        _set_if_changed(row, "port_security", self.port_security)
        _set_if_changed(row, "type", self.type)
        _set_if_changed(row, "options", self.options)
        self._converge(row)


def _child_of(api, txn, parent, parent_table: str, table: str, name: str):
    """The port `name` (created if missing) as a member of `parent`'s `ports`,
    taken out of any other parent's (a port moved to another switch/router)."""
    row = find(api, txn, table, name)
    if row is None:
        row = insert(api, txn, table, name)
        parent.addvalue("ports", row)
    elif not has_ref(parent, "ports", row):
        for other in referrers(api, parent_table, "ports", row):
            if other is not parent:
                other.delvalue("ports", row)
        parent.addvalue("ports", row)
    return row


class EnsureRouterPort(_Ensure):
    """A router port with exactly this mac/networks (normalized like
    ovn-nbctl: lower-case MAC, canonical CIDRs) and external_ids; `peer`
    None means no peer, KEEP not managed.  A port of the same name on another
    router is moved."""

    TABLE = LRP

    def __init__(self, api, router: str, name: str, mac: str, networks: list[str],
                 external_ids: dict, *, peer=KEEP, columns: dict | None = None,
                 merge_ids: bool = False):
        super().__init__(api, name, external_ids, columns, merge_ids)
        self.router = router
        try:
            self.mac = str(netaddr.EUI(mac, dialect=netaddr.mac_unix_expanded))
            self.networks = [str(netaddr.IPNetwork(n)) for n in networks]
        except (netaddr.AddrFormatError, TypeError, ValueError) as exc:
            raise ValueError(f"router port {name}: bad mac {mac!r} or networks "
                             f"{list(networks)!r}: {exc}") from None
        self.peer = peer if peer is KEEP else ([peer] if peer else [])

    def describe(self):
        return f"{self.router}/{self.name}"

    def run_idl(self, txn):
        lr = find(self.api, txn, LR, self.router)
        if lr is None:
            raise idlutils.RowNotFound(table=LR, col="name", match=self.router)
        row = _child_of(self.api, txn, lr, LR, LRP, self.name)
        _set_if_changed(row, "mac", self.mac)
        _set_if_changed(row, "networks", self.networks)
        _set_if_changed(row, "peer", self.peer)
        self._converge(row)


class DeletePort(Command):
    """Delete a switch port if it exists (the switch name avoids a scan)."""

    def __init__(self, api, name: str, switch: str | None = None):
        super().__init__(api)
        self.name, self.switch = name, switch

    def describe(self):
        return self.name

    def run_idl(self, txn):
        row = find(self.api, txn, LSP, self.name)
        if row is None:
            return
        ls = find(self.api, txn, LS, self.switch) if self.switch else None
        if ls is not None and has_ref(ls, "ports", row):
            parents = [ls]
        else:
            parents = referrers(self.api, LS, "ports", row)
        for p in parents:
            p.delvalue("ports", row)
        if not isinstance(row, TransientRow):   # a non-root row: gone once unreferenced
            row.delete()
        self.result = True


class DeleteRouterPort(Command):
    """Delete a router port if it exists."""

    def __init__(self, api, router: str, name: str):
        super().__init__(api)
        self.router, self.name = router, name

    def describe(self):
        return f"{self.router}/{self.name}"

    def run_idl(self, txn):
        row = find(self.api, txn, LRP, self.name)
        if row is None:
            return
        lr = find(self.api, txn, LR, self.router)
        if lr is not None and has_ref(lr, "ports", row):
            parents = [lr]
        else:
            parents = referrers(self.api, LR, "ports", row)
        for p in parents:
            p.delvalue("ports", row)
        row.delete()
        self.result = True


PG = "Port_Group"
AS = "Address_Set"


class EnsurePortGroup(_EnsureParent):
    """Port group `name` with these external_ids (merged) and columns.  Its
    members are not managed here: PortGroupAddPorts / PortGroupRemovePorts
    change them by mutation, so batched or concurrent writers never replace
    each other's members."""

    TABLE = PG

    def __init__(self, api, name: str, external_ids: dict, *, columns: dict | None = None,
                 merge_ids: bool = True):
        super().__init__(api, name, external_ids, columns, merge_ids)


class EnsureAddressSet(_EnsureParent):
    """Address set `name` with these external_ids (merged) and columns; its
    addresses change by mutation (AddressSetAddAddresses / ...Remove...)."""

    TABLE = AS

    def __init__(self, api, name: str, external_ids: dict, *, columns: dict | None = None,
                 merge_ids: bool = True):
        super().__init__(api, name, external_ids, columns, merge_ids)


class EnsureMeter(Command):
    """Meter `name` (unit pktps, one drop band of `rate` and `burst`; `fair`:
    one bucket per ACL using it, else one bucket all of them share), created
    or converged in place."""

    def __init__(self, api, name: str, rate: int, burst: int, external_ids: dict,
                 fair: bool = False):
        super().__init__(api)
        self.name, self.rate, self.burst, self.fair = name, int(rate), int(burst), fair
        self.external_ids = dict(external_ids)

    def describe(self):
        return f"{self.name} {self.rate}/s burst {self.burst}"

    def run_idl(self, txn):
        meter = find(self.api, txn, METER, self.name)
        bands = []
        if meter is None:
            meter = insert(self.api, txn, METER, self.name)
            meter.unit = "pktps"
        else:
            bands = list(meter.bands)
        if not _one_band(bands, self.rate, self.burst):
            band = txn.insert(self.api.tables[METER_BAND])
            band.action, band.rate, band.burst_size = "drop", self.rate, self.burst
            meter.bands = [band.uuid]
        _set_if_changed(meter, "fair", [self.fair])
        _set_if_changed(meter, "external_ids", self.external_ids)


def meter_is(api, name: str, rate: int, burst: int, fair: bool = False) -> bool:
    """Does the replica hold meter `name` with exactly this band?"""
    with api.ovsdb_connection.lock:
        try:
            meter = api.lookup(METER, name)
        except idlutils.RowNotFound:
            return False
        return _one_band(list(meter.bands), rate, burst) and list(meter.fair) == [fair]


def _one_band(bands: list, rate: int, burst: int) -> bool:
    return (len(bands) == 1 and bands[0].rate == rate and bands[0].burst_size == burst
            and bands[0].action == "drop")


class _Members(Command):
    """Add or remove members of one set column of a named row, by mutation;
    idempotent (nothing is sent for a member already as wanted).  The row may
    be created earlier in the same transaction.  result: how many members
    were queued for a change."""

    TABLE = ""
    COLUMN = ""
    ADD = True

    def __init__(self, api, name: str, members):
        super().__init__(api)
        self.name = name
        self.members = [members] if isinstance(members, str) else list(members)

    def describe(self):
        shown = ", ".join(map(str, self.members[:5]))
        more = f", ... ({len(self.members)})" if len(self.members) > 5 else ""
        return f"{self.name}: {shown}{more}"

    def run_idl(self, txn):
        row = find(self.api, txn, self.TABLE, self.name)
        if row is None:
            raise idlutils.RowNotFound(table=self.TABLE, col="name", match=self.name)
        self.result = 0
        for m in self.members:
            member = self._member(txn, m)
            if member is None:
                continue
            self.result += _mutate_set(row, self.COLUMN, member, self._has(row, member),
                                       self.ADD)

    def _has(self, row, member) -> bool:
        return has_value(row, self.COLUMN, member)

    def _member(self, txn, m):
        return m


class _PortMembers(_Members):
    TABLE = PG
    COLUMN = "ports"

    def _has(self, row, member) -> bool:
        return has_ref(row, self.COLUMN, member)

    def _member(self, txn, m):
        lsp = find(self.api, txn, LSP, m)
        if lsp is None and self.ADD:
            raise idlutils.RowNotFound(table=LSP, col="name", match=m)
        return lsp    # removing a port that does not exist: nothing to do


class PortGroupAddPorts(_PortMembers):
    """Add logical switch ports (by name; they may be created earlier in the
    same transaction) to port group `name`; a missing port is an error."""

    ADD = True


class PortGroupRemovePorts(_PortMembers):
    """Remove logical switch ports (by name) from port group `name`; a port
    that is not a member, or does not exist, is a no-op."""

    ADD = False


class _AddressMembers(_Members):
    TABLE = AS
    COLUMN = "addresses"


class AddressSetAddAddresses(_AddressMembers):
    """Add addresses (strings as OVN takes them: "10.16.0.5", "10.16.0.0/24")
    to address set `name`."""

    ADD = True


class AddressSetRemoveAddresses(_AddressMembers):
    """Remove addresses from address set `name`; an absent one is a no-op."""

    ADD = False


def address_set_rows(name: str, external_ids: dict, want, have) -> list:
    """NB writer builders that make address set `name` hold exactly `want`,
    given what it holds now (`have`; None or empty for a new set): the set
    ensured, the difference added and removed by mutation (concurrent writers
    never replace each other's members)."""
    want, have = set(want), set(have or ())
    out = [lambda api: EnsureAddressSet(api, name, external_ids)]
    if want - have:
        out.append(lambda api, a=sorted(want - have): AddressSetAddAddresses(api, name, a))
    if have - want:
        out.append(lambda api, a=sorted(have - want): AddressSetRemoveAddresses(api, name, a))
    return out


class _DeleteNamed(Command):
    TABLE = ""

    def __init__(self, api, name: str):
        super().__init__(api)
        self.name = name

    def describe(self):
        return self.name

    def run_idl(self, txn):
        row = find(self.api, txn, self.TABLE, self.name)
        if row is None:
            return
        row.delete()
        self.result = True


class DeletePortGroup(_DeleteNamed):
    """Delete port group `name` (and so its ACLs) if it exists."""

    TABLE = PG


class DeleteAddressSet(_DeleteNamed):
    """Delete address set `name` if it exists."""

    TABLE = AS


class DeleteMeter(_DeleteNamed):
    """Delete meter `name` (and so its bands) if it exists."""

    TABLE = METER


class DeleteSwitch(_DeleteNamed):
    """Delete a switch (OVSDB garbage-collects its ports) if it exists."""

    TABLE = LS


# --- router policies and static routes -------------------------------------------------
LR_POLICY = "Logical_Router_Policy"
LR_ROUTE = "Logical_Router_Static_Route"


def _owned_by(row, owner_ids: dict) -> bool:
    ids = _ids(row)
    return all(ids.get(k) == v for k, v in owner_ids.items())


class EnsureRouterPolicies(Command):
    """Router `router`'s policies whose external_ids contain `owner_ids`
    become exactly `specs`: (priority, match, action, nexthops) tuples,
    identified by (priority, match); other owners' policies are untouched.
    Policies are not root rows: dropping the reference deletes them."""

    def __init__(self, api, router: str, owner_ids: dict, specs):
        super().__init__(api)
        self.router, self.owner_ids = router, dict(owner_ids)
        self.specs = {(p, m): (a, list(n)) for p, m, a, n in specs}

    def describe(self):
        return f"{self.router} policies of {self.owner_ids}: {len(self.specs)}"

    def run_idl(self, txn):
        lr = find(self.api, txn, LR, self.router)
        if lr is None:
            raise idlutils.RowNotFound(table=LR, col="name", match=self.router)
        seen = set()
        for row in list(lr.policies):
            if not _owned_by(row, self.owner_ids):
                continue
            key = (row.priority, row.match)
            if key not in self.specs or key in seen:
                lr.delvalue("policies", row)
                continue
            seen.add(key)
            action, nexthops = self.specs[key]
            _set_if_changed(row, "action", action)
            _set_if_changed(row, "nexthops", nexthops)
        for (prio, match), (action, nexthops) in self.specs.items():
            if (prio, match) in seen:
                continue
            row = txn.insert(self.api.tables[LR_POLICY])
            row.priority, row.match, row.action = prio, match, action
            row.nexthops = nexthops
            row.external_ids = dict(self.owner_ids)
            lr.addvalue("policies", row)


class EnsureRouterRoutes(Command):
    """Router `router`'s static routes whose external_ids contain `owner_ids`
    become exactly `routes`: {ip_prefix: nexthop}."""

    def __init__(self, api, router: str, owner_ids: dict, routes: dict):
        super().__init__(api)
        self.router, self.owner_ids, self.routes = router, dict(owner_ids), dict(routes)

    def describe(self):
        return f"{self.router} routes of {self.owner_ids}: {self.routes}"

    def run_idl(self, txn):
        lr = find(self.api, txn, LR, self.router)
        if lr is None:
            raise idlutils.RowNotFound(table=LR, col="name", match=self.router)
        seen = set()
        for row in list(lr.static_routes):
            if not _owned_by(row, self.owner_ids):
                continue
            if row.ip_prefix not in self.routes or row.ip_prefix in seen:
                lr.delvalue("static_routes", row)
                continue
            seen.add(row.ip_prefix)
            _set_if_changed(row, "nexthop", self.routes[row.ip_prefix])
        for prefix, nexthop in self.routes.items():
            if prefix not in seen:
                row = txn.insert(self.api.tables[LR_ROUTE])
                row.ip_prefix, row.nexthop = prefix, nexthop
                row.external_ids = dict(self.owner_ids)
                lr.addvalue("static_routes", row)


def router_policies_are(api, router: str, owner_ids: dict, specs) -> bool:
    """Does the replica already hold exactly these policies of this owner?"""
    with api.ovsdb_connection.lock:
        try:
            lr = api.lookup(LR, router)
        except idlutils.RowNotFound:
            return False
        have = sorted((r.priority, r.match, r.action, sorted(r.nexthops))
                      for r in lr.policies if _owned_by(r, owner_ids))
    return have == sorted((p, m, a, sorted(n)) for p, m, a, n in specs)
