"""pacific.ovn.NorthboundAPI against a real ovsdb-server with the OVN NB schema."""

from __future__ import annotations

import threading
import time

import pytest

from ovsdb_fixtures import NB_SCHEMA, OvsdbServer, nb, nbdb  # noqa: F401 (fixtures)
import nb_commands
from pacific import names
from pacific.ovn import (NorthboundAPI, OvnConnectionError, OvnTimeoutError,
                         OvnTransactionError, Owner)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)

CLUSTER = Owner(names.OWNER_KIND_CLUSTER, names.CLUSTER_ROUTER)
SUBNET = Owner(names.OWNER_KIND_SUBNET, names.DEFAULT_SUBNET)
POD = Owner(names.OWNER_KIND_POD, "default/web-0")
SW = names.DEFAULT_SUBNET
LR = names.CLUSTER_ROUTER


def owned_by(row, owner: Owner) -> bool:
    ids = row.external_ids
    return (ids.get(names.EXT_OWNER_KIND) == owner.kind
            and ids.get(names.EXT_OWNER) == owner.name)


def topology(nb):
    """Commands for one of every object kind (one transaction)."""
    lsp = nb_commands.add_switch_port(nb, SW, "web-0.default", owner=POD,
                             addresses=["0a:00:00:10:00:05 10.16.0.5"],
                             port_security=["0a:00:00:10:00:05 10.16.0.5"])
    return [
        nb_commands.add_router(nb, LR, owner=CLUSTER),
        nb_commands.add_switch(nb, SW, owner=SUBNET, other_config={"subnet": "10.16.0.0/16"}),
        *nb_commands.link_router_switch(nb, LR, SW, "0a:00:00:10:00:01", "10.16.0.1/16",
                               owner=SUBNET),
        lsp,
        nb_commands.add_address_set(nb, "as-default", ["10.16.0.5"], owner=SUBNET),
        nb_commands.add_port_group(nb, "pg-default", [lsp], owner=SUBNET),
        nb_commands.add_acl(nb, SW, "to-lport", names.PRIO_ACL_DEFAULT_ALLOW, "ip4",
                   "allow-related", owner=SUBNET),
        nb_commands.add_acl(nb, "pg-default", "from-lport", names.PRIO_ACL_ISOLATION_DROP,
                   "ip4", "drop", owner=SUBNET, port_group=True),
        nb_commands.add_load_balancer(nb, "svc-web", "10.96.0.10:80", ["10.16.0.5:8080"],
                             owner=SUBNET),
        nb_commands.add_nat(nb, LR, "snat", "172.31.0.5", "10.16.0.0/16", owner=SUBNET),
        nb_commands.add_static_route(nb, LR, "10.17.0.0/16", "100.64.0.2", owner=SUBNET),
        nb_commands.add_policy(nb, LR, names.PRIO_POLICY_DISTRIBUTED_EGRESS,
                      "ip4.src == 10.16.0.5", "reroute",
                      nexthops=["100.64.0.2"], owner=SUBNET),
        nb_commands.add_qos(nb, SW, "from-lport", 100, 'inport == "web-0.default"',
                   rate=1000, owner=POD),
    ]


KINDS = {  # table -> (owner, expected rows)
    "Logical_Router": (CLUSTER, 1), "Logical_Switch": (SUBNET, 1),
    "Logical_Router_Port": (SUBNET, 1), "Address_Set": (SUBNET, 1),
    "Port_Group": (SUBNET, 1), "ACL": (SUBNET, 2), "Load_Balancer": (SUBNET, 1),
    "NAT": (SUBNET, 1), "Logical_Router_Static_Route": (SUBNET, 1),
    "Logical_Router_Policy": (SUBNET, 1), "QoS": (POD, 1),
}


def test_create_every_kind_with_owner_ids(nb):
    nb.commit(*topology(nb))
    for table, (owner, n) in KINDS.items():
        rows = nb.rows_owned(table, owner.kind, owner.name)
        assert len(rows) == n, table
        assert all(owned_by(r, owner) for r in rows)
        assert all(r.external_ids[names.EXT_CREATED_BY] == "test" for r in rows)
    lsps = {r.name: r for r in nb.rows_owned("Logical_Switch_Port")}
    assert owned_by(lsps["web-0.default"], POD)
    assert lsps[names.switch_router_port_name(SW)].type == "router"
    pg = nb.lookup("Port_Group", "pg-default")
    assert [p.name for p in pg.ports] == ["web-0.default"]
    assert len(nb.lookup("Logical_Switch", SW).ports) == 2


