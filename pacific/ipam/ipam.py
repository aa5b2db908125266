"""The IPAM: subnets, and one address + MAC per owner key.  Pure, in memory,
thread-safe (one lock), rebuilt at start-up from the IP objects with restore().

Owner keys are opaque strings chosen by the caller (e.g. "namespace/pod" for a
pod, "node:node1" for a node's join address).  An owner holds at most one
allocation; allocate() for the same owner and request returns the same
allocation (idempotent), so a reconciler can call it on every pass.
"""

from __future__ import annotations

import random
import sys
import threading
from typing import Callable, Iterable, NamedTuple

from pacific.ipam.addr import mac_from_ip, normalize_mac, parse_ip, random_mac
from pacific.ipam.errors import (AddressInUse, IPAMError, MacInUse, OwnerConflict,
                                 SubnetExists, SubnetInUse, SubnetNotFound, SubnetOverlap)
from pacific.ipam.pool import Pool


class Allocation(NamedTuple):
    ip: str          # canonical text, e.g. "10.16.0.5"
    mac: str         # "0a:58:0a:10:00:05"
    cidr: str        # the subnet's CIDR, e.g. "10.16.0.0/16" (gives the prefix length)
    gateway: str
    subnet: str      # subnet name

    @property
    def ip_with_prefix(self) -> str:
        return f"{self.ip}/{self.cidr.rsplit('/', 1)[1]}"


class SubnetInfo(NamedTuple):
    name: str
    cidr: str
    gateway: str
    exclude: tuple[str, ...]
    used: int
    available: int


