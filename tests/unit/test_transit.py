"""Transit networks of the egress gateways (controller/transit.py): every
gateway router port gets its own /24, also when reconciles run at once and
before NB shows what the other ones wrote."""
import threading
from types import SimpleNamespace

import pytest

from controller_fakes import FakeNB, make_controller
from pacific import names
from pacific.controller import transit as tr
from pacific.controller.gateway import GatewayFeature
from pacific.kube import resources as r
from pacific.ovn import ensure


def port(name, index):
    cidr = tr.transit(index)[0]
    return SimpleNamespace(table=ensure.LRP, name=tr.PORT_PREFIX + name, networks=[cidr],
                           external_ids={names.EXT_OWNER_KIND: names.OWNER_KIND_SUBNET})


def test_transit_networks_are_24s_of_the_transit_cidr():
    assert tr.transit(0) == ("100.65.0.1/24", "100.65.0.2", "0e:00:64:41:00:01")
    assert tr.transit(7) == ("100.65.7.1/24", "100.65.7.2", "0e:00:64:41:07:01")
    assert tr.transit(255)[0] == "100.65.255.1/24"
    assert tr.transit_index(["100.65.7.1/24"]) == 7
    assert tr.transit_index(["10.16.0.1/16"]) is None
    with pytest.raises(ValueError, match="outside 100.65.0.0/16"):
        tr.transit(256)


def test_an_ipv6_transit_network_is_the_64_of_its_index():
    assert tr.transit6(0) == ("fd00:65::1/64", "fd00:65::2")
    assert tr.transit6(7) == ("fd00:65:0:7::1/64", "fd00:65:0:7::2")
    assert tr.transit_index(["100.65.7.1/24", "fd00:65:0:7::1/64"]) == 7
    with pytest.raises(ValueError):
        tr.transit6(256)


def test_ports_reconciled_at_once_never_share_a_network():
    nb, nets = FakeNB(), tr.TransitNetworks()    # NB shows none of them: not committed yet
    got, start = {}, threading.Barrier(50)

    def take(i):
        start.wait()
        got[i] = nets.index(nb, f"{tr.PORT_PREFIX}s{i}")
    threads = [threading.Thread(target=take, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got.values()) == list(range(50))
    # asked again (a retry, or NB now shows it): the same network
    assert nets.index(nb, f"{tr.PORT_PREFIX}s7") == got[7]


def test_a_port_keeps_its_network_and_a_new_one_takes_the_lowest_free():
    nb, nets = FakeNB(), tr.TransitNetworks()
    nb.owned += [port("a", 0), port("b", 2)]
    assert nets.index(nb, tr.PORT_PREFIX + "b") == 2
    assert nets.index(nb, tr.PORT_PREFIX + "c") == 1
    assert nets.index(nb, tr.PORT_PREFIX + "d") == 3


def test_two_ports_sharing_a_network_are_parted_the_first_name_keeps_it():
    nb, nets = FakeNB(), tr.TransitNetworks()
    nb.owned += [port("a", 1), port("b", 1)]
    assert nets.index(nb, tr.PORT_PREFIX + "b") == 0
    assert nets.index(nb, tr.PORT_PREFIX + "a") == 1


def test_a_released_network_is_handed_out_again():
    nb, nets = FakeNB(), tr.TransitNetworks()
    first = nets.index(nb, tr.PORT_PREFIX + "a")
    nets.index(nb, tr.PORT_PREFIX + "b")
    nets.release(tr.PORT_PREFIX + "a")
    assert nets.index(nb, tr.PORT_PREFIX + "c") == first


def test_no_free_network_is_an_error_naming_the_port():
    nb, nets = FakeNB(), tr.TransitNetworks()
    nb.owned += [port(f"s{i}", i) for i in range(tr.COUNT)]
    with pytest.raises(RuntimeError, match=r"no free transit network left in 100.65.0.0/16 "
                                           r"for lrp:egw:new"):
        nets.index(nb, tr.PORT_PREFIX + "new")


def test_centralized_subnets_get_distinct_transit_networks_and_mac():
    ctl = make_controller()
    for n in ("node1", "node2"):
        ctl.kube.add(r.NODES, {"metadata": {"name": n}})
    for i in range(3):
        cidr = f"10.7{i}.0.0/24"
        ctl.kube.add(r.SUBNETS, {"metadata": {"name": f"c{i}"},
                                 "spec": {"cidrBlock": cidr, "gatewayType": "centralized",
                                          "gatewayNodes": ["node1", "node2"]},
                                 "status": {"cidrBlock": cidr}})
    feature = next(f for f in ctl.features if isinstance(f, GatewayFeature))
    for i in range(3):
        feature.reconcile(f"c{i}")
    ports = [p for p in ctl.writer.commands(ensure.EnsureRouterPort)
             if p.name.startswith(tr.PORT_PREFIX)]
    assert len(ports) == 3
    assert len({tuple(p.networks) for p in ports}) == 3
    assert len({p.mac for p in ports}) == 3



def test_a_tenant_s_port_takes_a_network_only_while_more_than_the_reserve_are_free():
    nb, nets = FakeNB(), tr.TransitNetworks()
    nb.owned += [port(f"s{i}", i) for i in range(tr.COUNT - 3)]       # 3 free
    told = []
    nets.on_release.append(lambda: told.append(1))
    assert nets.index(nb, tr.PORT_PREFIX + "svc:t/a", reserved=2) == tr.COUNT - 3
    with pytest.raises(tr.TransitRefused, match="outside the 2 reserved"):
        nets.index(nb, tr.PORT_PREFIX + "svc:t/b", reserved=2)
    # a port that has its network keeps it, the reserve reached or not
    assert nets.index(nb, tr.PORT_PREFIX + "svc:t/a", reserved=200) == tr.COUNT - 3
    assert nets.index(nb, tr.PORT_PREFIX + "subnet", reserved=0) == tr.COUNT - 2  # the admin's
    nets.release(tr.PORT_PREFIX + "svc:t/a")
    assert told == [1]


def test_the_settings_are_bounded_by_the_pool():
    from pacific.controller.config import Config, ConfigError
    Config(nb_remote="tcp:127.0.0.1:6641", transit_networks_per_namespace=0,
           transit_networks_reserved=tr.COUNT).validate()
    for bad in (dict(transit_networks_per_namespace=-1), dict(transit_networks_reserved=257)):
        with pytest.raises(ConfigError, match="--transit-networks"):
            Config(nb_remote="tcp:127.0.0.1:6641", **bad).validate()
