"""One UUID object per row in the IDL replica, however many rows refer to it.

The ovs IDL parses every reference anew: a pod port is named by its own row's
UUID and again by a UUID object in its switch's `ports` and in each port
group's `ports` (~100 B each: the object and its 128-bit int).  `RefSharer`
makes each reference Atom hold the referenced row's own UUID object (an equal
value: hashes and comparisons are unchanged), so a reference costs its Atom
and its slot in the set only.

A reference often arrives before its row: the switch's update naming a new
port may come first in the same update message.  Such Atoms wait in `pending`
until the row is created (`created`); whatever is left at the end of the IDL's
run (a row not replicated, or gone meanwhile) is forgotten (`forget`).  A row
kept as a tuple (pacific.ovn.compact) is referred to by the uuid object of its
entry, as a row by its own (`arrived`).
Connection thread only (called by pacific.ovn.base.NotifyingIdl).
"""
from __future__ import annotations


class RefSharer:
    def __init__(self, tables, compact=None):
        self.tables = tables     # the IDL's table name -> IdlTable
        self.compact = compact if compact is not None else {}   # name -> CompactTable
        self.pending: dict = {}  # uuid -> [Atom, ...] waiting for that row

    def share(self, column_type, datum) -> None:
        """Point the reference Atoms of a set `datum` (of `column_type`) at
        their rows' UUID objects."""
        ref = column_type.key.ref_table_name
        if not ref or column_type.value is not None:
            return
        table = self.tables.get(ref)
        if table is None:
            return
        rows = table.rows
        compact = self.compact.get(ref)
        for atom in datum.values:
            row = rows.get(atom.value)
            if row is not None:
                own = row.uuid
            else:
                entry = compact.get(atom.value) if compact is not None else None
                if entry is None:
                    self.pending.setdefault(atom.value, []).append(atom)
                    continue
                own = entry[0]
            if own is not atom.value:
                atom.value = own

    def created(self, row) -> None:
        """A row was created: its own reference columns, and the Atoms that
        waited for it."""
        for name, datum in row._data.items():
            col = row._table.columns.get(name)
            if col is not None and col.type.key.ref_table_name:
                self.share(col.type, datum)
        waiting = self.pending.pop(row.uuid, None)
        for atom in waiting or ():
            atom.value = row.uuid

    def arrived(self, entry) -> None:
        """A compacted row was stored (its entry; entry[0] its uuid): the
        Atoms that waited for it."""
        if entry is None:
            return
        for atom in self.pending.pop(entry[0], None) or ():
            atom.value = entry[0]

    def forget(self) -> None:
        if self.pending:
            self.pending = {}
