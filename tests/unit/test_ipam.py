"""IPAM: allocation, release, fixed addresses, exclusions, gateway, full subnet,
overlap, malformed CIDRs, rebuild, idempotence."""

import ipaddress

import pytest

from pacific.ipam import IPAM, errors


@pytest.fixture
def ipam():
    i = IPAM(seed=1)
    i.add_subnet("default", "10.16.0.0/16")
    return i


def test_default_gateway_is_first_address_and_never_allocated(ipam):
    info = ipam.subnet("default")
    assert info.gateway == "10.16.0.1"
    a = ipam.allocate("default", "ns/a")
    assert a.ip == "10.16.0.2"
    assert (a.cidr, a.gateway, a.subnet) == ("10.16.0.0/16", "10.16.0.1", "default")
    assert a.ip_with_prefix == "10.16.0.2/16"
    assert a.mac == "0a:58:0a:10:00:02"
    with pytest.raises(errors.AddressExcluded, match="10.16.0.1 is the gateway"):
        ipam.allocate("default", "ns/b", ip="10.16.0.1")


def test_explicit_gateway_inside_subnet():
    i = IPAM()
    i.add_subnet("s", "192.168.5.0/24", gateway="192.168.5.254")
    assert i.allocate("s", "o").ip == "192.168.5.1"
    with pytest.raises(errors.AddressExcluded):
        i.allocate("s", "p", ip="192.168.5.254")
    with pytest.raises(errors.InvalidSubnet, match="outside subnet t"):
        i.add_subnet("t", "192.168.6.0/24", gateway="192.168.5.1")
    with pytest.raises(errors.InvalidSubnet, match="network address"):
        i.add_subnet("u", "192.168.7.0/24", gateway="192.168.7.0")


def test_allocation_is_unique_and_idempotent(ipam):
    seen = set()
    for n in range(1000):
        a = ipam.allocate("default", f"ns/p{n}")
        assert a.ip not in seen
        seen.add(a.ip)
        assert ipam.allocate("default", f"ns/p{n}") == a
    assert len({ipam.lookup(f"ns/p{n}").mac for n in range(1000)}) == 1000
    assert ipam.usage("default") == (1000, 65536 - 3 - 1000)


def test_release_frees_address_and_mac(ipam):
    a = ipam.allocate("default", "ns/a", mac="02:00:00:00:00:01")
    assert ipam.release("ns/a") == a
    assert ipam.release("ns/a") is None           # idempotent
    assert ipam.lookup("ns/a") is None
    assert ipam.holder(a.ip) is None
    b = ipam.allocate("default", "ns/b", ip=a.ip, mac=a.mac)
    assert (b.ip, b.mac) == (a.ip, a.mac)
    assert ipam.usage("default")[0] == 1


def test_round_robin_does_not_reuse_just_released_address(ipam):
    a = ipam.allocate("default", "ns/a")
    ipam.release("ns/a")
    assert ipam.allocate("default", "ns/b").ip != a.ip


def test_fixed_address_errors_name_the_problem(ipam):
    ipam.allocate("default", "ns/holder", ip="10.16.3.4")
    with pytest.raises(errors.AddressInUse) as e:
        ipam.allocate("default", "ns/other", ip="10.16.3.4")
    # the holder is kept for the log, never shown (it may be another tenant's pod)
    assert e.value.holder == "ns/holder" and "holder" not in str(e.value)
    assert "10.16.3.4 in subnet default is already in use" in str(e.value)
    with pytest.raises(errors.AddressOutOfRange, match="10.17.0.9 is outside subnet default"):
        ipam.allocate("default", "ns/other", ip="10.17.0.9")
    with pytest.raises(errors.AddressExcluded, match="broadcast"):
        ipam.allocate("default", "ns/other", ip="10.16.255.255")
    with pytest.raises(errors.AddressExcluded, match="network address"):
        ipam.allocate("default", "ns/other", ip="10.16.0.0")
    with pytest.raises(errors.InvalidAddress):
        ipam.allocate("default", "ns/other", ip="10.16.0.300")
    with pytest.raises(errors.AddressOutOfRange):
        ipam.allocate("default", "ns/other", ip="fd00::5")
    with pytest.raises(errors.SubnetNotFound, match="'nope' does not exist"):
        ipam.allocate("nope", "ns/other")
    assert ipam.lookup("ns/other") is None        # nothing half-done
    assert ipam.usage("default")[0] == 1


def test_mac_requests(ipam):
    a = ipam.allocate("default", "ns/a", mac="02:AA:BB:CC:DD:EE")
    assert a.mac == "02:aa:bb:cc:dd:ee"
    with pytest.raises(errors.MacInUse, match="already in use by another port"):
        ipam.allocate("default", "ns/b", mac="02-aa-bb-cc-dd-ee")
    for bad in ("zz:00:00:00:00:00", "01:00:5e:00:00:01", "00:00:00:00:00:00", "02:00"):
        with pytest.raises(errors.InvalidMac):
            ipam.allocate("default", "ns/b", mac=bad)
    assert ipam.lookup("ns/b") is None


