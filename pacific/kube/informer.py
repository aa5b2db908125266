"""List+watch informer keeping a local cache of one resource, as plain dicts.

    from pacific.kube.informer import Informer
    from pacific.kube.resources import PODS, object_key
    inf = Informer(api, PODS, field_selector="spec.nodeName=node1",
                   on_add=lambda o: q.add(object_key(o)),
                   on_update=lambda old, new: q.add(object_key(new)),
                   on_delete=lambda o: q.add(object_key(o)))
    inf.start()
    if not inf.wait_synced(30):
        raise SystemExit("pods never listed")
    pod = inf.get("default/web-0")                   # dict or None
    pod = inf.wait_for("default/web-0",
                       lambda p: contract.own_record(p) is not None,
                       timeout=10)                   # blocks, no polling
    inf.stop()

The informer thread lists (in pages of LIST_PAGE_SIZE), then watches from the
list's resourceVersion.  It
re-lists on 410 Gone, and re-watches (backing off from 0.2 s to 10 s) when the
connection drops or the server is unreachable; after a re-list, objects that
vanished meanwhile are reported through on_delete and changed ones through
on_update, so handlers see every transition level-triggered.  With resync=N,
on_update(obj, obj) is called for every cached object every N seconds.

Callbacks run in the informer thread: keep them short (queue a key).  A callback
that raises is logged and does not stop the informer.  The cache holds the
objects as received: treat returned dicts as read-only (copy before changing).

transform=fn (optional) is applied to every received object (listed, added,
modified or deleted; after kind/apiVersion are filled in) before it is cached
or handed to a callback: return a smaller dict with only the fields the
caller reads (keep metadata.name/namespace/resourceVersion), so 100,000 pods
do not cost 100,000 full Pod objects of memory.  A transform that raises drops
nothing: the object is cached as received and the error is logged.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable

import urllib3.exceptions
from kubernetes.watch.watch import iter_resp_lines

from pacific.kube import errors, resources
from pacific.kube.resources import Resource, object_key

log = logging.getLogger(__name__)

WATCH_SERVER_TIMEOUT = 60     # seconds the server keeps one watch open
# Lists are read in pages (limit/continue), each transformed before the next is
# fetched, so a 100,000-object list never exists whole in memory: what a page
# costs decoded (~3 KB a minimal Pod, several times that a real one) is the
# process's peak, and most of it stays in its RSS as fragmentation between the
# cached objects made meanwhile (100,000 slim Pods and IP objects, listed in
# pages of 20,000: +65 MiB of RSS against pages of 5,000).  kube-apiserver
# serves a `continue` from its cache at the cost of that page alone.
LIST_PAGE_SIZE = 5000
BACKOFF_MIN, BACKOFF_MAX = 0.2, 10.0


DELETED_UIDS_KEPT = 4096      # uids of recently deleted objects, for wait_for(uid=...)


class _Relist(Exception):
    """The watch cannot continue from the current resourceVersion."""


class ObjectDeleted(Exception):
    """wait_for(uid=...): the object with that uid was deleted meanwhile."""


class Informer:
    def __init__(self, api: Any, res: Resource, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None,
                 on_add: Callable[[dict], None] | None = None,
                 on_update: Callable[[dict, dict], None] | None = None,
                 on_delete: Callable[[dict], None] | None = None,
                 resync: float | None = None,
                 transform: Callable[[dict], dict] | None = None):
        self.api = api
        self.res = res
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_add, self.on_update, self.on_delete = on_add, on_update, on_delete
        self.resync = resync
        self.transform = transform
        self._cache: dict[str, dict] = {}
        self._deleted: dict[str, None] = {}    # uids of recent deletions, oldest first
        self._cond = threading.Condition()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp: Any = None
        self._rv = ""
        self._what = f"{res.plural}" + (f" in {namespace}" if namespace else "")

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> "Informer":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"informer-{self.res.plural}")
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:
            _close_quietly(resp)
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("informer for %s did not stop within %.1fs", self._what, timeout)

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first list is in the cache."""
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        return self._rv

    # -- cache -----------------------------------------------------------------
    def get(self, key: str) -> dict | None:
        with self._cond:
            return self._cache.get(key)

    def list(self) -> list[dict]:
        with self._cond:
            return list(self._cache.values())

    def keys(self) -> list[str]:
        with self._cond:
            return list(self._cache)

    def wait_for(self, key: str, predicate: Callable[[dict], bool],
                 timeout: float | None, uid: str | None = None) -> dict | None:
        """Block until the cached object `key` exists and predicate(obj) is true;
        returns it, or None on timeout or stop.  With `uid`: raises
        ObjectDeleted as soon as the object with that uid is deleted (one of
        the last DELETED_UIDS_KEPT deletions this informer saw), instead of
        waiting out the timeout for an object that cannot come back."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._stop.is_set():
                obj = self._cache.get(key)
                if obj is not None and predicate(obj):
                    return obj
                if uid and uid in self._deleted:
                    raise ObjectDeleted(f"{self.res.kind} {key} (uid {uid}) was deleted")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(left)
        return None

    def wait_for_absent(self, key: str, timeout: float | None) -> bool:
        """Block until `key` is not in the cache (after sync); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._stop.is_set():
                if self._synced.is_set() and key not in self._cache:
                    return True
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return False

    def _forget(self, obj: dict) -> None:
        """Remember a deleted object's uid (under the lock)."""
        uid = (obj.get("metadata") or {}).get("uid")
        if uid:
            self._deleted[uid] = None
            if len(self._deleted) > DELETED_UIDS_KEPT:
                del self._deleted[next(iter(self._deleted))]

    # -- the loop -------------------------------------------------------------
    def _run(self) -> None:
        backoff = BACKOFF_MIN
        need_list = True
        next_resync = time.monotonic() + self.resync if self.resync else None
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch(next_resync)
                backoff = BACKOFF_MIN
            except _Relist as e:
                log.info("%s: re-listing (%s)", self._what, e)
                need_list = True
                continue
            except errors.Gone:
                log.info("%s: resourceVersion %s expired, re-listing", self._what, self._rv)
                need_list = True
                continue
            except Exception as e:  # noqa: BLE001 - the informer must outlive any failure
                if self._stop.is_set():
                    break   # stop() closed the stream under us: expected
                known = (errors.ApiError, urllib3.exceptions.HTTPError, OSError, ValueError)
                log.warning("%s: list/watch failed (%s); retrying in %.1fs", self._what, e,
                            backoff, exc_info=not isinstance(e, known))
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            if next_resync is not None and time.monotonic() >= next_resync:
                self._do_resync()
                next_resync = time.monotonic() + self.resync
        log.debug("%s: informer stopped", self._what)

    def _list_pages(self) -> tuple[dict[str, dict], str]:
        query: list[tuple[str, Any]] = [("limit", LIST_PAGE_SIZE)]
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        fresh: dict[str, dict] = {}
        token, rv = None, ""
        while True:
            page = resources.request(self.api, "GET", self.res.path(self.namespace),
                                     query + ([("continue", token)] if token else []),
                                     timeout=(5.0, 120.0))
            for obj in page.get("items") or []:
                obj.setdefault("kind", self.res.kind)
                obj.setdefault("apiVersion", self.res.api_version)
                fresh[object_key(obj)] = self._transform(obj)
            meta = page.get("metadata") or {}
            rv = rv or str(meta.get("resourceVersion") or "")   # the first page's snapshot
            token = meta.get("continue")
            if not token:
                return fresh, rv

    def _list(self) -> None:
        fresh, rv = self._list_pages()
        with self._cond:
            old = self._cache
            self._cache = fresh
            self._rv = rv
            gone = [obj for key, obj in old.items() if key not in fresh]
            for obj in gone:
                self._forget(obj)
            self._cond.notify_all()
        for obj in gone:
            self._call(self.on_delete, obj)
        for key, obj in fresh.items():
            prev = old.get(key)
            if prev is None:
                self._call(self.on_add, obj)
            elif _rv_of(prev) != _rv_of(obj):
                self._call(self.on_update, prev, obj)
        first = not self._synced.is_set()
        self._synced.set()
        with self._cond:
            self._cond.notify_all()
        log.log(logging.INFO if first else logging.DEBUG,
                "%s: listed %d objects at resourceVersion %s", self._what, len(fresh), rv)

    def _watch(self, next_resync: float | None) -> None:
        timeout = WATCH_SERVER_TIMEOUT
        if next_resync is not None:
            timeout = max(1, min(timeout, int(next_resync - time.monotonic()) + 1))
        query: list[tuple[str, Any]] = [("watch", "true"), ("resourceVersion", self._rv),
                                        ("allowWatchBookmarks", "true"),
                                        ("timeoutSeconds", timeout)]
        if self.label_selector:
            query.append(("labelSelector", self.label_selector))
        if self.field_selector:
            query.append(("fieldSelector", self.field_selector))
        resp = resources.request(self.api, "GET", self.res.path(self.namespace), query,
                                 timeout=(5.0, timeout + 15), stream=True)
        self._resp = resp
        try:
            if self._stop.is_set():
                return
            for line in iter_resp_lines(resp):
                if self._stop.is_set():
                    return
                if line:
                    self._event(json.loads(line))
        finally:
            self._resp = None
            _close_quietly(resp)

    def _event(self, ev: dict) -> None:
        typ = ev.get("type")
        obj = ev.get("object") or {}
        if typ == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Relist(f"watch expired: {obj.get('message')}")
            raise errors.ApiError(int(code or 0), str(obj.get("reason") or "WatchError"),
                                  str(obj.get("message") or obj))
        rv = _rv_of(obj)
        if typ == "BOOKMARK":
            if rv:
                self._rv = rv
            return
        key = object_key(obj)
        obj.setdefault("kind", self.res.kind)
        obj.setdefault("apiVersion", self.res.api_version)
        obj = self._transform(obj)
        with self._cond:
            prev = self._cache.get(key)
            if typ == "DELETED":
                self._cache.pop(key, None)
                self._forget(obj)
            else:
                self._cache[key] = obj
            if rv:
                self._rv = rv
            self._cond.notify_all()
        if typ == "DELETED":
            self._call(self.on_delete, obj)
        elif prev is None:
            self._call(self.on_add, obj)
        else:
            self._call(self.on_update, prev, obj)

    def _transform(self, obj: dict) -> dict:
        if self.transform is None:
            return obj
        try:
            return self.transform(obj)
        except Exception:
            log.exception("%s: transform failed for %s; caching it whole", self._what, object_key(obj))
            return obj

    def _do_resync(self) -> None:
        if self.on_update is None:
            return
        for obj in self.list():
            self._call(self.on_update, obj, obj)

    def _call(self, fn: Callable[..., None] | None, *args: dict) -> None:
        if fn is None:
            return
        try:
            fn(*args)
        except Exception:
            log.exception("%s: event handler %s failed for %s", self._what,
                          getattr(fn, "__name__", fn), object_key(args[-1]))


def _rv_of(obj: dict) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _close_quietly(resp: Any) -> None:
    try:
        resp.shutdown() if hasattr(resp, "shutdown") else None
    except Exception:
        pass
    try:
        resp.close()
    except Exception:
        pass
    try:
        resp.release_conn()
    except Exception:
        pass
