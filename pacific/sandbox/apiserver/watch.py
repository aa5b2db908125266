"""Watch events and per-connection watchers.

The store offers every event of a resource to its watchers under the store lock
(cheap: a deque append); each watch connection's own thread filters by namespace
and selectors and writes the events.  Selector transitions are translated as
kube-apiserver does: an object that starts matching is ADDED, one that stops
matching is DELETED.
"""
import collections
import threading

# a watcher that falls this far behind is closed; the client re-watches from its
# last resourceVersion (what kube-apiserver does with slow watchers)
MAX_BACKLOG = 200_000


class Event:
    __slots__ = ("type", "rv", "obj", "raw", "old", "key")

    def __init__(self, etype: str, rv: int, obj: dict, raw: bytes, old: dict | None):
        self.type = etype
        self.rv = rv
        self.obj = obj
        self.raw = raw
        self.old = old
        self.key = None


class Watcher:
    def __init__(self, namespace: str | None, label_sel=None, field_sel=None):
        self.namespace = namespace or None
        self.label_sel = label_sel if label_sel is not None and not label_sel.empty() else None
        self.field_sel = field_sel if field_sel is not None and not field_sel.empty() else None
        self.queue: collections.deque[Event] = collections.deque()
        self.cond = threading.Condition(threading.Lock())
        self.overflow = False
        self.closed = False
        self.start_rv = 0

    def offer(self, ev: Event) -> None:
        with self.cond:
            if len(self.queue) >= MAX_BACKLOG:
                self.overflow = True
            else:
                self.queue.append(ev)
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify()

    def take(self, timeout: float) -> list[Event]:
        """Wait up to timeout for events; returns all queued (may be empty)."""
        with self.cond:
            if not self.queue and not self.closed and not self.overflow:
                self.cond.wait(timeout)
            out = list(self.queue)
            self.queue.clear()
            return out

    def _match(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace and meta.get("namespace") != self.namespace:
            return False
        if self.label_sel and not self.label_sel.matches(meta.get("labels")):
            return False
        if self.field_sel and not self.field_sel.matches(obj):
            return False
        return True

    def translate(self, ev: Event) -> str | None:
        """Event type this watcher must see for ev, or None to skip it."""
        if self.label_sel is None and self.field_sel is None:
            if self.namespace and ev.obj["metadata"].get("namespace") != self.namespace:
                return None
            return ev.type
        now = self._match(ev.obj)
        if ev.type != "MODIFIED":
            return ev.type if now else None
        before = self._match(ev.old)
        if now and before:
            return "MODIFIED"
        if now:
            return "ADDED"
        if before:
            return "DELETED"
        return None