def test_generated_mac_avoids_a_user_chosen_one(ipam):
    # the next address is 10.16.0.3 whose derived MAC a user already took
    ipam.allocate("default", "ns/a", ip="10.16.0.2", mac="0a:58:0a:10:00:03")
    b = ipam.allocate("default", "ns/b")
    assert b.ip == "10.16.0.3" and b.mac != "0a:58:0a:10:00:03"


def test_owner_conflict_instead_of_silent_move(ipam):
    a = ipam.allocate("default", "ns/a")
    assert ipam.allocate("default", "ns/a", ip=a.ip) == a
    with pytest.raises(errors.OwnerConflict, match=f"already holds {a.ip}"):
        ipam.allocate("default", "ns/a", ip="10.16.9.9")


def test_exclusions_single_and_ranges():
    i = IPAM()
    info = i.add_subnet("s", "10.20.0.0/24",
                        exclude=["10.20.0.2", "10.20.0.10..10.20.0.19", "10.20.0.15..10.20.0.25"])
    # 256 - network - broadcast - gateway - 1 - 16 (10..25)
    assert info.available == 256 - 3 - 1 - 16
    got = {i.allocate("s", f"o{n}").ip for n in range(info.available)}
    excluded = {"10.20.0.2"} | {f"10.20.0.{n}" for n in range(10, 26)}
    assert not got & excluded
    with pytest.raises(errors.AddressExcluded, match="excludeIps"):
        i.allocate("s", "x", ip="10.20.0.20")


@pytest.mark.parametrize("entry,match", [
    ("10.20.1.5", "outside subnet"),
    ("10.20.0.9..10.20.0.3", "reversed"),
    ("banana", "not an IP address"),
    ("", "empty"),
])
def test_bad_exclusions_are_refused(entry, match):
    with pytest.raises(errors.InvalidSubnet, match=match):
        IPAM().add_subnet("s", "10.20.0.0/24", exclude=[entry])


def test_full_subnet():
    i = IPAM()
    i.add_subnet("tiny", "10.30.0.0/29")        # 8 - network - broadcast - gateway = 5
    for n in range(5):
        i.allocate("tiny", f"o{n}")
    with pytest.raises(errors.SubnetFull, match="tiny .*no free address"):
        i.allocate("tiny", "o5")
    i.release("o2")
    assert i.allocate("tiny", "o5").ip == i.lookup("o5").ip
    assert i.usage("tiny") == (5, 0)


def test_point_to_point_subnets_have_no_network_or_broadcast():
    i = IPAM()
    i.add_subnet("p2p", "10.40.0.0/31")
    assert i.subnet("p2p").gateway == "10.40.0.0"
    assert i.allocate("p2p", "o").ip == "10.40.0.1"


def test_overlap_is_refused_naming_both():
    i = IPAM()
    i.add_subnet("a", "10.16.0.0/16")
    with pytest.raises(errors.SubnetOverlap) as e:
        i.add_subnet("b", "10.16.128.0/24")
    assert "subnet b (10.16.128.0/24) overlaps subnet a (10.16.0.0/16)" == str(e.value)
    i.add_subnet("c", "10.17.0.0/16")            # adjacent is fine
    i.add_subnet("v6", "fd00::/64")              # other family is fine


@pytest.mark.parametrize("cidr,match", [
    ("10.16.0.0", "expected address/prefix"),
    ("10.16.0.0/33", "malformed"),
    ("10.16.0.1/16", "did you mean 10.16.0.0/16"),
    ("not-a-cidr/8", "malformed"),
    (None, "malformed"),
])
def test_malformed_cidr(cidr, match):
    with pytest.raises(errors.InvalidSubnet, match=match):
        IPAM().add_subnet("bad", cidr)


def test_add_subnet_idempotent_and_name_clash():
    i = IPAM()
    i.add_subnet("a", "10.16.0.0/16", exclude=["10.16.0.5"])
    i.add_subnet("a", "10.16.0.0/16", exclude=["10.16.0.5"])
    with pytest.raises(errors.SubnetExists, match="update_subnet"):
        i.add_subnet("a", "10.18.0.0/16")


def test_remove_subnet_refused_while_in_use():
    i = IPAM()
    i.add_subnet("a", "10.16.0.0/16")
    i.allocate("a", "ns/p")
    with pytest.raises(errors.SubnetInUse, match=r"10\.16\.0\.2 \(ns/p\)"):
        i.remove_subnet("a")
    i.release("ns/p")
    assert i.remove_subnet("a") is True
    assert i.remove_subnet("a") is False


