"""IPAM of dual-stack and IPv6-only subnets: one address per family, all or
none, fixed addresses per family, release, overlap per family, changes."""

import pytest

from pacific.ipam import IPAM, errors


@pytest.fixture
def ipam():
    i = IPAM(seed=1)
    i.add_subnet("dual", "fd00:17::/64,10.17.0.0/24", gateway="10.17.0.1,fd00:17::1")
    return i


def test_an_allocation_holds_one_address_of_each_family_ipv4_first(ipam):
    info = ipam.subnet("dual")
    assert (info.cidr, info.gateway) == ("10.17.0.0/24,fd00:17::/64", "10.17.0.1,fd00:17::1")
    a = ipam.allocate("dual", "ns/a")
    assert a.ips == ("10.17.0.2", "fd00:17::2")
    assert a.cidrs == ("10.17.0.0/24", "fd00:17::/64")
    assert a.gateways == ("10.17.0.1", "fd00:17::1")
    assert (a.ip, a.cidr, a.gateway) == ("10.17.0.2", "10.17.0.0/24", "10.17.0.1")
    assert a.mac == "0a:58:0a:11:00:02"          # from the IPv4 address
    assert ipam.holder("fd00:17::2") == ipam.holder("10.17.0.2") == "ns/a"
    assert ipam.subnet_of("fd00:17::99") == "dual"
    assert ipam.usage_by_family("dual")[4] == (1, 256 - 3 - 1)
    assert ipam.usage_by_family("dual")[6][0] == 1


def test_fixed_addresses_per_family_and_idempotence(ipam):
    a = ipam.allocate("dual", "ns/a", ip="10.17.0.9,fd00:17::9")
    assert a.ips == ("10.17.0.9", "fd00:17::9")
    assert ipam.allocate("dual", "ns/a", ip="fd00:17::9") == a
    b = ipam.allocate("dual", "ns/b", ip="fd00:17::20")       # IPv4 from the pool
    assert b.ips[1] == "fd00:17::20" and b.ips[0].startswith("10.17.0.")
    with pytest.raises(errors.AddressInUse):
        ipam.allocate("dual", "ns/c", ip="10.17.0.50,fd00:17::9")
    # all or none: the refused request took no IPv4 address
    assert ipam.holder("10.17.0.50") is None
    with pytest.raises(errors.InvalidAddress, match="two IPv6"):
        ipam.allocate("dual", "ns/d", ip="fd00:17::30,fd00:17::31")


def test_a_family_the_subnet_lacks_is_refused_by_name():
    i = IPAM()
    i.add_subnet("v4", "10.18.0.0/24")
    with pytest.raises(errors.AddressOutOfRange, match="has no IPv6 CIDR"):
        i.allocate("v4", "ns/a", ip="fd00::5")
    i.add_subnet("v6", "fd00:18::/64")
    a = i.allocate("v6", "ns/b")
    assert a.ips == ("fd00:18::2",) and a.gateway == "fd00:18::1"
    with pytest.raises(errors.AddressOutOfRange, match="has no IPv4 CIDR"):
        i.allocate("v6", "ns/c", ip="10.18.0.7")


def test_release_frees_both_families(ipam):
    a = ipam.allocate("dual", "ns/a", ip="10.17.0.9,fd00:17::9")
    assert ipam.release("ns/a") == a
    assert ipam.holder("10.17.0.9") is None and ipam.holder("fd00:17::9") is None
    assert ipam.allocate("dual", "ns/b", ip="10.17.0.9,fd00:17::9").ips == a.ips


def test_bad_definitions_are_refused_naming_the_problem():
    i = IPAM()
    with pytest.raises(errors.InvalidSubnet, match="two of one family"):
        i.add_subnet("x", "10.1.0.0/24,10.2.0.0/24")
    with pytest.raises(errors.InvalidSubnet, match="at most one IPv4"):
        i.add_subnet("x", "10.1.0.0/24,fd00::/64,fd01::/64")
    with pytest.raises(errors.InvalidSubnet, match="no CIDR of"):
        i.add_subnet("x", "10.1.0.0/24", gateway="fd00::1")
    i.add_subnet("a", "10.1.0.0/24,fd00:1::/64")
    with pytest.raises(errors.SubnetOverlap):
        i.add_subnet("b", "10.2.0.0/24,fd00:1::/80")


def test_excludes_apply_to_their_family_and_changes_keep_allocations(ipam):
    ipam.update_subnet("dual", "10.17.0.0/24,fd00:17::/64", gateway="10.17.0.1,fd00:17::1",
                       exclude=["fd00:17::2..fd00:17::10", "10.17.0.2"])
    a = ipam.allocate("dual", "ns/a")
    assert a.ips == ("10.17.0.3", "fd00:17::11")
    with pytest.raises(errors.SubnetInUse, match="families cannot change"):
        ipam.update_subnet("dual", "10.17.0.0/24")
    info = ipam.update_subnet("dual", "10.17.0.0/23,fd00:17::/64")
    assert info.cidr == "10.17.0.0/23,fd00:17::/64"
    assert ipam.lookup("ns/a").cidrs == ("10.17.0.0/23", "fd00:17::/64")
    assert ipam.lookup("ns/a").ips == a.ips
