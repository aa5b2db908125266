"""In-memory object store with a global resourceVersion, event history and watchers.

Objects are plain dicts, never mutated once stored; each is kept with its JSON
encoding so lists and watch events are written without re-encoding.  All writes
happen under one lock, which also orders the event history: resourceVersion is a
single increasing counter shared by every resource, as with etcd.
"""
import bisect
import collections
import copy
import datetime
import json
import logging
import threading
import uuid

from pacific.sandbox.apiserver import errors, semantics
from pacific.sandbox.apiserver.metavalidation import GENERATED_NAME_BASE_MAX
from pacific.sandbox.apiserver.resources import CRD_KEY, NAMESPACE_KEY, Registry, ResourceType, from_crd
from pacific.sandbox.apiserver.watch import Event, Watcher

log = logging.getLogger(__name__)

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def encode(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class Entry:
    __slots__ = ("obj", "raw")

    def __init__(self, obj: dict):
        self.obj = obj
        self.raw = encode(obj)


class Bucket(dict):
    """One resource's objects by (namespace, name), with the keys also kept sorted,
    so a list is served in order without sorting and a paged list (`continue`)
    starts where the previous page ended instead of rescanning everything."""

    __slots__ = ("keys_sorted",)

    def __init__(self) -> None:
        super().__init__()
        self.keys_sorted: list[tuple[str, str]] = []

    def __setitem__(self, key, value) -> None:
        if key not in self:
            bisect.insort(self.keys_sorted, key)
        super().__setitem__(key, value)

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        del self.keys_sorted[bisect.bisect_left(self.keys_sorted, key)]

    def sorted_items(self):
        """(key, entry) in key order."""
        for k in self.keys_sorted:
            yield k, dict.__getitem__(self, k)


class Store:
    """All objects of every resource, keyed by ResourceType.key then (namespace, name)."""

    def __init__(self, registry: Registry | None = None, history: int = 10000):
        self.registry = registry or Registry()
        self.lock = threading.RLock()
        self.rv = 0
        self.objects: dict[tuple[str, str], dict[tuple[str, str], Entry]] = collections.defaultdict(Bucket)
        self.history: collections.deque[Event] = collections.deque()
        self.history_size = history
        self.history_floor = 0        # watches from below this rv get 410 Gone
        self.watchers: dict[tuple[str, str], set[Watcher]] = collections.defaultdict(set)
        self.dirty = False
        self.changed = threading.Condition(self.lock)

    # ------------------------------------------------------------ helpers
    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, rt: ResourceType, etype: str, entry: Entry, old: Entry | None) -> None:
        ev = Event(etype, self.rv, entry.obj, entry.raw, old.obj if old else None)
        self.history.append(ev)
        while len(self.history) > self.history_size:
            self.history_floor = self.history.popleft().rv
        ev.key = rt.key
        for w in list(self.watchers.get(rt.key, ())):
            w.offer(ev)
        self.dirty = True

    def _bucket(self, rt: ResourceType):
        return self.objects[rt.key]

    def _require_namespace(self, ns: str) -> None:
        entry = self.objects[NAMESPACE_KEY].get(("", ns))
        if entry is None:
            raise errors.not_found("", "namespaces", ns)
        if entry.obj.get("status", {}).get("phase") == "Terminating":
            raise errors.ApiError(403, "Forbidden",
                                  f"unable to create new content in namespace {ns} because it is being terminated",
                                  {"name": ns, "kind": "namespaces"})

    def service_allocations(self) -> tuple[set[str], set[int]]:
        ips, ports = set(), set()
        for e in self.objects[("", "services")].values():
            spec = e.obj.get("spec") or {}
            if spec.get("clusterIP"):
                ips.add(spec["clusterIP"])
            for p in spec.get("ports") or []:
                if p.get("nodePort"):
                    ports.add(p["nodePort"])
        return ips, ports

    # ------------------------------------------------------------ reads
    def get(self, rt: ResourceType, ns: str, name: str) -> Entry:
        e = self.objects[rt.key].get((ns, name))
        if e is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return e

    def list(self, rt: ResourceType, ns: str | None, label_sel=None, field_sel=None,
             after: tuple[str, str] | None = None, limit: int | None = None
             ) -> tuple[int, list[Entry], int | None]:
        """(resourceVersion of the list, matching entries sorted by namespace/name,
        how many more match beyond `limit`: None when no limit was hit; with
        selectors only "at least 1" is known, as in kube-apiserver).  `after` starts
        the list past that key (a continue token's position)."""
        selective = (label_sel is not None and not label_sel.empty()) or \
            (field_sel is not None and not field_sel.empty())
        with self.lock:
            bucket = self.objects[rt.key]
            rv = self.rv
            name = field_sel.exact_name() if field_sel is not None else None
            if name is not None and ns is not None:
                e = bucket.get((ns, name))
                one = e is not None and (after is None or (ns, name) > after) and field_sel.matches(e.obj) \
                    and (label_sel is None or label_sel.matches(e.obj["metadata"].get("labels")))
                return rv, [e] if one else [], None
            keys = bucket.keys_sorted
            lo, hi = 0, len(keys)
            if ns:      # keys sort by (namespace, name): a namespace is one contiguous run
                lo, hi = bisect.bisect_left(keys, (ns, "")), bisect.bisect_left(keys, (ns + "\0", ""))
            if after is not None:
                lo = max(lo, bisect.bisect_right(keys, after))
            out: list[Entry] = []
            for i in range(lo, hi):
                e = dict.__getitem__(bucket, keys[i])
                if selective:
                    if label_sel is not None and not label_sel.matches(e.obj["metadata"].get("labels")):
                        continue
                    if field_sel is not None and not field_sel.matches(e.obj):
                        continue
                if limit is not None and len(out) >= limit:
                    return rv, out, 1 if selective else hi - i
                out.append(e)
        return rv, out, None

    # ------------------------------------------------------------ writes
    def create(self, rt: ResourceType, ns: str, obj: dict, dry_run: bool = False) -> Entry:
        meta = obj.setdefault("metadata", {})
        obj.setdefault("kind", rt.kind)
        obj.setdefault("apiVersion", f"{rt.group}/{rt.storage_version}" if rt.group else rt.storage_version)
        with self.lock:
            if rt.namespaced:
                self._require_namespace(ns)
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            if not meta.get("name") and meta.get("generateName"):
                base = meta["generateName"][:GENERATED_NAME_BASE_MAX]
                for _ in range(20):
                    cand = base + semantics.generate_suffix()
                    if (ns, cand) not in self.objects[rt.key]:
                        meta["name"] = cand
                        break
            for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
                meta.pop(k, None)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            semantics.prepare_create(rt, obj, self)
            name = meta["name"]
            if (ns if rt.namespaced else "", name) in self.objects[rt.key]:
                raise errors.already_exists(rt.group, rt.plural, name)
            if rt.key == CRD_KEY:
                self._check_crd_conflict(obj)
            if dry_run:
                return Entry(obj)
            meta["resourceVersion"] = self._next_rv()
            entry = Entry(obj)
            self._bucket(rt)[(ns if rt.namespaced else "", name)] = entry
            self._emit(rt, "ADDED", entry, None)
            if rt.key == CRD_KEY:
                self._register_crd(obj)
            return entry

    def _check_crd_conflict(self, crd: dict) -> None:
        spec = crd["spec"]
        for v in spec["versions"]:
            cur = self.registry.get(spec["group"], v["name"], spec["names"]["plural"])
            if cur is not None and cur.crd is None:
                raise errors.invalid("apiextensions.k8s.io", "CustomResourceDefinition",
                                     crd["metadata"]["name"],
                                     [("FieldValueInvalid", "spec.names.plural",
                                       "Invalid value: conflicts with a built-in resource")])

    def _register_crd(self, crd: dict) -> None:
        self.registry.replace_crd(crd["metadata"]["name"], from_crd(crd))
        log.info("serving custom resource %s", crd["metadata"]["name"])

    def update(self, rt: ResourceType, ns: str, name: str, obj: dict, subresource: str = "",
               dry_run: bool = False) -> tuple[Entry, bool]:
        """PUT semantics. Returns (entry, created)."""
        ns = ns if rt.namespaced else ""
        meta = obj.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the name "
                                     f"on the URL ({name})")
        meta["name"] = name
        with self.lock:
            cur = self.objects[rt.key].get((ns, name))
            if cur is None:
                if rt.key in semantics.CREATE_ON_UPDATE and not subresource:
                    return self.create(rt, ns, obj, dry_run), True
                raise errors.not_found(rt.group, rt.plural, name)
            want = meta.get("resourceVersion")
            if want and want != cur.obj["metadata"]["resourceVersion"]:
                raise errors.conflict(rt.group, rt.plural, name, "the object has been modified; please "
                                      "apply your changes to the latest version and try again")
            return self._replace(rt, ns, name, cur, obj, subresource, dry_run), False

    def _replace(self, rt, ns, name, cur: Entry, obj: dict, subresource: str, dry_run: bool) -> Entry:
        old = cur.obj
        if subresource == "status":
            # a schema may default or prune in place: never inside the stored object
            new = copy.deepcopy(old) if rt.schema else dict(old)
            new["status"] = obj.get("status")
            if new["status"] is None:
                new.pop("status")
            new["metadata"] = copy.deepcopy(old["metadata"])
            semantics.prepare_status_update(rt, old, new)
        else:
            new = obj
            new["apiVersion"] = old.get("apiVersion", new.get("apiVersion"))
            new["kind"] = old.get("kind", new.get("kind"))
            meta = new["metadata"]
            for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                      "generation", "namespace", "generateName"):
                if k in old["metadata"]:
                    meta[k] = old["metadata"][k]
                else:
                    meta.pop(k, None)
            if rt.status_subresource:
                if "status" in old:
                    new["status"] = copy.deepcopy(old["status"]) if rt.schema else old["status"]
                else:
                    new.pop("status", None)
            semantics.prepare_update(rt, old, new)
            if semantics.spec_changed(old, new):
                meta["generation"] = old["metadata"].get("generation", 1) + 1
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if dry_run:
            return Entry(new)
        if new == old:       # no-op updates keep the resourceVersion and emit nothing
            return cur
        meta = new["metadata"]
        # the last finalizer of a deleted object gone: the object goes away
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            meta["resourceVersion"] = self._next_rv()
            return self._remove(rt, ns, name, Entry(new))
        meta["resourceVersion"] = self._next_rv()
        entry = Entry(new)
        self.objects[rt.key][(ns, name)] = entry
        self._emit(rt, "MODIFIED", entry, cur)
        if rt.key == CRD_KEY:
            self._register_crd(new)
        return entry

    def mutate(self, rt: ResourceType, ns: str, name: str, fn, subresource: str = "",
               dry_run: bool = False) -> Entry:
        """Read-modify-write under the lock (PATCH). fn(current obj copy) -> new obj."""
        ns = ns if rt.namespaced else ""
        with self.lock:
            cur = self.get(rt, ns, name)
            new = fn(copy.deepcopy(cur.obj))
            if not isinstance(new, dict):
                raise errors.bad_request("patch did not produce an object")
            meta = new.setdefault("metadata", {}) if isinstance(new.get("metadata"), (dict, type(None))) \
                else None
            if meta is None:
                raise errors.bad_request("metadata must be an object")
            if new.get("kind", cur.obj["kind"]) != cur.obj["kind"] or \
                    new.get("apiVersion", cur.obj["apiVersion"]) != cur.obj["apiVersion"]:
                raise errors.bad_request("the kind or apiVersion of a patched object cannot change")
            want = meta.get("resourceVersion")
            if want and want != cur.obj["metadata"]["resourceVersion"]:
                raise errors.conflict(rt.group, rt.plural, name, "the object has been modified; please "
                                      "apply your changes to the latest version and try again")
            if meta.get("name", name) != name:
                raise errors.bad_request(f"the name of the object ({meta['name']}) does not match the "
                                         f"name on the URL ({name})")
            meta["name"] = name
            return self._replace(rt, ns, name, cur, new, subresource, dry_run)

    def delete(self, rt: ResourceType, ns: str, name: str, precondition_uid: str | None = None,
               precondition_rv: str | None = None, dry_run: bool = False) -> tuple[Entry, bool]:
        """Returns (entry, gone): gone False when finalizers keep the object (marked for deletion)."""
        ns = ns if rt.namespaced else ""
        with self.lock:
            cur = self.get(rt, ns, name)
            meta = cur.obj["metadata"]
            if precondition_uid and precondition_uid != meta["uid"]:
                raise errors.conflict(rt.group, rt.plural, name,
                                      f"Precondition failed: UID in precondition: {precondition_uid}, "
                                      f"UID in object meta: {meta['uid']}")
            if precondition_rv and precondition_rv != meta["resourceVersion"]:
                raise errors.conflict(rt.group, rt.plural, name,
                                      f"Precondition failed: ResourceVersion in precondition: "
                                      f"{precondition_rv}, ResourceVersion in object meta: "
                                      f"{meta['resourceVersion']}")
            if dry_run:
                return cur, True
            if rt.key == NAMESPACE_KEY:
                return self._delete_namespace(rt, cur)
            if meta.get("finalizers"):
                if meta.get("deletionTimestamp"):
                    return cur, False
                new = copy.deepcopy(cur.obj)
                new["metadata"]["deletionTimestamp"] = now_rfc3339()
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                new["metadata"]["resourceVersion"] = self._next_rv()
                entry = Entry(new)
                self.objects[rt.key][(ns, name)] = entry
                self._emit(rt, "MODIFIED", entry, cur)
                return entry, False
            new = copy.deepcopy(cur.obj)
            new["metadata"]["resourceVersion"] = self._next_rv()
            return self._remove(rt, ns, name, Entry(new)), True

    def _remove(self, rt: ResourceType, ns: str, name: str, final: Entry) -> Entry:
        del self.objects[rt.key][(ns, name)]
        self._emit(rt, "DELETED", final, None)
        if rt.key == CRD_KEY:
            self._drop_crd(final.obj)
        if rt.namespaced:
            self._maybe_finish_namespace(ns)
        return final

    def _drop_crd(self, crd: dict) -> None:
        """A deleted CRD takes all its custom resources with it."""
        crt = next((r for r in self.registry.all() if r.crd == crd["metadata"]["name"]), None)
        if crt is not None:
            for (ons, oname), e in list(self.objects[crt.key].items()):
                new = copy.deepcopy(e.obj)
                new["metadata"]["resourceVersion"] = self._next_rv()
                del self.objects[crt.key][(ons, oname)]
                self._emit(crt, "DELETED", Entry(new), None)
            self.objects.pop(crt.key, None)
        self.registry.remove_crd(crd["metadata"]["name"])
        log.info("stopped serving custom resource %s", crd["metadata"]["name"])

    def _delete_namespace(self, rt: ResourceType, cur: Entry) -> tuple[Entry, bool]:
        """Mark Terminating, delete the namespace's content, drop it once empty."""
        ns = cur.obj["metadata"]["name"]
        if not cur.obj["metadata"].get("deletionTimestamp"):
            new = copy.deepcopy(cur.obj)
            new["metadata"]["deletionTimestamp"] = now_rfc3339()
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["status"] = {"phase": "Terminating"}
            new["metadata"]["resourceVersion"] = self._next_rv()
            cur_new = Entry(new)
            self.objects[NAMESPACE_KEY][("", ns)] = cur_new
            self._emit(rt, "MODIFIED", cur_new, cur)
            cur = cur_new
        for key, bucket in list(self.objects.items()):
            ort = self.registry.by_key(key)
            if ort is None or not ort.namespaced:
                continue
            for (ons, oname) in [k for k in bucket if k[0] == ns]:
                self.delete(ort, ons, oname)
        self._maybe_finish_namespace(ns)
        entry = self.objects[NAMESPACE_KEY].get(("", ns))
        return (entry or cur), entry is None

    def _maybe_finish_namespace(self, ns: str) -> None:
        entry = self.objects[NAMESPACE_KEY].get(("", ns))
        if entry is None or not entry.obj["metadata"].get("deletionTimestamp"):
            return
        for key, bucket in self.objects.items():
            rt = self.registry.by_key(key)
            if rt is not None and rt.namespaced and any(k[0] == ns for k in bucket):
                return
        rt = self.registry.by_key(NAMESPACE_KEY)
        new = copy.deepcopy(entry.obj)
        new["spec"] = {}
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._remove(rt, "", ns, Entry(new))

    # ------------------------------------------------------------ watch
    def watch(self, rt: ResourceType, ns: str | None, since: int | None, watcher: Watcher) -> None:
        """Register watcher and queue its backlog: everything after `since`, or the
        current state as ADDED events when since is None.  Raises 410 if too old."""
        with self.lock:
            if since is not None:
                if since < self.history_floor:
                    raise errors.gone(f"too old resource version: {since} ({self.history_floor})")
                for ev in self.history:
                    if ev.rv > since and ev.key == rt.key:
                        watcher.offer(ev)
            else:
                for (ons, _), e in self.objects[rt.key].sorted_items():
                    if not ns or ons == ns:
                        watcher.offer(Event("ADDED", int(e.obj["metadata"]["resourceVersion"]),
                                            e.obj, e.raw, None))
            watcher.start_rv = self.rv
            self.watchers[rt.key].add(watcher)

    def unwatch(self, rt: ResourceType, watcher: Watcher) -> None:
        with self.lock:
            self.watchers[rt.key].discard(watcher)

    # ------------------------------------------------------------ bootstrap / persistence
    def ensure_default_namespaces(self) -> None:
        rt = self.registry.by_key(NAMESPACE_KEY)
        for ns in DEFAULT_NAMESPACES:
            if ("", ns) not in self.objects[NAMESPACE_KEY]:
                self.create(rt, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    def snapshot(self) -> dict:
        with self.lock:
            objs = []
            for key, bucket in self.objects.items():
                for e in bucket.values():
                    objs.append(e.obj)
            self.dirty = False
            return {"resourceVersion": self.rv, "objects": objs}

    def load(self, state: dict) -> int:
        """Load a snapshot; resourceVersions are preserved, history starts empty."""
        with self.lock:
            objs = state.get("objects") or []
            crds = [o for o in objs if o.get("kind") == "CustomResourceDefinition"]
            for crd in crds:
                self._register_crd(crd)
            count = 0
            for o in objs:
                group, _, version = o["apiVersion"].rpartition("/")
                rt = next((r for r in self.registry.all() if r.group == group and r.kind == o["kind"]), None)
                if rt is None:
                    log.warning("state file: dropping %s %s: its kind is not served",
                                o.get("kind"), o.get("metadata", {}).get("name"))
                    continue
                m = o["metadata"]
                self.objects[rt.key][(m.get("namespace", "") if rt.namespaced else "", m["name"])] = Entry(o)
                count += 1
            self.rv = max(int(state.get("resourceVersion") or 0), self.rv)
            self.history_floor = self.rv
            return count
