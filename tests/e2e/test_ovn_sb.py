"""pacific.ovn.sb against a real OVN Southbound ovsdb-server: the replica holds
only the gateway-ish Port_Bindings, follows every change at once (no polling),
and comes back right after the server was away, rows deleted meanwhile gone."""
from __future__ import annotations

import json
import subprocess
import threading

import pytest

from ovsdb_fixtures import SB_SCHEMA, OvsdbServer
from waiting import wait_until
from pacific import names, servicesnat
from pacific.node.egresssnat import gateways
from pacific.ovn.sb import SouthboundWatch

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)
KEY = "shop/web"                                  # a Service with egress SNAT
PORT = names.router_port_name(names.egress_switch_name(names.SNAT_GATEWAY_PREFIX + KEY))


def ops(*operations) -> str:
    return json.dumps(["OVN_Southbound", *operations])


def transact(target: list[str], *operations) -> list:
    res = json.loads(subprocess.run([*target, ops(*operations)], check=True,
                                    capture_output=True, text=True).stdout)
    assert not [r for r in res if r and "error" in r], res
    return res


def chassis(name: str, ip: str) -> list[dict]:
    return [{"op": "insert", "table": "Encap", "uuid-name": f"e{name}",
             "row": {"type": "geneve", "ip": ip, "chassis_name": name}},
            {"op": "insert", "table": "Chassis", "uuid-name": name,
             "row": {"name": name, "hostname": name, "encaps": ["named-uuid", f"e{name}"]}}]


def bind(client, port: str, chassis_name: str | None) -> dict:
    """The operation that binds `port` to `chassis_name` (None: to nobody)."""
    held = ["set", []] if chassis_name is None else ["uuid", chassis_uuid(client, chassis_name)]
    return {"op": "update", "table": "Port_Binding", "where": [["logical_port", "==", port]],
            "row": {"chassis": held}}


def chassis_uuid(client, name: str) -> str:
    res = transact(client, {"op": "select", "table": "Chassis", "columns": ["_uuid"],
                            "where": [["name", "==", name]]})
    return res[0]["rows"][0]["_uuid"][1]


def wait(pred, what, timeout=10.0):
    wait_until(pred, timeout, 0.01, what)


@pytest.fixture
def sb(tmp_path):
    srv = OvsdbServer(tmp_path / "sb", SB_SCHEMA).start()
    client = ["ovsdb-client", "transact", srv.remote]
    try:
        transact(client, *chassis("node1", "192.0.2.1"), *chassis("node2", "192.0.2.2"),
                 {"op": "insert", "table": "Datapath_Binding", "uuid-name": "dp",
                  "row": {"tunnel_key": 1}},
                 *[{"op": "insert", "table": "Port_Binding",
                    "row": {"logical_port": lp, "type": kind, "datapath": ["named-uuid", "dp"],
                            "tunnel_key": i + 1, "mac": ["set", macs]}}
                   for i, (lp, kind, macs) in enumerate((
                       ("cr-" + PORT, "chassisredirect", []),
                       (PORT, "patch", ["0a:58:64:40:01:01 100.64.1.1/24"]),
                       ("pod:shop/a", "", ["0a:58:0a:00:00:05 10.0.0.5"])))],
                 {"op": "insert", "table": "Address_Set",
                  "row": {"name": servicesnat.address_set_name(KEY),
                          "addresses": ["set", ["10.0.0.5"]]}},
                 {"op": "insert", "table": "Address_Set",       # a policy's: not asked for
                  "row": {"name": "np_as_0123", "addresses": ["set", ["10.0.0.5"]]}})
        yield srv, client
    finally:      # also when the rows could not be written: no server left behind
        srv.stop()


