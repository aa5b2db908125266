"""Idempotent "ensure" commands for the controller's NB objects (ovsdbapp).

ovsdbapp's `*_add(may_exist=True)` commands do not update an existing row, and
name lookups do not see rows inserted earlier in the same transaction.  The
controller needs both (a batch may create a subnet's switch and a pod's port on
it in one transaction, and a reconcile must converge an existing row to the
desired one), so these commands implement "make it so":

    txn.add(EnsureSwitch(api, "s1", ext))
    txn.add(EnsurePort(api, "s1", "p.ns", ["0a:58:... 10.16.0.5"], [...], ext))
    txn.add(DeletePort(api, "p.ns", switch="s1"))

Each is an ovsdbapp `BaseCommand`; rows created in the same transaction are
remembered on the transaction object so later commands find them by name.
"""
from __future__ import annotations

from ovs.db import data as ovs_data
from ovs.db import types as ovs_types
from ovsdbapp.backend.ovs_idl import command as ovs_cmd
from ovsdbapp.backend.ovs_idl import idlutils

LS = "Logical_Switch"
LSP = "Logical_Switch_Port"
LR = "Logical_Router"
LRP = "Logical_Router_Port"


def _created(txn) -> dict:
    d = getattr(txn, "_pacific_created", None)
    if d is None:
        d = {}
        txn._pacific_created = d
    return d


def find(api, txn, table: str, name: str):
    """Row named `name` in `table`, including rows inserted in `txn`; or None."""
    row = _created(txn).get((table, name))
    if row is not None:
        return row
    try:
        return api.lookup(table, name)
    except idlutils.RowNotFound:
        return None


def _insert(api, txn, table: str, name: str):
    row = txn.insert(api.tables[table])
    row.name = name
    _created(txn)[(table, name)] = row
    return row


def _set_if_changed(row, column: str, value) -> None:
    # a row inserted in this transaction has no value yet: getattr raises
    if getattr(row, column, None) != value:
        setattr(row, column, value)


def has_ref(parent, column: str, child) -> bool:
    """Is `child` in the reference set `parent.<column>` (e.g. a port in a
    switch's ports), counting this transaction's addvalue/delvalue?

    Reading ``parent.ports`` makes the ovs IDL build (and sort) a list of every
    referenced Row, O(ports) per read, and after an addvalue in the same
    transaction several times over: with 10,000 pods on one switch that was most
    of the controller's CPU.  This checks the committed datum and the pending
    mutations directly, O(1).  Falls back to the attribute when the column was
    replaced wholesale in this transaction."""
    changes = parent._changes
    if changes and column in changes:
        return child in getattr(parent, column)
    mutations = parent._mutations or {}
    if child in mutations.get("_removes", {}).get(column, ()):
        return False
    if child in mutations.get("_inserts", {}).get(column, ()):
        return True
    committed = parent._data
    if not committed or column not in committed:
        return False
    return ovs_data.Atom(ovs_types.UuidType, child.uuid) in committed[column].values


def referrers(api, table: str, column: str, child) -> list:
    """Rows of `table` whose reference set `column` holds `child`."""
    return [r for r in list(api.tables[table].rows.values()) if has_ref(r, column, child)]


def port_is(api, switch: str, name: str, addresses: list[str], port_security: list[str],
            external_ids: dict, type: str = "", options: dict | None = None) -> bool:
    """Does the local replica already hold exactly this switch port?  A
    lock-free read from a worker thread, used to skip a no-op NB submission;
    any doubt (row changing under us, missing row) answers False, and the
    caller then submits EnsurePort as usual."""
    try:
        row = api.lookup(LSP, name)
        ls = api.lookup(LS, switch)
        return (has_ref(ls, "ports", row) and row.addresses == list(addresses)
                and row.port_security == list(port_security) and row.type == type
                and row.options == dict(options or {}) and row.external_ids == dict(external_ids))
    except Exception:   # noqa: BLE001 - not found, or changed while we looked
        return False


def _ids(row) -> dict:
    return dict(getattr(row, "external_ids", None) or {})


class _Base(ovs_cmd.BaseCommand):
    def __str__(self):
        return f"{self.__class__.__name__}({self.describe()})"

    def describe(self) -> str:  # pragma: no cover - overridden
        return ""


class EnsureRouter(_Base):
    def __init__(self, api, name: str, external_ids: dict):
        super().__init__(api)
        self.name, self.external_ids = name, dict(external_ids)

    def describe(self):
        return self.name

    def run_idl(self, txn):
        row = find(self.api, txn, LR, self.name) or _insert(self.api, txn, LR, self.name)
        _set_if_changed(row, "external_ids", {**_ids(row), **self.external_ids})
        self.result = row.uuid


