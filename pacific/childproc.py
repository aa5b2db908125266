"""Child daemons of a Pacific supervisor (pacific-central, pacific-vswitch):
they die with it, and are stopped politely, then firmly."""
from __future__ import annotations

import ctypes
import signal
import subprocess

PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when its supervisor dies, however it
    dies (no daemon outlives it holding ports, files or sockets)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def terminate(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM a child, SIGKILL it if it has not exited within `timeout`."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
