"""Released addresses held back from other holders for a while.

An address that changes holder at once carries the old holder's exposure to
the new one: a Service's hand-written endpoints, a client's conntrack entry,
a node's cache of who runs where (issue 51).  So a released address stays
out of every pool for `period` seconds: no dynamic allocation takes it, and
a request naming it is refused (AddressQuarantined, with when it is free
again), except by the holder that released it (the same owner key: a
StatefulSet pod re-created with its fixed address takes it back at once).

    q = Quarantine(60.0)
    q.add("ovn-default", "10.16.0.5", "web/a", now)
    q.get("ovn-default", "10.16.0.5")     # (now + 60, "web/a")
    q.expired(now + 61)                   # [("ovn-default", "10.16.0.5")]

Entries expire in the order they were added (one period for all): `expired`
pops the head of a queue, amortized O(1) per release.  Keyed by (subnet,
address), so a Subnet redefined meanwhile keeps its quarantine.
"""
from __future__ import annotations

from collections import deque
from typing import NamedTuple


class Entry(NamedTuple):
    until: float         # clock time it is free again
    owner: str | None    # who released it (None: unknown, e.g. held back at start-up)


class Quarantine:
    def __init__(self, period: float = 0.0):
        self.period = max(0.0, float(period))
        self._order: deque[tuple[float, str, str]] = deque()   # (until, subnet, ip)
        self._entries: dict[tuple[str, str], Entry] = {}
        self._by_owner: dict[str, set[tuple[str, str]]] = {}
        self._count: dict[str, int] = {}                       # subnet -> entries

    def __bool__(self) -> bool:
        return self.period > 0

    def add(self, subnet: str, ip: str, owner: str | None, now: float) -> Entry:
        """Quarantine `ip` of `subnet` from now for one period (again from now
        if it already was)."""
        self.take(subnet, ip)
        entry = Entry(now + self.period, owner)
        self._entries[(subnet, ip)] = entry
        self._order.append((entry.until, subnet, ip))
        self._count[subnet] = self._count.get(subnet, 0) + 1
        if owner is not None:
            self._by_owner.setdefault(owner, set()).add((subnet, ip))
        return entry

    def get(self, subnet: str, ip: str) -> Entry | None:
        return self._entries.get((subnet, ip))

    def take(self, subnet: str, ip: str) -> Entry | None:
        """Remove `ip` from quarantine (taken back by its holder, or expired)."""
        entry = self._entries.pop((subnet, ip), None)
        if entry is None:
            return None
        self._count[subnet] -= 1
        if not self._count[subnet]:
            del self._count[subnet]
        if entry.owner is not None:
            mine = self._by_owner.get(entry.owner)
            if mine is not None:
                mine.discard((subnet, ip))
                if not mine:
                    del self._by_owner[entry.owner]
        return entry

    def expired(self, now: float) -> list[tuple[str, str]]:
        """(subnet, ip) of every entry whose period is over, removed."""
        out = []
        while self._order and self._order[0][0] <= now:
            until, subnet, ip = self._order.popleft()
            entry = self._entries.get((subnet, ip))
            if entry is not None and entry.until == until:   # not re-added since
                self.take(subnet, ip)
                out.append((subnet, ip))
        return out

    def of_owner(self, owner: str, subnet: str) -> list[str]:
        """The addresses of `subnet` that `owner` released and may take back."""
        return sorted(ip for s, ip in self._by_owner.get(owner, ()) if s == subnet)

    def count(self, subnet: str) -> int:
        return self._count.get(subnet, 0)

    def first_free(self, subnet: str) -> float | None:
        """When the first of `subnet`'s quarantined addresses is free again."""
        return min((e.until for (s, _), e in self._entries.items() if s == subnet), default=None)

    def addresses(self, subnet: str) -> list[str]:
        return sorted(ip for s, ip in self._entries if s == subnet)
