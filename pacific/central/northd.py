"""ovn-northd beside a member: one per central node, one of them active (its
lock in SB), the others waiting; restarted when it exits."""
from __future__ import annotations

import logging
import os
import subprocess
import threading

from pacific.central.member import DbSpec, Settings, die_with_parent, terminate

LOG = logging.getLogger(__name__)


class Northd:
    """ovn-northd on every member's NB and SB, restarted when it exits."""

    def __init__(self, cfg: Settings, dbs: list[DbSpec], program: str):
        self.dbs, self.program = dbs, program
        self.cmd = self._command(cfg)
        self._stop = threading.Event()
        self.proc: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._run, name="central-northd", daemon=True)

    def _command(self, cfg: Settings) -> list[str]:
        def remotes(spec):
            return ",".join(cfg.remote(a, spec.client_port) for a in cfg.members)
        return [self.program, "--no-chdir", f"--ovnnb-db={remotes(self.dbs[0])}",
                f"--ovnsb-db={remotes(self.dbs[1])}", *cfg.ssl_args(),
                f"--unixctl={os.path.join(cfg.run_dir, 'northd.ctl')}",
                "-vconsole:warn", "-vsyslog:off",
                f"--log-file={os.path.join(cfg.run_dir, 'northd.log')}"]

    def start(self) -> None:
        self._thread.start()

    def members_changed(self, cfg: Settings) -> None:
        """The members changed: ovn-northd restarted on the new list (its own
        member alone would not do: northd writes through the leader)."""
        self.cmd = self._command(cfg)
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()        # _run starts it again with self.cmd

    def _run(self) -> None:
        while not self._stop.is_set():
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL,
                                         preexec_fn=die_with_parent)
            LOG.info("ovn-northd started (pid %d)", self.proc.pid)
            rc = self.proc.wait()
            if self._stop.wait(1.0):
                return
            LOG.warning("ovn-northd exited (status %s): starting it again", rc)

    def stop(self) -> None:
        self._stop.set()
        terminate(self.proc)
        self._thread.join(5)
