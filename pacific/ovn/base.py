"""Connection, transaction and ownership machinery shared by NB and OVS APIs.

Not used directly: see :mod:`pacific.ovn.nb` and :mod:`pacific.ovn.ovs`.

Connection model.  Each API object owns exactly one ovs IDL connection (one
TCP/unix session, one ovsdbapp ``Connection`` thread, one event-handler
thread).  ovsdbapp keeps ``Backend.ovsdb_connection`` as a *class* attribute
that the first instance fixes for every later instance of the same class; we
override that property so the connection lives on the instance, and two APIs
on two databases in one process stay separate.  A process should create one
API object per database and share it (it is thread-safe: commands are queued
to the connection thread).

Reconnect.  The ovs IDL reconnects by itself (back-off capped at
``MAX_BACKOFF_MS``) and re-reads the monitored tables, so the cache and every
command work again after an ovsdb-server restart.  A transaction issued while
the server is away is retried until its timeout, then raises
:class:`~pacific.ovn.errors.OvnTimeoutError`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
import time
import uuid as uuidlib
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple

from ovs.db import data as ovs_data
from ovs.db import error as ovs_error
from ovs.db import idl as ovs_idl
from ovs.db import types as ovs_types
from ovsdbapp.backend.ovs_idl import command as ovsdbapp_cmd
from ovsdbapp.backend.ovs_idl import connection as ovsdbapp_conn
from ovsdbapp.backend.ovs_idl import event as ovsdbapp_event
from ovsdbapp.backend.ovs_idl import idlutils
from ovsdbapp.backend.ovs_idl import rowview
from ovsdbapp.backend.ovs_idl import transaction as ovsdbapp_txn
from ovsdbapp import exceptions as ovsdbapp_exc

from pacific import names
from pacific.ovn import cjson
from pacific.ovn.compact import CompactTable
from pacific.ovn.refs import RefSharer
from pacific.ovn.errors import (OvnConnectionError, OvnError, OvnTimeoutError,
                                OvnTransactionError)

LOG = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
# Reconnect back-off of the IDL session (ovs default max is 8 s; a restarted
# local ovsdb-server should be picked up quickly).
MIN_BACKOFF_MS = 100
MAX_BACKOFF_MS = 1000
# Extra time the caller waits for the connection thread beyond the
# transaction's own timeout, so the thread (which gives up at `timeout`)
# always answers first and a transaction never commits after its caller
# was told it failed.
_RESULT_GRACE = 5.0
_UNSET = object()


class Owner(NamedTuple):
    """Who owns a row: kind (names.OWNER_KIND_*) and name ("ns/name" or name)."""

    kind: str
    name: str

    def external_ids(self, **extra: str) -> dict[str, str]:
        """external_ids naming this owner, plus `extra` keys."""
        ids = {names.EXT_OWNER_KIND: self.kind, names.EXT_OWNER: self.name}
        ids.update(extra)
        return ids


def owner_ids(owner: Owner, extra: dict[str, str] | None = None,
              created_by: str | None = None) -> dict[str, str]:
    ids = owner.external_ids(**(extra or {}))
    if created_by:
        ids.setdefault(names.EXT_CREATED_BY, created_by)
    return ids


def fetch_schema_helper(remote: str, schema: str, timeout: float):
    """Schema helper from the server itself (so its version always matches),
    retried until `timeout` while the server is not (yet) there."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            return idlutils.create_schema_helper(
                idlutils.fetch_schema_json(remote, schema))
        except Exception as e:  # ovsdbapp raises a bare Exception
            if time.monotonic() + delay > deadline:
                raise OvnConnectionError(remote, schema,
                                         f"schema not retrieved within "
                                         f"{timeout:g}s ({e})") from e
            time.sleep(delay)
            delay = min(delay * 2, 1.0)


