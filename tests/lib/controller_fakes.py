"""Fakes for unit tests of the controller's reconcilers.

* `FakeKube`: an in-memory Kubernetes API behind the two methods of the
  official ApiClient that `pacific.kube.resources.request` calls
  (param_serialize, call_api), so the product's own helpers (get, create,
  patch_merge, delete, create_event) and their paths and error mapping run
  unchanged.  Objects get uid and resourceVersion; merge patches follow RFC 7386.
* `FakeInformer`: the cache surface the reconcilers read (get, list, keys,
  wait_for), always in sync with the FakeKube, through the same transform.
* `FakeWriter`: the NBWriter surface (run, submit) that builds the commands
  (pacific.ovn.ensure, the same builders the product submits) and records them
  instead of committing them.
* `FakeNB`: the NB surface reconcilers read besides the writer: rows_owned
  (rows a test puts there) and lookup (nothing: every write goes through).
* `make_controller()`: a real Controller (real features and wiring) on these.
"""
from __future__ import annotations

import copy
import itertools
import json
import threading
import uuid
from concurrent.futures import Future
from types import SimpleNamespace

from pacific.controller.config import Config
from pacific.controller.core import Controller
from pacific.kube import resources as r

_rv = itertools.count(1)


class _Resp:
    def __init__(self, status: int, body):
        self.status = status
        self.response = SimpleNamespace(data=json.dumps(body).encode() if body is not None else b"")


