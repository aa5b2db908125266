"""IPAM quarantine (issue 51): a released address goes to no other holder for
the period, by request or dynamically; its own holder takes it back at once;
the refusals say when it is free and never who held it."""

import pytest

from pacific.ipam import IPAM, errors


class Clock:
    def __init__(self, t: float = 1_700_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def ipam(clock):
    i = IPAM(seed=1, quarantine=60, clock=clock)
    i.add_subnet("s", "10.20.0.0/29")          # .2 - .6 usable (.1 is the gateway)
    return i


def test_fixed_request_for_a_released_address_is_refused_until_the_period_ends(ipam, clock):
    a = ipam.allocate("s", "red/a", ip="10.20.0.5")
    ipam.release("red/a")
    with pytest.raises(errors.AddressQuarantined) as e:
        ipam.allocate("s", "blue/b", ip="10.20.0.5")
    msg = str(e.value)
    assert "10.20.0.5 in subnet s" in msg and "quarantined until 2023-11-14T22:14:20Z" in msg
    assert "in 60 s" in msg and "red" not in msg          # never who held it
    assert e.value.free_at == clock.t + 60 and e.value.reason == "AddressQuarantined"
    assert ipam.quarantined("10.20.0.5") == clock.t + 60
    clock.t += 59.5
    with pytest.raises(errors.AddressQuarantined, match=r"in 1 s"):
        ipam.allocate("s", "blue/b", ip="10.20.0.5")
    clock.t += 0.5
    assert ipam.allocate("s", "blue/b", ip="10.20.0.5").ip == a.ip
    assert ipam.quarantined("10.20.0.5") is None


def test_the_same_holder_takes_its_address_back_at_once(ipam):
    ipam.allocate("s", "db/db-0", ip="10.20.0.4")
    ipam.release("db/db-0")
    assert ipam.allocate("s", "db/db-0", ip="10.20.0.4").ip == "10.20.0.4"
    ipam.release("db/db-0")
    # dynamically too: its own quarantined address before any other
    assert ipam.allocate("s", "db/db-0").ip == "10.20.0.4"
    assert ipam.quarantined("10.20.0.4") is None


def test_dynamic_allocation_skips_quarantined_and_fails_closed_only_when_nothing_else_is_free(
        ipam, clock):
    got = [ipam.allocate("s", f"red/p{n}").ip for n in range(5)]
    assert got == [f"10.20.0.{n}" for n in range(2, 7)]
    ipam.release("red/p0")
    ipam.release("red/p3")
    with pytest.raises(errors.SubnetFull) as e:       # only quarantined ones left
        ipam.allocate("s", "blue/x")
    assert "2 released address(es) are quarantined" in str(e.value)
    assert "in 60 s" in str(e.value) and "red" not in str(e.value)
    assert e.value.free_at == clock.t + 60
    clock.t += 61
    assert ipam.allocate("s", "blue/x").ip in ("10.20.0.2", "10.20.0.5")


def test_dynamic_allocation_prefers_addresses_never_or_least_recently_freed(clock):
    i = IPAM(quarantine=60, clock=clock)
    i.add_subnet("s", "10.21.0.0/24")
    first = i.allocate("s", "a/one").ip
    i.release("a/one")
    # every other free address comes before the released one, even after its period
    clock.t += 120
    seen = {i.allocate("s", f"b/p{n}").ip for n in range(250)}
    assert first not in seen


def test_restore_ignores_quarantine_and_hold_back_quarantines_an_unheld_address(ipam, clock):
    ipam.allocate("s", "red/a", ip="10.20.0.3")
    ipam.release("red/a")
    assert ipam.restore("s", "blue/b", "10.20.0.3").ip == "10.20.0.3"  # a record read back
    assert not ipam.hold_back("10.20.0.3")           # held
    assert not ipam.hold_back("10.20.0.1")           # the gateway
    assert not ipam.hold_back("192.0.2.1")           # outside every subnet
    assert ipam.hold_back("10.20.0.6")
    with pytest.raises(errors.AddressQuarantined):   # nobody, not even a former holder
        ipam.allocate("s", "red/a", ip="10.20.0.6")
    clock.t += 60
    assert ipam.allocate("s", "red/a", ip="10.20.0.6").ip == "10.20.0.6"


def test_quarantine_survives_a_subnet_redefinition(ipam, clock):
    ipam.allocate("s", "red/a", ip="10.20.0.2")
    ipam.release("red/a")
    ipam.update_subnet("s", "10.20.0.0/28")
    got = {ipam.allocate("s", f"blue/p{n}").ip for n in range(12)}
    assert "10.20.0.2" not in got
    with pytest.raises(errors.SubnetFull, match="1 released address"):
        ipam.allocate("s", "blue/more")


def test_dual_stack_quarantines_both_families(clock):
    i = IPAM(quarantine=30, clock=clock)
    i.add_subnet("d", "10.22.0.0/24,fd00:22::/120")
    a = i.allocate("d", "red/a")
    i.release("red/a")
    with pytest.raises(errors.AddressQuarantined, match=a.more[0][0]):
        i.allocate("d", "blue/b", ip=a.more[0][0])
    b = i.allocate("d", "blue/b")
    assert not set(b.ips) & set(a.ips)
    assert i.allocate("d", "red/a").ips == a.ips      # back to its holder, both families


def test_no_quarantine_by_default():
    i = IPAM()
    i.add_subnet("s", "10.23.0.0/24")
    i.allocate("s", "red/a", ip="10.23.0.9")
    i.release("red/a")
    assert i.allocate("s", "blue/b", ip="10.23.0.9").ip == "10.23.0.9"
    assert not i.hold_back("10.23.0.10")
