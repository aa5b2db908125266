"""The IPAM: subnets, and one address + MAC per owner key.  Pure, in memory,
thread-safe (one lock), rebuilt at start-up from the IP objects with restore().

Owner keys are opaque strings chosen by the caller (e.g. "namespace/pod" for a
pod, "node:node1" for a node's join address).  An owner holds at most one
allocation; allocate() for the same owner and request returns the same
allocation (idempotent), so a reconciler can call it on every pass.

Dual-stack: a subnet defined with an IPv4 and an IPv6 CIDR (kube-ovn's form,
"10.17.0.0/16,fd00:17::/64", gateways likewise) has one pool per family, and an
allocation holds one address of each, all or none (decision 0045).  The first
family (IPv4 when there is one) is the allocation's `ip`/`cidr`/`gateway`, the
other is in `more`; `ips`, `cidrs`, `gateways` list them all, IPv4 first.

Quarantine (`quarantine` seconds, 0: none): a released address goes to no
other owner for that long (ipam/quarantine.py); dynamic allocation skips it
and fails (SubnetFull, with when one is free again) only when nothing else is
free; a request naming it is refused (AddressQuarantined); the owner that
released it takes it back at once, by request or dynamically.  restore()
ignores it (a record read back is no new holder); hold_back() quarantines a
free address whose last holder is unknown (a restart: rebuild.py).
"""

from __future__ import annotations

import random
import sys
import threading
import time
from typing import Callable, Iterable, NamedTuple

from pacific.ipam.addr import mac_from_ip, normalize_mac, parse_ip, random_mac
from pacific.ipam.errors import (AddressInUse, AddressOutOfRange, AddressQuarantined,
                                 InvalidAddress, InvalidSubnet, IPAMError, MacInUse,
                                 OwnerConflict, SubnetExists, SubnetFull, SubnetInUse,
                                 SubnetNotFound, SubnetOverlap)
from pacific.ipam.pool import Pool, parse_cidr
from pacific.ipam.quarantine import Quarantine


class Allocation(NamedTuple):
    ip: str          # canonical text, e.g. "10.16.0.5" (the first family's)
    mac: str         # "0a:58:0a:10:00:05"
    cidr: str        # the subnet's CIDR, e.g. "10.16.0.0/16" (gives the prefix length)
    gateway: str
    subnet: str      # subnet name
    more: tuple = ()  # ((ip, cidr, gateway),) of the other family of a dual-stack subnet

    @property
    def ip_with_prefix(self) -> str:
        return f"{self.ip}/{self.cidr.rsplit('/', 1)[1]}"

    @property
    def ips(self) -> tuple[str, ...]:
        return (self.ip, *(m[0] for m in self.more))

    @property
    def cidrs(self) -> tuple[str, ...]:
        return (self.cidr, *(m[1] for m in self.more))

    @property
    def gateways(self) -> tuple[str, ...]:
        return (self.gateway, *(m[2] for m in self.more))


class SubnetInfo(NamedTuple):
    name: str
    cidr: str        # "a" or, dual-stack, "a,b" (IPv4 first), as the Subnet spells it
    gateway: str     # likewise
    exclude: tuple[str, ...]
    used: int        # owners holding an address (a dual-stack owner counts once)
    available: int   # the first family's free addresses


def _split(text, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",")] if isinstance(text, str) else [text]
    if len(items) > 2:
        raise InvalidSubnet(f"{what} {text!r} names {len(items)} entries: at most one IPv4 "
                            "and one IPv6 (dual-stack)")
    return items


def _make_pools(name: str, cidr: str, gateway: str | None,
                exclude: Iterable[str]) -> tuple[Pool, ...]:
    """One pool per family of `cidr` ("a" or "a,b"), IPv4 first, each with its
    family's gateway and excludeIps entries."""
    nets = [parse_cidr(c) for c in _split(cidr, "CIDR")]
    if len({n.version for n in nets}) != len(nets):
        raise InvalidSubnet(f"CIDR {cidr!r} names two of one family: at most one per family")
    gws: dict[int, str] = {}
    for g in _split(gateway, "gateway") if gateway else ():
        try:
            gws[parse_ip(g)[0]] = g
        except IPAMError:
            raise InvalidSubnet(f"gateway {g!r} of subnet {name} is not an IP address") from None
    excl: dict[int, list[str]] = {}
    for item in exclude:
        first = str(item).split("..")[0].strip()
        version = 6 if ":" in first else 4
        excl.setdefault(version, []).append(item)
    unknown = set(gws) - {n.version for n in nets}
    if unknown:
        raise InvalidSubnet(f"gateway {gateway} of subnet {name} is IPv{unknown.pop()}, "
                            f"which {cidr} has no CIDR of")
    return tuple(Pool(name, str(n), gws.get(n.version), tuple(excl.get(n.version, ())))
                 for n in sorted(nets, key=lambda n: n.version))