def _status(code: int, reason: str, message: str) -> _Resp:
    return _Resp(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": reason, "message": message, "code": code})


class FakeKube:
    def __init__(self):
        self.objects: dict[str, dict] = {}   # object path -> object
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []
        self.informers: list["FakeInformer"] = []   # told of every change, as by a watch

    # -- the ApiClient surface ----------------------------------------------------
    def param_serialize(self, method, path, query_params=None, header_params=None, body=None,
                        auth_settings=None):
        return method, path, header_params, body, None

    def call_api(self, method, path, headers, body, post, _request_timeout=None):
        with self.lock:
            self.calls.append((method, path))
            return self._handle(method, path, copy.deepcopy(body))

    def _handle(self, method, path, body):
        if method == "POST":
            name = body["metadata"]["name"]
            key = f"{path}/{name}"
            if key in self.objects:
                return _status(409, "AlreadyExists", f"{name} already exists")
            body["metadata"].setdefault("uid", str(uuid.uuid4()))
            parts = path.split("/")
            if "namespaces" in parts[:-1]:
                body["metadata"]["namespace"] = parts[parts.index("namespaces") + 1]
            return self._store(key, body)
        sub = ""
        if path not in self.objects and path.rsplit("/", 1)[-1] == "status":
            path, sub = path.rsplit("/", 1)[0], "status"
        cur = self.objects.get(path)
        if method == "GET":
            return _Resp(200, cur) if cur is not None else _status(404, "NotFound", path)
        if cur is None:
            return _status(404, "NotFound", path)
        if method == "DELETE":
            del self.objects[path]
            self._notify(path, cur, None)
            return _Resp(200, {"kind": "Status", "status": "Success"})
        if method == "PATCH":
            return self._store(path, merge_patch(cur, body))
        if method == "PUT":
            return self._store(path, body)
        raise AssertionError(f"unexpected {method} {path} {sub}")

    def _store(self, key, obj):
        obj["metadata"]["resourceVersion"] = str(next(_rv))
        old = self.objects.get(key)
        self.objects[key] = obj
        self._notify(key, old, obj)
        return _Resp(200, obj)

    def _notify(self, key, old, new):
        for inf in self.informers:
            inf.notify(key, old, new)

    # -- test helpers --------------------------------------------------------------------
    def add(self, res: r.Resource, obj: dict, namespace: str | None = None) -> dict:
        return r.create(self, res, copy.deepcopy(obj), namespace)

    def of(self, res: r.Resource) -> list[dict]:
        prefix = res.path() if not res.namespaced else None
        out = []
        for key, obj in self.objects.items():
            ns = obj["metadata"].get("namespace")
            if res.namespaced != bool(ns):
                continue
            if key == res.path(ns, obj["metadata"]["name"]) and (prefix is None or key.startswith(prefix)):
                out.append(obj)
        return out


class FakeInformer:
    def __init__(self, kube: FakeKube, res: r.Resource, transform=None, on_add=None,
                 on_update=None, on_delete=None):
        self.kube, self.res, self.transform = kube, res, transform
        self.on_add, self.on_update, self.on_delete = on_add, on_update, on_delete
        self.synced = True
        kube.informers.append(self)

    def notify(self, key, old, new):
        m = (new or old)["metadata"]
        if self.res.namespaced != bool(m.get("namespace")):
            return
        if key != self.res.path(m.get("namespace") if self.res.namespaced else None, m["name"]):
            return
        if old is None and self.on_add:
            self.on_add(self._view(new))
        elif new is None and self.on_delete:
            self.on_delete(self._view(old))
        elif old is not None and new is not None and self.on_update:
            self.on_update(self._view(old), self._view(new))

    def _view(self, obj):
        obj = copy.deepcopy(obj)
        return self.transform(obj) if self.transform else obj

    def get(self, key: str):
        ns, name = r.split_key(key)
        obj = self.kube.objects.get(self.res.path(ns if self.res.namespaced else None, name))
        return None if obj is None else self._view(obj)

    def list(self):
        return [self._view(o) for o in self.kube.of(self.res)]

    def keys(self):
        return [r.object_key(o) for o in self.kube.of(self.res)]

    def wait_for(self, key, predicate, timeout=None):
        obj = self.get(key)
        return obj if obj is not None and predicate(obj) else None


class FakeWriter:
    def __init__(self):
        self.writes: list[tuple[str, list]] = []

    def run(self, builders, what: str = "", timeout=None):
        return self.wait(self.submit(builders, what), what, timeout)

    def submit(self, builders, what: str = ""):
        """Commits at once (NBWriter.submit's Future completes later)."""
        cmds = [b(None) for b in builders]
        self.writes.append((what, cmds))
        fut = Future()
        fut.set_result([None] * len(cmds))
        return fut

    @staticmethod
    def wait(fut, what: str = "", timeout=None):
        return fut.result()

    def commands(self, kind: type) -> list:
        return [c for _, cmds in self.writes for c in cmds if type(c) is kind]

    def start(self):
        return self

    def stop(self, *a, **kw):
        pass


class FakeNB:
    """Holds no rows but the owned ones a test adds (found by rows_owned and
    lookup): every other port is missing, so every reconcile submits its write
    (recorded by FakeWriter)."""
    remote = "fake"

    def __init__(self):
        self.owned: list = []   # SimpleNamespace rows: table, name, external_ids, addresses, type
        self.acl_tier = True
        self.tables: dict = {}  # (no ACL rows: acl.meters_named finds none)
        self.ovsdb_connection = SimpleNamespace(lock=threading.Lock())

    def rows_owned(self, table, kind=None, owner=None):
        from pacific import names
        return [row for row in self.owned if row.table == table
                and (kind is None or row.external_ids.get(names.EXT_OWNER_KIND) == kind)
                and (owner is None or row.external_ids.get(names.EXT_OWNER) == owner)]

    def lookup(self, table, name, default=None):
        """An owned row the test added; else not found."""
        from ovsdbapp.backend.ovs_idl import idlutils
        for row in self.owned:
            if row.table == table and getattr(row, "name", None) == name:
                return row
        raise idlutils.RowNotFound(table=table, col="name", match=name)

    def row_uuid(self, table, name):
        """As NorthboundAPI.row_uuid: the uuid of an owned row (one made from
        its name if the test gave none), else None."""
        import uuid
        from ovsdbapp.backend.ovs_idl import idlutils
        try:
            row = self.lookup(table, name)
        except idlutils.RowNotFound:
            return None
        return getattr(row, "uuid", None) or uuid.uuid5(uuid.NAMESPACE_OID, f"{table}/{name}")

    def ref_names(self, row, column):
        """As NorthboundAPI.ref_names: the names of the rows `row.<column>` holds."""
        return {r.name for r in getattr(row, column)}

    def capabilities(self):
        """As NorthboundAPI.capabilities: current OVN (ACL tiers), unless a test
        sets `acl_tier` False (Debian 12's 23.03)."""
        from pacific.ovn.capabilities import Capabilities
        return Capabilities("fake", acl_tier=self.acl_tier, acl_sample=True, lb_health_check=True)

    def is_connected(self):
        return True


def make_controller(**cfg) -> Controller:
    """A Controller on the fakes: real features, handlers and reconcilers;
    informers read the FakeKube; NB writes are recorded.  The startup topology
    is ensured and every feature prepared, as run() does before workers."""
    from pacific.controller import cluster_router
    kube, nb = FakeKube(), FakeNB()
    ctl = Controller(Config(nb_remote="fake", **cfg), kube, nb)
    ctl.informers = {name: FakeInformer(kube, real.res, real.transform, real.on_add,
                                        real.on_update, real.on_delete)
                     for name, real in ctl.informers.items()}
    ctl.writer = FakeWriter()
    kube.add(r.NAMESPACES, {"metadata": {"name": "default"}})
    cluster_router.ensure(ctl)
    for f in ctl.features:
        f.prepare()
    return ctl


def drain(ctl, rounds: int = 5) -> None:
    """Reconcile every queued key of every feature until the queues are empty
    (what the workers would do), in feature order."""
    for _ in range(rounds):
        busy = False
        for f in ctl.features:
            while f.queue.pending():
                key = f.queue.get(0)
                if key is None:
                    break
                busy = True
                try:
                    f.reconcile(key)
                finally:
                    f.queue.done(key)
        if not busy:
            return


def events(ctl, name: str, ns: str) -> list[str]:
    """"Reason: message" of the Events the controller wrote about ns/name."""
    return [f"{e['reason']}: {e['message']}" for e in ctl.kube.of(r.EVENTS)
            if e["involvedObject"]["name"] == name and e["involvedObject"]["namespace"] == ns]


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch, as kube-apiserver applies
    application/merge-patch+json: objects merge, null deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def pod_body(name, ns="default", node="node1", ann=None, labels=None) -> dict:
    """A Pod scheduled to `node`, as the API server would hold it."""
    return {"metadata": {"name": name, "namespace": ns, "annotations": dict(ann or {}),
                         "labels": dict(labels or {})},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause"}]}}


def record(ctl, name, ns="default"):
    """The controller's record on pod ns/name, if it made one for that pod."""
    from pacific import contract
    return contract.own_record(r.get(ctl.kube, r.PODS, name, ns))


def only_b_group_write(ctl) -> tuple[str, list]:
    """Pods x/a and x/b, and a policy letting only b reach a: (its group's
    name, the commands of the group's one write)."""
    from pacific.controller import policy
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "x", "labels": {"ns": "x"}}})
    ctl.kube.add(r.PODS, pod_body("a", "x", labels={"pod": "a"}), "x")
    ctl.kube.add(r.PODS, pod_body("b", "x", labels={"pod": "b"}), "x")
    drain(ctl)
    ctl.kube.add(r.NETWORKPOLICIES, {"metadata": {"name": "only-b", "namespace": "x"}, "spec": {
        "podSelector": {"matchLabels": {"pod": "a"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]}}, "x")
    drain(ctl)
    pg = policy.group_name("x", {"matchLabels": {"pod": "a"}})
    (cmds,) = [c for w, c in ctl.writer.writes if w == f"NetworkPolicy group x/{pg}"]
    return pg, cmds
