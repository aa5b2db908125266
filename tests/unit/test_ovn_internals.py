"""The private parts of the ovs IDL that pacific.ovn still reads.

pacific.ovn uses a few underscore attributes of ovs.db.idl objects because
the library has no public way to do the same thing cheaply:

* ``Row._data`` (committed column -> Datum, None for a row inserted by the
  transaction being built): ``base.is_new``, ``base._intern_map_strings``
  (also on the ``updates`` Row passed to ``Idl.notify``), ``ensure.has_ref``;
* ``Row._changes`` / ``Row._mutations`` (``{"_inserts"|"_removes": {column:
  set}}``): ``ensure.has_ref``;
* ``Idl._session`` (``reconnect.set_backoff``, ``is_connected``):
  ``ApiBase.__init__`` and ``NotifyingIdl.run``.

Each test here pins one of them, without a server, so an ovs upgrade that
changes them fails here by name instead of silently (e.g. a membership check
answering "absent" and the controller rewriting every port on each resync).
"""
from __future__ import annotations

import uuid

import pytest
from ovs.db import data as ovs_data
from ovs.db import idl as ovs_idl
from ovs.db import types as ovs_types
from ovsdbapp.backend.ovs_idl import rowview

from pacific.ovn import base, ensure

NB_SCHEMA = "/usr/share/ovn/ovn-nb.ovsschema"


@pytest.fixture
def idl():
    helper = ovs_idl.SchemaHelper(location=NB_SCHEMA)
    helper.register_columns("Logical_Switch", ["name", "ports", "acls", "external_ids"])
    helper.register_columns("Logical_Switch_Port", ["name", "addresses", "external_ids"])
    helper.register_table("ACL")
    idl = base.NotifyingIdl("unix:/nonexistent/pacific-test.sock", helper, _NullHandler())
    yield idl
    if idl.txn is not None:
        idl.txn.abort()
    idl.close()


class _NullHandler:
    def __init__(self):
        self.seen = []

    def notify(self, event, row, updates=None):
        self.seen.append(event)


def _datum(table, column, value):
    return ovs_data.Datum.from_python(table.columns[column].type, value, ovs_idl._row_to_uuid)


def committed_row(idl, table_name, **values):
    """A row as the IDL holds it after the server sent it."""
    table = idl.tables[table_name]
    data = {c: (_datum(table, c, values[c]) if c in values
                else ovs_data.Datum.default(table.columns[c].type))
            for c in table.columns}
    row = ovs_idl.Row(idl, table, uuid.uuid4(), data)
    table.rows[row.uuid] = row
    return row


def test_row_private_layout(idl):
    ls = committed_row(idl, "Logical_Switch", name="s1")
    assert isinstance(ls._data, dict) and set(ls._data) == set(idl.tables["Logical_Switch"].columns)
    assert isinstance(ls._data["name"], ovs_data.Datum)
    assert ls._changes == {} and ls._mutations == {}
    assert not base.is_new(ls)


def test_inserted_row_has_no_committed_data_and_unset_columns_raise(idl):
    txn = ovs_idl.Transaction(idl)
    row = txn.insert(idl.tables["Logical_Switch"])
    assert base.is_new(row)
    with pytest.raises(AttributeError):      # what _init_ref_sets relies on
        row.ports
    row.name = "s1"
    base._init_ref_sets(idl.tables["Logical_Switch"], row)
    assert row.ports == [] and row.acls == [] and row.name == "s1"


def test_mutations_layout_and_has_ref_agree_with_the_idl(idl):
    p1 = committed_row(idl, "Logical_Switch_Port", name="p1")
    p2 = committed_row(idl, "Logical_Switch_Port", name="p2")
    p3 = committed_row(idl, "Logical_Switch_Port", name="p3")
    ls = committed_row(idl, "Logical_Switch", name="s1", ports=[p1.uuid, p2.uuid])

    def agree():
        return {p.name: (ensure.has_ref(ls, "ports", p), p in ls.ports) for p in (p1, p2, p3)}

    assert agree() == {"p1": (True, True), "p2": (True, True), "p3": (False, False)}
    assert ls._data["ports"].values.keys() >= {ovs_data.Atom(ovs_types.UuidType, p1.uuid)}
    txn = ovs_idl.Transaction(idl)
    ls.addvalue("ports", p3)
    ls.delvalue("ports", p1)
    assert ls._mutations == {"_inserts": {"ports": {p3}}, "_removes": {"ports": {p1}}}
    assert agree() == {"p1": (False, False), "p2": (True, True), "p3": (True, True)}
    txn.abort()
    ls.__dict__["_mutations"] = {}   # what the aborted transaction leaves behind
    txn = ovs_idl.Transaction(idl)
    ls.ports = [p3]                 # replaced wholesale: has_ref falls back to the column
    assert "ports" in ls._changes
    assert agree() == {"p1": (False, False), "p2": (False, False), "p3": (True, True)}
    txn.abort()


def test_notify_interns_map_strings_of_created_and_updated_rows(idl):
    def fresh(*parts):              # a new str object each call, as the parser makes
        return "".join(parts)

    def ids(key, value):
        return {fresh("pacific.io/", key): fresh(value, "")}

    a = committed_row(idl, "Logical_Switch_Port", name="a", external_ids=ids("owner-kind", "Pod"))
    b = committed_row(idl, "Logical_Switch_Port", name="b", external_ids=ids("owner-kind", "Pod"))
    keys = [next(iter(r._data["external_ids"].values)).value for r in (a, b)]
    assert keys[0] == keys[1] and keys[0] is not keys[1]   # the JSON parser's copies
    idl.notify(ovs_idl.ROW_CREATE, a)
    idl.notify(ovs_idl.ROW_CREATE, b)
    k = [next(iter(r._data["external_ids"].values.items())) for r in (a, b)]
    assert k[0][0].value is k[1][0].value and k[0][1].value is k[1][1].value
    # an update: the IDL has applied the new values to the row's _data and
    # passes the changed columns' old values as a Row whose _data holds them
    old = a._data["external_ids"]
    a._data["external_ids"] = _datum(a._table, "external_ids", ids("owner", "ns/x"))
    upd = ovs_idl.Row(idl, a._table, a.uuid, {"external_ids": old})
    c = committed_row(idl, "Logical_Switch_Port", name="c", external_ids=ids("owner", "ns/x"))
    idl.notify(ovs_idl.ROW_CREATE, c)
    idl.notify(ovs_idl.ROW_UPDATE, a, upd)
    assert (next(iter(a._data["external_ids"].values)).value
            is next(iter(c._data["external_ids"].values)).value)
    assert idl.notify_handler.seen == [ovs_idl.ROW_CREATE] * 3 + [ovs_idl.ROW_UPDATE]


def test_session_backoff_and_connected_flag(idl):
    session = idl._session
    session.reconnect.set_backoff(base.MIN_BACKOFF_MS, base.MAX_BACKOFF_MS)
    assert session.reconnect.get_max_backoff() == base.MAX_BACKOFF_MS
    assert idl.connected is False
    idl.run()                       # no server there: still not connected
    assert idl.connected is False and session.is_connected() is False


def test_rowview_exposes_uuid():
    class R:
        uuid = uuid.uuid4()
    assert rowview.RowView(R()).uuid == R.uuid