def test_rerun_is_idempotent_and_updates(nb):
    nb.commit(*topology(nb))
    before = {t: len(nb.tables[t].rows) for t in KINDS}
    nb.commit(*topology(nb))
    assert {t: len(nb.tables[t].rows) for t in KINDS} == before
    # updates through the same helpers
    nb.commit(
        nb_commands.add_switch_port(nb, SW, "web-0.default", owner=POD,
                           addresses=["0a:00:00:10:00:06 10.16.0.6"]),
        nb_commands.add_address_set(nb, "as-default", ["10.16.0.6", "10.16.0.7"],
                           owner=SUBNET),
        nb_commands.add_load_balancer(nb, "svc-web", "10.96.0.10:80",
                             ["10.16.0.6:8080", "10.16.0.7:8080"], owner=SUBNET),
        nb_commands.add_acl(nb, SW, "to-lport", names.PRIO_ACL_DEFAULT_ALLOW, "ip4",
                   "allow", owner=SUBNET),
        nb_commands.add_static_route(nb, LR, "10.17.0.0/16", "100.64.0.3", owner=SUBNET),
        nb_commands.add_qos(nb, SW, "from-lport", 100, 'inport == "web-0.default"',
                   rate=2000, owner=POD),
    )
    assert nb.lookup("Logical_Switch_Port", "web-0.default").addresses == [
        "0a:00:00:10:00:06 10.16.0.6"]
    assert nb.lookup("Address_Set", "as-default").addresses == [
        "10.16.0.6", "10.16.0.7"]
    assert nb.lookup("Load_Balancer", "svc-web").vips == {
        "10.96.0.10:80": "10.16.0.6:8080,10.16.0.7:8080"}
    acls = nb.lookup("Logical_Switch", SW).acls
    assert [a.action for a in acls] == ["allow"]
    [route] = nb.lookup("Logical_Router", LR).static_routes
    assert route.nexthop == "100.64.0.3"
    [qos] = nb.lookup("Logical_Switch", SW).qos_rules
    assert qos.bandwidth == {"rate": 2000}
    assert {t: len(nb.tables[t].rows) for t in KINDS} == before


def test_delete_owned_removes_root_and_child_rows(nb):
    nb.commit(*topology(nb))
    for table in ("ACL", "NAT", "Logical_Router_Static_Route",
                  "Logical_Router_Policy", "Address_Set", "Port_Group",
                  "Load_Balancer"):
        [n] = nb.commit(nb.delete_owned(table, names.OWNER_KIND_SUBNET))
        assert n == KINDS[table][1], table
        assert nb.rows_owned(table) == [], table
    # keep= spares live owners: only the stale pod port goes
    nb.commit(nb_commands.add_switch_port(nb, SW, "web-1.default", owner=Owner(
        names.OWNER_KIND_POD, "default/web-1")))
    nb.commit(nb.delete_owned(
        "Logical_Switch_Port", names.OWNER_KIND_POD,
        keep=lambda r: r.external_ids[names.EXT_OWNER] == "default/web-1"))
    assert {p.name for p in nb.lookup("Logical_Switch", SW).ports} == {
        "web-1.default", names.switch_router_port_name(SW)}
    # deleting a switch takes its ports and QoS rows with it
    nb.commit(nb.ls_del(SW), nb.lr_del(LR))
    for table in ("Logical_Switch", "Logical_Switch_Port", "QoS",
                  "Logical_Router", "Logical_Router_Port"):
        assert len(nb.tables[table].rows) == 0, table


def test_batch_of_1000_ports_in_one_transaction(nb):
    nb.commit(nb_commands.add_switch(nb, SW, owner=SUBNET))
    t0 = time.monotonic()
    with nb.transaction() as txn:
        for i in range(1000):
            ip = f"10.16.{i // 250}.{i % 250 + 2}"
            mac = f"0a:00:00:10:{i // 250:02x}:{i % 250 + 2:02x}"
            txn.add(nb_commands.add_switch_port(nb,
                SW, f"p{i}.bulk", owner=Owner(names.OWNER_KIND_POD, f"bulk/p{i}"),
                addresses=[f"{mac} {ip}"], port_security=[f"{mac} {ip}"]))
    elapsed = time.monotonic() - t0
    assert len(nb.lookup("Logical_Switch", SW).ports) == 1000
    assert len(nb.rows_owned("Logical_Switch_Port", names.OWNER_KIND_POD)) == 1000
    assert nb.lookup("Logical_Switch_Port", "p999.bulk").external_ids[
        names.EXT_OWNER] == "bulk/p999"
    assert elapsed < 30, f"1000-port transaction took {elapsed:.1f}s"


