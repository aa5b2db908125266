"""The controller: informers -> feature queues -> reconcilers -> NB / API writes.

    ctl = Controller(cfg, kube_api, nb_api)       # registry.FEATURES by default
    ctl.run(stop_event)                           # blocks until stop_event is set

One `Controller` is one term of leadership.  It is a wiring of features
(feature.py): each declares its informers, handlers, queue and reconciler.
`run()` starts the NB writer and the informers, waits until every cache is
synced, ensures the startup topology, lets every feature `prepare()` (IPAM is
rebuilt from the IP objects and NB there, see rebuild.py), queues every key
each feature's `resync_keys()` names (so stale rows and IP objects are found
and removed by the same level-triggered reconcilers that create them), then
starts each feature's workers in list order until `stop_event` is set.  A
failing key is retried with per-key exponential backoff
(pacific.kube.workqueue.run_workers).
"""
from __future__ import annotations

import logging
import threading
from typing import Callable
import time

from pacific import names
from pacific.controller import cluster_router, metrics
from pacific.controller.config import Config
from pacific.controller.feature import Feature, merge_informer_specs, wire_uses
from pacific.controller.lagprobe import LagProbe
from pacific.controller.nbwriter import NBWriter
from pacific.controller.transit import TransitNetworks
from pacific.ipam import IPAM
from pacific.kube import resources as r
from pacific.kube.budget import NamespaceBudget
from pacific.kube.informer import Informer
from pacific.kube.workqueue import run_workers
from pacific.ovn.sb import SbView, SouthboundWatch

LOG = logging.getLogger(__name__)
SYNC_TIMEOUT = 120.0
SUPPRESSED_REPORT_EVERY = 10.0    # s between log lines naming namespaces over their Event budget


class NBUnavailable(RuntimeError):
    """The NB database has been unwritable for longer than cfg.nb_failure_exit."""


