"""pacific.ovn.OvsAPI against a real ovsdb-server with the Open_vSwitch schema.

No ovs-vswitchd runs here, so the APIs use wait_vswitchd=False."""

from __future__ import annotations

import threading

import time

import pytest

from ovsdb_fixtures import NB_SCHEMA, VSWITCH_SCHEMA, OvsdbServer
import nb_commands
from pacific import names
from pacific.ovn import NorthboundAPI, OvnTransactionError, OvsAPI, Owner

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)

POD = Owner(names.OWNER_KIND_POD, "default/web-0")
BR = names.INTEGRATION_BRIDGE


@pytest.fixture
def ovsdb(tmp_path):
    srv = OvsdbServer(tmp_path / "ovs", VSWITCH_SCHEMA).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def ovs(ovsdb):
    api = OvsAPI(ovsdb.remote, timeout=10, wait_vswitchd=False,
                 created_by="test")
    try:
        api.commit(api.init())
        yield api
    finally:
        api.close()


def test_bootstrap_external_ids_and_bridge(ovs):
    ids = {"system-id": "node1", "ovn-encap-type": "geneve",
           "ovn-encap-ip": "172.31.0.11", "ovn-bridge-datapath-type": "netdev"}
    ovs.commit(ovs.init(), ovs.set_ovs_external_ids(ids),
               ovs.add_br(BR, datapath_type="netdev"))
    ovs.commit(ovs.set_ovs_external_ids({"ovn-remote": "tcp:172.31.0.1:6642"}))
    assert ovs.get_ovs_external_ids() == {**ids,
                                          "ovn-remote": "tcp:172.31.0.1:6642"}
    assert len(ovs.tables["Open_vSwitch"].rows) == 1  # init is idempotent
    assert ovs.list_br().execute(check_error=True) == [BR]


def test_set_ssl_creates_the_row_then_updates_it(ovs):
    """A fresh node's database has no SSL row (pacific-vswitch's, nothing else
    ran set-ssl): the first call makes it, later ones change it in place."""
    files = ("/etc/pacific/ovn-tls/tls.key", "/etc/pacific/ovn-tls/tls.crt",
             "/etc/pacific/ovn-tls/ca.crt")
    ovs.commit(ovs.set_ssl(*files))

    def row():
        (ssl,) = ovs.tables["SSL"].rows.values()
        return ssl.private_key, ssl.certificate, ssl.ca_cert
    assert row() == files
    renewed = (files[0], "/etc/pacific/ovn-tls/new.crt", files[2])
    ovs.commit(ovs.set_ssl(*renewed))
    assert row() == renewed


def test_interface_port_create_update_find_delete(ovs):
    ovs.commit(ovs.add_br(BR, datapath_type="netdev"))
    ext = {names.OVS_IFACE_ID: "web-0.default", names.OVS_POD: "default/web-0"}
    ovs.commit(ovs.add_interface_port(BR, "veth0a1b", external_ids=ext,
                                      owner=POD, mtu_request=1400))
    iface = ovs.get_interface("veth0a1b")
    assert iface.external_ids == ext and iface.mtu_request == [1400]
    port = ovs.lookup("Port", "veth0a1b")
    assert port.external_ids[names.EXT_OWNER] == "default/web-0"
    # re-running updates in place (idempotent), external_ids are merged
    ovs.commit(ovs.add_interface_port(
        BR, "veth0a1b", external_ids={names.OVS_CONTAINER_ID: "c1"}, owner=POD))
    assert len(ovs.tables["Interface"].rows) == 2  # br-int's own + veth
    assert ovs.get_interface("veth0a1b").external_ids == {
        **ext, names.OVS_CONTAINER_ID: "c1"}
    found = ovs.find_interfaces({names.OVS_POD: "default/web-0"})
    assert [i.name for i in found] == ["veth0a1b"]
    assert ovs.find_interfaces({names.OVS_POD: "default/other"}) == []
    # the pod index (IDL events) agrees, and follows a second interface and a removal
    assert [i.name for i in ovs.interfaces_of_pod("default/web-0")] == ["veth0a1b"]
    ovs.commit(ovs.add_interface_port(BR, "veth9", external_ids={names.OVS_POD: "default/web-0"},
                                      owner=POD))
    wait = time.monotonic() + 5
    while len(ovs.interfaces_of_pod("default/web-0")) != 2 and time.monotonic() < wait:
        time.sleep(0.01)     # the index follows as the IDL applies the change
    assert [i.name for i in ovs.interfaces_of_pod("default/web-0")] == ["veth0a1b", "veth9"]
    ovs.commit(ovs.del_port("veth9"))
    ovs.commit(ovs.del_port("veth0a1b"))
    while ovs.interfaces_of_pod("default/web-0") and time.monotonic() < wait:
        time.sleep(0.01)
    assert ovs.interfaces_of_pod("default/web-0") == []
    assert ovs.get_interface("veth0a1b") is None
    assert ovs.rows_owned("Port", names.OWNER_KIND_POD) == []


