"""One Open vSwitch daemon of the node, detached: it outlives pacific-vswitch.

    d = Daemon("ovs-vswitchd", program, args, run_dir, log_dir, env)
    d.pid()               # the running one's (pidfile), None if none runs
    d.version()           # what the running one says it is ("ovs-vswitchd (Open vSwitch) 4.0.0")
    d.start()             # --detach --monitor: returns once it is up
    d.stop()              # `exit`, then signals

Started with OVS's own `--monitor`, a crashed daemon is restarted by its monitor
process even while no pacific-vswitch runs (an upgrade's gap); both processes
leave the pod's cgroups (cgroups.escape) so stopping the pod leaves them.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import time

from pacific.vswitch import cgroups

LOG = logging.getLogger(__name__)


def _stat(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name: [state, ppid, ...]; [] if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):     # gone, even while being read (ESRCH)
        return []


def alive(pid: int | None) -> bool:
    st = _stat(pid) if pid else []
    return bool(st) and st[0] not in ("Z", "X")


def parent(pid: int) -> int | None:
    st = _stat(pid)
    return int(st[1]) if len(st) > 1 else None


class Daemon:
    def __init__(self, name: str, program: str, args: list[str], run_dir: str, log_dir: str,
                 env: dict[str, str], appctl: str, ctl: str | None = None,
                 host_cgroup: str = cgroups.HOST_CGROUP):
        self.name, self.program, self.args, self.env = name, program, args, env
        self.pidfile = os.path.join(run_dir, f"{name}.pid")
        self.log = os.path.join(log_dir, f"{name}.log")
        self.run_dir = run_dir
        self._ctl, self._appctl = ctl, appctl
        self.host_cgroup = host_cgroup
        self.outlives_pod = True         # False: it stops with this pod (escape failed)

    def pid(self) -> int | None:
        try:
            with open(self.pidfile) as f:
                pid = int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return None
        return pid if alive(pid) else None

    def ctl(self) -> str | None:
        """Its unixctl socket (ovn-controller's is named after its pid)."""
        if self._ctl:
            return self._ctl
        pid = self.pid()
        return os.path.join(self.run_dir, f"{self.name}.{pid}.ctl") if pid else None

    def appctl(self, *argv: str, timeout: float = 5) -> subprocess.CompletedProcess:
        ctl = self.ctl()
        if ctl is None:
            return subprocess.CompletedProcess([], 1, "", f"{self.name} is not running")
        return subprocess.run([self._appctl, "-t", ctl, f"--timeout={int(timeout)}", *argv],
                              env=self.env, capture_output=True, text=True, timeout=timeout + 5)

    def version(self) -> str:
        """The running daemon's version line ("" if it does not answer)."""
        p = self.appctl("version", timeout=2)
        return p.stdout.splitlines()[0].strip() if p.returncode == 0 and p.stdout else ""

    def own_version(self) -> str:
        p = subprocess.run([self.program, "--version"], capture_output=True, text=True,
                           env=self.env)
        return p.stdout.splitlines()[0].strip() if p.stdout else ""

    def start(self, timeout: float = 60) -> int:
        argv = [self.program, "--detach", "--monitor", "--no-chdir", "-vconsole:off",
                "-vsyslog:off", f"--pidfile={self.pidfile}", f"--log-file={self.log}",
                *([f"--unixctl={self._ctl}"] if self._ctl else []), *self.args]
        p = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        pid = self.pid()
        if p.returncode != 0 or pid is None:
            raise RuntimeError(f"{self.name} did not start ({(p.stderr or '').strip()[-300:]}); "
                               f"see {self.log}")
        monitor = parent(pid)
        self.outlives_pod = cgroups.escape([x for x in (monitor, pid) if x and x != 1],
                                           self.host_cgroup)
        LOG.info("%s started (pid %d, monitor %s)", self.name, pid, monitor)
        return pid

    def stop(self, *exit_args: str, timeout: float = 10) -> None:
        """`exit` (with `exit_args`; its monitor then ends too: it restarts only
        a crash), then SIGKILL to both."""
        pid = self.pid()
        if pid is None:
            return
        monitor = parent(pid)
        monitor = monitor if monitor and monitor != 1 and alive(monitor) else None
        self.appctl("exit", *exit_args, timeout=timeout)
        deadline = time.monotonic() + timeout
        while (alive(pid) or alive(monitor)) and time.monotonic() < deadline:
            time.sleep(0.01)
        for p in (monitor, pid):
            if alive(p):
                LOG.warning("%s (pid %d) did not exit when asked: killing it", self.name, p)
                os.kill(p, signal.SIGKILL)
        LOG.info("%s stopped (pid %d)", self.name, pid)
