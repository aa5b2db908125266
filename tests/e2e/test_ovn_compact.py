"""pacific.ovn.compact: the controller's pod ports kept as tuples, against a
real ovsdb-server with the OVN NB schema.  Each test writes through the
controller-shaped API (monitor=CONTROLLER_MONITOR, compact=CONTROLLER_COMPACT)
and checks the server's rows through a second, ordinary client."""

from __future__ import annotations

import pytest

from ovsdb_fixtures import nb, nbdb  # noqa: F401 (fixtures)
from pacific import names
from pacific.ovn import NorthboundAPI, ensure
from pacific.ovn.compact import TransientRow
from pacific.ovn.nb import CONTROLLER_COMPACT, CONTROLLER_MONITOR

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)

SW, SW2, LSP = "sw", "sw2", "Logical_Switch_Port"
A1 = ["0a:00:00:10:00:05 10.16.0.5"]
A2 = ["0a:00:00:10:00:06 10.16.0.6"]


def pod_ids(pod: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_POD, names.EXT_OWNER: pod}


@pytest.fixture
def ctl(nbdb):
    api = NorthboundAPI(nbdb.remote, timeout=10, created_by="test",
                        monitor=CONTROLLER_MONITOR, compact=CONTROLLER_COMPACT)
    try:
        api.commit(ensure.EnsureSwitch(api, SW, {}), ensure.EnsureSwitch(api, SW2, {}),
                   ensure.EnsurePortGroup(api, "pg", {}))
        yield api
    finally:
        api.close()


def server_port(nb, name, pred=lambda r: True, timeout=5):
    return nb.wait_for_row(LSP, lambda r: r.name == name and pred(r), timeout)


def server_names(nb) -> set[str]:
    with nb.ovsdb_connection.lock:
        return {r.name for r in nb.tables[LSP].rows.values()}


def compacted(api, name):
    with api.ovsdb_connection.lock:
        return api.idl.compact[LSP].get(name)


def test_a_pod_port_is_a_tuple_and_reads_as_a_row(ctl, nb):
    ctl.commit(ensure.EnsurePort(ctl, SW, "p1", A1, A1, pod_ids("ns/p1"),
                                 options={"requested-chassis": "n1"}),
               ensure.EnsurePort(ctl, SW, "infra", ["router"], [], {}, type="router"),
               ensure.PortGroupAddPorts(ctl, "pg", ["p1"]))
    assert server_port(nb, "p1")
    entry = compacted(ctl, "p1")
    assert entry is not None
    rows = ctl.tables[LSP].rows
    assert entry[0] not in rows and [r.name for r in rows.values()] == ["infra"]
    row = ctl.lookup(LSP, "p1")
    assert isinstance(row, TransientRow)
    assert (row.addresses, row.port_security, row.type, row.options, row.external_ids) == (
        A1, A1, "", {"requested-chassis": "n1"}, pod_ids("ns/p1"))
    assert ctl.lookup(LSP, entry[0]).name == "p1"        # by uuid too
    assert ensure.port_is(ctl, SW, "p1", A1, A1, pod_ids("ns/p1"),
                          options={"requested-chassis": "n1"})
    assert not ensure.port_is(ctl, SW, "p1", A2, A2, pod_ids("ns/p1"),
                              options={"requested-chassis": "n1"})
    assert not ensure.port_is(ctl, SW2, "p1", A1, A1, pod_ids("ns/p1"),
                              options={"requested-chassis": "n1"})
    assert ensure.row_exists(ctl, LSP, "p1") and not ensure.row_exists(ctl, LSP, "p2")
    with ctl.ovsdb_connection.lock:
        assert ctl.row_uuid(LSP, "p1") == entry[0]
        assert ctl.row_uuid(LSP, "infra") is not None and ctl.row_uuid(LSP, "p2") is None
        pg, ls = ctl.lookup("Port_Group", "pg"), ctl.lookup("Logical_Switch", SW)
        assert ctl.ref_names(pg, "ports") == {"p1"}
        assert ctl.ref_names(ls, "ports") == {"p1", "infra"}
        # the switch's reference holds the entry's own uuid object (refs.py)
        assert any(a.value is entry[0] for a in ls._data["ports"].values)
    snap = ctl.rows_owned(LSP, names.OWNER_KIND_POD)
    assert [(s.name, s.uuid, s.addresses, s.external_ids) for s in snap] == [
        ("p1", entry[0], A1, pod_ids("ns/p1"))]
    assert [s.name for s in ctl.rows_owned(LSP, names.OWNER_KIND_POD, "ns/p1")] == ["p1"]
    assert ctl.rows_owned(LSP, names.OWNER_KIND_POD, "ns/other") == []
    assert [s.name for s in ctl.rows_owned(LSP)] == ["p1"]   # Pacific's: "infra" has no owner


