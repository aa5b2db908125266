"""Row watchers (ApiBase.watch_rows) and the node's interface index built on them.

The pod index used to be an ovsdbapp RowEvent matching every Interface change:
each change (statistics every 5 s, ovs-vswitchd and ovn-controller on every new
port) was formatted twice for a debug message and frozen for the event thread,
in the connection thread, ahead of the CNI ADD's own transaction (issue 23).
"""
from __future__ import annotations

import logging
import uuid

import pytest
from ovs.db import data as ovs_data
from ovs.db import idl as ovs_idl
from ovsdbapp.backend.ovs_idl import idlutils

from pacific import names, ovsinstall
from pacific.node import bfd
from pacific.ovn import base
from pacific.ovn.ovs import IfaceRecord, _IfaceIndex

VSWITCH_SCHEMA = ovsinstall.from_env().schema("vswitch")


class _Handler:
    def __init__(self):
        self.seen = []

    def notify(self, event, row, updates=None):
        self.seen.append(event)


@pytest.fixture
def idl():
    helper = ovs_idl.SchemaHelper(location=VSWITCH_SCHEMA)
    helper.register_columns("Interface", ["name", "external_ids", "statistics", "ofport"])
    idl = base.NotifyingIdl("unix:/nonexistent/pacific-test.sock", helper, _Handler())
    yield idl
    idl.close()


def _datum(table, column, value):
    return ovs_data.Datum.from_python(table.columns[column].type, value, ovs_idl._row_to_uuid)


def iface(idl, **values):
    table = idl.tables["Interface"]
    data = {c: (_datum(table, c, values[c]) if c in values
                else ovs_data.Datum.default(table.columns[c].type)) for c in table.columns}
    row = ovs_idl.Row(idl, table, uuid.uuid4(), data)
    table.rows[row.uuid] = row
    return row


def update(idl, row, **values):
    """Apply `values` to the row as the IDL does, and notify the update (the
    `updates` Row holds the changed columns' old values)."""
    old = {c: row._data[c] for c in values}
    for c, v in values.items():
        row._data[c] = _datum(row._table, c, v)
    idl.notify(ovs_idl.ROW_UPDATE, row, ovs_idl.Row(idl, row._table, row.uuid, old))


class CountingIndex(_IfaceIndex):
    def __init__(self):
        super().__init__()
        self.applied = 0

    def apply(self, ifname, ids):
        self.applied += 1
        super().apply(ifname, ids)


def pods(idx):
    return {v: names_ for (k, v), names_ in idx.by.items() if k == names.OVS_POD}


def test_interface_index_follows_creates_external_ids_and_deletes_only(idl):
    idx = CountingIndex()
    idl.add_row_watcher("Interface", idx.changed)
    a = iface(idl, name="a_h", external_ids={names.OVS_POD: "ns/p", names.OVS_IFACE_ID: "lsp-p"})
    b = iface(idl, name="b_h", external_ids={names.OVS_POD: "ns/p", names.OVS_CONTAINER_ID: "c1"})
    br = iface(idl, name="br-int")
    for r in (a, b, br):
        idl.notify(ovs_idl.ROW_CREATE, r)
    assert pods(idx) == {"ns/p": {"a_h", "b_h"}}
    assert idx.find(names.OVS_IFACE_ID, "lsp-p") == [
        IfaceRecord("a_h", {names.OVS_POD: "ns/p", names.OVS_IFACE_ID: "lsp-p"})]
    assert [r.name for r in idx.find(names.OVS_CONTAINER_ID, "c1")] == ["b_h"]
    assert idx.get("br-int") == IfaceRecord("br-int", {}) and idx.get("nope") is None
    n = idx.applied
    update(idl, a, statistics={"rx_packets": 5}, ofport=[7])   # not the index's business
    assert idx.applied == n
    update(idl, a, external_ids={names.OVS_POD: "ns/p", names.OVS_OVN_INSTALLED: "true"})
    assert idx.applied == n + 1 and pods(idx) == {"ns/p": {"a_h", "b_h"}}
    assert idx.find(names.OVS_IFACE_ID, "lsp-p") == []          # the key went
    assert idx.get("a_h").external_ids[names.OVS_OVN_INSTALLED] == "true"
    update(idl, b, external_ids={names.OVS_POD: "ns/q"})
    assert pods(idx) == {"ns/p": {"a_h"}, "ns/q": {"b_h"}}
    update(idl, b, name="c_h")
    assert pods(idx) == {"ns/p": {"a_h"}, "ns/q": {"c_h"}} and idx.get("b_h") is None
    idl.notify(ovs_idl.ROW_DELETE, a)
    assert pods(idx) == {"ns/q": {"c_h"}} and idx.get("a_h") is None
    # every change still reaches the event handler
    assert idl.notify_handler.seen.count(ovs_idl.ROW_UPDATE) == 4


def test_interface_index_records_are_copies():
    idx = _IfaceIndex()
    ids = {names.OVS_POD: "ns/p"}
    idx.apply("a_h", ids)
    got = idx.get("a_h")
    got.external_ids["x"] = "y"
    idx.find(names.OVS_POD, "ns/p")[0].external_ids.clear()
    assert idx.get("a_h").external_ids == {names.OVS_POD: "ns/p"}


def test_a_failing_watcher_does_not_stop_the_update(idl, caplog):
    calls = []

    def broken(event, row, updates):
        raise RuntimeError("bug")

    idl.add_row_watcher("Interface", broken)
    idl.add_row_watcher("Interface", lambda e, r, u: calls.append(e))
    with caplog.at_level(logging.ERROR, logger=base.LOG.name):
        idl.notify(ovs_idl.ROW_CREATE, iface(idl, name="x"))
    assert calls == [ovs_idl.ROW_CREATE] and idl.notify_handler.seen == [ovs_idl.ROW_CREATE]
    assert "row watcher" in caplog.text


