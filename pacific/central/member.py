"""One database (NB or SB) of this member: its file, its ovsdb-server, kept
running and kept in the cluster.

    m = DbMember(spec, settings)
    m.start()          # a thread: prepare the file, run ovsdb-server, watch it
    m.status()         # the last cluster/status read (raft.Status) or None
    m.stop()

ovsdb-server runs in the foreground as this process's child (its stderr goes
to this process's log, so `kubectl logs` shows it).  When it exits it is
started again (1 s, then up to 30 s apart); when it exits at once saying its
file cannot be read, the file is moved aside and the member joins again from
its peers (dbfile.prepare).  Every second the thread reads `cluster/status`:
the cluster id is kept beside the file (dbfile's marker), and, while this
member leads, server ids that a re-joined member left behind are kicked
(raft.stale).
"""
from __future__ import annotations

import ctypes
import ipaddress
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

from pacific.central import dbfile, raft

LOG = logging.getLogger(__name__)
POLL = 1.0
BACKOFF_MAX = 30.0
QUICK_EXIT = 10.0        # an ovsdb-server that exits sooner than this did not start
FILE_ERRORS = ("ovsdb error", "I/O error", "syntax error")


@dataclass(frozen=True)
class DbSpec:
    db: str              # "nb" or "sb"
    name: str            # OVN_Northbound, OVN_Southbound
    schema: str
    client_port: int
    raft_port: int


@dataclass(frozen=True)
class Settings:
    address: str                 # this member's address
    members: tuple[str, ...]     # every member's address, this one's included
    db_dir: str
    run_dir: str
    proto: str                   # "ssl" or "tcp"
    ssl: tuple[str, str, str] | None = None      # key, certificate, CA
    ovsdb_server: str = "ovsdb-server"
    ovsdb_tool: str = "ovsdb-tool"
    ovsdb_client: str = "ovsdb-client"
    appctl: str = "ovs-appctl"

    @property
    def seed(self) -> bool:
        return min(self.members, key=address_key) == self.address

    def remote(self, address: str, port: int) -> str:
        return f"{self.proto}:{bracketed(address)}:{port}"

    def ssl_args(self) -> list[str]:
        if not self.ssl:
            return []
        key, crt, ca = self.ssl
        return [f"--private-key={key}", f"--certificate={crt}", f"--ca-cert={ca}"]


def bracketed(address: str) -> str:
    """An address as OVSDB's remotes spell it ([fd00::1] for IPv6)."""
    return f"[{address}]" if ":" in address else address


