"""The controller: informers -> work queues -> reconcilers -> NB / API writes.

    ctl = Controller(cfg, kube_api, nb_api)
    ctl.run(stop_event)          # blocks until stop_event is set

One `Controller` is one term of leadership: `run()` starts the NB writer and
the informers, waits until every cache is synced, ensures the startup
topology, rebuilds IPAM from the IP objects and NB (`rebuild.py`), queues every
object it knows about (so stale rows and IP objects are found and removed by
the same level-triggered reconcilers that create them), then runs the workers
until `stop_event` is set.  Each resource kind has its own work queue and
reconciler module (subnet.py, node.py, pod.py); a failing key is retried with
per-key exponential backoff by pacific.kube.workqueue.run_workers.
"""
from __future__ import annotations

import logging
import threading
import time

from pacific import names
from pacific.controller import metrics, model, rebuild, topology
from pacific.controller.config import Config
from pacific.controller.node import NodeReconciler
from pacific.controller.pod import PodReconciler
from pacific.controller.subnet import SubnetReconciler
from pacific.kube import resources as r
from pacific.kube.informer import Informer
from pacific.kube.workqueue import WorkQueue, run_workers

LOG = logging.getLogger(__name__)
SYNC_TIMEOUT = 120.0


class Controller:
    def __init__(self, cfg: Config, kube_api, nb_api):
        self.cfg = cfg
        self.kube = kube_api
        self.nb = nb_api
        self.ipam = metrics.MeteredIPAM()
        self.ipam_lock = threading.RLock()
        self.writer = metrics.MeteredNBWriter(nb_api, max_batch=cfg.batch_max,
                                              max_delay=cfg.batch_delay, batch=cfg.batch)
        self.pod_q = WorkQueue(name="pods")
        self.node_q = WorkQueue(name="nodes")
        self.subnet_q = WorkQueue(name="subnets")
        self.subnets = SubnetReconciler(self)
        self.nodes = NodeReconciler(self)
        self.pods = PodReconciler(self)
        # pods and IP objects number in the 100,000s: cache only what is read
        self.inf_pods = Informer(kube_api, r.PODS, on_add=self._pod_event,
                                 on_update=self._pod_update, on_delete=self._pod_event,
                                 transform=model.slim_pod)
        self.inf_nodes = Informer(kube_api, r.NODES, on_add=self._node_event,
                                  on_update=lambda o, n: self._node_event(n), on_delete=self._node_event)
        self.inf_subnets = Informer(kube_api, r.SUBNETS, on_add=self._subnet_event,
                                    on_update=lambda o, n: self._subnet_event(n),
                                    on_delete=self._subnet_event)
        self.inf_ips = Informer(kube_api, r.IPS, on_add=self._ip_event,
                                on_update=lambda o, n: None, on_delete=self._ip_event,
                                transform=model.slim_ip)
        self.inf_namespaces = Informer(kube_api, r.NAMESPACES)
        self.inf_sts = Informer(kube_api, r.STATEFULSETS, on_add=self._sts_event,
                                on_update=lambda o, n: self._sts_event(n), on_delete=self._sts_event)
        self.informers = [self.inf_namespaces, self.inf_subnets, self.inf_ips, self.inf_sts,
                          self.inf_nodes, self.inf_pods]
        self.ready = threading.Event()   # set once rebuilt and workers run
        self.last_tick = time.monotonic()  # the run loop's heartbeat (liveness)

    # -- event handlers (informer threads: only queue keys) ---------------------
    def _pod_event(self, pod: dict) -> None:
        m = pod.get("metadata") or {}
        self.pod_q.add(model.pod_key(m.get("namespace", "default"), m.get("name", "")))

    def _pod_update(self, old: dict, new: dict) -> None:
        # the cached pods are trimmed to what the reconciler reads (slim_pod), so
        # an update that changed none of it (status conditions, container
        # states, other annotations...) needs no reconcile
        if old is new or not model.same_but_version(old, new):
            self._pod_event(new)

    def _node_event(self, node: dict) -> None:
        self.node_q.add((node.get("metadata") or {}).get("name", ""))

    def _subnet_event(self, subnet: dict) -> None:
        self.subnet_q.add((subnet.get("metadata") or {}).get("name", ""))

    def _ip_event(self, ip: dict) -> None:
        spec = ip.get("spec") or {}
        if spec.get("namespace") and spec.get("pod"):
            self.pod_q.add(model.pod_key(spec["namespace"], spec["pod"]))

    def _sts_event(self, sts: dict) -> None:
        m = sts.get("metadata") or {}
        ns, name = m.get("namespace"), m.get("name")
        for ip in self.inf_ips.list():
            spec = ip.get("spec") or {}
            if (spec.get("ownerKind") == names.OWNER_KIND_STATEFULSET and spec.get("namespace") == ns
                    and spec.get("ownerName") == name):
                self.pod_q.add(model.pod_key(ns, spec.get("pod", "")))

    # -- helpers for reconcilers ------------------------------------------------
    def event(self, obj: dict, reason: str, message: str, type: str = "Warning") -> None:
        r.create_event(self.kube, obj, reason, message, type=type, component=names.CONTROLLER_NAME)

    def requeue_waiting_pods(self) -> None:
        """Pods refused earlier (unknown subnet, address taken) get another try."""
        for key in self.pods.refused_keys():
            self.pod_q.add(key)

    def _wait_subnets_settled(self, stop: threading.Event, timeout: float = 30.0) -> None:
        """Let every Subnet get its switch (or its refusal) before pods are
        reconciled, so a big restart does not park thousands of pods in retry."""
        deadline = time.monotonic() + timeout
        while not stop.is_set() and time.monotonic() < deadline:
            names_ = [model.meta(s).get("name") for s in self.inf_subnets.list()]
            if all(self.subnets.spec(n) or self.subnets.is_refused(n) for n in names_):
                return
            time.sleep(0.05)
        LOG.warning("subnets not all settled after %.0fs; starting pod workers anyway", timeout)

    # -- life cycle ---------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        t0 = time.monotonic()
        self.writer.start()
        threads: list[threading.Thread] = []
        try:
            for inf in self.informers:
                inf.start()
            for inf in self.informers:
                if not inf.wait_synced(SYNC_TIMEOUT):
                    raise RuntimeError(f"informer for {inf.res.plural} did not sync within "
                                       f"{SYNC_TIMEOUT:.0f}s: is the API server reachable and "
                                       "are the Pacific CRDs installed?")
                if stop.is_set():
                    return
            LOG.info("caches synced in %.2fs", time.monotonic() - t0)
            topology.ensure(self)
            rebuild.rebuild(self)
            n = self.cfg.workers
            timed = metrics.timed_reconcile
            threads += run_workers(self.subnet_q, timed("subnet", self.subnets.reconcile),
                                   max(1, n // 4), name="subnet")
            threads += run_workers(self.node_q, timed("node", self.nodes.reconcile),
                                   max(1, n // 4), name="node")
            self._wait_subnets_settled(stop)
            threads += run_workers(self.pod_q, timed("pod", self.pods.reconcile), n, name="pod")
            self.ready.set()
            LOG.info("controller ready in %.2fs (%d workers)", time.monotonic() - t0, n)
            next_gc = time.monotonic() + self.cfg.gc_interval
            while not stop.wait(self.cfg.status_interval):
                self.last_tick = time.monotonic()
                self.subnets.queue_dirty()
                if time.monotonic() >= next_gc:
                    rebuild.queue_everything(self)
                    next_gc = time.monotonic() + self.cfg.gc_interval
        finally:
            self.ready.clear()
            for q in (self.subnet_q, self.node_q, self.pod_q):
                q.shutdown()
            for inf in self.informers:
                inf.stop()
            for t in threads:
                t.join(5)
            self.writer.stop()
            LOG.info("controller stopped")
