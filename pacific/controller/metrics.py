"""Every metric of `pacific-controller`, and its liveness/readiness.

Counters and histograms are updated where the work happens (cheap: a lock and
an add); gauges that describe state (work-queue depth, IPAM usage, multicast groups) are read
from the leading `Controller` when Prometheus scrapes, so they cannot drift.

| metric | type | labels |
|---|---|---|
| pacific_controller_is_leader | gauge | |
| pacific_controller_reconciles_total | counter | kind (the feature: pod, subnet, policy, service, ...) |
| pacific_controller_reconcile_errors_total | counter | kind |
| pacific_controller_reconcile_duration_seconds | histogram | kind |
| pacific_controller_workqueue_depth | gauge | kind (keys waiting now or later) |
| pacific_controller_nb_transactions_total | counter | |
| pacific_controller_nb_transaction_failures_total | counter | |
| pacific_controller_nb_transaction_duration_seconds | histogram | |
| pacific_controller_nb_batch_size | histogram | (reconciles per transaction) |
| pacific_controller_pods_allocated_total | counter | subnet |
| pacific_controller_allocation_refusals_total | counter | reason |
| pacific_ipam_used_addresses | gauge | subnet |
| pacific_ipam_available_addresses | gauge | subnet |
| pacific_multicast_groups | gauge | subnet (groups joined on it, IGMP snooping in SB) |
| pacific_multicast_group_members | gauge | subnet (member ports, summed over its groups) |
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Hashable

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from pacific import metrics as _exposition  # noqa: F401 - process-wide settings (no _created)

# reconciles and NB transactions take ~1 ms .. seconds (a 1,000-port batch ~0.5 s)
_FAST = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60)

IS_LEADER = Gauge("pacific_controller_is_leader",
                  "1 while this replica leads (runs the reconcilers), else 0")
RECONCILES = Counter("pacific_controller_reconciles", "Reconciles run, failed ones included",
                     ["kind"])
RECONCILE_ERRORS = Counter("pacific_controller_reconcile_errors",
                           "Reconciles that raised (the key is retried with backoff)", ["kind"])
RECONCILE_SECONDS = Histogram("pacific_controller_reconcile_duration_seconds",
                              "Time of one reconcile, NB and API writes included", ["kind"],
                              buckets=_FAST)
NB_TXNS = Counter("pacific_controller_nb_transactions",
                  "OVN Northbound transactions the NB writer committed or tried")
NB_TXN_FAILURES = Counter("pacific_controller_nb_transaction_failures",
                          "OVN Northbound transactions that failed (a failed batch is then "
                          "retried one reconcile per transaction)")
NB_TXN_SECONDS = Histogram("pacific_controller_nb_transaction_duration_seconds",
                           "Time of one OVN Northbound transaction (build, commit, reply)",
                           buckets=_FAST)
NB_BATCH = Histogram("pacific_controller_nb_batch_size",
                     "Reconciles (writer submissions) carried by one NB transaction",
                     buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024))
PODS_ALLOCATED = Counter("pacific_controller_pods_allocated",
                         "Addresses handed out to pods (not counting restores at start-up)",
                         ["subnet"])
REFUSALS = Counter("pacific_controller_allocation_refusals",
                   "Pods refused an address (Event reason); a pod refused again for the "
                   "same reason and message is not counted again", ["reason"])
EVENTS_SUPPRESSED = Counter("pacific_controller_events_suppressed",
                            "Events not written because their namespace was over its budget "
                            "(--event-burst, --event-rate)", ["reason"])

KINDS = ("pod", "node", "subnet")
for _k in KINDS:      # export zeros before the first reconcile
    RECONCILES.labels(_k)
    RECONCILE_ERRORS.labels(_k)


def timed_reconcile(kind: str, fn: Callable[[Hashable], None]) -> Callable[[Hashable], None]:
    """`fn` counted and timed as a reconcile of `kind` (exceptions propagate)."""
    total, errors, seconds = RECONCILES.labels(kind), RECONCILE_ERRORS.labels(kind), \
        RECONCILE_SECONDS.labels(kind)

    def reconcile(key: Hashable) -> None:
        t0 = time.perf_counter()
        try:
            fn(key)
        except BaseException:
            errors.inc()
            raise
        finally:
            total.inc()
            seconds.observe(time.perf_counter() - t0)
    reconcile.__name__ = getattr(fn, "__name__", "reconcile")
    return reconcile


def refused(reason: str) -> None:
    """A pod was refused an address (called by pod.py once per new refusal)."""
    REFUSALS.labels(reason).inc()


def event_suppressed(reason: str) -> None:
    EVENTS_SUPPRESSED.labels(reason).inc()


def nb_transaction(submissions: int, seconds: float, ok: bool) -> None:
    """NBWriter's on_transaction: each transaction counted, timed, its batch size."""
    NB_BATCH.observe(submissions)
    NB_TXNS.inc()
    NB_TXN_SECONDS.observe(seconds)
    if not ok:
        NB_TXN_FAILURES.inc()


