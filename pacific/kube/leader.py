"""Leader election on a coordination.k8s.io/v1 Lease (client-go's algorithm).

    from pacific.kube.leader import run_leader_elected
    stop = threading.Event()
    run_leader_elected(api, "pacific-controller", "kube-system", identity=hostname_pid,
                       on_started_leading=controller.run,      # may block or return
                       on_stopped_leading=lambda: os._exit(1),
                       lease_duration=15, renew_deadline=10, retry_period=2,
                       stop=stop)                              # blocks

A candidate creates the Lease or takes it over once its holder has not renewed it
for lease_duration seconds, measured on the candidate's own clock from when it last
saw the Lease change (so clocks need not agree).  Every write is conditional on the
Lease's resourceVersion, so two candidates can never both win.  The leader renews
every retry_period; if it cannot renew within renew_deadline it calls
on_stopped_leading and returns: the process must stop acting (exit is simplest), as
another candidate takes over lease_duration after the last renewal.  Each attempt
is given up at its deadline even if the API server never answers (the HTTP
client's timeouts and retries would take far longer than a lease), and a renewal
counts from when its request was sent, so a leader always stops before a standby
can start.  When `stop` is
set, a leader releases the Lease (empty holder) so a standby takes over at once.

Why not kubernetes.leaderelection: its LeaseLock uses the global default client
rather than the ApiClient given, its candidate loop cannot be stopped, its timings
are whole seconds (sys.exit on anything shorter), and it does not release on stop.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from typing import Any, Callable

from pacific.kube import errors, resources
from pacific.kube.resources import LEASES

log = logging.getLogger(__name__)


def _now_micro() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, api: Any, name: str, namespace: str, identity: str,
                 on_started_leading: Callable[[], None],
                 on_stopped_leading: Callable[[], None] | None = None,
                 lease_duration: float = 15, renew_deadline: float = 10,
                 retry_period: float = 2, stop: threading.Event | None = None):
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0, got "
                             f"{lease_duration}, {renew_deadline}, {retry_period}")
        if not identity:
            raise ValueError("leader election identity must not be empty")
        self.api, self.name, self.namespace, self.identity = api, name, namespace, identity
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.stop_event = stop or threading.Event()
        self._leading = threading.Event()
        self._observed: tuple | None = None   # (holder, renewTime, resourceVersion)
        self._observed_at = 0.0               # monotonic time it last changed
        self._lease: dict | None = None
        self._pending: threading.Thread | None = None   # the attempt in flight

    @property
    def is_leader(self) -> bool:
        return self._leading.is_set()

    @property
    def observed_holder(self) -> str | None:
        """The Lease's holder as this candidate last read it (None: not read yet)."""
        return self._observed[0] if self._observed else None

    def stop(self) -> None:
        self.stop_event.set()

    # -- main loop ---------------------------------------------------------
    def run(self) -> None:
        where = f"lease {self.namespace}/{self.name}"
        log.info("%s: %s is a candidate", where, self.identity)
        while not self.stop_event.is_set():
            sent = time.monotonic()
            if self._attempt(sent + self.renew_deadline):
                break
            self.stop_event.wait(self.retry_period)
        else:
            return
        log.info("%s: %s became the leader", where, self.identity)
        self._leading.set()
        threading.Thread(target=self._run_leading, daemon=True,
                         name="leader-work").start()
        last_renew = sent
        while not self.stop_event.wait(self.retry_period):
            sent = time.monotonic()
            if self._attempt(last_renew + self.renew_deadline):
                last_renew = sent
            elif time.monotonic() - last_renew >= self.renew_deadline:
                log.error("%s: %s could not renew for %.1fs, stopping leading",
                          where, self.identity, self.renew_deadline)
                break
        if self.stop_event.is_set():
            self._release()
        self._leading.clear()
        log.info("%s: %s stopped leading", where, self.identity)
        if self.on_stopped_leading is not None:
            self.on_stopped_leading()

    def _run_leading(self) -> None:
        try:
            self.on_started_leading()
        except Exception:
            log.exception("on_started_leading failed; giving up leadership")
            self.stop_event.set()

    # -- one attempt -----------------------------------------------------
    def _attempt(self, deadline: float) -> bool:
        """_try_acquire_or_renew, given up (False) at `deadline` (monotonic).

        The attempt runs in its own thread so a request the server never
        answers cannot hold the caller past the deadline; while an abandoned
        attempt is still pending no new one starts (one writer of the Lease)."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        if self._pending is not None and self._pending.is_alive():
            log.warning("lease %s/%s: the previous attempt is still unanswered",
                        self.namespace, self.name)
            return False
        box: list[bool] = []

        def attempt() -> None:
            try:
                box.append(self._try_acquire_or_renew(deadline))
            except Exception:   # noqa: BLE001 - reported; the attempt just failed
                log.exception("lease %s/%s: attempt failed", self.namespace, self.name)

        self._pending = threading.Thread(target=attempt, daemon=True, name="lease-attempt")
        self._pending.start()
        self._pending.join(left)
        if self._pending.is_alive():
            log.warning("lease %s/%s: no answer from the API server within %.1fs",
                        self.namespace, self.name, left)
            return False
        return bool(box and box[0])

    @staticmethod
    def _timeout(deadline: float) -> tuple[float, float]:
        """(connect, read) timeouts of a request that must end by `deadline`."""
        left = max(deadline - time.monotonic(), 0.05)
        return min(left, 5.0), left

    def _try_acquire_or_renew(self, deadline: float) -> bool:
        now = _now_micro()
        try:
            lease = resources.get(self.api, LEASES, self.name, self.namespace,
                                  timeout=self._timeout(deadline))
            if lease is None:
                body = {"metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": self._spec(now, now, 0)}
                self._lease = resources.create(self.api, LEASES, body, self.namespace,
                                               timeout=self._timeout(deadline))
                self._observe(self._lease)
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            self._observe(lease)
            if holder and holder != self.identity:
                duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
                if time.monotonic() - self._observed_at < duration:
                    return False
                log.info("lease %s/%s: holder %s has not renewed for %.0fs, taking over",
                         self.namespace, self.name, holder, duration)
            transitions = int(spec.get("leaseTransitions") or 0)
            if holder == self.identity:
                new_spec = self._spec(spec.get("acquireTime") or now, now, transitions)
            else:
                new_spec = self._spec(now, now, transitions + 1)
            lease["spec"] = new_spec
            self._lease = resources.replace(self.api, LEASES, lease, self.namespace,
                                            timeout=self._timeout(deadline))
            self._observe(self._lease)
            return True
        except errors.ApiError as e:
            if isinstance(e, (errors.Conflict, errors.AlreadyExists)):
                log.debug("lease %s/%s: lost a race (%s)", self.namespace, self.name, e.reason)
            else:
                log.warning("lease %s/%s: %s", self.namespace, self.name, e)
            return False

    def _spec(self, acquire: str, renew: str, transitions: int) -> dict:
        return {"holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, int(round(self.lease_duration))),
                "acquireTime": acquire, "renewTime": renew,
                "leaseTransitions": transitions}

    def _observe(self, lease: dict) -> None:
        spec = lease.get("spec") or {}
        rec = (spec.get("holderIdentity"), spec.get("renewTime"),
               (lease.get("metadata") or {}).get("resourceVersion"))
        if rec != self._observed:
            self._observed = rec
            self._observed_at = time.monotonic()

    def _release(self) -> None:
        """Give the Lease up so a standby need not wait for it to expire."""
        if self._lease is None:
            return
        lease = self._lease
        spec = dict(lease.get("spec") or {})
        if spec.get("holderIdentity") != self.identity:
            return
        spec.update(holderIdentity=None, leaseDurationSeconds=1, renewTime=_now_micro())
        lease["spec"] = spec
        try:
            resources.replace(self.api, LEASES, lease, self.namespace,
                              timeout=self._timeout(time.monotonic() + self.renew_deadline))
            log.info("lease %s/%s: released by %s", self.namespace, self.name, self.identity)
        except errors.ApiError as e:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, e)


def run_leader_elected(api: Any, name: str, namespace: str, identity: str,
                       on_started_leading: Callable[[], None],
                       on_stopped_leading: Callable[[], None] | None = None,
                       lease_duration: float = 15, renew_deadline: float = 10,
                       retry_period: float = 2,
                       stop: threading.Event | None = None) -> None:
    """Block: campaign for the Lease, lead, and return after leadership ends
    (renewal failed, on_started_leading raised, or `stop` was set)."""
    LeaderElector(api, name, namespace, identity, on_started_leading, on_stopped_leading,
                  lease_duration, renew_deadline, retry_period, stop).run()
