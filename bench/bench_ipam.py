#!/usr/bin/env python3
"""IPAM benchmark: pacific.ipam against a naive allocator, in the same run.

Measures allocations/s and releases/s on a /16 (every usable address), rebuild
(restore) time for 10,000 and 100,000 addresses, and memory (tracemalloc) of an
empty /16 and of 100,000 allocations.  The naive baseline keeps a Python set of
the free addresses (what `set(net.hosts())` gives) plus dicts of owners and MACs.

    .venv/bin/python bench/bench_ipam.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import platform
import time
import tracemalloc

from pacific.ipam import IPAM


class NaiveIPAM:
    """Baseline: a set of free address strings per subnet."""

    def __init__(self) -> None:
        self.free: dict[str, set[str]] = {}
        self.owners: dict[str, tuple[str, str, str]] = {}
        self.holders: dict[str, str] = {}
        self.macs: dict[str, str] = {}

    def add_subnet(self, name: str, cidr: str) -> None:
        net = ipaddress.ip_network(cidr)
        hosts = net.hosts()
        next(hosts)                                   # gateway
        self.free[name] = {str(h) for h in hosts}

    def allocate(self, subnet: str, owner: str, ip: str | None = None) -> str:
        if owner in self.owners:
            return self.owners[owner][1]
        free = self.free[subnet]
        if ip is None:
            ip = free.pop()
        else:
            free.remove(ip)
        b = ipaddress.IPv4Address(ip).packed
        mac = "0a:58:%02x:%02x:%02x:%02x" % tuple(b)
        self.owners[owner] = (subnet, ip, mac)
        self.holders[ip] = owner
        self.macs[mac] = owner
        return ip

    def release(self, owner: str) -> None:
        subnet, ip, mac = self.owners.pop(owner)
        del self.holders[ip]
        del self.macs[mac]
        self.free[subnet].add(ip)


def timed(fn) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def best(fn, repeat: int) -> float:
    return min(timed(fn) for _ in range(repeat))


def bench_alloc_release(cls, repeat: int) -> tuple[float, float, int]:
    """(allocs/s, releases/s, n) filling and emptying a whole /16."""
    alloc_t, rel_t, n = [], [], 0
    for _ in range(repeat):
        ipam = cls()
        ipam.add_subnet("s", "10.16.0.0/16")
        owners = [f"ns/pod-{k}" for k in range(65533)]
        n = len(owners)
        alloc_t.append(timed(lambda: [ipam.allocate("s", o) for o in owners]))
        rel_t.append(timed(lambda: [ipam.release(o) for o in owners]))
    return n / min(alloc_t), n / min(rel_t), n


def make_records(n: int) -> list[tuple[str, str, str]]:
    """n (subnet, owner, ip) records spread over /16 subnets, 80% full."""
    per = 52000
    out = []
    for k in range(n):
        s, i = divmod(k, per)
        out.append((f"s{s}", f"ns{k % 50}/pod-{k}",
                    str(ipaddress.IPv4Address(int(ipaddress.IPv4Address(f"10.{16 + s}.0.0")) + 2 + i))))
    return out


def bench_rebuild(cls, records, repeat: int) -> float:
    subnets = sorted({r[0] for r in records})

    def run():
        ipam = cls()
        for s in subnets:
            ipam.add_subnet(s, f"10.{16 + int(s[1:])}.0.0/16")
        for subnet, owner, ip in records:
            ipam.allocate(subnet, owner, ip)
    return best(run, repeat)


def measure_memory(build) -> int:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    keep = build()
    size = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del keep
    return size


def mem_subnet(cls):
    def build():
        ipam = cls()
        ipam.add_subnet("s", "10.16.0.0/16")
        return ipam
    return measure_memory(build)


def mem_allocations(cls, records):
    subnets = sorted({r[0] for r in records})

    def build():
        ipam = cls()
        for s in subnets:
            ipam.add_subnet(s, f"10.{16 + int(s[1:])}.0.0/16")
        for subnet, owner, ip in records:
            ipam.allocate(subnet, owner, ip)
        return ipam
    return measure_memory(build)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure, best kept")
    args = ap.parse_args()
    print(f"# {platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}, best of {args.repeat}")
    rows = []
    for label, cls in (("pacific.ipam", IPAM), ("naive set", NaiveIPAM)):
        a, r, n = bench_alloc_release(cls, args.repeat)
        rows.append((label, f"allocate /16 ({n} addresses)", f"{a:,.0f}/s"))
        rows.append((label, f"release /16 ({n} addresses)", f"{r:,.0f}/s"))
    recs = {n: make_records(n) for n in (10_000, 100_000)}
    for label, cls in (("pacific.ipam", IPAM), ("naive set", NaiveIPAM)):
        for n, rs in recs.items():
            t = bench_rebuild(cls, rs, args.repeat)
            rows.append((label, f"rebuild {n:,} addresses", f"{t * 1000:,.0f} ms"))
    for label, cls in (("pacific.ipam", IPAM), ("naive set", NaiveIPAM)):
        rows.append((label, "memory, empty /16", f"{mem_subnet(cls) / 1024:,.0f} KiB"))
        rows.append((label, "memory, 100,000 allocations",
                     f"{mem_allocations(cls, recs[100_000]) / 2**20:,.1f} MiB"))
    order = list(dict.fromkeys(r[1] for r in rows))
    rows.sort(key=lambda r: (order.index(r[1]), r[0] != "pacific.ipam"))
    w = max(len(r[1]) for r in rows)
    print(f"| {'measure':<{w}} | {'implementation':<14} | {'result':>12} |")
    print(f"|{'-' * (w + 2)}|{'-' * 16}|{'-' * 13}:|")
    for label, what, val in rows:
        print(f"| {what:<{w}} | {label:<14} | {val:>12} |")


if __name__ == "__main__":
    main()
