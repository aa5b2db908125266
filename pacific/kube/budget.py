"""A budget per namespace: how many Events the controller writes about one
namespace's objects (a token bucket per namespace).

    budget = NamespaceBudget(burst=20, per_second=1.0)
    if budget.take("team-a"):
        create_event(...)             # else: counted as suppressed

One tenant creating a thousand pods the controller must refuse costs the API
server one Event per refusal otherwise, and every other tenant's pods wait
behind those writes (issue 22, bench_fairness).  With a budget, a namespace
gets `burst` Events at once and `per_second` after that; what is over budget
is counted (`take_suppressed()`: the controller logs the counts every 10 s)
and deferred: the latest per object and reason (`defer()`) is written once the
namespace has a token again (`due()`), so a report made once (a Service's
ignored endpoints) is late, never lost, while a flood of them costs the API
server no more than the budget.  Another namespace's budget is its own: a
noisy tenant cannot spend it.

`per_second <= 0` turns the budget off (every Event is written).
"""
from __future__ import annotations

import threading
import time
from typing import Callable


class NamespaceBudget:
    MAX_TRACKED = 10_000          # namespaces kept; the fullest buckets are forgotten first
    MAX_DEFERRED = 10_000         # deferred items kept; over it, the namespace holding
                                  # the most loses its oldest (a flood evicts its own)

    def __init__(self, burst: int = 20, per_second: float = 1.0,
                 clock: Callable[[], float] = time.monotonic):
        self.burst, self.rate, self._clock = max(1, int(burst)), float(per_second), clock
        self._lock = threading.Lock()
        self._tokens: dict[str, tuple[float, float]] = {}   # ns -> (tokens, at)
        self._suppressed: dict[str, int] = {}
        self._deferred: dict[str, dict] = {}     # ns -> {key: item}, oldest first
        self._n_deferred = 0

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, namespace: str) -> bool:
        """May one more Event about `namespace`'s objects be written now?"""
        if not self.enabled:
            return True
        with self._lock:
            if self._take_locked(namespace, self._clock()):
                return True
            self._suppressed[namespace] = self._suppressed.get(namespace, 0) + 1
            return False

    def _take_locked(self, namespace: str, now: float) -> bool:
        tokens, at = self._tokens.get(namespace, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self._tokens[namespace] = (tokens - 1.0, now)
            return True
        self._tokens[namespace] = (tokens, now)
        if len(self._tokens) > self.MAX_TRACKED:
            self._forget_full(now)
        return False

    def defer(self, namespace: str, key, item) -> None:
        """Keep `item`, the latest for `key`, until `namespace` may spend again."""
        with self._lock:
            mine = self._deferred.setdefault(namespace, {})
            self._n_deferred += mine.pop(key, None) is None
            mine[key] = item
            if self._n_deferred > self.MAX_DEFERRED:
                fullest = max(self._deferred.values(), key=len)
                del fullest[next(iter(fullest))]
                self._n_deferred -= 1

    def due(self) -> list:
        """The deferred items whose namespace has a token now (each spends one),
        oldest first per namespace; the others stay."""
        out = []
        with self._lock:
            now = self._clock()
            for ns, mine in list(self._deferred.items()):
                while mine and self._take_locked(ns, now):
                    out.append(mine.pop(next(iter(mine))))
                    self._n_deferred -= 1
                if not mine:
                    del self._deferred[ns]
        return out

    def _forget_full(self, now: float) -> None:
        """Drop namespaces whose bucket has refilled (they start full again anyway)."""
        full = [ns for ns, (t, at) in self._tokens.items()
                if t + (now - at) * self.rate >= self.burst]
        for ns in full:
            del self._tokens[ns]

    def take_suppressed(self) -> dict[str, int]:
        """Events not written per namespace since the last call (and reset)."""
        with self._lock:
            out, self._suppressed = self._suppressed, {}
        return out
