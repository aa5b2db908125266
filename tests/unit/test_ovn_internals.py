"""The private parts of the ovs IDL that pacific.ovn still reads.

pacific.ovn uses a few underscore attributes of ovs.db.idl objects because
the library has no public way to do the same thing cheaply:

* ``Row._data`` (committed column -> Datum, None for a row inserted by the
  transaction being built): ``base.is_new``, ``base._Compactor``
  (also on the ``updates`` Row passed to ``Idl.notify``), ``ensure.has_ref``;
* ``Row._changes`` / ``Row._mutations`` (``{"_inserts"|"_removes": {column:
  set}}``): ``ensure.has_ref``;
* ``Datum.values`` / ``Atom.value`` edited or replaced by ``base._Compactor``,
  which relies on ``Datum.diff`` replacing a single-valued scalar and
  editing only a set's or map's own dict;
* ``Idl._session`` (``reconnect.set_backoff``, ``is_connected``):
  ``ApiBase.__init__`` and ``NotifyingIdl.run``;
* ``Idl.__process_update2`` / ``Idl.__clear`` (name-mangled), overridden by
  ``NotifyingIdl`` for ``compact.CompactTable``, and a Row that is not in
  its table written in a transaction (``compact.TransientRow``).

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

from pacific import ovsinstall
from pacific.ovn import base, ensure

NB_SCHEMA = ovsinstall.from_env().schema("ovn-nb")


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


def _ident(atom, base):
    return atom


def test_datum_diff_replaces_scalars_and_edits_only_sets_and_maps():
    """base._Compactor shares single-valued scalar Datums among rows: safe
    only while ovs's update path (Datum.diff) returns a new Datum for them."""
    helper = ovs_idl.SchemaHelper(location=NB_SCHEMA)
    helper.register_table("Logical_Switch_Port")
    cols = helper.get_idl_schema().tables["Logical_Switch_Port"].columns
    old = ovs_data.Datum.from_python(cols["type"].type, "", ovs_idl._row_to_uuid)
    new = ovs_data.Datum.from_python(cols["type"].type, "router", ovs_idl._row_to_uuid)
    assert old.diff(new) is new and old.to_python(_ident) == ""
    ids = ovs_data.Datum.from_python(cols["external_ids"].type, {"a": "1"}, ovs_idl._row_to_uuid)
    before = ids.values
    change = ovs_data.Datum.from_python(cols["external_ids"].type, {"b": "2"}, ovs_idl._row_to_uuid)
    assert ids.diff(change) is ids and ids.values is before   # in place: never share these
    assert ids.to_python(_ident) == {"a": "1", "b": "2"}


def test_compactor_shares_recurring_values_and_keeps_every_value(idl):
    addr = "0a:58:0a:10:00:05 10.16.0.5"

    def port(i):
        return committed_row(idl, "Logical_Switch_Port", name=f"p{i}",
                             addresses=["".join([addr[:-1], str(i)])],
                             external_ids={"".join(["pacific.io/", "owner-kind"]): "".join(["Po", "d"]),
                                           "".join(["pacific.io/", "owner"]): f"ns/p{i}"})
    rows = [port(i) for i in range(4)]
    for r in rows:
        idl.notify(ovs_idl.ROW_CREATE, r)
    for i, r in enumerate(rows):        # every value reads back unchanged
        assert r.name == f"p{i}" and r.addresses == [addr[:-1] + str(i)]
        assert r.external_ids == {"pacific.io/owner-kind": "Pod", "pacific.io/owner": f"ns/p{i}"}

    def atoms(r):
        return {k.value: (k, v) for k, v in r._data["external_ids"].values.items()}
    a = [atoms(r) for r in rows]
    # map keys: one Atom for all rows; a recurring value ("Pod"): shared from
    # its second sighting on; a unique value: the row's own
    assert all(x["pacific.io/owner"][0] is a[0]["pacific.io/owner"][0] for x in a)
    assert a[2]["pacific.io/owner-kind"][1] is a[3]["pacific.io/owner-kind"][1]
    assert a[2]["pacific.io/owner"][1] is not a[3]["pacific.io/owner"][1]