class OwnerIndex:
    """Which rows each owner has, per table: (table, owner kind) -> owner -> uuid(s),
    kept from the IDL's row changes in the connection thread (under its lock), so
    `rows_owned` reads the rows of one kind or one owner instead of scanning a
    table of 100,000 pod ports.  A single row is stored as its uuid, more as a set.

    Rows deleted while the connection was down (the IDL re-reads without deletes)
    stay listed until looked up: readers skip a uuid the table no longer has."""

    def __init__(self):
        self._by: dict[tuple[str, str], dict[str, Any]] = {}

    @staticmethod
    def _key(ids) -> tuple[str, str] | None:
        kind = ids.get(names.EXT_OWNER_KIND)
        return None if kind is None else (kind, ids.get(names.EXT_OWNER, ""))

    def _add(self, table: str, key, uuid) -> None:
        owners = self._by.setdefault((table, key[0]), {})
        cur = owners.get(key[1])
        if cur is None:
            owners[key[1]] = uuid
        elif isinstance(cur, set):
            cur.add(uuid)
        elif cur != uuid:
            owners[key[1]] = {cur, uuid}

    def _remove(self, table: str, key, uuid) -> None:
        owners = self._by.get((table, key[0]))
        cur = owners.get(key[1]) if owners else None
        if cur == uuid:
            del owners[key[1]]
        elif isinstance(cur, set):
            cur.discard(uuid)
            if len(cur) == 1:
                owners[key[1]] = next(iter(cur))

    def changed(self, event, row, updates) -> None:
        table = row._table
        if "external_ids" not in table.columns:
            return
        if event == ovs_idl.ROW_UPDATE:
            if updates is None or "external_ids" not in updates._data:
                return
            old, new = self._key(updates.external_ids), self._key(row.external_ids)
            if old == new:
                return
            if old:
                self._remove(table.name, old, row.uuid)
            if new:
                self._add(table.name, new, row.uuid)
            return
        key = self._key(row.external_ids)
        if key is None:
            return
        if event == ovs_idl.ROW_CREATE:
            self._add(table.name, key, row.uuid)
        elif event == ovs_idl.ROW_DELETE:
            self._remove(table.name, key, row.uuid)

    def uuids(self, table: str, kind: str | None, owner: str | None) -> list:
        """Under the connection lock."""
        out: list = []
        for (t, k), owners in self._by.items():
            if t != table or (kind is not None and k != kind):
                continue
            found = owners.values() if owner is None else [owners.get(owner)]
            for cur in found:
                if isinstance(cur, set):
                    out.extend(cur)
                elif cur is not None:
                    out.append(cur)
        return out


class NotifyingIdl(ovsdbapp_conn.OvsdbIdl):
    """IDL that feeds every row change to a RowEventHandler (and to its owner
    index and its row watchers)."""

    def __init__(self, remote, helper, handler, after_change=None):
        super().__init__(remote, helper)
        self.notify_handler = handler
        self.compactor = _Compactor()
        self.after_change = after_change
        self.owners = OwnerIndex()
        # table -> rows of one owner kind kept as tuples, not Rows (compact.py)
        self.compact: dict[str, CompactTable] = {}
        self.refs = RefSharer(self.tables, self.compact)
        # table -> (fn(event, row, updates), ...): see ApiBase.watch_rows.  Copied
        # on write, so notify() iterates a snapshot and a watcher is removed
        # without the connection lock (held across a whole transaction's round
        # trip: a waiter woken by a change must not queue behind another's commit)
        self.row_watchers: dict[str, tuple[Callable, ...]] = {}
        self._watchers_lock = threading.Lock()

    def add_row_watcher(self, table: str, fn: Callable) -> None:
        with self._watchers_lock:
            self.row_watchers[table] = self.row_watchers.get(table, ()) + (fn,)

    def remove_row_watcher(self, table: str, fn: Callable) -> None:
        with self._watchers_lock:
            left = tuple(f for f in self.row_watchers.get(table, ()) if f != fn)   # bound methods: ==
            if left:
                self.row_watchers[table] = left
            else:
                self.row_watchers.pop(table, None)

    connected = False   # published by the connection thread, see run()

    def run(self):
        # the connection thread, under the connection lock: publish the
        # session state as a plain bool other threads read without the lock
        seqno = self.change_seqno
        try:
            return super().run()
        finally:
            self.refs.forget()
            self.connected = self._session.is_connected()
            if self.after_change is not None and self.change_seqno != seqno:
                self.after_change(self)     # also after a reconnect's re-read

    def notify(self, event, row, updates=None):
        # the connection thread, under the connection lock (inside run())
        if event == ovs_idl.ROW_CREATE:
            self.compactor.compact(row._data, row._data)
            self.refs.created(row)
        elif event == ovs_idl.ROW_UPDATE and updates is not None:
            self.compactor.compact(row._data, updates._data)  # the changed columns
        self.owners.changed(event, row, updates)
        for fn in self.row_watchers.get(row._table.name, ()):
            try:
                fn(event, row, updates)
            except Exception:   # a watcher's bug must not stop the replica's update
                LOG.exception("row watcher %r failed on %s of %s", fn, event, row._table.name)
        self.notify_handler.notify(event, row, updates)

    def _Idl__process_update2(self, table, uuid, row_update):
        """ovs.db.idl.Idl.__process_update2, for a compacted table's rows
        first offered to its CompactTable (see pacific.ovn.compact)."""
        compact = self.compact.get(table.name)
        if compact is not None and self.tables.get(table.name) is table:
            handled = compact.update(uuid, row_update)
            if handled is True:
                self.refs.arrived(compact.get(uuid))
                self.change_seqno += 1    # the replica changed (no Row, no notice)
                return False
            if handled is not None:       # an entry that stopped matching: a Row now
                row_update = handled
        return super()._Idl__process_update2(table, uuid, row_update)

    def _Idl__clear(self):
        super()._Idl__clear()
        for compact in self.compact.values():
            compact.clear()

    def _Idl__apply_diff(self, table, row, row_diff):
        """ovs.db.idl.Idl.__apply_diff (an "update2" modify), without copying a
        big set or map column's old value for the ROW_UPDATE notice.

        ovs copies the whole column to hand the old row to notify(); a switch
        with 100,000 ports (or a tenant's port group) is copied on every port
        added to it, O(n) per update and O(n^2) for n ports: most of the
        controller's CPU at scale.  Pacific's events read only the new row and
        which columns changed, so a big column's "old" value is the (updated)
        datum itself.  Small columns are copied as ovs does.
        tests/unit/test_ovn_internals.py pins the ovs method this replaces."""
        old_row = {}
        for column_name, datum_diff_json in row_diff.items():
            column = table.columns.get(column_name)
            if not column:
                continue
            try:
                datum_diff = ovs_data.Datum.from_json(column.type, datum_diff_json)
            except ovs_error.Error:
                continue
            if column.type.key.ref_table_name:
                self.refs.share(column.type, datum_diff)
            cur = old_row[column_name] = row._data[column_name]
            if len(cur.values) <= _BIG_COLUMN:
                # a small column is diffed on a copy, never in place: the
                # compactor shares small Datums among rows (_Compactor)
                cur = cur.copy()
            # sets and maps are edited in place (diff returns self); a column the
            # server never sent is a default Datum made on read (ColumnDefaultDict),
            # so the result is stored in any case (ovs compares it, O(n) for a set)
            row._data[column_name] = cur.diff(datum_diff)
        return old_row

    def cooperative_yield(self):
        """ovsdbapp sleeps(0) per updated row (for eventlet); with plain
        threads the interpreter switches threads anyway, and the sleeps cost
        ~10% of a large update."""


