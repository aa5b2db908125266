"""How long a change to NB takes to reach ovn-northd and every chassis.

The leader, every `--lag-probe-interval` seconds, bumps NB_Global.nb_cfg (as
`ovn-nbctl --wait=hv sync` does) and times, from its own NB replica, until
ovn-northd has carried it to SB (NB_Global.sb_cfg) and every ovn-controller
has applied it (NB_Global.hv_cfg, the minimum over the chassis):

    pacific_ovn_nb_to_sb_seconds        histogram
    pacific_ovn_nb_to_chassis_seconds   histogram
    pacific_ovn_lag_probe_timeouts      counter (labels: stage = northd | chassis):
                                        not caught up within the timeout, e.g. a
                                        chassis whose ovn-controller is gone

One small NB write per interval; reading the replica costs nothing.
"""
from __future__ import annotations

import logging
import threading
import time

from prometheus_client import Counter, Histogram

from pacific.ovn import barrier

LOG = logging.getLogger(__name__)
_BUCKETS = (.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60)
NB_TO_SB = Histogram("pacific_ovn_nb_to_sb_seconds",
                     "Time until ovn-northd carried an NB change to SB (NB_Global.sb_cfg)",
                     buckets=_BUCKETS)
NB_TO_CHASSIS = Histogram("pacific_ovn_nb_to_chassis_seconds",
                          "Time until every chassis applied an NB change (NB_Global.hv_cfg)",
                          buckets=_BUCKETS)
TIMEOUTS = Counter("pacific_ovn_lag_probe_timeouts",
                   "Lag probes not caught up within the timeout", ["stage"])
for _s in ("northd", "chassis"):
    TIMEOUTS.labels(_s)


class LagProbe:
    def __init__(self, nb, interval: float, timeout: float = 60.0, poll: float = 0.005):
        self.nb, self.interval, self.timeout, self.poll = nb, interval, timeout, poll

    def probe_once(self, stop: threading.Event) -> tuple[float | None, float | None]:
        """(seconds to SB, seconds to every chassis); None: not within the timeout."""
        t0 = time.perf_counter()
        target = barrier.bump(self.nb)
        if target is None:
            return None, None
        to_sb = None
        while not stop.is_set():
            now = time.perf_counter() - t0
            c = barrier.counters(self.nb)
            sb_cfg, hv_cfg = c.sb_cfg, c.hv_cfg
            if to_sb is None and sb_cfg >= target:
                to_sb = now
                NB_TO_SB.observe(now)
            if hv_cfg >= target:
                NB_TO_CHASSIS.observe(now)
                return to_sb, now
            if now > self.timeout:
                TIMEOUTS.labels("northd" if to_sb is None else "chassis").inc()
                LOG.warning("NB change %d has not reached %s within %.0f s", target,
                            "SB (is ovn-northd running?)" if to_sb is None
                            else "every chassis (an ovn-controller down or behind?)",
                            self.timeout)
                return to_sb, None
            time.sleep(self.poll)
        return to_sb, None

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            try:
                self.probe_once(stop)
            except Exception as exc:  # noqa: BLE001 - a probe must never stop the controller
                LOG.warning("lag probe failed: %s", exc)

    def start(self, stop: threading.Event) -> threading.Thread:
        t = threading.Thread(target=self.run, args=(stop,), name="lag-probe", daemon=True)
        t.start()
        return t