def test_compactor_shares_scalar_datums_and_equal_atoms_inside_a_row():
    helper = ovs_idl.SchemaHelper(location=NB_SCHEMA)
    helper.register_columns("Logical_Switch_Port", ["name", "type", "addresses", "port_security"])
    idl = base.NotifyingIdl("unix:/nonexistent/pacific-test.sock", helper, _NullHandler())
    try:
        rows = []
        for i in range(3):
            a = f"0a:58:0a:10:00:0{i} 10.16.0.{i}"
            r = committed_row(idl, "Logical_Switch_Port", name=f"p{i}", type="".join(["rou", "ter"]),
                              addresses=[a], port_security=["".join([a, ""])])
            idl.notify(ovs_idl.ROW_CREATE, r)
            rows.append(r)
        assert rows[1]._data["type"] is rows[2]._data["type"]       # recurring: shared
        assert [r.type for r in rows] == ["router"] * 3
        for r in rows:       # port_security reuses the addresses' Atom
            (ka,), (kp,) = r._data["addresses"].values, r._data["port_security"].values
            assert ka is kp and r.addresses == r.port_security
            assert rows[0]._data["name"] is not r._data["name"] or r is rows[0]
    finally:
        idl.close()


def test_apply_diff_override_replaces_the_ovs_method_and_applies_updates(idl):
    """NotifyingIdl overrides the name-mangled Idl.__apply_diff so a big set's
    old value is not copied per update: the ovs method must exist under that
    name (else the override is dead code and the O(n) copy is back)."""
    assert hasattr(ovs_idl.Idl, "_Idl__apply_diff")
    assert base.NotifyingIdl._Idl__apply_diff is not ovs_idl.Idl._Idl__apply_diff
    sw = idl.tables["Logical_Switch"]
    ports = [committed_row(idl, "Logical_Switch_Port", name=f"p{i}") for i in range(300)]
    row = committed_row(idl, "Logical_Switch", name="s1", ports=ports[:299], external_ids={"a": "1"})
    old = idl._Idl__apply_diff(sw, row, {
        "ports": ["set", [["uuid", str(ports[299].uuid)]]],      # add one (update2 diff)
        "external_ids": ["map", [["a", "1"], ["b", "2"]]],         # remove a, add b
        "name": "s2"})
    assert len(row._data["ports"].values) == 300
    assert row._data["external_ids"].to_python(_ident) == {"b": "2"}
    assert row._data["name"].to_python(_ident) == "s2"
    assert old["external_ids"].to_python(_ident) == {"a": "1"}     # small: copied, as ovs does
    assert old["name"].to_python(_ident) == "s1"
    assert old["ports"] is row._data["ports"]                       # big: not copied


def test_apply_diff_stores_a_column_the_server_never_sent(idl):
    """A created row's unsent columns are defaults made on read
    (ColumnDefaultDict): a diff of such a column must be stored."""
    sw = idl.tables["Logical_Switch"]
    port = committed_row(idl, "Logical_Switch_Port", name="p0")
    row = ovs_idl.Row(idl, sw, uuid.uuid4(), ovs_idl.ColumnDefaultDict(sw))
    idl._Idl__apply_diff(sw, row, {"ports": ["set", [["uuid", str(port.uuid)]]]})
    assert [p.uuid for p in row.ports] == [port.uuid]


def test_compactor_shares_equal_small_datums_and_an_update_never_reaches_another_row():
    """A pod port's port_security Datum is its addresses Datum, and a recurring
    options map is one Datum for all rows; the update of one row's shared
    Datum (diffed on a copy by NotifyingIdl) leaves the other rows' alone."""
    helper = ovs_idl.SchemaHelper(location=NB_SCHEMA)
    helper.register_columns("Logical_Switch_Port", ["name", "addresses", "port_security", "options"])
    idl = base.NotifyingIdl("unix:/nonexistent/pacific-test.sock", helper, _NullHandler())
    try:
        lsp = idl.tables["Logical_Switch_Port"]
        rows = []
        for i in range(3):
            a = f"0a:58:0a:10:00:0{i} 10.16.0.{i}"
            r = committed_row(idl, "Logical_Switch_Port", name=f"p{i}", addresses=[a],
                              port_security=["".join([a, ""])],
                              options={"requested-chassis": "".join(["node", "1"])})
            idl.notify(ovs_idl.ROW_CREATE, r)
            rows.append(r)
        for r in rows:
            assert r._data["port_security"] is r._data["addresses"]
        assert rows[1]._data["options"] is rows[2]._data["options"]    # recurring: shared
        old = idl._Idl__apply_diff(lsp, rows[1], {
            "options": ["map", [["requested-chassis", "node2"]]],            # value replaced
            "port_security": ["set", ["0a:58:0a:10:00:01 10.16.0.1"]]})      # member removed
        idl.notify(ovs_idl.ROW_UPDATE, rows[1], _Updates(old))
        assert rows[1].options == {"requested-chassis": "node2"} and rows[1].port_security == []
        assert rows[1].addresses == ["0a:58:0a:10:00:01 10.16.0.1"]
        assert rows[2].options == {"requested-chassis": "node1"}
        assert rows[2].port_security == rows[2].addresses == ["0a:58:0a:10:00:02 10.16.0.2"]
    finally:
        idl.close()