def test_update_subnet_keeps_allocations_or_refuses():
    i = IPAM()
    i.add_subnet("a", "10.16.0.0/24")
    x = i.allocate("a", "ns/x", ip="10.16.0.100")
    info = i.update_subnet("a", "10.16.0.0/23", exclude=["10.16.1.0..10.16.1.9"])
    assert info.used == 1 and i.holder("10.16.0.100") == "ns/x"
    assert i.lookup("ns/x") == x._replace(cidr="10.16.0.0/23")
    with pytest.raises(errors.SubnetInUse, match=r"10\.16\.0\.100 \(held by ns/x"):
        i.update_subnet("a", "10.16.0.0/24", exclude=["10.16.0.100"])
    with pytest.raises(errors.SubnetInUse):
        i.update_subnet("a", "10.16.1.0/24")
    assert i.subnet("a").cidr == "10.16.0.0/23"      # unchanged after refusal
    i.ensure_subnet("a", "10.16.0.0/23", exclude=["10.16.1.0..10.16.1.9"])  # no-op
    i.ensure_subnet("a", "10.16.0.0/22")
    assert i.subnet("a").cidr == "10.16.0.0/22"


def test_rebuild_from_records_matches_original():
    src = IPAM()
    src.add_subnet("a", "10.16.0.0/16", exclude=["10.16.0.2..10.16.0.9"])
    src.add_subnet("b", "10.17.0.0/24")
    for n in range(3000):
        src.allocate("a", f"ns/a{n}")
    for n in range(100):
        src.allocate("b", f"ns/b{n}")
    for n in range(0, 3000, 3):
        src.release(f"ns/a{n}")
    records = src.allocations()

    dst = IPAM()
    for s in src.subnets():
        dst.add_subnet(s.name, s.cidr, s.gateway, s.exclude)
    for owner, a in records:
        assert dst.restore(a.subnet, owner, a.ip, a.mac) == a
    assert sorted(dst.allocations()) == sorted(records)
    assert dst.usage("a") == src.usage("a") and dst.usage("b") == src.usage("b")
    # never hands an address out twice after the rebuild
    taken = {a.ip for _, a in records}
    for n in range(2000):
        assert dst.allocate("a", f"new/{n}").ip not in taken


def test_restore_conflicting_records_raise():
    i = IPAM()
    i.add_subnet("a", "10.16.0.0/16", exclude=["10.16.0.50"])
    i.restore("a", "ns/x", "10.16.0.5", "0a:58:0a:10:00:05")
    with pytest.raises(errors.AddressInUse):
        i.restore("a", "ns/y", "10.16.0.5", "0a:58:0a:10:00:06")
    with pytest.raises(errors.MacInUse):
        i.restore("a", "ns/y", "10.16.0.6", "0a:58:0a:10:00:05")
    with pytest.raises(errors.AddressExcluded):
        i.restore("a", "ns/y", "10.16.0.50")
    assert i.restore("a", "ns/x", "10.16.0.5", "0a:58:0a:10:00:05").ip == "10.16.0.5"


def test_subnet_of_and_holder():
    i = IPAM()
    i.add_subnet("a", "10.16.0.0/16")
    i.add_subnet("b", "10.17.0.0/16")
    i.allocate("b", "ns/p", ip="10.17.3.3")
    assert i.subnet_of("10.17.3.3") == "b"
    assert i.subnet_of("10.99.0.1") is None
    assert i.holder("10.17.3.3") == "ns/p"
    assert i.holder("10.16.3.3") is None


def test_ipv6_subnet():
    i = IPAM()
    i.add_subnet("v6", "fd00:10::/64", exclude=["fd00:10::2..fd00:10::ff"])
    a = i.allocate("v6", "ns/a")
    assert a.ip == "fd00:10::100" and a.gateway == "fd00:10::1"
    far = "fd00:10::abcd:0:0:1"                  # beyond the dynamic window
    assert i.allocate("v6", "ns/far", ip=far).ip == far
    with pytest.raises(errors.AddressInUse):
        i.allocate("v6", "ns/other", ip=far)
    with pytest.raises(errors.AddressExcluded):
        i.allocate("v6", "ns/other", ip="fd00:10::20")
    assert i.release("ns/far").ip == far
    used, avail = i.usage("v6")
    assert used == 1 and avail == 2 ** 64 - 1 - 1 - 254 - 1


def test_whole_slash16_allocates_every_usable_address():
    i = IPAM()
    info = i.add_subnet("big", "10.50.0.0/16", exclude=["10.50.7.0..10.50.7.255"])
    n = info.available
    ips = {i.allocate("big", f"o{k}").ip for k in range(n)}
    assert len(ips) == n == 65536 - 3 - 256
    net = ipaddress.ip_network("10.50.0.0/16")
    assert all(ipaddress.ip_address(x) in net for x in ips)
    with pytest.raises(errors.SubnetFull):
        i.allocate("big", "one-too-many")