def test_failed_command_raises_named_error_and_commits_nothing(nb):
    nb.commit(nb_commands.add_switch(nb, SW, owner=SUBNET))
    with pytest.raises(OvnTransactionError) as e:
        nb.commit(nb_commands.add_switch_port(nb, SW, "ok.default", owner=POD),
                  nb_commands.add_switch_port(nb, "no-such-switch", "x.default", owner=POD))
    err = e.value
    assert "no-such-switch" in err.failed_command
    assert "Cannot find Logical_Switch" in err.detail
    assert nbdb_remote_in(err, nb)
    assert len(err.commands) == 2
    assert nb.lookup("Logical_Switch", SW).ports == []  # all or nothing


def nbdb_remote_in(err, nb) -> bool:
    return nb.remote in str(err)


def test_server_side_error_carries_ovsdb_text(nb):
    nb.commit(nb_commands.add_switch(nb, SW, owner=SUBNET))
    # two address sets of one name violate the schema index: ovsdb-server refuses
    with pytest.raises(OvnTransactionError) as e:
        nb.commit(nb.db_create("Address_Set", name="dup"),
                  nb.db_create("Address_Set", name="dup"))
    assert "OVSDB error" in e.value.detail
    assert "constraint violation" in e.value.detail
    assert e.value.failed_command is None
    # the connection still works afterwards
    nb.commit(nb_commands.add_switch_port(nb, SW, "after.default", owner=POD))


def test_reconnect_after_kill9_and_restart(nbdb, nb):
    nb.commit(nb_commands.add_switch(nb, SW, owner=SUBNET))
    nbdb.kill9()
    deadline = time.monotonic() + 5
    while nb.is_connected() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not nb.is_connected()

    # a transaction issued during the outage is retried and lands after restart
    result = {}

    def writer():
        try:
            nb.commit(nb_commands.add_switch_port(nb, SW, "during.default", owner=POD))
            result["ok"] = True
        except Exception as ex:  # reported below
            result["error"] = ex

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.5)
    nbdb.start()
    t.join(15)
    assert result == {"ok": True}
    # the cache was re-read: old rows present, new commands work
    nb.commit(nb_commands.add_switch_port(nb, SW, "after.default", owner=POD))
    assert {p.name for p in nb.lookup("Logical_Switch", SW).ports} == {
        "during.default", "after.default"}


def test_transaction_while_server_down_raises_timeout(tmp_path):
    srv = OvsdbServer(tmp_path / "nb", NB_SCHEMA).start()
    api = NorthboundAPI(srv.remote, timeout=1.5)
    try:
        srv.kill9()
        t0 = time.monotonic()
        with pytest.raises(OvnTimeoutError) as e:
            api.commit(nb_commands.add_switch(api, SW, owner=SUBNET))
        assert time.monotonic() - t0 < 10
        assert srv.remote in str(e.value)
        assert "not committed within 1.5s" in str(e.value)
    finally:
        api.close()
        srv.stop()


def test_two_apis_on_two_databases_stay_separate(tmp_path):
    a_srv = OvsdbServer(tmp_path / "a", NB_SCHEMA).start()
    b_srv = OvsdbServer(tmp_path / "b", NB_SCHEMA).start()
    a = b = None
    try:
        a = NorthboundAPI(a_srv.remote, timeout=10)
        b = NorthboundAPI(b_srv.remote, timeout=10)
        assert a.ovsdb_connection is not b.ovsdb_connection
        a.commit(nb_commands.add_switch(a, "only-a", owner=SUBNET))
        b.commit(nb_commands.add_switch(b, "only-b", owner=SUBNET))
        assert [r.name for r in a.rows_owned("Logical_Switch")] == ["only-a"]
        assert [r.name for r in b.rows_owned("Logical_Switch")] == ["only-b"]
        # a third API on a's database sees a's data through its own connection
        a2 = NorthboundAPI(a_srv.remote, timeout=10)
        try:
            assert a2.lookup("Logical_Switch", "only-a").name == "only-a"
        finally:
            a2.close()
    finally:
        for api in (a, b):
            if api is not None:
                api.close()
        a_srv.stop()
        b_srv.stop()