class EnsureSwitch(_Base):
    def __init__(self, api, name: str, external_ids: dict, other_config: dict | None = None):
        super().__init__(api)
        self.name, self.external_ids = name, dict(external_ids)
        self.other_config = dict(other_config or {})

    def describe(self):
        return self.name

    def run_idl(self, txn):
        row = find(self.api, txn, LS, self.name) or _insert(self.api, txn, LS, self.name)
        _set_if_changed(row, "external_ids", {**_ids(row), **self.external_ids})
        if self.other_config:
            _set_if_changed(row, "other_config", {**dict(getattr(row, "other_config", None) or {}), **self.other_config})
        self.result = row.uuid


class EnsurePort(_Base):
    """A switch port with exactly these addresses/port_security/type/options.

    A port of the same name on another switch is moved (a pod re-created with
    another subnet, a StatefulSet pod whose subnet changed)."""

    def __init__(self, api, switch: str, name: str, addresses: list[str],
                 port_security: list[str], external_ids: dict,
                 type: str = "", options: dict | None = None):
        super().__init__(api)
        self.switch, self.name = switch, name
        self.addresses, self.port_security = list(addresses), list(port_security)
        self.external_ids, self.type = dict(external_ids), type
        self.options = dict(options or {})

    def describe(self):
        return f"{self.switch}/{self.name}"

    def run_idl(self, txn):
        ls = find(self.api, txn, LS, self.switch)
        if ls is None:
            raise RuntimeError(f"logical switch {self.switch} does not exist (port {self.name})")
        row = find(self.api, txn, LSP, self.name)
        if row is None:
            row = _insert(self.api, txn, LSP, self.name)
            ls.addvalue("ports", row)
        elif not has_ref(ls, "ports", row):
            for other in referrers(self.api, LS, "ports", row):
                if other is not ls:
                    other.delvalue("ports", row)
            ls.addvalue("ports", row)
        _set_if_changed(row, "addresses", self.addresses)
        _set_if_changed(row, "port_security", self.port_security)
        _set_if_changed(row, "type", self.type)
        _set_if_changed(row, "options", self.options)
        _set_if_changed(row, "external_ids", self.external_ids)
        self.result = row.uuid


class EnsureRouterPort(_Base):
    def __init__(self, api, router: str, name: str, mac: str, networks: list[str],
                 external_ids: dict):
        super().__init__(api)
        self.router, self.name, self.mac = router, name, mac
        self.networks, self.external_ids = list(networks), dict(external_ids)

    def describe(self):
        return f"{self.router}/{self.name}"

    def run_idl(self, txn):
        lr = find(self.api, txn, LR, self.router)
        if lr is None:
            raise RuntimeError(f"logical router {self.router} does not exist (port {self.name})")
        row = find(self.api, txn, LRP, self.name)
        if row is None:
            row = _insert(self.api, txn, LRP, self.name)
            lr.addvalue("ports", row)
        _set_if_changed(row, "mac", self.mac)
        _set_if_changed(row, "networks", self.networks)
        _set_if_changed(row, "external_ids", self.external_ids)
        self.result = row.uuid


class DeletePort(_Base):
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
        parents = []
        ls = find(self.api, txn, LS, self.switch) if self.switch else None
        if ls is not None and has_ref(ls, "ports", row):
            parents = [ls]
        else:
            parents = referrers(self.api, LS, "ports", row)
        for p in parents:
            p.delvalue("ports", row)
        row.delete()
        self.result = True


class DeleteRouterPort(_Base):
    def __init__(self, api, router: str, name: str):
        super().__init__(api)
        self.router, self.name = router, name

    def describe(self):
        return f"{self.router}/{self.name}"

    def run_idl(self, txn):
        row = find(self.api, txn, LRP, self.name)
        if row is None:
            return
        for lr in referrers(self.api, LR, "ports", row):
            lr.delvalue("ports", row)
        row.delete()


class DeleteSwitch(_Base):
    """Delete a switch and its ports if it exists."""

    def __init__(self, api, name: str):
        super().__init__(api)
        self.name = name

    def describe(self):
        return self.name

    def run_idl(self, txn):
        row = find(self.api, txn, LS, self.name)
        if row is None:
            return
        row.delete()


def owned_rows(api, table: str, kind: str, owner_kind_key: str) -> list:
    """Rows of `table` whose external_ids[owner_kind_key] == kind (IDL read)."""
    return [r for r in api.tables[table].rows.values()
            if r.external_ids.get(owner_kind_key) == kind]
