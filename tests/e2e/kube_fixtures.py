"""Fixtures for the pacific.kube tests: the API emulator as a real process on
127.0.0.1, and a TCP proxy that can cut connections (to simulate network loss)."""

from __future__ import annotations

import socket
import tempfile
import threading

import kubernetes.client

from apiserver_fixtures import TOKEN, Emulator


class ApiServerProcess(Emulator):
    """The emulator over plain HTTP with a small watch window (so a test can force
    410 Gone) in its own temporary directory."""

    TOKEN = TOKEN
    HISTORY = 200

    def __init__(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="pacific-kube-test-")
        try:
            super().__init__(self._tmp.name, history=self.HISTORY, tls=False)
        except Exception:
            self._tmp.cleanup()
            raise

    def stop(self) -> None:
        super().stop()
        self._tmp.cleanup()

    def logs(self) -> str:
        return self.log_text()[-4000:]


def api_client(url: str, token: str | None = ApiServerProcess.TOKEN) -> kubernetes.client.ApiClient:
    conf = kubernetes.client.Configuration()
    conf.host = url
    conf.retries = 0
    if token:
        conf.api_key = {"BearerToken": token}
        conf.api_key_prefix = {"BearerToken": "Bearer"}
    return kubernetes.client.ApiClient(conf)


class CuttableProxy:
    """Loopback TCP proxy for network faults: cut() drops every connection and
    refuses new ones until restore(), as a partition would; stall() keeps every
    connection open but forwards nothing more (new ones go nowhere), as a
    black-holed network or a wedged server would."""

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
        self.stalled = threading.Event()
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
            if self.stalled.is_set():
                with self._lock:
                    self._conns.append(c)   # held open, never answered
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

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                if self.stalled.is_set():
                    continue            # swallowed: the peer waits for an answer
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

    def stall(self) -> None:
        self.stalled.set()

    def restore(self) -> None:
        self._open = True
        self.stalled.clear()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self.sock.close()