_BIG_COLUMN = 256     # set/map members above which an update's old value is not copied
_MAP_INTERN_MAX = 64
_SMALL_SET = 4
_SMALL_MAP = 8      # set/map members up to which equal Datums are shared


class _Compactor:
    """Shrinks the replica of a new or changed row, O(its small columns).

    The ovs IDL keeps every value of every row as its own objects: a Datum
    with a dict of Atoms, each holding a str the JSON parser made.  For
    100,000 pod ports that is ~4 KB per port, mostly copies of the same few
    values.  Without changing any value, this

    * interns the strings of string maps (external_ids, options, ...): one
      copy of "pacific.io/owner-kind" instead of 100,000;
    * shares one Atom object among all rows for a map key, and for a map
      value or small-set member that recurs (seen at least twice: "Pod",
      the subnet's name...); unique ones (a pod's name) are left alone;
    * shares one Datum among rows for a recurring single-valued scalar column
      (a port's type "", a router port's peer): ovs replaces such a Datum on
      update (``Datum.diff`` returns the new one), never edits it;
    * inside one row, reuses an Atom for an equal string in another small set
      (a pod port's port_security is its addresses);
    * shares a whole small set or map Datum (at most _SMALL_MAP entries)
      with an equal one: of another column of the same row and type (a pod
      port's port_security Datum is its addresses Datum), or of other rows
      when the value recurs (a pod port's options, requested-chassis=<node>).
      Safe because NotifyingIdl diffs a small column on a copy (its
      ``__apply_diff``), and ovs replaces every other Datum it changes.

    Atoms and Datums are values for the IDL: it builds new ones on every
    change and never edits them in place, except ``Datum.diff`` on sets and
    maps, which NotifyingIdl runs on a copy of a small column (a big one, a
    switch's ports, is never shared).
    tests/unit/test_ovn_internals.py pins both.  Connection thread only.
    Big sets (a switch's 100,000 ports) are left alone."""

    SHARED_MAX = 4096     # shared Atoms/Datums kept (recurring values are few)
    SEEN_MAX = 8192       # values seen once, candidates for sharing

    def __init__(self):
        self.atoms: dict = {}      # (type, value) -> shared Atom
        self.datums: dict = {}     # (column type id, value) -> shared Datum
        self.seen: set = set()

    def _recurs(self, key) -> bool:
        """Has `key` been seen before (recently)?  Remembers it if not."""
        if key in self.seen:
            self.seen.discard(key)
            return True
        if len(self.seen) >= self.SEEN_MAX:
            self.seen.clear()
        self.seen.add(key)
        return False

    def atom(self, atom, always: bool = False):
        """The shared Atom equal to `atom`, if it recurs (or `always`)."""
        if atom is None:
            return None
        key = (atom.type, atom.value)
        shared = self.atoms.get(key)
        if shared is not None:
            return shared
        if (always or self._recurs(("a",) + key)) and len(self.atoms) < self.SHARED_MAX:
            self.atoms[key] = atom
        return atom

    def compact(self, data, columns) -> None:
        if not columns or data is None:
            return
        local: dict = {}
        for name in columns:
            datum = data.get(name)
            if datum is None:
                continue
            t = datum.type
            values = datum.values
            if t.is_map():
                if t.key.type is not ovs_types.StringType or len(values) > 64:
                    continue
                value_is_str = t.value.type is ovs_types.StringType
                new = {}
                for k, v in values.items():
                    if len(k.value) <= _MAP_INTERN_MAX:
                        k.value = sys.intern(k.value)
                        k = self.atom(k, always=True)
                    if value_is_str and len(v.value) <= _MAP_INTERN_MAX:
                        v.value = sys.intern(v.value)
                        v = self.atom(v)
                    new[k] = v
                datum.values = new
            elif t.n_max == 1 and len(values) == 1:
                # a single-valued scalar: diff() replaces it, so it may be shared
                (k,) = values
                if k.type is ovs_types.UuidType:
                    continue
                key = (id(t), k.type, k.value)
                shared = self.datums.get(key)
                if shared is None:
                    if self._recurs(("d",) + key) and len(self.datums) < self.SHARED_MAX:
                        self.datums[key] = datum
                    continue
                data[name] = shared
            elif len(values) <= _SMALL_SET and t.key.type is ovs_types.StringType:
                for k in list(values):
                    use = local.get(k.value)
                    if use is None:
                        use = local[k.value] = self.atom(k)
                    if use is not k:   # in place: a 1-entry dict keeps its size
                        del values[k]
                        values[use] = None
            if t.n_max > 1 and 0 < len(datum.values) <= _SMALL_MAP:
                self._share_datum(data, name, datum, local)

    def _share_datum(self, data, name, datum, local) -> None:
        """Replace a small set or map Datum by an equal one already held: of
        the same row (another column of an equal type) or, for a value that
        recurs, of any row."""
        t = datum.type
        try:
            if t.value is None:
                content = frozenset(k.value for k in datum.values)
            else:
                content = frozenset((k.value, v.value) for k, v in datum.values.items())
        except TypeError:     # an unhashable value: left alone
            return
        same = local.get(("D", content))
        if same is not None and same.type == t:
            data[name] = same
            return
        local[("D", content)] = datum
        key = ("D", id(t), content)
        shared = self.datums.get(key)
        if shared is not None:
            data[name] = shared
            local[("D", content)] = shared
        elif self._recurs(key) and len(self.datums) < self.SHARED_MAX:
            self.datums[key] = datum