def test_internal_port_for_management(ovs):
    ovs.commit(ovs.add_br(BR, datapath_type="netdev"))
    ovs.commit(ovs.add_interface_port(
        BR, names.MGMT_PORT, type="internal",
        external_ids={names.OVS_IFACE_ID: names.node_lsp_name("node1")}))
    assert ovs.get_interface(names.MGMT_PORT).type == "internal"


def test_port_on_missing_bridge_names_it(ovs):
    with pytest.raises(OvnTransactionError) as e:
        ovs.commit(ovs.add_interface_port("br-missing", "veth9"))
    assert "bridge br-missing does not exist" in str(e.value)


def test_wait_ovn_installed_is_woken_by_another_writer(ovsdb, ovs):
    """ovn-controller sets ovn-installed from its own connection; the waiter
    wakes through an IDL event, not by polling."""
    ovs.commit(ovs.add_br(BR, datapath_type="netdev"),
               ovs.add_interface_port(BR, "veth1", external_ids={
                   names.OVS_IFACE_ID: "web-0.default"}))
    assert not ovs.is_ovn_installed("veth1")
    controller = OvsAPI(ovsdb.remote, timeout=10, wait_vswitchd=False)
    try:
        timer = threading.Timer(0.2, lambda: controller.commit(
            controller.iface_set_external_id("veth1", names.OVS_OVN_INSTALLED,
                                             "true")))
        timer.start()
        assert ovs.wait_ovn_installed("veth1", timeout=5)
        timer.join()
        assert ovs.is_ovn_installed("veth1")
        assert ovs.wait_ovn_installed("veth1", timeout=0.1)  # already there
        assert not ovs.wait_ovn_installed("veth-never", timeout=0.2)
    finally:
        controller.close()


def test_nb_and_ovs_apis_in_one_process_keep_their_own_connection(tmp_path,
                                                                   ovs):
    nbsrv = OvsdbServer(tmp_path / "nb", NB_SCHEMA).start()
    nb = None
    try:
        nb = NorthboundAPI(nbsrv.remote, timeout=10)
        assert nb.ovsdb_connection is not ovs.ovsdb_connection
        assert "Logical_Switch" in nb.tables and "Logical_Switch" not in ovs.tables
        assert "Bridge" in ovs.tables and "Bridge" not in nb.tables
        ovs.commit(ovs.add_br(BR))
        nb.commit(nb_commands.add_switch(nb, "s1", owner=POD))
        assert ovs.list_br().execute(check_error=True) == [BR]
        assert [r.name for r in nb.rows_owned("Logical_Switch")] == ["s1"]
    finally:
        if nb is not None:
            nb.close()
        nbsrv.stop()


def test_concurrent_waiters_on_one_table_each_wake(ovsdb, ovs):
    ovs.commit(ovs.add_br(BR))
    names_ = [f"veth{i}" for i in range(4)]
    results = {}

    def waiter(n):
        results[n] = ovs.wait_interface(n, lambda r: True, timeout=5)

    threads = [threading.Thread(target=waiter, args=(n,)) for n in names_]
    for t in threads:
        t.start()
    ovs.commit(*[ovs.add_interface_port(BR, n) for n in names_])
    for t in threads:
        t.join(10)
    assert sorted(n for n, row in results.items() if row is not None) == names_