def test_writes_to_a_compacted_port_reach_the_server(ctl, nb):
    ctl.commit(ensure.EnsurePort(ctl, SW, "p1", A1, A1, pod_ids("ns/p1")))
    uuid = server_port(nb, "p1").uuid
    # changed columns, and a membership in the same transaction: one row object
    ctl.commit(ensure.EnsurePort(ctl, SW, "p1", A2, A2, pod_ids("ns/p1"),
                                 options={"requested-chassis": "n2"}),
               ensure.PortGroupAddPorts(ctl, "pg", ["p1"]))
    assert server_port(nb, "p1", lambda r: r.addresses == A2
                       and r.options == {"requested-chassis": "n2"}).uuid == uuid
    assert nb.wait_for_row("Port_Group", lambda r: [p.name for p in r.ports] == ["p1"], 5)
    assert ctl.lookup(LSP, "p1").addresses == A2 and compacted(ctl, "p1")[0] == uuid
    # moved to another switch: the same row, referenced by the new switch only
    ctl.commit(ensure.EnsurePort(ctl, SW2, "p1", A2, A2, pod_ids("ns/p1")))
    assert nb.wait_for_row("Logical_Switch", lambda r: r.name == SW2
                           and [p.name for p in r.ports] == ["p1"], 5)
    assert nb.lookup("Logical_Switch", SW).ports == []
    ctl.commit(ensure.PortGroupRemovePorts(ctl, "pg", ["p1"]))
    assert nb.wait_for_row("Port_Group", lambda r: r.name == "pg" and r.ports == [], 5)
    assert ensure.port_is(ctl, SW2, "p1", A2, A2, pod_ids("ns/p1"))


def test_a_change_by_another_client_is_seen(ctl, nb):
    ctl.commit(ensure.EnsurePort(ctl, SW, "p1", A1, A1, pod_ids("ns/p1")))
    server_port(nb, "p1")
    nb.db_set(LSP, "p1", ("addresses", A2), ("options", {"x": "y"})).execute(check_error=True)

    def seen():
        row = ctl.lookup(LSP, "p1")
        return row.addresses == A2 and row.options == {"x": "y"} and row.port_security == A1
    assert _until(seen)
    assert not ensure.port_is(ctl, SW, "p1", A1, A1, pod_ids("ns/p1"))
    # no longer a pod's: an ordinary row of the replica, with its values
    nb.db_remove(LSP, "p1", "external_ids", names.EXT_OWNER_KIND).execute(check_error=True)
    assert _until(lambda: "p1" in {r.name for r in ctl.tables[LSP].rows.values()})
    assert compacted(ctl, "p1") is None
    row = ctl.lookup(LSP, "p1")
    assert not isinstance(row, TransientRow) and row.addresses == A2
    assert row.external_ids == {names.EXT_OWNER: "ns/p1"}
    # and deleted by another client
    nb.commit(ensure.DeletePort(nb, "p1"))
    assert _until(lambda: ctl.lookup(LSP, "p1", default=None) is None)


def test_deleting_compacted_ports(ctl, nb):
    ctl.commit(*(ensure.EnsurePort(ctl, SW, f"p{i}", [f"0a:00:00:10:00:0{i} 10.16.0.{i}"], [],
                                   pod_ids(f"ns/p{i}")) for i in range(1, 5)),
               ensure.PortGroupAddPorts(ctl, "pg", ["p1", "p2", "p3"]))
    assert nb.wait_for_row("Port_Group", lambda r: len(r.ports) == 3, 5)
    ctl.commit(ensure.DeletePort(ctl, "p1", SW), ensure.DeletePort(ctl, "p2"))
    assert _until(lambda: compacted(ctl, "p1") is None and compacted(ctl, "p2") is None)
    assert _until(lambda: server_names(nb) == {"p3", "p4"})
    assert not ctl.tables[LSP].rows       # no deleted row put back into the table
    with ctl.ovsdb_connection.lock:
        assert ctl.ref_names(ctl.lookup("Port_Group", "pg"), "ports") == {"p3"}
    # stale-row clean-up by owner (delete_owned: removed from every referrer)
    ctl.commit(ctl.delete_owned(LSP, names.OWNER_KIND_POD,
                                keep=lambda r: r.external_ids[names.EXT_OWNER] == "ns/p4"))
    assert _until(lambda: compacted(ctl, "p3") is None)
    assert _until(lambda: server_names(nb) == {"p4"} and nb.lookup("Port_Group", "pg").ports == [])
    assert [s.name for s in ctl.rows_owned(LSP, names.OWNER_KIND_POD)] == ["p4"]
    assert ctl.commit(ensure.DeletePort(ctl, "p9")) == [None]     # absent: nothing to do


def test_the_replica_is_read_again_after_a_server_restart(ctl, nb, nbdb):
    ctl.commit(ensure.EnsurePort(ctl, SW, "p1", A1, A1, pod_ids("ns/p1")))
    server_port(nb, "p1")
    nbdb.stop()
    nbdb.start()
    assert _until(lambda: ctl.is_connected() and compacted(ctl, "p1") is not None, 20)
    ctl.commit(ensure.EnsurePort(ctl, SW, "p2", A2, A2, pod_ids("ns/p2")))
    assert _until(lambda: compacted(ctl, "p2") is not None)
    assert sorted(s.name for s in ctl.rows_owned(LSP, names.OWNER_KIND_POD)) == ["p1", "p2"]


def _until(cond, timeout: float = 5.0) -> bool:
    """Poll `cond` (the compacted rows raise no row events to wait on)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())
