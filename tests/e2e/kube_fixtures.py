"""Fixtures for the pacific.kube tests: the API emulator as a real process on
127.0.0.1, and a TCP proxy that can cut connections (to simulate network loss)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import kubernetes.client

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"API emulator exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


class ApiServerProcess:
    """`python -m pacific.sandbox.apiserver` on a free loopback port."""

    TOKEN = "pacific-kube-test-token"
    HISTORY = 200       # small watch window, so a test can force 410 Gone

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.TemporaryDirectory(prefix="pacific-kube-test-")
        self.kubeconfig = os.path.join(self.dir.name, "kubeconfig")
        self.log = open(os.path.join(self.dir.name, "apiserver.log"), "wb")
        argv = [sys.executable, "-m", "pacific.sandbox.apiserver",
                "--listen", f"127.0.0.1:{self.port}", "--token", self.TOKEN,
                "--kubeconfig", self.kubeconfig, "--bookmark-interval", "1",
                "--history", str(self.HISTORY)]
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            wait_port(self.port, 20, self.proc)
            deadline = time.monotonic() + 10
            while not (os.path.exists(self.kubeconfig) and os.path.getsize(self.kubeconfig)) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
        except Exception:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.log.close()
        self.dir.cleanup()

    def logs(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-4000:]


def api_client(url: str, token: str | None = ApiServerProcess.TOKEN) -> kubernetes.client.ApiClient:
    conf = kubernetes.client.Configuration()
    conf.host = url
    conf.retries = 0
    if token:
        conf.api_key = {"BearerToken": token}
        conf.api_key_prefix = {"BearerToken": "Bearer"}
    return kubernetes.client.ApiClient(conf)


class CuttableProxy:
    """Loopback TCP proxy; cut() drops every connection and refuses new ones
    until restore(), as a network partition would."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = upstream_port
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._open = True
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if not self._open:
                c.close()
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.upstream), timeout=2)
            except OSError:
                c.close()
                continue
            with self._lock:
                self._conns += [c, u]
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()
            threading.Thread(target=self._pump, args=(u, c), daemon=True).start()

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self._open = False
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        self._open = True

    def close(self) -> None:
        self._closed = True
        self.cut()
        self.sock.close()