class _RowWait:
    """One wait_for_row: a row watcher that, in the connection thread, keeps a
    frozen copy of the first created or updated row satisfying the predicate
    and wakes the waiter at once (an ovsdbapp WaitEvent went through the event
    thread: one more thread to schedule on a busy node before ADD answers)."""

    def __init__(self, predicate: Callable[[Any], bool]):
        self.predicate = predicate
        self.row = None
        self.done = threading.Event()

    def __call__(self, event, row, updates) -> None:
        if self.done.is_set() or event == ovs_idl.ROW_DELETE:
            return
        if self.predicate(row):
            self.row = idlutils.frozen_row(row)
            self.done.set()


def _abort(txn, idl) -> None:
    """Abort an IDL transaction.  If the IDL cannot undo it (it fails to
    un-index half-built rows), the cache may hold phantom rows: resync it
    from the server by reconnecting.  Never hides the original error."""
    try:
        txn.abort()
    except Exception:
        LOG.warning("aborting IDL transaction failed; resyncing the cache "
                    "from the server", exc_info=True)
        idl.force_reconnect()


class PacificTransaction(ovsdbapp_txn.Transaction):
    """ovsdbapp transaction whose failures are OvnTransactionError.

    It names the failing command, carries the OVSDB error text, and retries
    TRY_AGAIN (database changed under us, or connection lost) until the
    timeout, after which it raises OvnTimeoutError.
    """

    def commit(self):
        remote = self.api.remote
        try:
            self.ovsdb_connection.queue_txn(self)
        except ovsdbapp_exc.TimeoutException as e:
            raise OvnTimeoutError(remote, self.commands,
                                  f"connection busy, not queued within "
                                  f"{self.timeout:g}s") from e
        try:
            result = self.results.get(timeout=self.timeout + _RESULT_GRACE)
        except queue.Empty as e:
            raise OvnTimeoutError(remote, self.commands,
                                  f"no answer within {self.timeout:g}s") from e
        if isinstance(result, idlutils.ExceptionResult):
            ex = result.ex
            if isinstance(ex, OvnTransactionError):
                raise ex
            raise OvnTransactionError(remote, self.commands,
                                      f"{type(ex).__name__}: {ex}") from ex
        return result

    def do_commit(self):
        remote = self.api.remote
        self.start_time = time.time()
        if not self.commands:
            return []
        attempts = 0
        while True:
            if attempts > 0 and self.timeout_exceeded():
                connected = self.api.is_connected()
                raise OvnTimeoutError(
                    remote, self.commands,
                    f"not committed within {self.timeout:g}s after "
                    f"{attempts} attempt(s); "
                    + ("database kept changing" if connected else
                       "no member of the clustered database is the leader or reachable "
                       "(members down, or a majority lost: quorum lost); retrying"
                       if "," in remote else "OVSDB server unreachable, reconnecting"))
            attempts += 1
            seqno = self.api.idl.change_seqno
            txn = ovs_idl.Transaction(self.api.idl)
            try:
                self.pre_commit(txn)
            except Exception:
                _abort(txn, self.api.idl)
                raise
            for command in self.commands:
                try:
                    command.run_idl(txn)
                except Exception as e:
                    _abort(txn, self.api.idl)
                    raise OvnTransactionError(
                        remote, self.commands, f"{type(e).__name__}: {e}",
                        failed_command=command) from e
            status = txn.commit_block()
            if status == txn.TRY_AGAIN:
                LOG.debug("transaction on %s: TRY_AGAIN (attempt %d)",
                          remote, attempts)
                try:
                    idlutils.wait_for_change(self.api.idl,
                                             max(self.time_remaining(), 0.01),
                                             seqno)
                except ovsdbapp_exc.TimeoutException:
                    pass  # reported by the timeout check above
                continue
            if status == txn.ERROR:
                raise OvnTransactionError(remote, self.commands,
                                          f"OVSDB error: {txn.get_error()}")
            if status == txn.NOT_LOCKED:
                raise OvnTransactionError(remote, self.commands,
                                          "database lock not held")
            if status == txn.ABORTED:
                raise OvnTransactionError(remote, self.commands, "aborted")
            if status == txn.SUCCESS:
                self.post_commit(txn)
            return [cmd.result for cmd in self.commands]