def ipam_allocated(subnet: str, owner_key: str) -> None:
    """IPAM's on_allocated: a new pod address (pods' keys are "ns/name"; nodes'
    are not counted)."""
    if "/" in owner_key:
        PODS_ALLOCATED.labels(subnet).inc()


class ControllerHealth:
    """Liveness/readiness of one replica, and the scrape-time gauges of the
    Controller it currently runs (None while standby).

    main.py calls `leading(ctl)` when a term starts and `not_leading()` when it
    ends; the metrics server calls `liveness()` / `readiness()`."""

    def __init__(self, nb, identity: str, leader_elect: bool = True,
                 stall_after: float = 30.0):
        self.nb, self.identity, self.leader_elect = nb, identity, leader_elect
        self.stall_after = stall_after
        self._lock = threading.Lock()
        self._ctl = None
        IS_LEADER.set(0)

    @property
    def controller(self):
        return self._ctl

    def leading(self, ctl) -> None:
        with self._lock:
            self._ctl = ctl
        IS_LEADER.set(1)

    def not_leading(self) -> None:
        with self._lock:
            self._ctl = None
        IS_LEADER.set(0)

    # -- probes ---------------------------------------------------------------------
    def liveness(self) -> tuple[bool, str]:
        ctl = self._ctl
        if ctl is None or not ctl.ready.is_set():
            return True, f"{self.identity}: {'standby' if ctl is None else 'starting a term'}"
        age = time.monotonic() - ctl.last_tick
        if age > self.stall_after:
            return False, (f"{self.identity}: the controller loop has not run for {age:.0f} s "
                           f"(limit {self.stall_after:.0f} s): stuck")
        return True, f"{self.identity}: leader, controller loop ran {age:.1f} s ago"

    def readiness(self) -> tuple[bool, str]:
        if not self.nb.is_connected():
            if "," in self.nb.remote:     # a RAFT cluster: the IDL talks to its leader only
                return False, (f"{self.identity}: not connected to the leader of the OVN "
                               f"Northbound cluster {self.nb.remote}: no member reachable "
                               "that leads (members down, or quorum lost)")
            return False, f"{self.identity}: not connected to OVN Northbound {self.nb.remote}"
        ctl = self._ctl
        if ctl is None:
            role = "standby (not the leader)" if self.leader_elect else "starting"
            return True, f"{self.identity}: {role}, OVN Northbound connected"
        if not ctl.ready.is_set():
            waiting = [i.res.plural for i in ctl.informers.values() if not i.synced]
            why = (f"informers not synced: {', '.join(waiting)}" if waiting
                   else "rebuilding IPAM and starting workers")
            return False, f"{self.identity}: leader, not ready yet ({why})"
        return True, (f"{self.identity}: leader, OVN Northbound connected, informers synced, "
                      "workers running")


class _ScrapeCollector:
    """Work-queue depth, IPAM usage and multicast groups (its SB replica) of the
    leading Controller, read at scrape."""

    def __init__(self):
        self.health: ControllerHealth | None = None

    def describe(self):
        return []

    def collect(self):
        depth = GaugeMetricFamily("pacific_controller_workqueue_depth",
                                  "Keys waiting in the work queue (now or after a backoff)",
                                  labels=["kind"])
        used = GaugeMetricFamily("pacific_ipam_used_addresses",
                                 "Addresses allocated in the subnet (pods, or nodes on join)",
                                 labels=["subnet"])
        avail = GaugeMetricFamily("pacific_ipam_available_addresses",
                                  "Addresses still free in the subnet (excluded, gateway, "
                                  "network and broadcast not counted)", labels=["subnet"])
        groups = GaugeMetricFamily("pacific_multicast_groups",
                                   "Multicast groups joined on the Subnet (IGMP snooping, SB)",
                                   labels=["subnet"])
        members = GaugeMetricFamily("pacific_multicast_group_members",
                                    "Pod ports that joined a group on the Subnet, summed over "
                                    "its groups", labels=["subnet"])
        ctl = self.health.controller if self.health is not None else None
        view = ctl.southbound_view() if ctl is not None else None
        for switch, (n, m) in sorted((view.multicast if view else {}).items()):
            groups.add_metric([switch], n)
            members.add_metric([switch], m)
        if ctl is not None:
            for f in ctl.features:
                depth.add_metric([f.name], f.queue.pending())
            for info in ctl.ipam.subnets():
                used.add_metric([info.name], info.used)
                avail.add_metric([info.name], info.available)
        return [depth, used, avail, groups, members]


COLLECTOR = _ScrapeCollector()
REGISTRY.register(COLLECTOR)


def install(health: ControllerHealth) -> ControllerHealth:
    """Make `health`'s Controller the one the scrape-time gauges read."""
    COLLECTOR.health = health
    return health
