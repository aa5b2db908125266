"""Rows of one owner kind kept as tuples instead of ovs IDL Rows.

The controller's NB replica holds every pod's switch port: 100,000 at scale.
As an ovs IDL Row each cost ~2.7 KB even after `_Compactor` (a Row with five
dicts, a Datum with a dict and an Atom per column, the name index): more than
half of the controller's memory.  A `CompactTable` keeps those rows (a table's
rows whose ``external_ids`` name one owner kind, e.g. pods' ports) as one
tuple each: the uuid, then each monitored column's value (a scalar as itself,
a set as a sorted tuple, a map as a flat sorted tuple ``(k1, v1, k2, v2...)``),
recurring values shared: ~0.5 KB.

`NotifyingIdl` hands each "update2/3" row change of the table to `update()`
first: a matching row is kept here and never becomes a Row, so it raises no
ROW_CREATE/UPDATE/DELETE notice (no RowEvent, no row watcher, no owner-index
entry) and is not in ``tables[table].rows``.  Readers go through the API:

* ``api.lookup(table, name or uuid)`` answers a `TransientRow`, an ovs Row
  built from the entry and not in the table: readable, and writable in a
  transaction like any row (the IDL sends an "update" by uuid) -- so the
  ensure commands work on it unchanged.  Never ``delete()`` one: a port is
  deleted by removing it from its switch (a non-root row); the IDL would put
  a deleted row back into the table after the transaction;
* ``rows_owned`` lists entries as RowSnapshots; `uuid_of` / `name_of` answer
  membership questions without building rows.

A row that stops matching (its owner kind changed) becomes an ordinary Row;
one that starts matching after it was created stays one (Pacific writes the
owner kind when it creates a row).  Connection thread, or under the
connection lock, for everything.
"""
from __future__ import annotations

import sys
from typing import Any

import ovs.ovsuuid
from ovs.db import data as ovs_data
from ovs.db import idl as ovs_idl
from ovs.db import types as ovs_types


class TransientRow(ovs_idl.Row):
    """A Row built from a CompactTable entry for one read or one transaction;
    not in the IDL's table (see the module doc: never delete() it)."""


