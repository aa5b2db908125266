"""One daemon of pacific-vswitch: a child process, started again when it exits.

    d = Supervised("ovs-vswitchd", argv, ready=lambda: answers(ctl), on_ready=move_underlay)
    d.start()          # returns once `ready` holds (or raises)
    ...
    d.stop(lambda: appctl(ctl, "exit"))

The daemons run in the foreground (no --detach), as the pod's children, with
PR_SET_PDEATHSIG: a pacific-vswitch that dies takes them along rather than
leaving a datapath nobody supervises (decision 0049: a container's processes
die with it anyway).  A daemon that exits is started again after a back-off,
and `on_ready` runs after every start (a new ovs-vswitchd needs its underlay
address back).
"""
from __future__ import annotations

import logging
import subprocess
import threading
import time
from typing import Callable

from pacific.childproc import die_with_parent, terminate

LOG = logging.getLogger(__name__)
BACKOFF_MAX = 30.0
QUICK_EXIT = 10.0       # an exit sooner than this after a start doubles the back-off
POLL = 0.02


class NotReady(RuntimeError):
    pass


class Supervised:
    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None,
                 ready: Callable[[], bool] = lambda: True,
                 on_ready: Callable[[], None] = lambda: None, ready_timeout: float = 30.0):
        self.name, self.argv, self.env = name, argv, env
        self.ready, self.on_ready, self.ready_timeout = ready, on_ready, ready_timeout
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        p = self.proc
        return p.pid if p is not None and p.poll() is None else None

    def running(self) -> bool:
        return self.pid is not None

    def start(self) -> None:
        """Start it and wait until `ready`, run `on_ready`; then watch it."""
        self._launch()
        self._thread = threading.Thread(target=self._watch, name=f"vswitch-{self.name}",
                                        daemon=True)
        self._thread.start()

    def _launch(self) -> None:
        self.proc = proc = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                            preexec_fn=die_with_parent)
        deadline = time.monotonic() + self.ready_timeout
        while not self.ready():
            if proc.poll() is not None:
                raise NotReady(f"{self.name} exited with status {proc.returncode} "
                               "while starting (its log says why)")
            if time.monotonic() > deadline:
                raise NotReady(f"{self.name} (pid {proc.pid}) not ready within "
                               f"{self.ready_timeout:.0f} s")
            time.sleep(POLL)
        LOG.info("%s started (pid %d)", self.name, proc.pid)
        self.on_ready()

    def _watch(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            proc = self.proc
            started = time.monotonic()
            if proc is not None:
                rc = proc.wait()
                if self._stop.is_set():
                    return
                LOG.warning("%s (pid %d) exited with status %s: starting it again in %.0f s",
                            self.name, proc.pid, rc, backoff)
            if self._stop.wait(backoff):
                return
            quick = time.monotonic() - started < QUICK_EXIT + backoff
            backoff = min(BACKOFF_MAX, backoff * 2) if quick else 1.0
            self.restarts += 1
            try:
                self._launch()
            except Exception as exc:  # noqa: BLE001 - said, then retried
                LOG.error("%s: %s", self.name, exc)
                terminate(self.proc, 5)

    def stop(self, politely: Callable[[], None] | None = None, timeout: float = 10.0) -> None:
        """`politely` first (e.g. `ovs-appctl exit`), then SIGTERM, then SIGKILL."""
        self._stop.set()
        proc = self.proc
        if proc is not None and proc.poll() is None and politely is not None:
            try:
                politely()
                proc.wait(timeout)
            except Exception as exc:  # noqa: BLE001 - the signals follow
                LOG.warning("%s did not exit when asked (%s): terminating it", self.name, exc)
        terminate(proc, timeout)
        if self._thread is not None:
            self._thread.join(timeout)
        LOG.info("%s stopped", self.name)