def is_new(row) -> bool:
    """Was `row` inserted by the transaction being built (no committed form)?
    The ovs IDL's private ``_data`` is None exactly then (ovs/db/idl.py
    Row.__init__; checked by tests/unit/test_ovn_internals.py)."""
    return row._data is None


def _init_ref_sets(table, row) -> None:
    """Give `row` of `table` (an IDL TableSchema, ``api.tables[name]``),
    inserted in this transaction, empty reference-set columns.

    The ovs IDL raises AttributeError reading an unset column of a new row,
    so e.g. an ACL added to a switch created in the same transaction would
    fail on ``switch.acls``; empty sets are the schema defaults anyway.
    Only monitored columns exist for the IDL (and can be written)."""
    for name, col in table.columns.items():
        t = col.type
        if not (t.key.ref_table_name and t.n_min == 0 and t.n_max > 1
                and t.value is None):
            continue
        try:
            getattr(row, name)      # set earlier in this transaction
        except AttributeError:
            setattr(row, name, [])


class StampOwner(ovsdbapp_cmd.BaseCommand):
    """Wraps a create-or-find command: on the row it created (or found, with
    may_exist) sets `columns` and merges the owner's external_ids, so running
    it again converges to the same row (level-triggered reconcilers)."""

    def __init__(self, api, table: str, inner, ids: dict[str, str],
                 columns: dict[str, Any] | None = None):
        super().__init__(api)
        self.table = table
        self.inner = inner
        self.ids = ids
        self.columns = dict(columns or {})

    def __str__(self):
        extra = f" set {self.columns}" if self.columns else ""
        return f"{self.inner}{extra} owner={self.ids.get(names.EXT_OWNER_KIND)}/" \
               f"{self.ids.get(names.EXT_OWNER)}"

    def run_idl(self, txn):
        self.inner.run_idl(txn)
        res = self.inner.result
        table = self.api.tables[self.table]
        if isinstance(res, ovs_idl.Row):
            row = res
        elif isinstance(res, rowview.RowView):   # an existing row
            row = table.rows[res.uuid]
        else:   # a uuid (rows inserted by the transaction are in table.rows too)
            row = table.rows[res]
        if is_new(row):
            _init_ref_sets(table, row)
        for col, val in self.columns.items():
            if getattr(row, col, _UNSET) != val:
                self.set_column(row, col, val)
        merged = dict(getattr(row, "external_ids", {}))
        merged.update(self.ids)
        if merged != getattr(row, "external_ids", None):
            row.external_ids = merged

    def post_commit(self, txn):
        self.inner.post_commit(txn)

    @property
    def result(self):
        return self.inner.result

    @result.setter
    def result(self, value):
        pass


