"""Node readiness for CNI STATUS: OVS reachable and ovn-controller connected."""
from __future__ import annotations

import glob
import logging
import os
import subprocess

from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError

log = logging.getLogger(__name__)


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

    def check(self) -> None:
        """Raise CniError(50) naming what is not ready."""
        if not self.ovs.is_connected():
            raise CniError(proto.ERR_NOT_AVAILABLE, f"OVS database {self.ovs.remote} is "
                           "not reachable")
        ctl = self.ctl or find_controller_ctl(self.ovn_rundir)
        if ctl is None:
            raise CniError(proto.ERR_NOT_AVAILABLE, "ovn-controller is not running (no "
                           f"ovn-controller.*.ctl in {self.ovn_rundir})")
        try:
            p = subprocess.run(["ovn-appctl", "-t", ctl, "connection-status"],
                               capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CniError(proto.ERR_NOT_AVAILABLE, f"ovn-controller at {ctl} does not "
                           f"answer: {e}") from None
        state = p.stdout.strip() or p.stderr.strip()
        if p.returncode != 0 or state != "connected":
            raise CniError(proto.ERR_NOT_AVAILABLE, "ovn-controller is not connected to "
                           f"the OVN southbound database ({state or 'no answer'})")