def _defn(pools: tuple[Pool, ...]) -> tuple:
    return tuple((p.cidr, p.gateway, p.exclude) for p in pools)


class IPAM:
    def __init__(self, seed: int | None = None,
                 on_allocated: Callable[[str, str], None] | None = None,
                 quarantine: float = 0.0, clock: Callable[[], float] = time.time):
        """on_allocated(subnet, owner_key): called after each new allocation (not
        for an owner that already held it, nor for restore()), e.g. a metric.
        quarantine: seconds a released address goes to no other owner; clock:
        seconds since the epoch (the refusals say when an address is free)."""
        self.on_allocated = on_allocated
        self._quarantine = Quarantine(quarantine)
        self.clock = clock
        self._lock = threading.RLock()
        self._pools: dict[str, tuple[Pool, ...]] = {}    # name -> a pool per family
        self._owners: dict[str, Allocation] = {}
        self._macs: dict[str, str] = {}            # mac -> owner key
        self._rng = random.Random(seed)

    # -- subnets -----------------------------------------------------------------
    def add_subnet(self, name: str, cidr: str, gateway: str | None = None,
                   exclude: Iterable[str] = ()) -> SubnetInfo:
        """Add a subnet ("cidr" or "cidr4,cidr6", gateway likewise).  Re-adding
        the same definition is a no-op; a different one under an existing name
        raises SubnetExists (use update_subnet)."""
        if not name:
            raise IPAMError("a subnet needs a name")
        with self._lock:
            pools = _make_pools(name, cidr, gateway, tuple(exclude))
            cur = self._pools.get(name)
            if cur is not None:
                if _defn(cur) == _defn(pools):
                    return self._info(cur)
                raise SubnetExists(f"subnet {name} already exists as {_cidr(cur)} "
                                   f"(gateway {_gateway(cur)}); use update_subnet to change it")
            for pool in pools:
                self._check_overlap(pool)
            self._pools[name] = pools
            self._keep_quarantine(name, pools)
            return self._info(pools)

    def update_subnet(self, name: str, cidr: str, gateway: str | None = None,
                      exclude: Iterable[str] = ()) -> SubnetInfo:
        """Replace a subnet's definition, keeping its allocations.  Refused
        (SubnetInUse, nothing changed) if an allocated address would fall outside
        the new CIDR or become excluded or the gateway, or if the subnet's
        families change while addresses are allocated."""
        with self._lock:
            old = self._pool(name)
            new = _make_pools(name, cidr, gateway, tuple(exclude))
            for pool in new:
                self._check_overlap(pool, ignore=name)
            held = old[0].used
            if held and [p.version for p in old] != [p.version for p in new]:
                raise SubnetInUse(f"cannot change subnet {name} from {_cidr(old)} to "
                                  f"{_cidr(new)}: its families cannot change while {held} "
                                  "address(es) are in use")
            bad = []
            moved: list[tuple[Pool, int, str]] = []
            for op, np_ in zip(old, new):
                for off, owner in op.holders.items():
                    ip = op.ip(off)
                    version, value = parse_ip(ip)
                    try:
                        noff = np_.offset(version, value, ip)
                        np_.check_free(noff, ip)
                    except IPAMError as e:
                        bad.append(f"{ip} (held by {owner}: {e})")
                        continue
                    moved.append((np_, noff, owner))
            if bad:
                more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
                raise SubnetInUse(f"cannot change subnet {name} to {_cidr(new)}: addresses in "
                                  f"use would become unusable: {'; '.join(bad[:5])}{more}")
            for np_, noff, owner in moved:
                np_.take(noff, owner)
            for owner in {owner for _, _, owner in moved}:
                a = self._owners[owner]
                self._owners[owner] = a._replace(
                    cidr=new[0].cidr, gateway=new[0].gateway,
                    more=tuple((m[0], p.cidr, p.gateway) for m, p in zip(a.more, new[1:])))
            for op, np_ in zip(old, new):
                np_.cursor = op.cursor if op.cursor < np_.window else 0
            self._pools[name] = new
            self._keep_quarantine(name, new)
            return self._info(new)

    def ensure_subnet(self, name: str, cidr: str, gateway: str | None = None,
                      exclude: Iterable[str] = ()) -> SubnetInfo:
        """add_subnet, or update_subnet when it exists with another definition."""
        with self._lock:
            if name in self._pools:
                cur = self._pools[name]
                if _defn(cur) == _defn(_make_pools(name, cidr, gateway, tuple(exclude))):
                    return self._info(cur)
                return self.update_subnet(name, cidr, gateway, exclude)
            return self.add_subnet(name, cidr, gateway, exclude)

    def remove_subnet(self, name: str) -> bool:
        """Remove; False if absent; SubnetInUse while addresses are allocated."""
        with self._lock:
            pools = self._pools.get(name)
            if pools is None:
                return False
            pool = pools[0]
            if pool.holders:
                sample = ", ".join(f"{pool.ip(o)} ({k})" for o, k in
                                   list(pool.holders.items())[:3])
                raise SubnetInUse(f"subnet {name} ({_cidr(pools)}) still has {pool.used} "
                                  f"address(es) in use: {sample}"
                                  + (", ..." if pool.used > 3 else ""))
            del self._pools[name]
            return True

    def subnet(self, name: str) -> SubnetInfo:
        with self._lock:
            return self._info(self._pool(name))

    def subnets(self) -> list[SubnetInfo]:
        with self._lock:
            return [self._info(p) for p in self._pools.values()]

    def subnet_of(self, ip: str) -> str | None:
        """Name of the subnet containing ip, or None."""
        pool = self._pool_holding(ip)
        return pool.name if pool is not None else None

    def usage(self, subnet: str) -> tuple[int, int]:
        """(used, available) addresses of a subnet (its first family's)."""
        with self._lock:
            p = self._pool(subnet)[0]
            return p.used, p.available

    def usage_by_family(self, subnet: str) -> dict[int, tuple[int, int]]:
        """IP version -> (used, available) of each family of a subnet."""
        with self._lock:
            return {p.version: (p.used, p.available) for p in self._pool(subnet)}

    # -- addresses ---------------------------------------------------------------
    def allocate(self, subnet: str, owner_key: str, ip: str | None = None,
                 mac: str | None = None) -> Allocation:
        """Give owner_key an address of each of the subnet's families: the
        requested ip ("a", or "a,b" for both families; a family not named gets
        any free address) and mac, or the next free addresses and a MAC derived
        from the first.  All or none.  Idempotent per owner.

        Raises SubnetNotFound, InvalidAddress, AddressOutOfRange, AddressExcluded,
        AddressInUse (.holder: who, for logs), SubnetFull, InvalidMac, MacInUse, and
        OwnerConflict if the owner already holds a different allocation."""
        return self._allocate(subnet, owner_key, ip, mac, self.on_allocated)

    def _next_free(self, pool: Pool, subnet: str, owner_key: str, now: float) -> int:
        """A free offset of `pool` for a dynamic allocation: the owner's own
        quarantined address first (it may take it back), else the next FREE one
        (next_free skips the quarantined); none: SubnetFull, saying when a
        quarantined one is free again."""
        for ip in self._quarantine.of_owner(owner_key, subnet):
            version, value = parse_ip(ip)
            if version == pool.version and 0 <= value - pool.base < pool.size:
                return value - pool.base
        try:
            return pool.next_free()
        except SubnetFull as exc:
            held = self._quarantine.count(subnet)
            if not held:
                raise
            free_at = self._quarantine.first_free(subnet)
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(free_at))
            raise SubnetFull(f"{exc}; {held} released address(es) are quarantined, the first "
                             f"free again at {when} (in {max(0, int(free_at - now + 0.999))} s): "
                             "the allocation is retried then", free_at=free_at) from None

    def _requested(self, pools: tuple[Pool, ...], subnet: str, ip: str | None) -> dict[int, tuple]:
        """Family -> (pool, offset) of each requested address."""
        out: dict[int, tuple] = {}
        for text in (_split(ip, "address") if ip else ()):
            version, value = parse_ip(text)
            pool = next((p for p in pools if p.version == version), None)
            if pool is None:
                raise AddressOutOfRange(f"address {text} is IPv{version}, but subnet {subnet} "
                                        f"({_cidr(pools)}) has no IPv{version} CIDR")
            if version in out:
                raise InvalidAddress(f"{ip!r} names two IPv{version} addresses: at most one "
                                     "per family")
            out[version] = (pool, pool.offset(version, value, text))
        return out

    def _allocate(self, subnet, owner_key, ip, mac, on_new, restoring: bool = False) -> Allocation:
        if not owner_key:
            raise IPAMError("an allocation needs a non-empty owner key")
        # the key ("namespace/pod") is also the pod informer's cache key: one copy
        owner_key = sys.intern(owner_key)
        with self._lock:
            now = self.clock()
            self._expire(now)
            pools = self._pool(subnet)
            want_mac = normalize_mac(mac) if mac else None
            asked = self._requested(pools, subnet, ip)
            cur = self._owners.get(owner_key)
            if cur is not None:
                have = set(cur.ips)
                same_ip = all(p.ip(off) in have for p, off in asked.values())
                if cur.subnet == subnet and same_ip and want_mac in (None, cur.mac):
                    return cur
                raise OwnerConflict(
                    f"{owner_key} already holds {', '.join(cur.ips)} ({cur.mac}) in subnet "
                    f"{cur.subnet}; requested {ip or 'any address'} in {subnet}"
                    + (f" with MAC {want_mac}" if want_mac else "") + ": release it first")
            for pool, off in asked.values():
                holder = pool.check_free(off, pool.ip(off))
                if holder is not None:
                    raise AddressInUse(pool.ip(off), subnet, holder)
                held = None if restoring else self._quarantine.get(subnet, pool.ip(off))
                if held is not None and held.owner != owner_key:
                    raise AddressQuarantined(pool.ip(off), subnet, held.until, now)
            offs = [asked[p.version][1] if p.version in asked
                    else self._next_free(p, subnet, owner_key, now) for p in pools]
            if want_mac is not None:
                holder = self._macs.get(want_mac)
                if holder is not None:
                    raise MacInUse(want_mac, holder)
            else:
                want_mac = self._generate_mac(pools[0], offs[0])
            for pool, off in zip(pools, offs):
                pool.take(off, owner_key)
                self._quarantine.take(subnet, pool.ip(off))
            first = pools[0]
            alloc = Allocation(first.ip(offs[0]), want_mac, first.cidr, first.gateway, subnet,
                               tuple((p.ip(o), p.cidr, p.gateway)
                                     for p, o in zip(pools[1:], offs[1:])))
            self._owners[owner_key] = alloc
            self._macs[want_mac] = owner_key
        if on_new is not None:
            on_new(subnet, owner_key)
        return alloc

    def restore(self, subnet: str, owner_key: str, ip: str, mac: str | None = None) -> Allocation:
        """Re-record an allocation read back from an IP object at start-up.

        Same checks as allocate() with a fixed address: a record that conflicts
        with the subnet's definition or with an earlier record raises, and the
        caller decides (typically: keep the first, delete the stale IP object)."""
        return self._allocate(subnet, owner_key, ip, mac, None, restoring=True)

    def hold_back(self, ip: str) -> bool:
        """Quarantine a free address whose last holder is unknown (a restarted
        controller: rebuild.py) for one period; False when it is held, outside
        every subnet or there is no quarantine."""
        with self._lock:
            pool = self._pool_holding(ip)
            if pool is None or not self._quarantine:
                return False
            off = parse_ip(ip)[1] - pool.base
            text = pool.ip(off)
            try:
                if pool.check_free(off, text) is not None:
                    return False
            except IPAMError:
                return False      # excluded, the gateway...
            pool.free(off, quarantined=True)
            self._quarantine.add(pool.name, text, None, self.clock())
            return True

    def quarantined(self, ip: str) -> float | None:
        """When a quarantined address is free again (clock time), else None."""
        with self._lock:
            self._expire(self.clock())
            pool = self._pool_holding(ip)
            if pool is None:
                return None
            held = self._quarantine.get(pool.name, pool.ip(parse_ip(ip)[1] - pool.base))
            return held.until if held is not None else None

    def release(self, owner_key: str) -> Allocation | None:
        """Free the owner's addresses and MAC; returns what was freed, or None."""
        with self._lock:
            alloc = self._owners.pop(owner_key, None)
            if alloc is None:
                return None
            if self._macs.get(alloc.mac) == owner_key:
                del self._macs[alloc.mac]
            now, hold = self.clock(), bool(self._quarantine)
            self._expire(now)
            for pool in self._pools.get(alloc.subnet, ()):
                for ip in alloc.ips:
                    version, value = parse_ip(ip)
                    off = value - pool.base
                    if version == pool.version and pool.holders.get(off) == owner_key:
                        pool.free(off, quarantined=hold)
                        if hold:
                            self._quarantine.add(alloc.subnet, ip, owner_key, now)
            return alloc

    def lookup(self, owner_key: str) -> Allocation | None:
        with self._lock:
            return self._owners.get(owner_key)

    def holder(self, ip: str) -> str | None:
        """Owner key holding ip, or None."""
        pool = self._pool_holding(ip)
        return None if pool is None else pool.holders.get(parse_ip(ip)[1] - pool.base)

    def mac_holder(self, mac: str) -> str | None:
        with self._lock:
            return self._macs.get(normalize_mac(mac))

    def allocations(self, subnet: str | None = None) -> list[tuple[str, Allocation]]:
        """Snapshot of (owner key, allocation), optionally of one subnet."""
        with self._lock:
            return [(k, a) for k, a in self._owners.items()
                    if subnet is None or a.subnet == subnet]

    def __len__(self) -> int:
        return len(self._owners)

    # -- internals ------------------------------------------------------------
    def _pool(self, name: str) -> tuple[Pool, ...]:
        pools = self._pools.get(name)
        if pools is None:
            known = ", ".join(sorted(self._pools)) or "none"
            raise SubnetNotFound(f"subnet {name!r} does not exist (known: {known})")
        return pools

    def _pool_holding(self, ip: str) -> Pool | None:
        version, value = parse_ip(ip)
        with self._lock:
            for pools in self._pools.values():
                for p in pools:
                    if p.version == version and 0 <= value - p.base < p.size:
                        return p
        return None

    def _expire(self, now: float) -> None:
        """Addresses whose quarantine is over are FREE again (lock held)."""
        for subnet, ip in self._quarantine.expired(now):
            pool = self._pool_of(subnet, ip)
            if pool is not None:
                pool.unquarantine(parse_ip(ip)[1] - pool.base)

    def _keep_quarantine(self, name: str, pools: tuple[Pool, ...]) -> None:
        """A subnet's new pools (added again, redefined) keep its quarantined
        addresses out of dynamic allocation (lock held)."""
        for ip in self._quarantine.addresses(name):
            pool = self._pool_of(name, ip)
            if pool is None:
                continue
            off = parse_ip(ip)[1] - pool.base
            try:
                if pool.check_free(off, ip) is None:
                    pool.free(off, quarantined=True)
            except IPAMError:
                continue

    def _pool_of(self, subnet: str, ip: str) -> Pool | None:
        version, value = parse_ip(ip)
        return next((p for p in self._pools.get(subnet, ())
                     if p.version == version and 0 <= value - p.base < p.size), None)

    def _check_overlap(self, pool: Pool, ignore: str | None = None) -> None:
        for pools in self._pools.values():
            for other in pools:
                if other.name != ignore and other.version == pool.version \
                        and other.network.overlaps(pool.network):
                    raise SubnetOverlap(pool.name, pool.cidr, other.name, other.cidr)

    def _generate_mac(self, pool: Pool, off: int) -> str:
        mac = mac_from_ip(pool.version, pool.base + off)
        while mac in self._macs:          # a user-chosen MAC took it: pick a random one
            mac = random_mac(self._rng)
        return mac

    @staticmethod
    def _info(pools: tuple[Pool, ...]) -> SubnetInfo:
        p = pools[0]
        return SubnetInfo(p.name, _cidr(pools), _gateway(pools),
                          tuple(e for q in pools for e in q.exclude), p.used, p.available)


def _cidr(pools: tuple[Pool, ...]) -> str:
    return ",".join(p.cidr for p in pools)


def _gateway(pools: tuple[Pool, ...]) -> str:
    return ",".join(p.gateway for p in pools)
