"""A real ovsdb-server in a temporary directory, for tests of pacific.ovn.

    from ovsdb_fixtures import OvsdbServer, NB_SCHEMA, VSWITCH_SCHEMA

    with OvsdbServer(tmp_path / "nb", NB_SCHEMA) as srv:
        api = NorthboundAPI(srv.remote)

or, as pytest fixtures (a server per test, and an ordinary client of it):

    from ovsdb_fixtures import nb, nbdb  # noqa: F401 (fixtures)

The server is a child process of the test (own --pidfile, --unixctl,
--log-file, -vconsole:off); stop() kills and reaps it, kill9() simulates a
crash, start() again reuses the same socket and database file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from pacific import ovsinstall

NB_SCHEMA = ovsinstall.from_env().schema("ovn-nb")     # of the installation conftest chose
SB_SCHEMA = ovsinstall.from_env().schema("ovn-sb")
VSWITCH_SCHEMA = ovsinstall.from_env().schema("vswitch")


class OvsdbServer:
    def __init__(self, workdir: Path, schema: str, extra_args: tuple = ()):
        self.extra_args = list(extra_args)     # e.g. --remote=pssl:... and its PKI
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.schema = schema
        self.db = self.dir / "db.db"
        self.sock = self.dir / "db.sock"
        self.ctl = self.dir / "db.ctl"
        self.pidfile = self.dir / "db.pid"
        self.log = self.dir / "db.log"
        self.proc: subprocess.Popen | None = None
        subprocess.run(["ovsdb-tool", "create", str(self.db), schema],
                       check=True, capture_output=True)

    @property
    def remote(self) -> str:
        return f"unix:{self.sock}"

    def start(self, timeout: float = 10.0) -> "OvsdbServer":
        assert self.proc is None, "already running"
        self.proc = subprocess.Popen(
            ["ovsdb-server", str(self.db), f"--remote=punix:{self.sock}",
             f"--pidfile={self.pidfile}", f"--unixctl={self.ctl}",
             f"--log-file={self.log}", "-vconsole:off", "-vfile:info", *self.extra_args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ovsdb-server exited {self.proc.returncode}"
                                   f", see {self.log}")
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(self.sock))
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"ovsdb-server not listening on {self.sock}")

    def kill9(self) -> None:
        """Crash the server (SIGKILL), leaving socket file and db behind."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
            self.proc = None

    def __enter__(self) -> "OvsdbServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def vsctl_init(srv: OvsdbServer) -> None:
    """Create the Open_vSwitch root row (what a node bootstrap does)."""
    subprocess.run(["ovs-vsctl", f"--db={srv.remote}", "--no-wait", "init"],
                   check=True, capture_output=True, env={**os.environ})


def sandbox_programs(sb) -> dict[str, str]:
    """Daemon tag ("central/northd", "node1/ovn-controller", ...) -> the program
    that process runs (/proc/<pid>/exe: links resolved), for every OVS/OVN daemon
    of sandbox `sb`."""
    return {tag: os.readlink(f"/proc/{d['pid']}/exe")
            for tag, d in sb.state.read()["daemons"].items() if d.get("kind") == "ovs"}


@pytest.fixture
def nbdb(tmp_path):
    """A real NB ovsdb-server for one test."""
    srv = OvsdbServer(tmp_path / "nb", NB_SCHEMA).start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def nb(nbdb):
    """An ordinary NorthboundAPI client of `nbdb` (every table, every column)."""
    from pacific.ovn import NorthboundAPI
    api = NorthboundAPI(nbdb.remote, timeout=10, created_by="test")
    try:
        yield api
    finally:
        api.close()


@contextlib.contextmanager
def controller_on_nb(tmp_path, make_controller, **cfg):
    """A controller of the fake API (`make_controller(**cfg)`, from
    tests/lib/controller_fakes.py) writing through the real NB writer to a
    real NB ovsdb-server of its own, its cluster router made; everything
    stopped on leaving."""
    from pacific.controller import cluster_router
    from pacific.controller.nbwriter import NBWriter
    from pacific.ovn import NorthboundAPI
    srv = OvsdbServer(tmp_path / "nb", NB_SCHEMA).start()
    api = writer = None
    try:
        api = NorthboundAPI(srv.remote, timeout=10, created_by="test")
        writer = NBWriter(api).start()
        c = make_controller(**cfg)
        c.nb, c.writer = api, writer
        cluster_router.ensure(c)
        yield c
    finally:
        if writer is not None:
            writer.stop()
        if api is not None:
            api.close()
        srv.stop()