class _DeleteRows(ovsdbapp_cmd.BaseCommand):
    """Delete rows by uuid, including non-root rows (ACL, LSP, NAT, ...):
    those are removed from every strong reference to them (OVSDB then
    garbage-collects them), root rows are deleted."""

    def __init__(self, api, table: str, uuids: Iterable[uuidlib.UUID]):
        super().__init__(api)
        self.table = table
        self.uuids = set(uuids)

    def __str__(self):
        return f"delete {len(self.uuids)} {self.table} row(s)"

    def run_idl(self, txn):
        tables = self.api.tables
        target = tables[self.table]
        compact = self.api.idl.compact.get(self.table)
        todo = {u for u in self.uuids
                if u in target.rows or (compact is not None and compact.get(u) is not None)}
        self.result = len(todo)
        if not todo:
            return
        if target.is_root:
            for u in todo:
                target.rows[u].delete()
            return
        for parent in tables.values():
            for col in parent.columns.values():
                t = col.type
                if not ((t.key.ref_table_name == self.table
                         and t.key.is_strong_ref())
                        or (t.value is not None
                            and t.value.ref_table_name == self.table
                            and t.value.is_strong_ref())):
                    continue
                for prow in list(parent.rows.values()):
                    # the committed uuids (``prow.<col>`` leaves compacted rows out)
                    datum = prow._data[col.name]
                    if t.value is not None:
                        for k, v in list(datum.values.items()):
                            if v.value in todo:
                                prow.delkey(col.name, k.value)
                        continue
                    for atom in list(datum.values):
                        if atom.value in todo:
                            prow.delvalue(col.name, atom.value)


_SCAN_CHUNK = 2000


def _is_ref(t) -> bool:
    return bool(t.key.ref_table_name or (t.value is not None and t.value.ref_table_name))


class RowSnapshot:
    """A copy of a row's plain columns, taken under the connection lock, so
    any thread can read it (a RowView reads the live row)."""

    def __init__(self, uuid, external_ids: dict, columns: dict):
        self.__dict__.update(columns)
        self.uuid = uuid
        self.external_ids = external_ids

    def __repr__(self):
        return f"RowSnapshot({self.__dict__})"


_ssl: dict[str, str] = {}


def configure_ssl(private_key: str, certificate: str, ca_cert: str) -> None:
    """The PKI of ssl: remotes, for every connection of this process (the ovs
    library keeps it process-wide): our key and certificate, and the CA that
    must have signed the server's certificate (verified; the connection is
    refused otherwise).  Raises OvnError naming a missing or unreadable file."""
    from ovs.stream import Stream
    files = {"private key": private_key, "certificate": certificate, "CA certificate": ca_cert}
    for what, path in files.items():
        if not path or not os.access(path, os.R_OK):
            raise OvnError(f"TLS {what} {path!r} is not a readable file")
    Stream.ssl_set_private_key_file(private_key)
    Stream.ssl_set_certificate_file(certificate)
    Stream.ssl_set_ca_cert_file(ca_cert)
    _ssl.update(files)


def ssl_files() -> dict[str, str]:
    """What configure_ssl set: "private key", "certificate", "CA certificate"
    -> path (empty before it ran)."""
    return dict(_ssl)


def uses_ssl(remote: str) -> bool:
    return any(r.strip().startswith("ssl:") for r in remote.split(","))


def check_ssl(remote: str) -> None:
    if uses_ssl(remote) and not _ssl:
        raise OvnError(f"{remote}: an ssl: remote needs a private key, a certificate and a CA "
                       "certificate (configure_ssl; the daemons' --*-ssl-key, --*-ssl-cert, "
                       "--*-ssl-ca flags)")