class _Updates:
    def __init__(self, data):
        self._data = data


def test_references_hold_the_referenced_rows_own_uuid_object(idl):
    """pacific.ovn.refs: a reference Atom is made to hold its row's UUID object
    (equal value), whether the row came before the reference or after it in
    the same run, and through a diff too."""
    sw = idl.tables["Logical_Switch"]
    first = committed_row(idl, "Logical_Switch_Port", name="p0")
    idl.notify(ovs_idl.ROW_CREATE, first)
    row = committed_row(idl, "Logical_Switch", name="s1", ports=[])
    row._data["ports"] = ovs_data.Datum.from_json(
        sw.columns["ports"].type, ["set", [["uuid", str(first.uuid)], ["uuid", str(uuid.UUID(int=7))]]])
    idl.notify(ovs_idl.ROW_CREATE, row)
    late = ovs_idl.Row(idl, idl.tables["Logical_Switch_Port"], uuid.UUID(int=7),
                       {c: ovs_data.Datum.default(t.type)
                        for c, t in idl.tables["Logical_Switch_Port"].columns.items()})
    idl.tables["Logical_Switch_Port"].rows[late.uuid] = late
    idl.notify(ovs_idl.ROW_CREATE, late)          # came after the reference
    third = committed_row(idl, "Logical_Switch_Port", name="p2")
    idl.notify(ovs_idl.ROW_CREATE, third)
    idl._Idl__apply_diff(sw, row, {"ports": ["set", [["uuid", str(third.uuid)]]]})
    held = {a.value for a in row._data["ports"].values}
    assert held == {first.uuid, late.uuid, third.uuid}
    for a in row._data["ports"].values:
        assert a.value is idl.tables["Logical_Switch_Port"].rows[a.value].uuid
    assert {p.uuid for p in row.ports} == {first.uuid, late.uuid, third.uuid}
    idl.refs.forget()
    assert not idl.refs.pending


def test_process_update2_and_clear_overrides_keep_compacted_rows(idl):
    """NotifyingIdl overrides the name-mangled Idl.__process_update2 and
    Idl.__clear: the ovs methods must exist under those names (else pod ports
    become Rows again, silently)."""
    from pacific.ovn.compact import CompactTable
    for name in ("_Idl__process_update2", "_Idl__clear"):
        assert hasattr(ovs_idl.Idl, name)
        assert getattr(base.NotifyingIdl, name) is not getattr(ovs_idl.Idl, name)
    lsp = idl.tables["Logical_Switch_Port"]
    idl.compact["Logical_Switch_Port"] = compact = CompactTable(lsp, "kind", "Pod")
    pod, infra = uuid.uuid4(), uuid.uuid4()
    assert idl._Idl__process_update2(lsp, pod, {"insert": {
        "name": "p", "addresses": "a b", "external_ids": ["map", [["kind", "Pod"]]]}}) is False
    assert idl._Idl__process_update2(lsp, infra, {"insert": {"name": "i"}})
    assert list(lsp.rows) == [infra] and compact.uuid_of("p") == pod
    assert compact.value(compact.get(pod), "addresses") == ["a b"]
    idl._Idl__process_update2(lsp, pod, {"modify": {"addresses": ["set", ["a b", "c d"]]}})
    assert compact.value(compact.get("p"), "addresses") == ["c d"]
    idl._Idl__clear()
    assert not lsp.rows and len(compact) == 0


def test_a_row_outside_its_table_is_written_by_uuid(idl):
    """compact.TransientRow: a Row the table does not hold, changed in a
    transaction, is recorded as a table's row is (the IDL sends an "update"
    where _uuid == its uuid: tests/e2e/test_ovn_compact.py), and the
    transaction's end does not put it into the table."""
    from pacific.ovn.compact import CompactTable
    lsp = idl.tables["Logical_Switch_Port"]
    compact = CompactTable(lsp, "kind", "Pod")
    compact.update(uuid.uuid4(), {"insert": {"name": "p", "external_ids": ["map", [["kind", "Pod"]]]}})
    row = compact.row(idl, compact.get("p"))
    txn = ovs_idl.Transaction(idl)
    row.addresses = ["a b"]
    assert txn._txn_rows == {row.uuid: row} and "addresses" in row._changes
    txn.abort()
    assert row.uuid not in lsp.rows and row._changes == {}
