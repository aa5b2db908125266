"""The node daemon's pod loop: settings of running pods' ports, kept in line.

CNI ADD plumbs a pod once.  Settings that can change while the pod runs
(bandwidth limits, mirroring, ...) are applied here instead, level-triggered.
The pod loop is a node feature (feature.py) whose work is not one converge
pass but a queue of pod keys: its informer is this node's pods, its handler
queues keys, and its own `start()` runs one worker:

    loop = PodLoop(ctx)   # settings.build(): QosSetting, MirrorSetting, ...
    loop.start()          # the daemon starts it once the pods are listed
    loop.apply_now(key)   # right after ADD plumbed the pod: what it wants beyond
                          # a new port's defaults (PortSetting.fresh)

A `PortSetting` (portsetting.py) is one node-side setting, a small class:

    class MySetting(PortSetting):
        name = "my-setting"
        fresh = None                      # wanted() of a port without it (a new one)
        def wanted(self, pod):            # pod dict -> what the port should have
            ...                           #  (hashable; None = the default)
        def apply(self, att, wanted):     # make the port so; idempotent
            ...

An update of a pod is queued only when some setting's `wanted()` differs
between the old and the new pod (so status churn costs nothing); every
`resync` seconds all of the node's pods are queued again, which repairs what a
restart of ovs-vswitchd or a hand edit undid.  A reconcile applies the
settings to every interface of the pod found in OVS (the daemon's view, see
plumbing.py), and only to a pod whose controller record is its own
(contract.own_record): a pod carrying another pod's copied record gets no
settings, as it got no network.  A failing setting is retried with backoff
(workqueue.run_workers) and does not stop the others.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from pacific import contract
from pacific.kube.resources import object_key
from pacific.kube.workqueue import WorkQueue, run_workers
from pacific.node import metrics
from pacific.node import settings as port_settings
from pacific.node.attachment import PodAttachment
from pacific.node.feature import THIS_NODES_PODS, NodeFeature
from pacific.node.portsetting import PortSetting

log = logging.getLogger(__name__)


class PodLoop(NodeFeature):
    name = "pod-loop"
    informers = {"pods": THIS_NODES_PODS}

    def __init__(self, ctx, settings: list[PortSetting] | None = None,
                 find_attachments: Callable[[str], Iterable[PodAttachment]] | None = None):
        """settings: settings.build()'s by default; find_attachments(pod key):
        the pod's attachments, by default as OVS records them."""
        super().__init__(ctx)
        self.pods = self.informer("pods")
        self.find_attachments = find_attachments or ovs_attachments(ctx.ovs, ctx.mtu)
        self.settings = list(port_settings.build(ctx.args, ctx.ovs) if settings is None
                             else settings)
        self.resync = ctx.args.pod_resync
        self.queue = WorkQueue(name="node-pods")
        self._threads: list[threading.Thread] = []     # stopped by the Loop's _stop event
        self._started: set[str] = set()
        self._start_lock = threading.Lock()

    def _ensure_started(self, s: PortSetting) -> None:
        with self._start_lock:
            if s.name not in self._started:
                s.start()
                self._started.add(s.name)

    # -- events (informer thread: keys only) ---------------------------------------
    def handlers(self):
        return {"pods": self.on_pod}

    def on_pod(self, old: dict | None, new: dict | None) -> None:
        if new is None:
            return   # the port goes with CNI DEL; nothing to reconcile
        if old is None:
            self.kick(object_key(new))
        else:
            self.on_update(old, new)

    def on_update(self, old: dict, new: dict) -> None:
        if old is new or any(s.wanted(old) != s.wanted(new) for s in self.settings) \
                or contract.own_record(old) != contract.own_record(new):
            self.kick(object_key(new))

    def kick(self, key: str) -> None:      # a pod's key, not a wake-up (no converge pass)
        if self.settings:
            self.queue.add(key)

    def apply_now(self, key: str) -> None:
        """Apply the settings of a just-plumbed pod in the caller's thread (CNI
        ADD), before ADD answers: only those the pod wants other than a new
        port has (`PortSetting.fresh`), so a pod without bandwidth limits or
        mirroring costs its ADD no netlink or OVSDB round trip.  A failure is
        logged and left to the loop's retries, never fails the ADD."""
        try:
            pod = self.pods.get(key)
            pending = [s for s in self.settings if s.wanted(pod) != s.fresh] if pod else []
            if pending:
                self.reconcile(key, pending)
        except Exception as exc:
            log.warning("pod %s: port settings not applied yet (%s); retrying", key, exc)
            self.queue.add_rate_limited(key)

    # -- life cycle ------------------------------------------------------------------
    def start(self) -> "PodLoop":
        if not self.settings:
            log.info("pod loop: no port settings configured")
            return self
        for s in self.settings:
            try:
                self._ensure_started(s)
            except Exception as exc:   # e.g. br-int not there yet: retried per pod
                log.warning("pod loop: %s not set up yet: %s", s.name, exc)
        self._threads = run_workers(self.queue, self.reconcile, 1, name="node-pods")
        t = threading.Thread(target=self._resync_loop, name="node-pods-resync", daemon=True)
        t.start()
        self._threads.append(t)
        log.info("pod loop: settings %s, resync every %gs",
                 ", ".join(s.name for s in self.settings), self.resync)
        return self

    def stop(self) -> None:
        self._stop.set()
        self.queue.shutdown()
        for t in self._threads:
            t.join(5)

    def _resync_loop(self) -> None:
        while not self._stop.wait(self.resync):
            for key in self.pods.keys():
                self.queue.add(key)

    # -- reconcile -----------------------------------------------------------------
    def reconcile(self, key: str, settings: list[PortSetting] | None = None) -> None:
        """Apply `settings` (all by default) to the pod's ports."""
        pod = self.pods.get(key)
        if pod is None:
            return
        rec = contract.own_record(pod)
        if rec is None:
            return   # not (yet) the controller's record for this pod: not plumbed
        atts = [a for a in self.find_attachments(key) if a.lsp == rec.port]
        failed = []
        for s in self.settings if settings is None else settings:
            want = s.wanted(pod)
            for att in atts:
                try:
                    self._ensure_started(s)
                    s.apply(att, want)
                    metrics.SETTINGS_APPLIED.labels(s.name, "ok").inc()
                except Exception as exc:   # one setting's failure must not stop the others
                    metrics.SETTINGS_APPLIED.labels(s.name, "error").inc()
                    log.warning("pod %s: %s on %s failed: %s", key, s.name, att.host_ifname, exc)
                    failed.append(f"{s.name} on {att.host_ifname}: {exc}")
        if failed:
            raise RuntimeError(f"pod {key}: " + "; ".join(failed))


def ovs_attachments(ovs, mtu: int) -> Callable[[str], list[PodAttachment]]:
    """find_attachments for PodLoop: the pod's interfaces recorded in OVS."""
    def find(key: str) -> list[PodAttachment]:
        out = []
        for iface in ovs.interfaces_of_pod(key):
            att = PodAttachment.from_ovs(dict(iface.external_ids), mtu, iface.name)
            if att is not None:
                out.append(att)
        return out
    return find
