"""The egress firewall's DNS names, kept resolved (dnspython).

    names = DnsNames(on_change=lambda name: queue.add(...), servers=["192.0.2.53"])
    names.want({"example.com"})          # resolved now, then again when the TTL runs out
    names.answer("example.com")          # (frozenset({"93.184.216.34"}), None) or
                                         # (frozenset(), "NXDOMAIN: ...")
    names.stop()

A feature whose objects name DNS names keeps them through `DnsUsers`: which
of its keys use which names, the names wanted being all of them, and a
changed answer queues the keys using it:

    users = DnsUsers(feature.queue_keys, servers)
    users.use("ns1", ["example.com"])    # started at the first name
    users.answer("example.com"); users.names()

One thread resolves every wanted name (A records, and AAAA records too with
`ipv6=True`: a name with either has an answer) and resolves it again when
its answer's TTL expires (at least MIN_TTL s later; an error is retried after
RETRY s); `on_change(name)` is called whenever a name's addresses or error
change, so the rule follows the answer within its TTL plus the time to write
NB.  Servers: `servers` (the controller's --dns-servers) or /etc/resolv.conf.
"""
from __future__ import annotations

import heapq
import logging
import threading
import time
from typing import Callable

import dns.exception
import dns.resolver

LOG = logging.getLogger(__name__)
MIN_TTL = 1.0       # s: an answer with TTL 0 is asked again no sooner than this
RETRY = 5.0         # s: after an error
TIMEOUT = 2.0       # s per query


class DnsNames:
    def __init__(self, on_change: Callable[[str], None], servers: list[str] | None = None,
                 ipv6: bool = False):
        self._rtypes = ("A", "AAAA") if ipv6 else ("A",)
        self._resolver = dns.resolver.Resolver(configure=not servers)
        if servers:          # "ip" or "ip:port"
            parsed = [s.rsplit(":", 1) if s.count(":") == 1 else [s] for s in servers]
            self._resolver.nameservers = [p[0] for p in parsed]
            self._resolver.nameserver_ports = {p[0]: int(p[1]) for p in parsed if len(p) == 2}
        self._resolver.lifetime = TIMEOUT
        self._on_change = on_change
        self._cv = threading.Condition()
        self._answers: dict[str, tuple[frozenset, str | None]] = {}
        self._due: list[tuple[float, str]] = []      # heap of (monotonic time, name)
        self._wanted: set[str] = set()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> "DnsNames":
        self._thread = threading.Thread(target=self._run, name="dns-names", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()

    def want(self, wanted: set[str]) -> None:
        """Keep exactly these names resolved; new ones are resolved at once."""
        with self._cv:
            new = set(wanted) - self._wanted
            self._wanted = set(wanted)
            for name in set(self._answers) - self._wanted:
                del self._answers[name]
            for name in new:
                heapq.heappush(self._due, (0.0, name))
            if new:
                self._cv.notify_all()

    def answer(self, name: str) -> tuple[frozenset, str | None] | None:
        """(addresses, error) once resolved, else None."""
        with self._cv:
            return self._answers.get(name)

    def resolve(self, name: str) -> tuple[frozenset, str | None, float]:
        """(addresses, error, seconds until asking again), a query per record
        type; asked again when the first of their TTLs runs out."""
        addrs: set[str] = set()
        ttls = []
        for rtype in self._rtypes:
            try:
                ans = self._resolver.resolve(name, rtype)
            except dns.resolver.NXDOMAIN:
                return frozenset(), f"{name}: no such name (NXDOMAIN)", RETRY
            except dns.resolver.NoAnswer:
                continue        # the other type may have records
            except (dns.exception.DNSException, OSError) as e:
                return frozenset(), f"{name}: not resolved ({type(e).__name__}: {e})", RETRY
            ttls.append(ans.rrset.ttl if ans.rrset is not None else RETRY)
            addrs.update(r.address for r in ans)
        if not addrs:
            return frozenset(), f"{name}: no {' or '.join(self._rtypes)} record", RETRY
        return frozenset(addrs), None, max(float(min(ttls)), MIN_TTL)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and (not self._due or self._due[0][0] > time.monotonic()):
                    self._cv.wait(None if not self._due else
                                  max(0.0, self._due[0][0] - time.monotonic()))
                if self._stopped:
                    return
                _, name = heapq.heappop(self._due)
                if name not in self._wanted or any(n == name for _, n in self._due):
                    continue
            addrs, err, again = self.resolve(name)
            with self._cv:
                if name not in self._wanted:
                    continue
                before = self._answers.get(name)
                self._answers[name] = (addrs, err)
                heapq.heappush(self._due, (time.monotonic() + again, name))
            if before != (addrs, err):
                LOG.info("DNS %s: %s", name, err or ", ".join(sorted(addrs)))
                self._on_change(name)


class DnsUsers:
    """Which keys of one feature use which DNS names, over a DnsNames of its own
    (started at the first name): a changed answer queues the keys using it."""

    def __init__(self, queue_keys: Callable[[list[str]], object], servers: list[str] | None = None,
                 ipv6: bool = False):
        self._lock = threading.Lock()
        self._users: dict[str, set[str]] = {}       # DNS name -> keys using it
        self._started = False
        self._queue_keys = queue_keys
        self.dns = DnsNames(self._changed, servers=servers, ipv6=ipv6)

    def _changed(self, name: str) -> None:
        with self._lock:
            users = sorted(self._users.get(name, ()))
        self._queue_keys(users)

    def use(self, key: str, wanted) -> None:
        """`key` now uses exactly these names (none: it uses no name any more)."""
        with self._lock:
            for name in list(self._users):
                self._users[name].discard(key)
                if not self._users[name]:
                    del self._users[name]
            for name in wanted:
                self._users.setdefault(name, set()).add(key)
            all_names = set(self._users)
            start = bool(all_names) and not self._started
            self._started = self._started or start
        if start:
            self.dns.start()
        self.dns.want(all_names)

    def names(self) -> set[str]:
        with self._lock:
            return set(self._users)

    def answer(self, name: str) -> tuple[frozenset, str | None] | None:
        return self.dns.answer(name)
