"""The controller's batched NB writer and ensure-commands against a real NB ovsdb-server."""
from __future__ import annotations

import threading

import pytest

from ovsdb_fixtures import NB_SCHEMA, OvsdbServer
from pacific import names
from pacific.controller import cluster_router
from pacific.controller.nbwriter import NBWriteError, NBWriter
from pacific.controller.pod import pod_ids
from pacific.controller.subnet import subnet_ids
from pacific.ovn import NorthboundAPI, ensure

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)
SW = "blue"


@pytest.fixture
def nb(tmp_path):
    srv = OvsdbServer(tmp_path / "nb", NB_SCHEMA).start()
    api = None
    try:
        api = NorthboundAPI(srv.remote, timeout=10, created_by="test")
        yield api
    finally:
        if api is not None:
            api.close()
        srv.stop()


@pytest.fixture
def writer(nb):
    w = NBWriter(nb, max_batch=500, max_delay=0.005).start()
    try:
        yield w
    finally:
        w.stop()


def _switch_builders(name: str, gw: str, plen: int) -> list:
    ids = subnet_ids(name)
    return [lambda api: ensure.EnsureRouter(api, names.CLUSTER_ROUTER, cluster_router.cluster_ids()),
            lambda api: ensure.EnsureSwitch(api, name, ids),
            *cluster_router.router_link_builders(name, gw, [f"{gw}/{plen}"], ids)]


def _port(i: int) -> tuple[str, str]:
    mac = "0a:58:0a:11:%02x:%02x" % (i >> 8, i & 0xFF)
    return f"p{i}.ns", f"{mac} 10.17.{i >> 8}.{i & 0xFF}"


def test_topology_is_idempotent_and_converges(nb, writer):
    writer.run(_switch_builders(SW, "10.17.0.1", 16), what="subnet")
    writer.run(_switch_builders(SW, "10.17.0.1", 16), what="subnet again")
    lr = nb.lookup("Logical_Router", names.CLUSTER_ROUTER)
    assert len(lr.ports) == 1
    lrp = nb.lookup("Logical_Router_Port", names.router_port_name(SW))
    assert lrp.networks == ["10.17.0.1/16"]
    # a changed gateway updates the existing router port in place
    writer.run(_switch_builders(SW, "10.17.0.254", 16), what="new gateway")
    lrp = nb.lookup("Logical_Router_Port", names.router_port_name(SW))
    assert lrp.networks == ["10.17.0.254/16"]
    assert lrp.external_ids[names.EXT_OWNER_KIND] == names.OWNER_KIND_SUBNET
    ls = nb.lookup("Logical_Switch", SW)
    peer = [p for p in ls.ports if p.type == "router"]
    assert len(peer) == 1 and peer[0].options["router-port"] == names.router_port_name(SW)


def test_switch_and_ports_in_one_batch(nb, writer):
    """A batch may create the switch and its ports in the same transaction."""
    futs = [writer.submit(_switch_builders("green", "10.18.0.1", 16), "subnet green")]
    for i in range(5):
        name, addr = _port(i)
        futs.append(writer.submit([lambda api, n=name, a=addr: ensure.EnsurePort(
            api, "green", n, [a], [a], pod_ids("ns", n, "green"))], name))
    for f in futs:
        f.result(30)
    assert len(nb.lookup("Logical_Switch", "green").ports) == 6


def test_many_concurrent_reconciles_share_transactions(nb, writer):
    writer.run(_switch_builders(SW, "10.17.0.1", 16))
    n, threads = 1000, 16
    before = writer.transactions

    def work(k):
        for i in range(k, n, threads):
            name, addr = _port(i)
            writer.run([lambda api: ensure.EnsurePort(api, SW, name, [addr], [addr],
                                                      pod_ids("ns", f"p{i}", SW))], what=name)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    txns = writer.transactions - before
    assert txns < n / 4, f"{n} reconciles took {txns} transactions: not batched"
    ls = nb.lookup("Logical_Switch", SW)
    assert len(ls.ports) == n + 1
    name, addr = _port(777)
    row = nb.lookup("Logical_Switch_Port", name)
    assert row.addresses == [addr] and row.port_security == [addr]
    assert row.external_ids[names.EXT_OWNER] == "ns/p777"


def test_bad_submission_fails_alone(nb, writer):
    writer.run(_switch_builders(SW, "10.17.0.1", 16))
    good = [writer.submit([lambda api, i=i: ensure.EnsurePort(api, SW, _port(i)[0], [_port(i)[1]], [],
                                                              pod_ids("ns", f"p{i}", SW))], f"p{i}")
            for i in range(10)]
    bad = writer.submit([lambda api: ensure.EnsurePort(api, "no-such-switch", "x.ns", [], [], {})], "x")
    for f in good:
        f.result(30)
    with pytest.raises(NBWriteError, match="no-such-switch"):
        bad.result(30)
    assert len(nb.lookup("Logical_Switch", SW).ports) == 11


def test_port_moves_between_switches_and_delete_is_idempotent(nb, writer):
    writer.run(_switch_builders(SW, "10.17.0.1", 16))
    writer.run(_switch_builders("red", "10.19.0.1", 16))
    name, addr = _port(1)
    writer.run([lambda api: ensure.EnsurePort(api, SW, name, [addr], [addr], {})])
    writer.run([lambda api: ensure.EnsurePort(api, "red", name, [addr], [addr], {})])
    assert name not in [p.name for p in nb.lookup("Logical_Switch", SW).ports]
    assert name in [p.name for p in nb.lookup("Logical_Switch", "red").ports]
    writer.run([lambda api: ensure.DeletePort(api, name, "red")])
    writer.run([lambda api: ensure.DeletePort(api, name, "red")])
    assert nb.lookup("Logical_Switch_Port", name, default=None) is None
    writer.run([lambda api: ensure.DeleteRouterPort(api, names.CLUSTER_ROUTER, names.router_port_name("red")),
                lambda api: ensure.DeleteSwitch(api, "red")])
    assert nb.lookup("Logical_Switch", "red", default=None) is None
    assert nb.lookup("Logical_Router_Port", names.router_port_name("red"), default=None) is None