def test_the_replica_follows_sb_and_holds_only_gateway_ports(sb):
    srv, client = sb
    changed = threading.Event()
    watch = SouthboundWatch(srv.remote, address_sets=names.SNAT_ADDRESS_SET_PREFIX,
                            timeout=10)
    watch.subscribe(changed.set)
    watch.start()
    try:
        # the first copy arrives inside the connection's constructor: _api, read
        # below, is set when that returns
        wait(lambda: watch.view() is not None and watch._api is not None, "the first copy")
        # (holder, transit router address, its IPv6 one: none for this IPv4 port)
        assert gateways(watch.view(), [KEY]) == ({KEY: (None, "100.64.1.1", None)},
                                                 {KEY: {"10.0.0.5"}})
        assert set(watch.view().address_sets) == {servicesnat.address_set_name(KEY)}
        ports = {r.logical_port for r in watch._api.tables["Port_Binding"].rows.values()}
        assert ports == {PORT, "cr-" + PORT}          # never the pods' ports
        for holder in ("node1", "node2", None):
            changed.clear()
            transact(client, bind(client, "cr-" + PORT, holder))
            assert changed.wait(5), f"no change seen for {holder}"
            wait(lambda: gateways(watch.view())[0][KEY][0] == holder, f"holder {holder}")
    finally:
        watch.stop()
    assert not [t for t in threading.enumerate() if t.name == "sb-watch"]


def test_after_the_server_was_away_the_replica_is_current_again(sb):
    srv, client = sb
    watch = SouthboundWatch(srv.remote, address_sets=names.SNAT_ADDRESS_SET_PREFIX,
                            timeout=10).start()
    try:
        transact(client, bind(client, "cr-" + PORT, "node1"))
        wait(lambda: watch.view() and gateways(watch.view())[0].get(KEY, (None,))[0] == "node1",
             "node1 holds the gateway")
        srv.kill9()
        offline = ["ovsdb-tool", "transact", str(srv.db)]     # changed while it was away
        transact(offline, {"op": "delete", "table": "Port_Binding",
                           "where": [["logical_port", "==", PORT]]},
                 {"op": "update", "table": "Address_Set", "where": [["name", "==",
                  servicesnat.address_set_name(KEY)]], "row": {"addresses": ["set", []]}})
        srv.start()
        wait(lambda: PORT not in watch.view().transits, "the deleted port gone")
        assert gateways(watch.view(), [KEY]) == ({}, {KEY: set()})
        assert watch.view().holders == {"cr-" + PORT: "node1"}
    finally:
        watch.stop()


def test_a_server_not_there_yet_is_waited_for(tmp_path):
    srv = OvsdbServer(tmp_path / "late", SB_SCHEMA)
    watch = SouthboundWatch(srv.remote, timeout=0.5).start()
    try:
        assert watch.view() is None
        srv.start()
        wait(lambda: watch.view() is not None, "the replica once the server is up", 20)
        assert watch.view().holders == {}
    finally:
        watch.stop()
        srv.stop()


def test_multicast_groups_are_counted_and_deleted_datapaths_leave_the_replica_working(sb):
    """IGMP snooping's groups per switch (members counted although the pods'
    Port_Bindings are not replicated), and rows of every watched table deleted
    without breaking the replica: ovsdbapp indexes each table by its schema
    index, so a watched table must bring that index's columns (a Datapath_Binding
    deleted without its tunnel_key once stopped every later update)."""
    srv, client = sb
    watch = SouthboundWatch(srv.remote, multicast=True, timeout=10).start()
    try:
        wait(lambda: watch.view() is not None, "the first copy")
        res = transact(client, {"op": "insert", "table": "Datapath_Binding", "uuid-name": "sw",
                                "row": {"tunnel_key": 7, "external_ids": ["map", [["name", "blue"]]]}})
        dp = res[0]["uuid"][1]
        pod = transact(client, {"op": "select", "table": "Port_Binding", "columns": ["_uuid"],
                                "where": [["logical_port", "==", "pod:shop/a"]]})[0]["rows"][0]["_uuid"]
        transact(client, {"op": "insert", "table": "IGMP_Group",
                          "row": {"address": "239.1.1.1", "datapath": ["uuid", dp],
                                  "chassis": ["uuid", chassis_uuid(client, "node1")],
                                  "ports": ["set", [pod]]}})
        wait(lambda: watch.view().multicast.get("blue") == (1, 1), "one group, one member")
        # deleted in the transaction that moves the gateway: one update message,
        # which a failing index would abort halfway
        transact(client, {"op": "delete", "table": "IGMP_Group", "where": []},
                 {"op": "delete", "table": "Datapath_Binding", "where": [["tunnel_key", "==", 7]]},
                 bind(client, "cr-" + PORT, "node2"))
        wait(lambda: "blue" not in watch.view().multicast, "the group gone")
        wait(lambda: gateways(watch.view())[0][KEY][0] == "node2", "the holder in the same update")
    finally:
        watch.stop()