class CompactTable:
    SHARED_MAX = 4096     # shared recurring values kept
    SEEN_MAX = 8192       # values seen once, candidates for sharing

    def __init__(self, table, key: str, value: str):
        """`table`: the IDL's table (schema with the monitored columns);
        rows whose external_ids[key] == value are kept here."""
        self.table = table
        self.match = (key, value)
        self.columns = sorted(table.columns)           # entry[i + 1] is columns[i]
        self.types = [table.columns[c].type for c in self.columns]
        self._name = self.columns.index("name") + 1 if "name" in table.columns else None
        self._ids = self.columns.index("external_ids") + 1
        self.by_uuid: dict[Any, tuple] = {}
        self.by_name: dict[str, tuple] = {}
        self._shared: dict = {}
        self._seen: set = set()

    def __len__(self) -> int:
        return len(self.by_uuid)

    # --- the IDL's side --------------------------------------------------------
    def update(self, uuid, row_update: dict):
        """One row change from the server: True if handled here; None if it is
        not this table's to keep (the IDL processes it); or a row update (an
        "insert" of the whole row) for the IDL when an entry stopped matching."""
        if "delete" in row_update:
            return True if self._drop(uuid) else None
        new = row_update.get("insert", row_update.get("initial"))
        if new is not None:
            data = {c: self._from_json(i, new[c]) if c in new else _default(t)
                    for i, (c, t) in enumerate(zip(self.columns, self.types))}
            if not self._matches(data["external_ids"]):
                return None
            self._drop(uuid)
            self._store(uuid, data)
            return True
        diff = row_update.get("modify")
        entry = self.by_uuid.get(uuid)
        if diff is None or entry is None:
            return None
        data = self.datums(entry)
        for i, c in enumerate(self.columns):
            if c in diff:
                data[c] = data[c].diff(self._from_json(i, diff[c]))
        self._drop(uuid)
        if self._matches(data["external_ids"]):
            self._store(uuid, data)
            return True
        return {"insert": {c: d.to_json() for c, d in data.items()}}

    def clear(self) -> None:
        self.by_uuid.clear()
        self.by_name.clear()

    # --- readers ---------------------------------------------------------------
    def get(self, record) -> tuple | None:
        """The entry named `record` (a str) or with that uuid."""
        if isinstance(record, str):
            return self.by_name.get(record)
        return self.by_uuid.get(record)

    def uuid_of(self, name: str):
        e = self.by_name.get(name)
        return None if e is None else e[0]

    def name_of(self, uuid) -> str | None:
        e = self.by_uuid.get(uuid)
        return None if e is None or self._name is None else e[self._name]

    def value(self, entry: tuple, column: str):
        """A column's value as the IDL would give it (list, dict or scalar)."""
        i = self.columns.index(column)
        v, t = entry[i + 1], self.types[i]
        if t.is_map():
            return dict(zip(v[::2], v[1::2]))
        return v if t.is_scalar() else list(v)

    def external_ids(self, entry: tuple) -> dict:
        v = entry[self._ids]
        return dict(zip(v[::2], v[1::2]))

    def datums(self, entry: tuple) -> dict:
        """column -> a new Datum of the entry's value."""
        out = {}
        for c, t, v in zip(self.columns, self.types, entry[1:]):
            kt = t.key.type
            if t.is_map():
                vt = t.value.type
                values = {ovs_data.Atom(kt, v[i]): ovs_data.Atom(vt, v[i + 1])
                          for i in range(0, len(v), 2)}
            elif t.is_scalar():
                values = {ovs_data.Atom(kt, v): None}
            else:
                values = {ovs_data.Atom(kt, x): None for x in v}
            out[c] = ovs_data.Datum(t, values)
        return out

    def row(self, idl, entry: tuple) -> TransientRow:
        return TransientRow(idl, self.table, entry[0], self.datums(entry))

    # --- internals -------------------------------------------------------------
    def _from_json(self, i: int, value):
        return ovs_data.Datum.from_json(self.types[i], value)

    def _matches(self, ids) -> bool:
        key, value = self.match
        for k, v in ids.values.items():
            if k.value == key:
                return v.value == value
        return False

    def _drop(self, uuid) -> bool:
        entry = self.by_uuid.pop(uuid, None)
        if entry is None:
            return False
        if self._name is not None and self.by_name.get(entry[self._name]) is entry:
            del self.by_name[entry[self._name]]
        return True

    def _store(self, uuid, data: dict) -> None:
        values: list = [uuid]
        for c, t in zip(self.columns, self.types):
            d = data[c]
            if t.is_map():
                v = tuple(x for k, val in sorted(d.values.items(), key=lambda kv: kv[0].value)
                          for x in (_intern(k.value), self._share(val.value, ())))
            elif t.is_scalar():
                (atom,) = d.values
                v = atom.value
                if c == "name" and type(v) is str:
                    v = sys.intern(v)   # a pod's port name is in its record too: one copy
            else:
                v = tuple(sorted(self._share(a.value, ()) for a in d.values))
            values.append(self._share(v, values))
        entry = tuple(values)
        self.by_uuid[uuid] = entry
        if self._name is not None:
            self.by_name[entry[self._name]] = entry

    def _share(self, v, row: list):
        """An equal value already held (of this row, or recurring among rows)."""
        if type(v) is tuple and v:
            for other in row[1:]:
                if other == v and type(other) is tuple:
                    return other
        try:
            shared = self._shared.get(v)
        except TypeError:
            return v
        if shared is not None:
            return shared
        if v in self._seen:
            self._seen.discard(v)
            if len(self._shared) < self.SHARED_MAX:
                self._shared[v] = v
        else:
            if len(self._seen) >= self.SEEN_MAX:
                self._seen.clear()
            self._seen.add(v)
        return v


def _default(t):
    """A column's default value (the server leaves such columns out): as the
    ovs IDL makes it (Idl.__add_default; ovs' Datum.default nests an Atom in
    a scalar's Atom)."""
    if t.n_min == 0 or t.is_map():
        return ovs_data.Datum(t, {})
    value = t.key.type.default
    if t.key.type is ovs_types.UuidType:
        value = ovs.ovsuuid.to_json(value)
    return ovs_data.Datum.from_json(t, value)


def _intern(key):
    """A map key (few distinct: external_ids' and options' keys)."""
    return sys.intern(key) if type(key) is str and len(key) <= 64 else key