def test_a_row_wait_wakes_on_the_first_matching_change_without_formatting_rows(
        idl, monkeypatch):
    """wait_for_row's watcher runs in the connection thread: it wakes the waiter
    itself (no event thread) and never formats rows for a debug message, as
    ovsdbapp's RowEvent.matches does even with debug logging off."""
    def no(*_):
        raise AssertionError("row formatted")
    monkeypatch.setattr(idlutils, "row2str", no)
    wait = base._RowWait(lambda r: r.external_ids.get(names.OVS_OVN_INSTALLED) == "true")
    idl.add_row_watcher("Interface", wait)
    row = iface(idl, name="a_h")
    idl.notify(ovs_idl.ROW_CREATE, row)
    assert not wait.done.is_set()
    update(idl, row, external_ids={names.OVS_OVN_INSTALLED: "true"})
    assert wait.done.is_set() and wait.row.name == "a_h"
    update(idl, row, external_ids={names.OVS_OVN_INSTALLED: "true", "x": "y"})
    assert "x" not in wait.row.external_ids          # the first match, frozen
    gone = base._RowWait(lambda r: True)
    gone(ovs_idl.ROW_DELETE, row, None)
    assert not gone.done.is_set()                    # a deleted row never satisfies a wait


def test_watchers_are_removed_without_disturbing_the_others(idl):
    seen = []
    a, b = (lambda e, r, u: seen.append("a")), (lambda e, r, u: seen.append("b"))
    idl.add_row_watcher("Interface", a)
    idl.add_row_watcher("Interface", b)
    idl.remove_row_watcher("Interface", a)
    idl.notify(ovs_idl.ROW_CREATE, iface(idl, name="x"))
    idl.remove_row_watcher("Interface", b)
    idl.notify(ovs_idl.ROW_CREATE, iface(idl, name="y"))
    assert seen == ["b"] and "Interface" not in idl.row_watchers


# -- the BFD sessions egress SNAT reads (pacific.node.bfd) ------------------------

class _Ovs:
    """What BfdSessions.watch uses of OvsAPI: watch_rows (replay, then follow)."""

    def __init__(self, idl):
        self.idl = idl

    def watch_rows(self, table, fn):
        self.idl.add_row_watcher(table, fn)
        for row in list(self.idl.tables[table].rows.values()):
            fn(ovs_idl.ROW_CREATE, row, None)


@pytest.fixture
def bfd_idl():
    helper = ovs_idl.SchemaHelper(location=VSWITCH_SCHEMA)
    helper.register_columns("Interface", ["name", "bfd", "bfd_status", "statistics"])
    helper.register_columns("Port", ["name", "external_ids"])
    idl = base.NotifyingIdl("unix:/nonexistent/pacific-test.sock", helper, _Handler())
    yield idl
    idl.close()


def tunnel(idl, peer, up: bool):
    table = idl.tables["Port"]
    data = {c: ovs_data.Datum.default(table.columns[c].type) for c in table.columns}
    data["name"] = _datum(table, "name", f"ovn-{peer}-0")
    data["external_ids"] = _datum(table, "external_ids",
                                  {bfd.CHASSIS_ID: f"{peer}@10.0.0.9%10.0.0.1"})
    port = ovs_idl.Row(idl, table, uuid.uuid4(), data)
    table.rows[port.uuid] = port
    return iface(idl, name=f"ovn-{peer}-0", bfd={"enable": "true"},
                 bfd_status={"forwarding": "true" if up else "false"})


def test_bfd_sessions_tell_a_node_coming_back_from_one_that_stayed(bfd_idl):
    now = [1000.0]
    kicks = []
    gw, compute = tunnel(bfd_idl, "node1", True), tunnel(bfd_idl, "node3", True)
    s = bfd.BfdSessions(lambda: kicks.append(now[0]), clock=lambda: now[0]).watch(_Ovs(bfd_idl))
    # up when pacific-node started: up long ago (a restarted daemon takes at once)
    assert s.settled() and s.peer_settled("node1") and s.peer_settled("node9")
    update(bfd_idl, gw, statistics={"rx_packets": 3})              # not a BFD change
    assert kicks == []
    # the link cut: every session down; nothing can settle yet
    update(bfd_idl, gw, bfd_status={"forwarding": "false"})
    update(bfd_idl, compute, bfd_status={"forwarding": "false"})
    assert not s.settled() and s.settles_in() is None and len(kicks) == 2
    # back: the compute chassis' session first, the other gateway's 0.7 s later
    now[0] = 1010.0
    update(bfd_idl, compute, bfd_status={"forwarding": "true"})
    assert not s.settled() and s.settles_in() == bfd.SETTLE
    now[0] = 1010.7
    update(bfd_idl, gw, bfd_status={"forwarding": "true"})
    assert not s.settled() and not s.peer_settled("node1")
    now[0] = 1010.0 + bfd.SETTLE
    assert s.settled() and not s.peer_settled("node1") and s.peer_settled("node3")
    now[0] = 1010.7 + bfd.SETTLE
    assert s.peer_settled("node1") and len(kicks) == 4
    # BFD turned off on a tunnel (no HA group needs it): no longer a session
    update(bfd_idl, compute, bfd={"enable": "false"})
    update(bfd_idl, gw, bfd={})
    assert s.settled() and s.settles_in() is None
    s.unwatch(_Ovs(bfd_idl))
    update(bfd_idl, gw, bfd={"enable": "true"}, bfd_status={"forwarding": "false"})
    assert s.settled() and len(kicks) == 6
