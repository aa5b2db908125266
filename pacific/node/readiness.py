"""Node readiness for CNI STATUS and /readyz: OVS reachable and ovn-controller
connected to the southbound database (asked over its control socket from
Python, not by forking ovn-appctl; answers are reused for CACHE_SECONDS, so a
burst of STATUS calls costs one round trip)."""
from __future__ import annotations

import glob
import logging
import os
import threading
import time

from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError
from pacific.node import unixctl

log = logging.getLogger(__name__)
CACHE_SECONDS = 1.0


def find_controller_ctl(ovn_rundir: str) -> str | None:
    """ovn-controller's unixctl socket in `ovn_rundir` (it has no --unixctl flag:
    the socket is ovn-controller.<pid>.ctl, the pid in ovn-controller.pid)."""
    try:
        with open(os.path.join(ovn_rundir, "ovn-controller.pid")) as f:
            pid = int(f.read().strip())
        path = os.path.join(ovn_rundir, f"ovn-controller.{pid}.ctl")
        if os.path.exists(path):
            return path
    except (OSError, ValueError):
        pass
    found = sorted(glob.glob(os.path.join(ovn_rundir, "ovn-controller.*.ctl")),
                   key=os.path.getmtime)
    return found[-1] if found else None


class Readiness:
    def __init__(self, ovs, ovn_rundir: str, ctl: str | None = None):
        self.ovs = ovs
        self.ovn_rundir = ovn_rundir
        self.ctl = ctl
        self._lock = threading.Lock()
        self._cached: tuple[float, str | None] = (0.0, None)   # (when, problem or None)

    def check(self) -> None:
        """Raise CniError(50) naming what is not ready."""
        if not self.ovs.is_connected():
            raise CniError(proto.ERR_NOT_AVAILABLE, f"OVS database {self.ovs.remote} is "
                           "not reachable")
        with self._lock:
            when, problem = self._cached
            if time.monotonic() - when > CACHE_SECONDS:
                problem = self._controller_problem()
                self._cached = (time.monotonic(), problem)
        if problem:
            raise CniError(proto.ERR_NOT_AVAILABLE, problem)

    def _controller_problem(self) -> str | None:
        ctl = self.ctl or find_controller_ctl(self.ovn_rundir)
        if ctl is None:
            return f"ovn-controller is not running (no ovn-controller.*.ctl in {self.ovn_rundir})"
        try:
            state = unixctl.call(ctl, "connection-status", timeout=5).strip()
        except unixctl.UnixctlError as e:
            return f"ovn-controller does not answer: {e}"
        if state != "connected":
            return ("ovn-controller is not connected to the OVN southbound database "
                    f"({state or 'no answer'})")
        return None
