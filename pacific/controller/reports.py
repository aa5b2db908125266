"""A problem told once: the Event a reconciler writes about an object is
written again only when the text changes or the object is a new one.

    self.reports = Reports()
    if self.reports.due(key, svc, text):
        self.ctl.event(svc, "ServiceNotFullyProgrammed", text)

A report is counted as made only when there was an object to make it about:
a reconcile that runs before the object reaches its informer (the Services
and EndpointSlices watches are two streams) leaves the report to the next
one, and the same Service deleted and created again (a new uid) is told again.
"""
from __future__ import annotations

import threading


class Reports:
    def __init__(self):
        self._lock = threading.Lock()
        self._made: dict[str, tuple[str, str]] = {}   # key -> (uid, text)

    def due(self, key: str, obj: dict | None, text: str) -> bool:
        """Should `text` (empty: nothing wrong) be reported about `obj` now?
        Remembers it as reported when it should."""
        with self._lock:
            if obj is None or not text:
                self._made.pop(key, None)
                return False
            made = ((obj.get("metadata") or {}).get("uid") or "", text)
            if self._made.get(key) == made:
                return False
            self._made[key] = made
            return True

    def forget(self, key: str) -> None:
        """`key`'s object is gone: a new one is told afresh."""
        with self._lock:
            self._made.pop(key, None)