def address_key(address: str) -> tuple:
    """Addresses in numeric order (10.0.0.2 before 10.0.0.10); names after them."""
    try:
        ip = ipaddress.ip_address(address)
        return (ip.version, int(ip), "")
    except ValueError:
        return (99, 0, address)


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when pacific-central dies, however it
    dies (no ovsdb-server outlives it holding the member's ports and file)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG


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


class DbMember:
    def __init__(self, spec: DbSpec, cfg: Settings):
        self.spec, self.cfg = spec, cfg
        self.path = os.path.join(cfg.db_dir, f"{spec.db}.db")
        self.ctl = os.path.join(cfg.run_dir, f"{spec.db}.ctl")
        self.sock = os.path.join(cfg.run_dir, f"{spec.db}.sock")
        self._stop = threading.Event()
        self._proc: subprocess.Popen | None = None
        self._status: raft.Status | None = None
        self._status_at = 0.0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.restarts = 0

    # -- what others read --------------------------------------------------------------
    @property
    def answered_once(self) -> bool:
        return self._status_at > 0

    def status(self) -> tuple[raft.Status | None, float]:
        """The last cluster/status read and its age in seconds."""
        with self._lock:
            return self._status, time.monotonic() - self._status_at

    @property
    def local(self) -> str:
        return self.cfg.remote(self.cfg.address, self.spec.raft_port)

    @property
    def peers(self) -> list[str]:
        return [self.cfg.remote(a, self.spec.raft_port) for a in self.cfg.members
                if a != self.cfg.address]

    def _peer_in_cluster(self) -> bool:
        return any(dbfile.in_cluster(self.cfg.remote(a, self.spec.client_port), self.spec.name,
                                     self.cfg.ssl_args(), self.cfg.ovsdb_client)
                   for a in self.cfg.members if a != self.cfg.address)

    def _appctl(self, command: str, *args: str) -> subprocess.CompletedProcess:
        """`ovs-appctl -t <this database's control socket> COMMAND DATABASE ARGS...`."""
        return subprocess.run([self.cfg.appctl, "-t", self.ctl, command, self.spec.name, *args],
                              capture_output=True, text=True, timeout=10, check=False)

    # -- life cycle --------------------------------------------------------------------
    def start(self) -> None:
        os.makedirs(self.cfg.db_dir, exist_ok=True)
        os.makedirs(self.cfg.run_dir, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name=f"central-{self.spec.db}",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        terminate(self._proc, timeout)
        if self._thread is not None:
            self._thread.join(timeout)

    def leave(self, timeout: float = 15.0) -> str | None:
        """Leave the cluster for good (this node is no longer a central node):
        `cluster/leave`, wait until the others let it go, stop, and keep the
        file aside (`nb.db.left-<time>`) with no cluster id beside it, so a
        later return joins afresh.  Returns where the file went."""
        self._stop.set()          # (the server is not started again once it has left)
        self._appctl("cluster/leave")
        deadline = time.monotonic() + timeout
        status = ""
        while time.monotonic() < deadline:
            cp = self._appctl("cluster/status")
            status = raft.parse(cp.stdout).status if cp.returncode == 0 else "not answering"
            if status in ("left cluster", "not answering"):
                break
            time.sleep(0.2)
        else:
            LOG.warning("%s: still '%s' %.0f s after cluster/leave", self.spec.name, status,
                        timeout)
        self.stop()
        dest = dbfile.move_aside(self.path, "left") if os.path.exists(self.path) else None
        dbfile.forget_cid(self.path)
        LOG.info("%s: left the cluster (%s); database kept at %s", self.spec.name, status, dest)
        return dest

    def _run(self) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                plan = dbfile.prepare(self.path, self.spec.schema, self.spec.name, self.local,
                                      self.peers, self.cfg.seed, self._peer_in_cluster,
                                      self.cfg.ovsdb_tool)
                LOG.info("%s: %s", self.spec.name, plan.reason)
                started = time.monotonic()
                errors = self._serve()
            except Exception as exc:  # noqa: BLE001 - said, then retried
                LOG.error("%s: %s", self.spec.name, exc)
                started, errors = time.monotonic(), []
            if self._stop.is_set():
                return
            quick = time.monotonic() - started < QUICK_EXIT
            if quick and any(e in line for line in errors for e in FILE_ERRORS):
                dest = dbfile.move_aside(self.path)
                LOG.error("%s: ovsdb-server cannot open its database (%s): moved aside to %s",
                          self.spec.name, errors[-1], dest)
            self.restarts += 1
            backoff = min(BACKOFF_MAX, backoff * 2) if quick else 1.0
            LOG.warning("%s: ovsdb-server exited; starting it again in %.0f s",
                        self.spec.name, backoff)
            self._stop.wait(backoff)

    def _serve(self) -> list[str]:
        """Run ovsdb-server until it exits (or stop); its stderr lines."""
        cmd = [self.cfg.ovsdb_server, "--no-chdir", f"--unixctl={self.ctl}",
               f"--remote=punix:{self.sock}", self._listener(),
               *self.cfg.ssl_args(), "-vconsole:warn", "-vsyslog:off",
               f"--log-file={os.path.join(self.cfg.run_dir, self.spec.db + '.log')}", self.path]
        errors: list[str] = []
        self._proc = proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                             stderr=subprocess.PIPE, text=True,
                                             preexec_fn=die_with_parent)
        reader = threading.Thread(target=self._read_stderr, args=(proc, errors),
                                  name=f"central-{self.spec.db}-log", daemon=True)
        reader.start()
        LOG.info("%s: ovsdb-server started (pid %d), clients on %s, RAFT on %s",
                 self.spec.name, proc.pid, self._listener()[len("--remote="):], self.local)
        while proc.poll() is None and not self._stop.wait(POLL):
            self._housekeeping()
        proc.wait()
        reader.join(2)
        with self._lock:
            self._status = None
        return errors

    def _listener(self) -> str:
        """ovsdb-server's client listener: pssl:PORT:ADDR (or ptcp)."""
        return f"--remote=p{self.cfg.proto}:{self.spec.client_port}:" \
            f"{bracketed(self.cfg.address)}"

    def _read_stderr(self, proc: subprocess.Popen, errors: list[str]) -> None:
        for line in proc.stderr:
            line = line.rstrip()
            if line:
                errors.append(line)
                del errors[:-20]
                LOG.warning("%s: ovsdb-server: %s", self.spec.name, line)

    def _housekeeping(self) -> None:
        cp = self._appctl("cluster/status")
        if cp.returncode != 0:
            return
        st = raft.parse(cp.stdout)
        with self._lock:
            self._status, self._status_at = st, time.monotonic()
        if st.member and st.cluster_id:
            dbfile.write_cid_marker(self.path, st.cluster_id)
        for sid in raft.stale(st):
            kick = self._appctl("cluster/kick", sid)
            LOG.warning("%s: kicked server %s, left behind by a member that joined again "
                        "at its address: %s", self.spec.name, sid,
                        (kick.stdout or kick.stderr).strip())
