"""ensure.has_ref / port_is (the O(1) membership checks that replaced reading
`switch.ports`) agree with the IDL's own view, inside and outside a
transaction, against a real NB ovsdb-server."""
from __future__ import annotations

import pytest

from ovsdb_fixtures import NB_SCHEMA, OvsdbServer
from pacific.ovn import NorthboundAPI, ensure

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)
IDS = {"pacific.io/owner": "ns/p"}
ADDR = ["0a:58:0a:11:00:05 10.17.0.5"]


@pytest.fixture
def nb(tmp_path):
    srv = OvsdbServer(tmp_path / "nb", NB_SCHEMA).start()
    api = None
    try:
        api = NorthboundAPI(srv.remote, timeout=10, created_by="test")
        api.commit(ensure.EnsureSwitch(api, "a", {}), ensure.EnsureSwitch(api, "b", {}),
                   *[ensure.EnsurePort(api, "a", f"x{i}", [], [], {}) for i in range(50)],
                   ensure.EnsurePort(api, "a", "p", ADDR, ADDR, IDS))
        yield api
    finally:
        if api is not None:
            api.close()
        srv.stop()


class _Probe(ensure.Command):
    """Runs `fn(txn)` inside a transaction and keeps what it returns."""

    def __init__(self, api, fn):
        super().__init__(api)
        self.fn = fn

    def run_idl(self, txn):
        self.result = self.fn(txn)


def _views(api, parent_name: str, child_name: str) -> tuple[bool, bool]:
    ls = api.lookup("Logical_Switch", parent_name)
    row = api.lookup("Logical_Switch_Port", child_name)
    return ensure.has_ref(ls, "ports", row), row in ls.ports


def test_committed_membership(nb):
    assert _views(nb, "a", "p") == (True, True)
    assert _views(nb, "b", "p") == (False, False)
    assert [r.name for r in ensure.referrers(nb, "Logical_Switch", "ports",
                                              nb.lookup("Logical_Switch_Port", "p"))] == ["a"]


def test_pending_add_and_remove_are_seen(nb):
    def check(txn):
        a, b = nb.lookup("Logical_Switch", "a"), nb.lookup("Logical_Switch", "b")
        p = nb.lookup("Logical_Switch_Port", "p")
        a.delvalue("ports", p)
        b.addvalue("ports", p)
        out = [(ensure.has_ref(a, "ports", p), p in a.ports), (ensure.has_ref(b, "ports", p), p in b.ports)]
        new = ensure.find(nb, txn, "Logical_Switch_Port", "q") or ensure.insert(nb, txn, "Logical_Switch_Port", "q")
        b.addvalue("ports", new)
        out.append((ensure.has_ref(b, "ports", new), new in b.ports))
        out.append((ensure.has_ref(a, "ports", new), new in a.ports))
        return out
    res = nb.commit(_Probe(nb, check))[0]
    assert res == [(False, False), (True, True), (True, True), (False, False)]
    assert _views(nb, "b", "p") == (True, True) and _views(nb, "a", "p") == (False, False)


def test_port_moves_and_deletes_without_switch_name(nb):
    nb.commit(ensure.EnsurePort(nb, "b", "p", ADDR, ADDR, IDS))
    assert _views(nb, "b", "p") == (True, True) and _views(nb, "a", "p") == (False, False)
    assert ensure.port_is(nb, "b", "p", ADDR, ADDR, IDS)
    assert not ensure.port_is(nb, "a", "p", ADDR, ADDR, IDS)
    nb.commit(ensure.DeletePort(nb, "p"))   # parent found by scanning, O(1) per switch
    assert nb.lookup("Logical_Switch_Port", "p", default=None) is None
    assert len(nb.lookup("Logical_Switch", "a").ports) == 50
    assert len(nb.lookup("Logical_Switch", "b").ports) == 0


def test_port_is_notices_every_difference(nb):
    assert ensure.port_is(nb, "a", "p", ADDR, ADDR, IDS)
    other = ["0a:58:0a:11:00:06 10.17.0.6"]
    assert not ensure.port_is(nb, "a", "p", other, ADDR, IDS)
    assert not ensure.port_is(nb, "a", "p", ADDR, other, IDS)
    assert not ensure.port_is(nb, "a", "p", ADDR, ADDR, {**IDS, "k": "v"})
    assert not ensure.port_is(nb, "a", "p", ADDR, ADDR, IDS, type="router")
    assert not ensure.port_is(nb, "a", "nope", ADDR, ADDR, IDS)
    assert not ensure.port_is(nb, "nope", "p", ADDR, ADDR, IDS)


def test_replica_shares_map_strings(nb):
    """pacific.ovn.base interns the strings of new and changed rows' maps."""
    nb.commit(ensure.EnsurePort(nb, "b", "q", ADDR, ADDR, {**IDS, "kind": "Pod"}),
              ensure.EnsurePort(nb, "b", "r", ADDR, ADDR, {**IDS, "kind": "Pod"}))
    q, r = nb.lookup("Logical_Switch_Port", "q"), nb.lookup("Logical_Switch_Port", "r")
    kq = {k.value: k for k in q._data["external_ids"].values}
    kr = {k.value: k for k in r._data["external_ids"].values}
    assert kq["kind"].value is kr["kind"].value
    assert q._data["external_ids"].values[kq["kind"]].value is r._data["external_ids"].values[kr["kind"]].value
    # a changed map is interned too, and reads back equal
    nb.commit(ensure.EnsurePort(nb, "b", "q", ADDR, ADDR, {**IDS, "kind": "Pod", "extra": "x"}))
    q = nb.lookup("Logical_Switch_Port", "q")
    assert q.external_ids == {**IDS, "kind": "Pod", "extra": "x"}
    kq = {k.value: k for k in q._data["external_ids"].values}
    assert kq["kind"].value is kr["kind"].value
