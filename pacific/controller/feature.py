"""What a controller feature declares, and how events reach its queue.

A feature is one module (subnet.py, node.py, pod.py; NetworkPolicy, Services
... later) with one class derived from `Feature`:

    class PolicyFeature(Feature):
        name = "policy"                                   # queue, metrics, logs
        informers = {"policies": InformerSpec(r.NETWORK_POLICIES)}
        def handlers(self):                               # informer -> event -> keys
            return {"policies": self.on_policy, "pods": self.on_pod_labels}
        def reconcile(self, key): ...
        def resync_keys(self): ...                        # caches + owned NB rows

and one line in `registry.FEATURES`.  The controller creates each informer
once (features that name the same informer share it; their specs must agree),
fans every event out to the handlers that subscribed, and runs the features in
list order: `prepare()` (rebuild in-memory state after the caches synced),
`before_workers()` (wait for what must settle first), workers on the queue,
`tick()` every status interval and `resync_keys()` at start and every
--gc-interval (stale-row collection: the reconcilers treat "object missing"
as "remove what it owned").

A handler gets (old, new): (None, obj) on add, (old, new) on update, (obj,
None) on delete, and returns the keys to queue (an iterable; empty for an
update it does not care about).  Handlers run on informer threads: they only
compute keys, never I/O.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from pacific.kube.resources import Resource
from pacific.kube.workqueue import WorkQueue

Handler = Callable[[dict | None, dict | None], Iterable[str]]


@dataclass(frozen=True)
class InformerSpec:
    resource: Resource
    transform: Callable[[dict], dict] | None = None   # trims what the cache keeps


class Feature:
    name = ""
    informers: dict[str, InformerSpec] = {}
    # the other features this one calls, attribute -> feature name: the controller
    # sets each attribute once every feature exists (`wire_uses`), so a feature
    # reads `self.subnets.spec(...)`, never looks another up by a string at run time
    uses: dict[str, str] = {}

    def __init__(self, ctl):
        self.ctl = ctl
        self.queue = WorkQueue(name=self.name)

    # -- declared by each feature ------------------------------------------
    def handlers(self) -> dict[str, Handler]:
        return {}

    def reconcile(self, key: str) -> None:
        raise NotImplementedError

    def workers(self, cfg) -> int:
        return max(1, cfg.workers // 4)

    def prepare(self) -> None:
        """After every cache synced, before any worker of any feature runs."""

    def before_workers(self, stop: threading.Event) -> None:
        """Called just before this feature's workers start (features in order)."""

    def tick(self) -> None:
        """Every status interval on the leader."""

    def port_builders(self, pod: dict, lsp: str) -> list:
        """NB command builders to run in the transaction that creates or rewrites
        a pod's port (e.g. joining its port groups), so the pod never sends or
        receives a packet before this feature's rules hold for it."""
        return []

    def holders_changed(self, ips: tuple[str, ...], released_by: str | None) -> None:
        """IPAM released `ips` (from a pod of namespace `released_by`) or gave
        them to a new pod (`released_by` None): queue whatever decided on who
        held them (a Service's hand-written endpoints), so it is decided again
        before the new holder's port carries traffic.  Called on the pod
        feature's worker, after IPAM changed: in-memory work only."""

    def resync_keys(self) -> Iterable[str]:
        """Every key worth a reconcile: objects in the caches and owners of the
        NB rows this feature wrote (so stale rows are found)."""
        return ()

    # -- helpers -------------------------------------------------------------
    def queue_keys(self, keys: Iterable[str]) -> int:
        n = 0
        for k in keys:
            if k:
                self.queue.add(k)
                n += 1
        return n


class OnceEvents:
    """A Warning Event (and log line) about an object's problem once, again
    only when the problem changes, forgotten when it goes (an invalid label
    re-checked by every resync must not repeat itself)."""

    def __init__(self, ctl, reason: str, log):
        self.ctl, self.reason, self.log = ctl, reason, log
        self._said: dict[str, str] = {}

    def report(self, obj: dict | None, key: str, problem: str | None, message: str = "") -> None:
        if problem is None or obj is None:
            self._said.pop(key, None)
            return
        if self._said.get(key) == problem:
            return
        self._said[key] = problem
        self.log.warning("%s", message or problem)
        self.ctl.event(obj, self.reason, message or problem)


def wire_uses(features: list[Feature]) -> None:
    """Set every feature's `uses` attributes to the features they name; a name
    that is not among `features` is an error at start, not at the first event."""
    by_name = {f.name: f for f in features}
    for f in features:
        for attr, dep in f.uses.items():
            if dep not in by_name:
                raise ValueError(f"feature {f.name} uses feature {dep!r}, which is not "
                                 f"in the controller's features ({', '.join(by_name)})")
            setattr(f, attr, by_name[dep])


def merge_informer_specs(features: list[Feature]) -> dict[str, InformerSpec]:
    """name -> spec over all features; two features naming one informer must
    declare the same spec (one cache, one transform)."""
    out: dict[str, InformerSpec] = {}
    for f in features:
        for name, spec in f.informers.items():
            if name in out and out[name] != spec:
                raise ValueError(f"feature {f.name} declares informer {name!r} as {spec}, "
                                 f"another feature as {out[name]}")
            out[name] = spec
    return out
