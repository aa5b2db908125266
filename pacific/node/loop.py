"""The one shape of pacific-node's background parts (management port, egress
gateway port, host firewall, egress SNAT, health report; each a node feature,
pacific.node.feature.NodeFeature, built on this): a thread that calls
`converge()`

- once at start,
- at once after every `kick()` (events of the informers a feature wakes on,
  SB changes, and a feature whose output it reads kick),
- every `repair` seconds when nothing kicks (None: only when kicked), to put
  back what someone changed by hand,
- sooner, once, when a pass asked with `again_in(s)` (it waits on time, not
  on an event),
- after a failed pass, again after a back-off that doubles from 0.5 s to 10 s
  (never longer than `repair`) and starts over after a pass that worked; a
  kick retries at once (what changed may be what it waited for), as it would
  start a pass after one that worked.

    class Firewall(NodeFeature):              # a Loop with declarations
        name, repair = "host-firewall", 5.0
        expected = (OSError, FirewallError)    # logged without a traceback
        def converge(self): ...

Kicks that arrive while a pass runs make one more pass, not one each.
"""
from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)
BACKOFF_MIN, BACKOFF_MAX = 0.5, 10.0


class Loop:
    name = "loop"                      # the thread's name, and the logs'
    repair: float | None = None        # s between passes when nothing kicks
    expected: tuple[type[BaseException], ...] = ()   # failures that need no traceback

    def __init__(self) -> None:
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._soon: float | None = None

    def converge(self) -> None:
        raise NotImplementedError

    def failed(self, error: Exception) -> None:
        """After a failed pass (before the back-off)."""

    def kick(self, *_args) -> None:
        self._wake.set()

    def again_in(self, seconds: float) -> None:
        """From converge(): the next pass at the latest `seconds` after this one."""
        self._soon = seconds if self._soon is None else min(self._soon, seconds)

    def start(self):
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        backoff = BACKOFF_MIN
        while not self._stop.is_set():
            self._wake.clear()
            wait = self.repair
            try:
                self.converge()
                backoff = BACKOFF_MIN
            except Exception as e:  # noqa: BLE001 - retried; a bug must not end the thread
                log.warning("%s not converged (retrying in %.1f s): %s", self.name, backoff,
                            e, exc_info=not isinstance(e, self.expected))
                self.failed(e)
                wait = backoff if wait is None else min(backoff, wait)
                backoff = min(backoff * 2, BACKOFF_MAX)
            soon, self._soon = self._soon, None
            if soon is not None:
                wait = soon if wait is None else min(wait, soon)
            self._wake.wait(wait)

