"""A de-duplicating, rate-limited work queue of keys (client-go's workqueue).

    from pacific.kube.workqueue import WorkQueue, run_workers
    q = WorkQueue()
    informer = Informer(api, PODS, on_add=lambda o: q.add(object_key(o)), ...)
    threads = run_workers(q, reconcile_pod, n=4)   # reconcile_pod(key) -> None
    ...
    q.shutdown()                                   # workers return

Semantics:
- `add(key)`: a key already waiting is not queued twice; a key being processed is
  queued again only after its `done()` (so it is never handed out twice at once,
  and a change that arrives during processing is not lost).
- `add_rate_limited(key)`: re-add after base * 2**(failures) seconds (capped);
  `forget(key)` resets the failure count after a success.
- `add_after(key, delay)`: re-add later (e.g. a periodic re-check).
- `get()` blocks and returns a key, or None once the queue is shut down.
- Fair between namespaces: keys "namespace/name" wait in one FIFO per
  namespace, and `get()` takes from the namespaces in turn (round robin; keys
  without a namespace share one turn).  One tenant with a thousand keys
  waiting delays another tenant's key by one key per namespace, not by a
  thousand (what Kubernetes' API Priority and Fairness does for requests).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import sys
import threading
import time
from collections import deque
from typing import Callable, Hashable

log = logging.getLogger(__name__)
# a set keeps the table it grew to: once the queue is empty again, one that
# held more than ~200 keys (a restart's 100,000 pods: 4 MiB) is replaced
_SHRINK_ABOVE = 8192      # bytes, sys.getsizeof of the set


def _flow(key: Hashable) -> str:
    """The namespace of a "namespace/name" key ("" for any other key)."""
    return key.split("/", 1)[0] if isinstance(key, str) and "/" in key else ""


class _FairQueue:
    """FIFO per namespace, served in turn."""

    def __init__(self):
        self._flows: dict[str, deque] = {}
        self._turns: deque[str] = deque()     # namespaces with keys waiting, in turn
        self._len = 0

    def append(self, key: Hashable) -> None:
        f = _flow(key)
        q = self._flows.get(f)
        if q is None:
            q = self._flows[f] = deque()
            self._turns.append(f)
        q.append(key)
        self._len += 1

    def popleft(self) -> Hashable:
        f = self._turns.popleft()
        q = self._flows[f]
        key = q.popleft()
        if q:
            self._turns.append(f)
        else:
            del self._flows[f]
        self._len -= 1
        return key

    def clear(self) -> None:
        self._flows.clear()
        self._turns.clear()
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0


class WorkQueue:
    def __init__(self, rate_limit_base: float = 0.005, rate_limit_max: float = 30.0,
                 name: str = "queue"):
        self.name = name
        self._base = rate_limit_base
        self._max = rate_limit_max
        self._cond = threading.Condition()
        self._queue = _FairQueue()
        self._dirty: set[Hashable] = set()       # waiting to be processed
        self._processing: set[Hashable] = set()  # handed out, done() not called yet
        self._failures: dict[Hashable, int] = {}
        self._delayed: list[tuple[float, int, Hashable]] = []  # heap (due, seq, key)
        self._seq = itertools.count()
        self._shutdown = False

    # -- producers ---------------------------------------------------------
    def add(self, key: Hashable) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: Hashable) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify()

    def add_after(self, key: Hashable, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutdown:
                return
            heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._seq), key))
            # wake a waiter so it recomputes its timeout for the earliest item
            self._cond.notify()

    def add_rate_limited(self, key: Hashable) -> float:
        """Re-add with per-key exponential backoff; returns the delay used."""
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        delay = min(self._base * (2 ** min(n, 60)), self._max)
        self.add_after(key, delay)
        return delay

    def forget(self, key: Hashable) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    # -- consumers ---------------------------------------------------------
    def get(self, timeout: float | None = None) -> Hashable | None:
        """Next key (marked processing), or None on shutdown or timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                now = time.monotonic()
                while self._delayed and self._delayed[0][0] <= now:
                    _, _, key = heapq.heappop(self._delayed)
                    self._add_locked(key)
                if self._queue:
                    key = self._queue.popleft()
                    self._processing.add(key)
                    self._dirty.discard(key)
                    if not self._dirty and sys.getsizeof(self._dirty) > _SHRINK_ABOVE:
                        self._dirty = set()
                    return key
                if self._shutdown:
                    return None
                wait = None
                if self._delayed:
                    wait = max(self._delayed[0][0] - now, 0.0)
                if deadline is not None:
                    left = deadline - now
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key: Hashable) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty and not self._shutdown:
                self._queue.append(key)
                self._cond.notify()

    # -- lifecycle -----------------------------------------------------------
    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._queue.clear()
            self._dirty.clear()
            self._delayed.clear()
            self._cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        return self._shutdown

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def pending(self) -> int:
        """Keys waiting now plus keys scheduled for later."""
        with self._cond:
            return len(self._queue) + len(self._delayed)


def run_workers(queue: WorkQueue, handler: Callable[[Hashable], None], n: int = 1,
                name: str | None = None) -> list[threading.Thread]:
    """Start n daemon threads that call handler(key) for each key.

    Success forgets the key's failure count; an exception is logged with the
    key and the key is re-added rate-limited.  Threads end at queue.shutdown().
    """
    label = name or queue.name

    def loop() -> None:
        while True:
            key = queue.get()
            if key is None:
                return
            try:
                handler(key)
            except Exception:
                delay = queue.add_rate_limited(key)
                log.exception("%s: handling %r failed (attempt %d), retrying in %.3fs",
                              label, key, queue.num_requeues(key), delay)
            else:
                queue.forget(key)
            finally:
                queue.done(key)

    threads = []
    for i in range(n):
        t = threading.Thread(target=loop, name=f"{label}-worker-{i}", daemon=True)
        t.start()
        threads.append(t)
    return threads