def test_connect_to_missing_server_raises_connection_error(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(OvnConnectionError) as e:
        NorthboundAPI(f"unix:{tmp_path}/absent.sock", timeout=0.5)
    assert "absent.sock" in str(e.value)
    assert time.monotonic() - t0 < 5


def test_wait_for_row_wakes_on_change_from_another_client(nbdb, nb):
    nb.commit(nb_commands.add_switch(nb, SW, owner=SUBNET),
              nb_commands.add_switch_port(nb, SW, "web-0.default", owner=POD))
    other = NorthboundAPI(nbdb.remote, timeout=10)
    try:
        timer = threading.Timer(0.2, lambda: other.commit(
            other.lsp_set_options("web-0.default", **{"requested-chassis": "node1"})))
        timer.start()
        row = nb.wait_for_row(
            "Logical_Switch_Port",
            lambda r: r.name == "web-0.default"
            and r.options.get("requested-chassis") == "node1", timeout=5)
        timer.join()
        assert row is not None
        # already true: returns at once; never true: None after the timeout
        assert nb.wait_for_row("Logical_Switch", lambda r: r.name == SW, 1)
        assert nb.wait_for_row("Logical_Switch", lambda r: r.name == "x",
                               0.2) is None
    finally:
        other.close()


def test_rows_owned_follows_owner_changes_made_by_another_client(nbdb, nb):
    """rows_owned reads the owner index kept from row events: a row whose owner
    another client changes moves to its new owner, a deleted row leaves, a row
    without owner ids is nobody's; the table is never scanned for it."""
    other_pod = Owner(names.OWNER_KIND_POD, "default/web-1")
    nb.commit(nb_commands.add_switch(nb, SW, owner=SUBNET),
              *[nb_commands.add_switch_port(nb, SW, f"p{i}.default", owner=POD)
                for i in range(3)],
              nb_commands.add_switch_port(nb, SW, "q.default", owner=other_pod))
    nb.commit(nb.ls_add("unowned"))

    def owned(kind=None, owner=None):
        return sorted(r.name for r in nb.rows_owned("Logical_Switch_Port", kind, owner))
    assert owned(names.OWNER_KIND_POD, POD.name) == ["p0.default", "p1.default", "p2.default"]
    assert owned(names.OWNER_KIND_POD, other_pod.name) == ["q.default"]
    assert owned(names.OWNER_KIND_SUBNET) == []
    assert [r.name for r in nb.rows_owned("Logical_Switch")] == [SW]
    other = NorthboundAPI(nbdb.remote, timeout=10)
    try:
        other.commit(other.lsp_del("p0.default"))
        other.commit(other.db_set("Logical_Switch_Port", "p1.default", (
            "external_ids", {names.EXT_OWNER: other_pod.name})))
        other.commit(other.db_remove("Logical_Switch_Port", "p2.default", "external_ids",
                                     names.EXT_OWNER_KIND))
        # one server, updates in order: the last change seen means all are
        assert nb.wait_for_row("Logical_Switch_Port", lambda r: r.name == "p2.default" and
                               names.EXT_OWNER_KIND not in r.external_ids, 5)
        assert nb.lookup("Logical_Switch_Port", "p0.default", default=None) is None
    finally:
        other.close()
    assert owned(names.OWNER_KIND_POD, POD.name) == []
    assert owned(names.OWNER_KIND_POD, other_pod.name) == ["p1.default", "q.default"]
    assert owned() == ["p1.default", "q.default"]
    # a reconnect re-reads the rows: the index still answers the same
    nbdb.kill9()
    nbdb.start()
    assert nb.wait_for_row("Logical_Switch_Port", lambda r: r.name == "q.default", 10)
    nb.commit(nb_commands.add_switch_port(nb, SW, "r.default", owner=POD))
    assert owned(names.OWNER_KIND_POD, POD.name) == ["r.default"]
    assert owned(names.OWNER_KIND_POD, other_pod.name) == ["p1.default", "q.default"]
    with nb.ovsdb_connection.lock:     # what rows_owned read: the index, one row
        assert len(nb.idl.owners.uuids("Logical_Switch_Port", names.OWNER_KIND_POD,
                                       POD.name)) == 1


# --- create-or-update (pacific.ovn.ensure under the add_* helpers) -----------

def test_router_port_mac_and_networks_change_in_place(nb):
    nb.commit(nb_commands.add_router(nb, LR, owner=CLUSTER), nb_commands.add_switch(nb, SW, owner=SUBNET),
              *nb_commands.link_router_switch(nb, LR, SW, "0A:00:00:10:00:01", "10.16.0.1/16",
                                     owner=SUBNET))
    rp = names.router_port_name(SW)
    before = nb.lookup("Logical_Router_Port", rp)
    assert before.mac == "0a:00:00:10:00:01"          # normalized like ovn-nbctl
    # a changed gateway: same row, new mac and networks (ovsdbapp's
    # lrp_add(may_exist=True) raised "exists with different mac" here)
    [res] = nb.commit(nb_commands.add_router_port(nb, LR, rp, "0a:00:00:10:00:fe",
                                         ["10.16.0.254/16", "fd00::1/64"], owner=SUBNET))
    after = nb.lookup("Logical_Router_Port", rp)
    assert after.uuid == before.uuid == res.uuid
    assert after.mac == "0a:00:00:10:00:fe"
    assert sorted(after.networks) == ["10.16.0.254/16", "fd00::1/64"]
    assert owned_by(after, SUBNET) and after.external_ids[names.EXT_CREATED_BY] == "test"
    assert [p.name for p in nb.lookup("Logical_Router", LR).ports] == [rp]
    assert len(nb.tables["Logical_Router_Port"].rows) == 1


def test_switch_port_update_moves_and_keeps_unmanaged_columns(nb):
    a, b = "10.16.0.5", "10.16.0.6"
    nb.commit(nb_commands.add_switch(nb, SW, owner=SUBNET), nb_commands.add_switch(nb, "other", owner=SUBNET),
              nb_commands.add_switch_port(nb, SW, "web-0.default", owner=POD,
                                 addresses=[f"0a:00:00:10:00:05 {a}"],
                                 port_security=[f"0a:00:00:10:00:05 {a}"],
                                 extra_ids={"keep": "me"}))
    uuid = nb.lookup("Logical_Switch_Port", "web-0.default").uuid
    # new addresses; port_security not passed: kept; owner ids re-stamped,
    # other external_ids kept (merged, as before)
    other_pod = Owner(names.OWNER_KIND_POD, "default/web-0b")
    nb.commit(nb_commands.add_switch_port(nb, SW, "web-0.default", owner=other_pod,
                                 addresses=[f"0a:00:00:10:00:06 {b}"]))
    p = nb.lookup("Logical_Switch_Port", "web-0.default")
    assert p.uuid == uuid
    assert p.addresses == [f"0a:00:00:10:00:06 {b}"]
    assert p.port_security == [f"0a:00:00:10:00:05 {a}"]
    assert owned_by(p, other_pod) and p.external_ids["keep"] == "me"
    # the same port name on another switch: moved, not duplicated
    nb.commit(nb_commands.add_switch_port(nb, "other", "web-0.default", owner=POD, type="", options={}))
    assert [x.name for x in nb.lookup("Logical_Switch", "other").ports] == ["web-0.default"]
    assert list(nb.lookup("Logical_Switch", SW).ports) == []
    assert nb.lookup("Logical_Switch_Port", "web-0.default").uuid == uuid
    # explicit external_ids replace the map (owner ids still on top)
    nb.commit(nb_commands.add_switch_port(nb, "other", "web-0.default", owner=POD,
                                 external_ids={"only": "this"}))
    assert nb.lookup("Logical_Switch_Port", "web-0.default").external_ids == {
        "only": "this", **POD.external_ids(), names.EXT_CREATED_BY: "test"}


def test_same_transaction_create_then_reference(nb):
    """Rows created by earlier commands of a transaction are found by name
    (a switch and its ports, a router and its port, then ovsdbapp commands on
    them); rerunning the same batch changes nothing."""
    def batch():
        return [nb_commands.add_router(nb, LR, owner=CLUSTER),
                nb_commands.add_switch(nb, SW, owner=SUBNET, other_config={"subnet": "10.16.0.0/16"}),
                *nb_commands.link_router_switch(nb, LR, SW, "0a:00:00:10:00:01", "10.16.0.1/16",
                                       owner=SUBNET),
                nb_commands.add_switch_port(nb, SW, "web-0.default", owner=POD,
                                   addresses=["0a:00:00:10:00:05 10.16.0.5"]),
                # same port again in the same transaction: converges, no second row
                nb_commands.add_switch_port(nb, SW, "web-0.default", owner=POD,
                                   addresses=["0a:00:00:10:00:07 10.16.0.7"]),
                nb_commands.add_acl(nb, SW, "to-lport", names.PRIO_ACL_DEFAULT_ALLOW, "ip4",
                           "allow-related", owner=SUBNET),
                nb_commands.add_static_route(nb, LR, "10.17.0.0/16", "100.64.0.2", owner=SUBNET)]
    results = nb.commit(*batch())
    assert [r.name for r in results[:5]] == [
        LR, SW, names.router_port_name(SW), names.switch_router_port_name(SW),
        "web-0.default"]
    ls = nb.lookup("Logical_Switch", SW)
    assert sorted(p.name for p in ls.ports) == sorted(
        [names.switch_router_port_name(SW), "web-0.default"])
    assert nb.lookup("Logical_Switch_Port", "web-0.default").addresses == [
        "0a:00:00:10:00:07 10.16.0.7"]
    assert len(ls.acls) == 1 and ls.other_config == {"subnet": "10.16.0.0/16"}
    assert len(nb.lookup("Logical_Router", LR).static_routes) == 1
    counts = {t: len(nb.tables[t].rows) for t in KINDS}
    nb.commit(*batch())
    assert {t: len(nb.tables[t].rows) for t in KINDS} == counts
    assert len(nb.tables["Logical_Switch_Port"].rows) == 2


def test_port_is_reads_under_the_connection_lock(nb):
    """ensure.port_is (called per pod reconcile from worker threads) waits
    while the connection thread holds the lock (applying an update), answers
    False only for a missing switch or port, and raises anything else."""
    from pacific.ovn import ensure
    addr = ["0a:00:00:10:00:05 10.16.0.5"]
    nb.commit(ensure.EnsureSwitch(nb, "s1", {}),
              ensure.EnsurePort(nb, "s1", "p1", addr, addr, {"k": "v"}))
    assert ensure.port_is(nb, "s1", "p1", addr, addr, {"k": "v"})
    assert not ensure.port_is(nb, "s1", "nope", addr, addr, {"k": "v"})
    assert not ensure.port_is(nb, "nope", "p1", addr, addr, {"k": "v"})
    done = threading.Event()
    with nb.ovsdb_connection.lock:
        t = threading.Thread(target=lambda: (ensure.port_is(nb, "s1", "p1", addr, addr, {}),
                                             done.set()))
        t.start()
        assert not done.wait(0.3)
    assert done.wait(5)
    t.join()
    with pytest.raises(TypeError):   # a bug is not "port differs"
        ensure.port_is(nb, "s1", "p1", addr, addr, external_ids=5)


def test_wait_for_row_raises_a_broken_predicate(nb):
    nb.commit(nb_commands.add_switch(nb, "s1", owner=SUBNET))
    with pytest.raises(KeyError):
        nb.wait_for_row("Logical_Switch", lambda r: r.external_ids["missing"] == "x", 0.1)
    # the watcher was removed: a later wait works
    assert nb.wait_for_row("Logical_Switch", lambda r: r.name == "s1", 1) is not None


# --- port group / address set membership by mutation ---------------------------

def _members(api, table, name):
    from pacific.ovn import ensure
    with api.ovsdb_connection.lock:
        row = api.lookup(table, name)
        if table == ensure.PG:
            return sorted(p.name for p in row.ports)
        return sorted(row.addresses)


class _Pause:
    """A command that holds its transaction (and its API's replica, which the
    same thread updates) until released: the transaction commits what it
    built from the view it had."""

    def __init__(self):
        self.reached, self.release = threading.Event(), threading.Event()

    def command(self, api):
        from pacific.ovn import ensure
        pause = self

        class Cmd(ensure.Command):
            def run_idl(self, txn):
                pause.reached.set()
                assert pause.release.wait(10)
        return Cmd(api)


@pytest.mark.parametrize("kind", ["port_group", "address_set"])
def test_members_added_from_the_same_stale_view_both_survive(nbdb, nb, kind):
    from pacific.ovn import ensure
    if kind == "port_group":
        table, create, add = ensure.PG, ensure.EnsurePortGroup, ensure.PortGroupAddPorts
        first, second = "p1", "p2"
    else:
        table, create, add = ensure.AS, ensure.EnsureAddressSet, ensure.AddressSetAddAddresses
        first, second = "10.16.0.5", "10.16.0.6"
    nb.commit(ensure.EnsureSwitch(nb, "s1", {}),
              *[ensure.EnsurePort(nb, "s1", p, [], [], {}) for p in ("p1", "p2")],
              create(nb, "m", {"k": "v"}))
    nb2 = NorthboundAPI(nbdb.remote, timeout=10)
    try:
        assert _members(nb2, table, "m") == []
        pause = _Pause()
        errors = []

        def second_writer():
            try:
                with nb2.transaction() as txn:
                    txn.add(add(nb2, "m", [second]))    # built from a view without `first`
                    txn.add(pause.command(nb2))
            except Exception as exc:   # noqa: BLE001 - reported below
                errors.append(exc)
        t = threading.Thread(target=second_writer)
        t.start()
        assert pause.reached.wait(10)
        nb.commit(add(nb, "m", [first]))           # commits while the other waits
        pause.release.set()
        t.join(15)
        assert not errors
        want = sorted([first, second])
        deadline = time.monotonic() + 5
        while _members(nb, table, "m") != want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _members(nb, table, "m") == want
        assert nb.lookup(table, "m").external_ids == {"k": "v"}
    finally:
        nb2.close()


def test_member_commands_are_idempotent_and_remove_absent_is_a_noop(nb):
    from pacific.ovn import ensure
    nb.commit(ensure.EnsureSwitch(nb, "s1", {}),
              *[ensure.EnsurePort(nb, "s1", p, [], [], {}) for p in ("p1", "p2")],
              ensure.EnsurePortGroup(nb, "pg", {}), ensure.EnsureAddressSet(nb, "as", {}))
    add_p, add_a = (nb.commit(ensure.PortGroupAddPorts(nb, "pg", ["p1"]),
                              ensure.AddressSetAddAddresses(nb, "as", ["10.0.0.1"])))
    assert (add_p, add_a) == (1, 1)
    # again: nothing to change, nothing sent
    assert nb.commit(ensure.PortGroupAddPorts(nb, "pg", ["p1"]),
                     ensure.AddressSetAddAddresses(nb, "as", ["10.0.0.1"])) == [0, 0]
    # absent members (and a port that does not exist at all): no-ops
    assert nb.commit(ensure.PortGroupRemovePorts(nb, "pg", ["p2", "nope"]),
                     ensure.AddressSetRemoveAddresses(nb, "as", ["10.0.0.9"])) == [0, 0]
    assert _members(nb, ensure.PG, "pg") == ["p1"]
    assert _members(nb, ensure.AS, "as") == ["10.0.0.1"]
    assert nb.commit(ensure.PortGroupRemovePorts(nb, "pg", "p1"),
                     ensure.AddressSetRemoveAddresses(nb, "as", "10.0.0.1")) == [1, 1]
    assert _members(nb, ensure.PG, "pg") == [] and _members(nb, ensure.AS, "as") == []
    # adding a port that does not exist is an error naming it
    with pytest.raises(OvnTransactionError, match="nope"):
        nb.commit(ensure.PortGroupAddPorts(nb, "pg", ["nope"]))
    assert nb.commit(ensure.DeletePortGroup(nb, "pg"), ensure.DeleteAddressSet(nb, "as"),
                     ensure.DeletePortGroup(nb, "pg")) == [True, True, None]
    assert nb.lookup(ensure.PG, "pg", default=None) is None


def test_members_of_a_group_created_in_the_same_transaction(nb):
    from pacific.ovn import ensure
    nb.commit(ensure.EnsureSwitch(nb, "s1", {}),
              *[ensure.EnsurePort(nb, "s1", p, [], [], {}) for p in ("p1", "p2", "p3")],
              ensure.EnsurePortGroup(nb, "pg", {"o": "1"}),
              ensure.PortGroupAddPorts(nb, "pg", ["p1", "p2", "p3"]),
              ensure.PortGroupRemovePorts(nb, "pg", ["p2"]),     # added then removed: out
              ensure.EnsureAddressSet(nb, "as", {"o": "1"}),
              ensure.AddressSetAddAddresses(nb, "as", ["10.0.0.1", "10.0.0.2"]),
              ensure.AddressSetRemoveAddresses(nb, "as", ["10.0.0.2"]),
              ensure.AddressSetAddAddresses(nb, "as", ["10.0.0.2", "10.0.0.3"]))  # and back in
    assert _members(nb, ensure.PG, "pg") == ["p1", "p3"]
    assert _members(nb, ensure.AS, "as") == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    # a port created in the same transaction as the group and its membership
    nb.commit(ensure.EnsurePort(nb, "s1", "p4", [], [], {}),
              ensure.PortGroupAddPorts(nb, "pg", ["p4"]),
              ensure.PortGroupRemovePorts(nb, "pg", ["p1"]),
              ensure.PortGroupAddPorts(nb, "pg", ["p1"]))   # removed then added: in
    assert _members(nb, ensure.PG, "pg") == ["p1", "p3", "p4"]
    # an ACL on the new group in the same transaction still works
    nb.commit(ensure.EnsurePortGroup(nb, "pg2", {}),
              nb.pg_acl_add("pg2", "to-lport", 1000, "outport == @pg2", "drop", may_exist=True))
    assert len(nb.lookup(ensure.PG, "pg2").acls) == 1


def test_replica_sharing_survives_updates_of_one_row(nbdb, nb):
    """pacific.ovn.base._Compactor shares Datums/Atoms of equal values among
    rows of the replica: a change to one row (through the server's update
    stream) must change that row only."""
    from pacific.ovn import ensure
    addr = ["0a:00:00:10:00:05 10.16.0.5"]
    nb.commit(ensure.EnsureSwitch(nb, "s1", {}),
              *[ensure.EnsurePort(nb, "s1", f"p{i}", addr, addr, {"k": "v", "u": str(i)},
                                  type="localnet", options={"network_name": "phys"})
                for i in range(5)])
    other = NorthboundAPI(nbdb.remote, timeout=10)
    try:
        other.commit(ensure.EnsurePort(other, "s1", "p1", ["0a:00:00:10:00:06 10.16.0.6"], addr,
                                       {"k": "w", "u": "1"}, type="router",
                                       options={"router-port": "x"}),
                     other.db_set("Logical_Switch_Port", "p2", ("external_ids", {"n": "m"})))
    finally:
        other.close()
    assert nb.wait_for_row("Logical_Switch_Port",
                           lambda r: r.name == "p2" and r.external_ids.get("n") == "m", 5)
    assert nb.wait_for_row("Logical_Switch_Port", lambda r: r.name == "p1" and r.type == "router", 5)
    with nb.ovsdb_connection.lock:
        rows = {i: nb.lookup("Logical_Switch_Port", f"p{i}") for i in range(5)}
        got = {i: (r.type, r.options, r.external_ids, r.addresses, r.port_security)
               for i, r in rows.items()}
    for i in (0, 3, 4):
        assert got[i] == ("localnet", {"network_name": "phys"}, {"k": "v", "u": str(i)}, addr, addr)
    assert got[1] == ("router", {"router-port": "x"}, {"k": "w", "u": "1"},
                      ["0a:00:00:10:00:06 10.16.0.6"], addr)
    assert got[2] == ("localnet", {"network_name": "phys"}, {"k": "v", "u": "2", "n": "m"}, addr, addr)


def test_controller_monitor_holds_only_its_columns_and_every_command_works(nbdb, nb):
    """NorthboundAPI(monitor=CONTROLLER_MONITOR, compact=...), as pacific-controller
    connects: the replica has only the listed tables/columns, and everything
    the controller and the ensure layer do still works on it."""
    from pacific.ovn import ensure
    from pacific.ovn.nb import CONTROLLER_COMPACT, CONTROLLER_MONITOR
    ctl = NorthboundAPI(nbdb.remote, timeout=10, created_by="test", monitor=CONTROLLER_MONITOR,
                        compact=CONTROLLER_COMPACT)
    try:
        assert set(ctl.tables) == set(CONTROLLER_MONITOR)
        assert set(ctl.tables["Logical_Switch_Port"].columns) == set(
            CONTROLLER_MONITOR["Logical_Switch_Port"])
        addr = ["0a:00:00:10:00:05 10.16.0.5"]
        ids = {names.EXT_OWNER_KIND: names.OWNER_KIND_POD, names.EXT_OWNER: "ns/p"}
        ctl.commit(ensure.EnsureRouter(ctl, LR, {}), ensure.EnsureSwitch(ctl, SW, {}),
                   ensure.EnsureRouterPort(ctl, LR, "rp", "0a:00:00:10:00:01", ["10.16.0.1/16"], {}),
                   ensure.EnsurePort(ctl, SW, "sp", ["router"], [], {}, type="router",
                                     options={"router-port": "rp"}),
                   ensure.EnsurePort(ctl, SW, "p.ns", addr, addr, ids),
                   ensure.EnsurePortGroup(ctl, "pg", {}),
                   ensure.PortGroupAddPorts(ctl, "pg", ["p.ns"]),
                   ensure.EnsureAddressSet(ctl, "as", {}),
                   ensure.AddressSetAddAddresses(ctl, "as", ["10.16.0.5"]),
                   ctl.pg_acl_add("pg", "to-lport", 1001, "outport == @pg", "allow",
                                  may_exist=True))
        assert ensure.port_is(ctl, SW, "p.ns", addr, addr, ids)
        assert [r.name for r in ctl.rows_owned("Logical_Switch_Port", names.OWNER_KIND_POD)] \
            == ["p.ns"]
        # the full replica (another client, e.g. northd) sees the same rows
        assert nb.wait_for_row("Port_Group", lambda r: r.name == "pg" and len(r.ports) == 1, 5)
        # a column not monitored is not there (the controller must not read it)
        with pytest.raises(AttributeError):
            ctl.lookup("Logical_Switch_Port", "p.ns").up
        ctl.commit(ensure.DeletePort(ctl, "p.ns", SW), ensure.DeleteRouterPort(ctl, LR, "rp"),
                   ensure.DeletePortGroup(ctl, "pg"), ensure.DeleteSwitch(ctl, SW))
        assert ctl.lookup("Logical_Switch", SW, default=None) is None
    finally:
        ctl.close()
    with pytest.raises(OvnConnectionError, match="nonsense"):
        NorthboundAPI(nbdb.remote, timeout=5, monitor={"Logical_Switch": ("name", "nonsense")})