class IPAM:
    def __init__(self, seed: int | None = None,
                 on_allocated: Callable[[str, str], None] | None = None):
        """on_allocated(subnet, owner_key): called after each new allocation (not
        for an owner that already held it, nor for restore()), e.g. a metric."""
        self.on_allocated = on_allocated
        self._lock = threading.RLock()
        self._pools: dict[str, Pool] = {}
        self._owners: dict[str, Allocation] = {}
        self._macs: dict[str, str] = {}            # mac -> owner key
        self._rng = random.Random(seed)

    # -- subnets -----------------------------------------------------------------
    def add_subnet(self, name: str, cidr: str, gateway: str | None = None,
                   exclude: Iterable[str] = ()) -> SubnetInfo:
        """Add a subnet.  Re-adding the same definition is a no-op; a different
        one under an existing name raises SubnetExists (use update_subnet)."""
        if not name:
            raise IPAMError("a subnet needs a name")
        with self._lock:
            pool = Pool(name, cidr, gateway, tuple(exclude))
            cur = self._pools.get(name)
            if cur is not None:
                if (cur.cidr, cur.gateway, cur.exclude) == (pool.cidr, pool.gateway, pool.exclude):
                    return self._info(cur)
                raise SubnetExists(f"subnet {name} already exists as {cur.cidr} "
                                   f"(gateway {cur.gateway}); use update_subnet to change it")
            self._check_overlap(pool)
            self._pools[name] = pool
            return self._info(pool)

    def update_subnet(self, name: str, cidr: str, gateway: str | None = None,
                      exclude: Iterable[str] = ()) -> SubnetInfo:
        """Replace a subnet's definition, keeping its allocations.  Refused
        (SubnetInUse, nothing changed) if an allocated address would fall outside
        the new CIDR or become excluded or the gateway."""
        with self._lock:
            old = self._pool(name)
            new = Pool(name, cidr, gateway, tuple(exclude))
            self._check_overlap(new, ignore=name)
            bad = []
            moved: list[tuple[int, str]] = []
            for off, owner in old.holders.items():
                ip = old.ip(off)
                version, value = parse_ip(ip)
                try:
                    noff = new.offset(version, value, ip)
                    new.check_free(noff, ip)
                except IPAMError as e:
                    bad.append(f"{ip} (held by {owner}: {e})")
                    continue
                moved.append((noff, owner))
            if bad:
                more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
                raise SubnetInUse(f"cannot change subnet {name} to {new.cidr}: addresses in "
                                  f"use would become unusable: {'; '.join(bad[:5])}{more}")
            for noff, owner in moved:
                new.take(noff, owner)
                a = self._owners[owner]
                self._owners[owner] = a._replace(cidr=new.cidr, gateway=new.gateway)
            new.cursor = old.cursor if old.cursor < new.window else 0
            self._pools[name] = new
            return self._info(new)

    def ensure_subnet(self, name: str, cidr: str, gateway: str | None = None,
                      exclude: Iterable[str] = ()) -> SubnetInfo:
        """add_subnet, or update_subnet when it exists with another definition."""
        with self._lock:
            if name in self._pools:
                cur = self._pools[name]
                probe = Pool(name, cidr, gateway, tuple(exclude))
                if (cur.cidr, cur.gateway, cur.exclude) == (probe.cidr, probe.gateway,
                                                            probe.exclude):
                    return self._info(cur)
                return self.update_subnet(name, cidr, gateway, exclude)
            return self.add_subnet(name, cidr, gateway, exclude)

    def remove_subnet(self, name: str) -> bool:
        """Remove; False if absent; SubnetInUse while addresses are allocated."""
        with self._lock:
            pool = self._pools.get(name)
            if pool is None:
                return False
            if pool.holders:
                sample = ", ".join(f"{pool.ip(o)} ({k})" for o, k in
                                   list(pool.holders.items())[:3])
                raise SubnetInUse(f"subnet {name} ({pool.cidr}) still has {pool.used} "
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
        version, value = parse_ip(ip)
        with self._lock:
            for p in self._pools.values():
                if p.version == version and 0 <= value - p.base < p.size:
                    return p.name
        return None

    def usage(self, subnet: str) -> tuple[int, int]:
        """(used, available) addresses of a subnet."""
        with self._lock:
            p = self._pool(subnet)
            return p.used, p.available

    # -- addresses ---------------------------------------------------------------
    def allocate(self, subnet: str, owner_key: str, ip: str | None = None,
                 mac: str | None = None) -> Allocation:
        """Give owner_key an address in subnet: the requested ip/mac, or the next
        free address and a MAC derived from it.  Idempotent per owner.

        Raises SubnetNotFound, InvalidAddress, AddressOutOfRange, AddressExcluded,
        AddressInUse (.holder: who, for logs), SubnetFull, InvalidMac, MacInUse, and
        OwnerConflict if the owner already holds a different allocation."""
        return self._allocate(subnet, owner_key, ip, mac, self.on_allocated)

    def _allocate(self, subnet, owner_key, ip, mac, on_new) -> Allocation:
        if not owner_key:
            raise IPAMError("an allocation needs a non-empty owner key")
        # the key ("namespace/pod") is also the pod informer's cache key: one copy
        owner_key = sys.intern(owner_key)
        with self._lock:
            pool = self._pool(subnet)
            want_mac = normalize_mac(mac) if mac else None
            off = None
            if ip:
                version, value = parse_ip(ip)
                off = pool.offset(version, value, ip)
            cur = self._owners.get(owner_key)
            if cur is not None:
                same_ip = off is None or pool.ip(off) == cur.ip
                if cur.subnet == subnet and same_ip and want_mac in (None, cur.mac):
                    return cur
                raise OwnerConflict(
                    f"{owner_key} already holds {cur.ip} ({cur.mac}) in subnet {cur.subnet}; "
                    f"requested {ip or 'any address'} in {subnet}"
                    + (f" with MAC {want_mac}" if want_mac else "") + ": release it first")
            if off is not None:
                holder = pool.check_free(off, ip)
                if holder is not None:
                    raise AddressInUse(pool.ip(off), subnet, holder)
            else:
                off = pool.next_free()
            if want_mac is not None:
                holder = self._macs.get(want_mac)
                if holder is not None:
                    raise MacInUse(want_mac, holder)
            else:
                want_mac = self._generate_mac(pool, off)
            pool.take(off, owner_key)
            alloc = Allocation(pool.ip(off), want_mac, pool.cidr, pool.gateway, subnet)
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
        return self._allocate(subnet, owner_key, ip, mac, None)

    def release(self, owner_key: str) -> Allocation | None:
        """Free the owner's address and MAC; returns what was freed, or None."""
        with self._lock:
            alloc = self._owners.pop(owner_key, None)
            if alloc is None:
                return None
            if self._macs.get(alloc.mac) == owner_key:
                del self._macs[alloc.mac]
            pool = self._pools.get(alloc.subnet)
            if pool is not None:
                version, value = parse_ip(alloc.ip)
                off = value - pool.base
                if pool.holders.get(off) == owner_key:
                    pool.free(off)
            return alloc

    def lookup(self, owner_key: str) -> Allocation | None:
        with self._lock:
            return self._owners.get(owner_key)

    def holder(self, ip: str) -> str | None:
        """Owner key holding ip, or None."""
        version, value = parse_ip(ip)
        with self._lock:
            for p in self._pools.values():
                if p.version == version and 0 <= value - p.base < p.size:
                    return p.holders.get(value - p.base)
        return None

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
    def _pool(self, name: str) -> Pool:
        pool = self._pools.get(name)
        if pool is None:
            known = ", ".join(sorted(self._pools)) or "none"
            raise SubnetNotFound(f"subnet {name!r} does not exist (known: {known})")
        return pool

    def _check_overlap(self, pool: Pool, ignore: str | None = None) -> None:
        for other in self._pools.values():
            if other.name != ignore and other.version == pool.version \
                    and other.network.overlaps(pool.network):
                raise SubnetOverlap(pool.name, pool.cidr, other.name, other.cidr)

    def _generate_mac(self, pool: Pool, off: int) -> str:
        mac = mac_from_ip(pool.version, pool.base + off)
        while mac in self._macs:          # a user-chosen MAC took it: pick a random one
            mac = random_mac(self._rng)
        return mac

    @staticmethod
    def _info(p: Pool) -> SubnetInfo:
        return SubnetInfo(p.name, p.cidr, p.gateway, p.exclude, p.used, p.available)
