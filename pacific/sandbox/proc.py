"""Process helpers for the sandbox: run setup commands, start and stop daemons.

Daemons are identified by pid *and* start time (field 22 of /proc/<pid>/stat), so a
pid recorded by a crashed run is never confused with an unrelated process that
later reused the number.  A zombie counts as dead: detached daemons are re-parented
to PID 1, which may reap them late, and `kill -0` keeps succeeding on zombies.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from typing import Callable, Mapping, Sequence

log = logging.getLogger(__name__)


class SandboxError(RuntimeError):
    """A sandbox operation failed; the message names what and why."""


def netns_argv(netns: str | None, argv: Sequence[str]) -> list[str]:
    """argv that runs inside `netns`.  `ip netns exec` execs the command, so the
    pid of the resulting process is the command's own pid (no wrapper left)."""
    argv = [str(a) for a in argv]
    return ["ip", "netns", "exec", netns, *argv] if netns else argv


def run(argv: Sequence[str], netns: str | None = None, check: bool = True,
        env: Mapping[str, str] | None = None, timeout: float = 60,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Run a one-shot setup command; raise SandboxError with its stderr on failure."""
    full = netns_argv(netns, argv)
    penv = None
    if env:
        penv = dict(os.environ)
        penv.update(env)
    try:
        cp = subprocess.run(full, capture_output=True, text=True, env=penv,
                            timeout=timeout, input=input,
                            stdin=None if input is not None else subprocess.DEVNULL)
    except FileNotFoundError as e:
        raise SandboxError(f"command not found: {full[0]} (is it installed?)") from e
    except subprocess.TimeoutExpired as e:
        raise SandboxError(f"timed out after {timeout}s: {' '.join(full)}") from e
    if check and cp.returncode != 0:
        where = f" in netns {netns}" if netns else ""
        raise SandboxError(f"command failed{where} (exit {cp.returncode}): "
                           f"{' '.join(str(a) for a in argv)}: {cp.stderr.strip()}")
    return cp


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces and parentheses: split after the last ')'
    return data[data.rfind(")") + 2:].split()


def start_time(pid: int) -> int | None:
    """Kernel start time of `pid` in clock ticks, or None if it does not exist."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def alive(pid: int, started: int | None = None) -> bool:
    """True if `pid` runs (not a zombie) and, when given, started at `started`."""
    fields = _stat(pid)
    if not fields or fields[0] in ("Z", "X"):
        return False
    return started is None or int(fields[19]) == started


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: PID 1 reaps it


def stop_pid(pid: int, started: int | None = None, what: str = "",
             timeout: float = 3.0) -> bool:
    """SIGTERM `pid`, wait up to `timeout`, then SIGKILL.  Returns True if it was
    running.  Only touches the process if its start time still matches."""
    if not alive(pid, started):
        _reap(pid)
        return False
    name = what or str(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not alive(pid, started):
            log.debug("stopped %s (pid %d)", name, pid)
            return True
        time.sleep(0.02)
    log.warning("%s (pid %d) ignored SIGTERM for %.1fs, sending SIGKILL", name, pid, timeout)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    # a killed process is gone once the kernel has released what it held: an
    # ovs-vswitchd with hundreds of ports takes seconds to give their devices back
    deadline = time.monotonic() + 30
    while alive(pid, started) and time.monotonic() < deadline:
        _reap(pid)
        time.sleep(0.02)
    if alive(pid, started):
        raise SandboxError(f"{name} (pid {pid}) survived SIGKILL")
    return True


def tail(path: str, size: int, missing: str = "") -> str:
    """The last `size` bytes of a log file as text (`missing` if unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode(errors="replace")
    except OSError:
        return missing


def read_pidfile(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0) or None
    except (FileNotFoundError, ValueError):
        return None


def wait_for(predicate: Callable[[], object], timeout: float, what: str,
             interval: float = 0.02) -> object:
    """Poll `predicate` until it returns a truthy value; raise SandboxError naming
    `what` on timeout.  Exceptions from the predicate count as "not yet"; the last
    one is included in the error."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 - reported on timeout
            last_exc = e
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_exc})" if last_exc else ""
            raise SandboxError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)