class Controller:
    def __init__(self, cfg: Config, kube_api, nb_api, features=None):
        from pacific.controller.registry import FEATURES
        self.cfg = cfg
        self.kube = kube_api
        self.nb = nb_api
        self.ipam = IPAM(on_allocated=metrics.ipam_allocated, quarantine=cfg.address_quarantine)
        self.ipam_lock = threading.RLock()
        self.transit = TransitNetworks()   # the egress gateways' /24s (transit.py)
        self.southbound: SouthboundWatch | None = None   # SB replica while run() runs
        self.writer = NBWriter(nb_api, max_batch=cfg.batch_max, max_delay=cfg.batch_delay,
                               batch=cfg.batch, on_transaction=metrics.nb_transaction)
        # Events per namespace (kube/budget.py): one tenant's thousand refusals
        # do not cost the API server a thousand writes
        self.event_budget = NamespaceBudget(cfg.event_burst, cfg.event_rate)
        self.features: list[Feature] = [cls(self) for cls in (features or FEATURES)]
        self._by_name = {f.name: f for f in self.features}
        wire_uses(self.features)
        specs = merge_informer_specs(self.features)
        subscribers: dict[str, list] = {name: [] for name in specs}
        for f in self.features:
            for inf_name, handler in f.handlers().items():
                if inf_name not in specs:
                    raise ValueError(f"feature {f.name} handles informer {inf_name!r}, "
                                     "which no feature declares")
                subscribers[inf_name].append((f, handler))
        self.informers: dict[str, Informer] = {}
        for inf_name, spec in specs.items():
            self.informers[inf_name] = Informer(
                kube_api, spec.resource, transform=spec.transform,
                **self._fan_out(inf_name, subscribers[inf_name]))
        self.ready = threading.Event()   # set once rebuilt and workers run
        self.on_giving_up: Callable[[], None] | None = None   # see NBUnavailable
        self.last_tick = time.monotonic()  # the run loop's heartbeat (liveness)
        self._acl_tiers: bool | None = None   # acl_tiers(), read from NB's schema once

    @staticmethod
    def _fan_out(inf_name: str, subs: list) -> dict:
        """Informer callbacks that hand each event to every subscribed handler
        and queue the keys it returns (informer threads: no I/O here)."""
        def deliver(old, new):
            for feature, handler in subs:
                try:
                    feature.queue_keys(handler(old, new))
                except Exception:  # a handler bug must not stop the informer
                    LOG.exception("feature %s: handler for %s failed", feature.name, inf_name)
        return {"on_add": lambda obj: deliver(None, obj),
                "on_update": lambda old, new: deliver(old, new),
                "on_delete": lambda obj: deliver(obj, None)}

    # -- lookups for features -------------------------------------------------------
    def acl_tiers(self) -> bool:
        """Does NB's OVN evaluate ACLs in tiers (OVN >= 23.09)?  NetworkPolicy is
        then tier 1, ClusterNetworkPolicy's Admin and Baseline tiers 0 and 2."""
        if self._acl_tiers is None:
            self._acl_tiers = bool(self.nb.capabilities().acl_tier)
        return self._acl_tiers

    def informer(self, name: str) -> Informer:
        return self.informers[name]

    def feature(self, name: str) -> Feature:
        return self._by_name[name]

    def holders_changed(self, ips, released_by: str | None = None) -> None:
        """Tell every feature that `ips` changed holder (Feature.holders_changed)."""
        ips = tuple(ips)
        for f in self.features:
            try:
                f.holders_changed(ips, released_by)
            except Exception:  # one feature's bug must not stop a pod's allocation
                LOG.exception("feature %s: holders_changed(%s) failed", f.name, ", ".join(ips))

    def southbound_view(self) -> SbView | None:
        """What SB says now (which chassis holds each gateway port), from the
        controller's one replica of it; None without --sb-remote or before it
        connected."""
        return self.southbound.view() if self.southbound is not None else None

    def event(self, obj: dict, reason: str, message: str, type: str = "Warning") -> None:
        """An Event about `obj`, within its namespace's budget (over it: counted, and
        the latest per object and reason written once the budget allows)."""
        meta = obj.get("metadata") or {}
        ns = meta.get("namespace") or ""
        if not self.event_budget.take(ns):
            metrics.event_suppressed(reason)
            self.event_budget.defer(ns, (ns, obj.get("kind"), meta.get("name"), reason),
                                    (obj, reason, message, type))
            return
        r.create_event(self.kube, obj, reason, message, type=type, component=names.CONTROLLER_NAME)

    def write_deferred_events(self) -> None:
        """The deferred Events whose namespace's budget allows them now."""
        for obj, reason, message, type_ in self.event_budget.due():
            r.create_event(self.kube, obj, reason, message, type=type_,
                           component=names.CONTROLLER_NAME)

    def report_suppressed_events(self) -> None:
        over = self.event_budget.take_suppressed()
        if over:
            LOG.warning("Events deferred, over their namespace's budget (--event-burst %d, "
                        "--event-rate %g/s; the latest per object and reason is written "
                        "once the budget allows): %s", self.cfg.event_burst,
                        self.cfg.event_rate, ", ".join(f"{ns or '(cluster)'}: {n}"
                                                       for ns, n in sorted(over.items())))

    def resync(self) -> None:
        """Queue every key every feature names (start-up, then every --gc-interval)."""
        counts = {f.name: f.queue_keys(f.resync_keys()) for f in self.features}
        LOG.info("queued for reconciliation: %s", ", ".join(f"{n} {c}" for n, c in counts.items()))

    # -- life cycle ---------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        t0 = time.monotonic()
        # nothing commits once this term ends (leadership lost or shutdown), even
        # a batch already queued
        self.writer.fence = lambda: not stop.is_set()
        self.writer.start()
        threads: list[threading.Thread] = []
        if self.cfg.sb_remote and self.southbound is None:
            self.southbound = SouthboundWatch(self.cfg.sb_remote,
                                              multicast=self.cfg.multicast).start()
        try:
            for inf in self.informers.values():
                inf.start()
            for inf in self.informers.values():
                if not inf.wait_synced(SYNC_TIMEOUT):
                    raise RuntimeError(f"informer for {inf.res.plural} did not sync within "
                                       f"{SYNC_TIMEOUT:.0f}s: is the API server reachable and "
                                       "are the Pacific CRDs installed?")
                if stop.is_set():
                    return
            LOG.info("caches synced in %.2fs", time.monotonic() - t0)
            cluster_router.ensure(self)
            for f in self.features:
                f.prepare()
            self.resync()
            timed = metrics.timed_reconcile
            for f in self.features:
                f.before_workers(stop)
                threads += run_workers(f.queue, timed(f.name, f.reconcile), f.workers(self.cfg),
                                       name=f.name)
            self.ready.set()
            if self.cfg.lag_probe_interval > 0:
                threads.append(LagProbe(self.nb, self.cfg.lag_probe_interval).start(stop))
            LOG.info("controller ready in %.2fs (features: %s)", time.monotonic() - t0,
                     ", ".join(f.name for f in self.features))
            next_gc = time.monotonic() + self.cfg.gc_interval
            next_report = time.monotonic() + SUPPRESSED_REPORT_EVERY
            while not stop.wait(self.cfg.status_interval):
                self.last_tick = time.monotonic()
                failing = self.writer.failing_for()
                if self.cfg.nb_failure_exit and failing > self.cfg.nb_failure_exit:
                    if self.on_giving_up is not None:
                        self.on_giving_up()     # e.g. release the Lease now, not after
                                                # the hung transaction's timeout
                    raise NBUnavailable(
                        f"NB writes have failed for {failing:.0f} s (--nb-failure-exit "
                        f"{self.cfg.nb_failure_exit:g}): giving up so that a replica with a "
                        "working NB connection takes over")
                for f in self.features:
                    f.tick()
                self.write_deferred_events()
                if time.monotonic() >= next_report:
                    self.report_suppressed_events()
                    next_report = time.monotonic() + SUPPRESSED_REPORT_EVERY
                if time.monotonic() >= next_gc:
                    self.resync()
                    next_gc = time.monotonic() + self.cfg.gc_interval
        finally:
            self.ready.clear()
            for f in self.features:
                f.queue.shutdown()
            for inf in self.informers.values():
                inf.stop()
            for t in threads:
                t.join(5)
            self.writer.stop()
            if self.southbound is not None:
                self.southbound.stop()
                self.southbound = None
            LOG.info("controller stopped")
