"""When is a feature's write in force on every chassis?  The nb_cfg/hv_cfg
barrier (pacific.ovn.barrier) for one feature's keys, checked on its own
queue so no worker ever waits:

    self.enforced = EnforcedTracker(self, self._report)   # in __init__
    ...after a write for `key`:   self.enforced.written(key, tag)
    ...in reconcile:              if self.enforced.handles(key):
                                      self.enforced.check(key); return
    def _report(self, key, ok, message, tag): ...         # write the object's status

A feature that reports in `status.enforced` / `enforcedMessage` (EgressIP,
EgressFirewall) starts a barrier once per version of its object (uid,
generation), not after every reconcile:

    if self.enforced.new_version(key, obj):
        r.patch_status(kube, res, obj, enforced.PENDING)
        self.enforced.written(key, enforced.version(obj))
    ...and reports with status_fields(ok, message) if version(obj) is still the tag.

`report(key, True, "every chassis applied it (NB change N, 0.05 s after the
write)", tag)` once hv_cfg reached the bumped nb_cfg; `report(key, False,
why, tag)` after PATIENCE s and again every LATE_EVERY s while a chassis is
behind; `report(key, None, why, tag)` when NB has no NB_Global row to bump.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from pacific import names
from pacific.ovn import barrier

PREFIX = "~"          # queue keys of the checks: "~" + the feature's key
CHECK_EVERY = 0.05    # s between looks at hv_cfg (the replica: free)
PATIENCE = 60.0       # s before saying a chassis is behind
LATE_EVERY = 5.0      # s between looks once late

Report = Callable[[str, "bool | None", str, object], None]
PENDING = {"enforced": "Pending", "enforcedMessage": "waiting until every chassis applied it"}


def version(obj: dict) -> tuple:
    """Which incarnation, spec and enforcement mode of an object a write was
    for (an annotation switching a policy from dry-run to enforced is a new
    version, though not a new generation)."""
    meta = obj.get("metadata") or {}
    mode = (meta.get("annotations") or {}).get(names.ANN_ENFORCEMENT)
    return meta.get("uid"), meta.get("generation") or 0, mode


def status_fields(ok: "bool | None", message: str) -> dict:
    """A report as `status.enforced` ("True", "False", "Unknown") and its message."""
    return {"enforced": {True: "True", False: "False"}.get(ok, "Unknown"),
            "enforcedMessage": message}


class EnforcedTracker:
    def __init__(self, feature, report: Report):
        self.feature, self.report = feature, report
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[int, float, object]] = {}   # key -> (nb_cfg, t0, tag)
        self._versions: dict[str, tuple] = {}      # key -> version(obj) its barrier began for

    def written(self, key: str, tag: object = None) -> None:
        self.written_all([(key, tag)])

    def written_all(self, keys: list[tuple[str, object]]) -> None:
        """written() for several keys of one write: one NB change to wait on."""
        if not keys:
            return
        target = barrier.bump(self.feature.ctl.nb)
        for key, tag in keys:
            if target is None:
                self.report(key, None, "NB has no NB_Global row to wait on", tag)
                continue
            with self._lock:
                self._pending[key] = (target, time.monotonic(), tag)
            self.feature.queue.add_after(PREFIX + key, CHECK_EVERY)

    def new_version(self, key: str, obj: dict) -> bool:
        """Is this version of `key`'s object one whose barrier has not begun
        (recorded as begun: the caller calls written() next)?"""
        v = version(obj)
        with self._lock:
            if self._versions.get(key) == v:
                return False
            self._versions[key] = v
            return True

    @staticmethod
    def handles(key: str) -> bool:
        return key.startswith(PREFIX)

    def pending(self, key: str) -> int | None:
        """The nb_cfg `key` waits for, or None."""
        with self._lock:
            p = self._pending.get(key)
        return p[0] if p else None

    def forget(self, key: str) -> None:
        with self._lock:
            self._pending.pop(key, None)
            self._versions.pop(key, None)

    def check(self, queued: str) -> None:
        key = queued[len(PREFIX):]
        with self._lock:
            pending = self._pending.get(key)
        if pending is None:
            return
        target, t0, tag = pending
        c = barrier.counters(self.feature.ctl.nb)
        waited = time.monotonic() - t0
        if c is not None and c.hv_cfg >= target:
            with self._lock:
                if self._pending.get(key) is pending:
                    del self._pending[key]
            self.report(key, True, f"every chassis applied it (NB change {target}, "
                        f"{waited:.2f} s after the write)", tag)
            return
        if waited > PATIENCE:
            self.report(key, False, (
                f"not every chassis applied NB change {target} after {waited:.0f} s (hv_cfg "
                f"{c.hv_cfg if c else '?'}): an ovn-controller down or behind; `pacific "
                "diagnose` names it"), tag)
            self.feature.queue.add_after(queued, LATE_EVERY)
            return
        self.feature.queue.add_after(queued, CHECK_EVERY)