class ApiBase:
    """Mixin giving an ovsdbapp Backend its own connection (see module doc).

    Must come first in the bases, before the ovsdbapp implementation class.
    """

    schema: str
    TABLES: tuple[str, ...] = ()

    def __init__(self, remote: str, timeout: float = DEFAULT_TIMEOUT,
                 tables: Iterable[str] | None = None,
                 created_by: str | None = None,
                 monitor: Mapping[str, Iterable[str] | None] | None = None,
                 conditions: Mapping[str, list] | None = None,
                 after_change: Callable[[Any], None] | None = None,
                 compact: Mapping[str, tuple[str, str]] | None = None):
        """`conditions`: table -> OVSDB condition (clauses OR-ed) of the rows to
        replicate, from the first monitor request on; `compact`: table ->
        (external_ids key, value) of the rows kept as tuples, not Rows
        (pacific.ovn.compact: no events for them); `after_change(idl)`: called
        in the connection thread, under its lock, after every run of the IDL
        that changed the replica (a consistent moment to read it; must not block)."""
        self.remote = remote
        self.created_by = created_by
        self._conn = None
        cjson.enable()   # the C JSON parser if the system has one (see cjson.py)
        check_ssl(remote)
        helper = fetch_schema_helper(remote, self.schema, timeout)
        available = helper.schema_json["tables"]
        self.server_schema = helper.schema_json   # as the server sent it (capabilities)
        # table -> columns (None: all); `monitor` replaces TABLES
        plan: dict[str, list[str] | None] = (
            {t: None for t in self.TABLES} if monitor is None
            else {t: (None if c is None else list(c)) for t, c in monitor.items()})
        for t in tables or ():
            plan[t] = None
        for table, columns in plan.items():
            if table not in available:
                raise OvnConnectionError(remote, self.schema,
                                         f"table {table} not in server schema")
            if columns is None:
                helper.register_table(table)
                continue
            missing = set(columns) - set(available[table]["columns"])
            if missing:
                raise OvnConnectionError(
                    remote, self.schema, f"column(s) {', '.join(sorted(missing))} "
                    f"of table {table} not in server schema")
            helper.register_columns(table, columns)
        wanted = [t if c is None else f"{t}({len(c)} columns)" for t, c in plan.items()]
        self._handler = ovsdbapp_event.RowEventHandler()
        idl = NotifyingIdl(remote, helper, self._handler, after_change)
        for table, condition in (conditions or {}).items():
            idl.cond_change(table, condition)     # sent with the first monitor request
        for table, (key, value) in (compact or {}).items():
            idl.compact[table] = CompactTable(idl.tables[table], key, value)
        # no public API for the back-off: the IDL's private session (checked
        # by tests/unit/test_ovn_internals.py), before its thread starts
        idl._session.reconnect.set_backoff(MIN_BACKOFF_MS, MAX_BACKOFF_MS)
        conn = ovsdbapp_conn.Connection(idl, timeout)
        try:
            super().__init__(conn, start=True, auto_index=True)
        except (ovsdbapp_exc.OvsdbConnectionUnavailable,
                ovsdbapp_exc.TimeoutException) as e:
            self._handler.shutdown()
            conn.stop(timeout=1)
            raise OvnConnectionError(remote, self.schema, str(e)) from e
        LOG.info("connected to %s %s (tables: %s)", self.schema, remote,
                 ", ".join(wanted))

    # --- per-instance connection (ovsdbapp keeps it on the class) -----------
    @property
    def ovsdb_connection(self):
        return self._conn

    @ovsdb_connection.setter
    def ovsdb_connection(self, connection):
        self._conn = connection

    # --- rows -----------------------------------------------------------------
    def _lookup(self, table, record):
        """ovsdbapp's lookup (under the connection lock), also finding a
        compacted row: as a TransientRow (pacific.ovn.compact).  The compacted
        rows first: every pod port the controller reads is one, and ovsdbapp
        answers a name it does not hold by raising."""
        compact = self.idl.compact.get(table)
        if compact is not None and isinstance(record, (str, uuidlib.UUID)):
            entry = compact.get(record)
            if entry is not None:
                return compact.row(self.idl, entry)
        return super()._lookup(table, record)

    def row_uuid(self, table: str, name: str):
        """The uuid of the row of `table` named `name`, or None, without
        building a row; connection thread or under the connection lock."""
        compact = self.idl.compact.get(table)
        uuid = compact.uuid_of(name) if compact is not None else None
        if uuid is not None:
            return uuid
        try:
            return super()._lookup(table, name).uuid
        except idlutils.RowNotFound:
            return None

    def ref_names(self, row, column: str) -> set[str]:
        """Names of the rows that `row`'s reference set `column` holds, as
        committed (compacted rows included, which ``row.<column>`` leaves
        out); connection thread or under the connection lock."""
        ref = row._table.columns[column].type.key.ref_table_name
        rows = self.tables[ref].rows
        compact = self.idl.compact.get(ref)
        out = set()
        for atom in row._data[column].values:
            r = rows.get(atom.value)
            name = r.name if r is not None else (
                compact.name_of(atom.value) if compact is not None else None)
            if name is not None:
                out.add(name)
        return out

    # --- life cycle ----------------------------------------------------------
    def close(self) -> None:
        """Stop the connection thread and the event thread. Idempotent."""
        if self._conn is not None:
            self._conn.stop(timeout=5)
        if self._handler is not None:
            self._handler.shutdown()
            self._handler = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def is_connected(self) -> bool:
        """True while the IDL session to the server is up (as the connection
        thread last saw it: no lock, so a health probe never waits for a
        large update to be applied)."""
        return self.idl.connected

    # --- transactions --------------------------------------------------------
    def create_transaction(self, check_error=True, log_errors=True, **kwargs):
        return PacificTransaction(self, self.ovsdb_connection,
                                  self.ovsdb_connection.timeout,
                                  check_error=True, log_errors=log_errors)

    @contextlib.contextmanager
    def transaction(self, check_error=True, log_errors=True, nested=True,
                    **kwargs) -> Iterator[PacificTransaction]:
        """Batch commands: ``with api.transaction() as txn: txn.add(cmd)``.

        The transaction commits when the block ends and raises
        OvnTransactionError on failure (check_error is always on)."""
        with super().transaction(True, log_errors, nested, **kwargs) as txn:
            yield txn

    def commit(self, *commands) -> list:
        """Run `commands` in one transaction; return their results."""
        with self.transaction() as txn:
            for c in commands:
                txn.add(c)
        return [c.result for c in commands]

    # --- ownership -----------------------------------------------------------
    def stamp(self, table: str, command, owner: Owner,
              extra_ids: dict[str, str] | None = None,
              columns: dict[str, Any] | None = None) -> StampOwner:
        """Wrap any create-or-find command of `table` so its row gets
        `columns` and carries the owner's external_ids."""
        return StampOwner(self, table, command,
                          owner_ids(owner, extra_ids, self.created_by),
                          columns)

    def rows_owned(self, table: str, kind: str | None = None,
                   owner: str | None = None) -> list["RowSnapshot"]:
        """Rows of `table` (from the local cache) owned by Pacific, filtered
        by owner kind and/or owner name.

        Found through the IDL's owner index (OwnerIndex), not by scanning the
        table.  Returns snapshots (uuid and every monitored column except
        references to other rows), read under the connection lock in chunks:
        the caller reads them without the lock, and the IDL thread is never
        held up for long."""
        with self.ovsdb_connection.lock:
            t = self.tables[table]
            uuids = self.idl.owners.uuids(table, kind, owner)
            plain = [c for c, col in t.columns.items()
                     if c != "external_ids" and not _is_ref(col.type)]
            compact = self.idl.compact.get(table)
            if compact is not None and kind in (None, compact.match[1]):
                uuids = uuids + list(compact.by_uuid)
        out = []
        for start in range(0, len(uuids), _SCAN_CHUNK):
            with self.ovsdb_connection.lock:
                for uuid in uuids[start:start + _SCAN_CHUNK]:
                    row = t.rows.get(uuid)
                    if row is None and compact is not None:
                        entry = compact.get(uuid)
                        if entry is not None:
                            ids = compact.external_ids(entry)
                            if owner is None or ids.get(names.EXT_OWNER) == owner:
                                out.append(RowSnapshot(uuid, ids, {c: compact.value(entry, c)
                                                                   for c in plain}))
                            continue
                    if row is None:        # deleted while disconnected (see OwnerIndex)
                        continue
                    ids = row.external_ids
                    if names.EXT_OWNER_KIND not in ids:
                        continue
                    if kind is not None and ids[names.EXT_OWNER_KIND] != kind:
                        continue
                    if owner is not None and ids.get(names.EXT_OWNER) != owner:
                        continue
                    out.append(RowSnapshot(row.uuid, ids,
                                           {c: getattr(row, c) for c in plain}))
        return out

    def delete_rows(self, table: str, rows: Iterable[Any]):
        """Command deleting rows (RowViews/Rows/uuids) of any table, root or not."""
        uuids = [r if isinstance(r, uuidlib.UUID) else r.uuid for r in rows]
        return _DeleteRows(self, table, uuids)

    def delete_owned(self, table: str, kind: str, owner: str | None = None,
                     keep: Callable[[Any], bool] | None = None):
        """Command deleting the rows of `table` owned by kind (and owner),
        except those for which keep(row) is true: stale-row cleanup."""
        rows = [r for r in self.rows_owned(table, kind, owner)
                if keep is None or not keep(r)]
        return self.delete_rows(table, rows)

    # --- waiting -------------------------------------------------------------
    def wait_for_row(self, table: str, predicate: Callable[[Any], bool],
                     timeout: float) -> Any | None:
        """Block until a row of `table` satisfies predicate(row), without
        polling: the connection thread checks each change as it applies it
        and wakes the caller.  Returns the row (a frozen copy if it came from
        a change) or None on timeout."""
        wait = _RowWait(predicate)
        self.idl.add_row_watcher(table, wait)     # first: no change is missed
        try:
            with self.ovsdb_connection.lock:      # then what is there already
                for row in self.tables[table].rows.values():
                    if predicate(row):            # a broken predicate raises here
                        return rowview.RowView(row)
            return wait.row if wait.done.wait(timeout) else None
        finally:
            self.idl.remove_row_watcher(table, wait)

    def watch_rows(self, table: str, fn: Callable[[str, Any, Any], None]) -> None:
        """Call fn(event, row, updates) for every change of a row of `table`, in the
        connection thread under its lock, as the IDL applies it (ovs.db.idl's
        ROW_CREATE/UPDATE/DELETE; `updates` holds the changed columns' old values
        on an update); first for each row already there, as a ROW_CREATE.

        For a cheap index kept current with the replica: fn must be quick and
        must not block.  Unlike a RowEvent (watch_event), no frozen copy of the
        row is made and nothing is queued to the event thread, and ovsdbapp's
        RowEvent.matches formats both rows for a debug message on every match
        (all columns, also with debug logging off): for an event that matches
        every row of a busy table (Interface: statistics every 5 s, ovs-vswitchd
        and ovn-controller on each new port) that work held the connection
        thread, and every transaction behind it, for milliseconds per change."""
        with self.ovsdb_connection.lock:
            self.idl.add_row_watcher(table, fn)
            for row in list(self.tables[table].rows.values()):
                fn(ovs_idl.ROW_CREATE, row, None)

    def watch_event(self, event) -> None:
        """Register an ovsdbapp RowEvent (run in the event thread)."""
        self._handler.watch_event(event)

    def unwatch_event(self, event) -> None:
        self._handler.unwatch_event(event)
