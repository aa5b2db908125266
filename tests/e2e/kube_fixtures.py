"""Fixtures for the pacific.kube tests: a real control plane (etcd + kube-apiserver
v1.20.2) of the test's own on 127.0.0.1, and a TCP proxy that can cut connections
(to simulate network loss)."""

from __future__ import annotations

import socket
import tempfile
import threading

import kubernetes.client
import pytest

from pacific.sandbox.k8s import bins
from pacific.sandbox.k8s.controlplane import ControlPlane, ProcessSpawner

# configmaps are watched from etcd itself (no watch cache) and etcd is compacted
# every second: a watcher that missed what was compacted gets 410 Gone, as on a
# busy cluster after five minutes
COMPACTION_INTERVAL = 1.0
TEST_APISERVER_ARGS = ("--watch-cache-sizes=configmaps#0",
                       f"--etcd-compaction-interval={int(COMPACTION_INTERVAL)}s")


class ApiServerProcess:
    """etcd + kube-apiserver (+ kube-controller-manager if asked) in a temporary
    directory; `kubeconfig` is the admin's."""

    def __init__(self, controller_manager: bool = False, apiserver_args=TEST_APISERVER_ARGS,
                 nodes=()) -> None:
        if not bins.available():
            pytest.skip(f"Kubernetes binaries missing in {bins.bin_dir()} (run `make setup`)")
        self._tmp = tempfile.TemporaryDirectory(prefix="pacific-kube-test-")
        self.spawner = ProcessSpawner(f"{self._tmp.name}/logs")
        self.cp = ControlPlane(f"{self._tmp.name}/kube", self.spawner, nodes=nodes,
                               controller_manager=controller_manager, scheduler=False,
                               apiserver_args=apiserver_args)
        try:
            self.cp.start()
        except Exception:
            self.stop()
            raise
        self.kubeconfig = self.cp.admin_kubeconfig
        self.port = self.cp.ports["apiserver"]
        self.url = self.cp.url
        self.token = self.cp.tokens["admin"]
        self.ca = self.cp.pki.ca_crt

    def stop(self) -> None:
        self.spawner.stop_all()
        self._tmp.cleanup()

    def logs(self) -> str:
        with open(self.spawner.log_path("kube-apiserver"), errors="replace") as f:
            return f.read()[-4000:]


def api_client(url: str, token: str | None, ca: str | None = None) -> kubernetes.client.ApiClient:
    conf = kubernetes.client.Configuration()
    conf.host = url
    conf.retries = 0
    if ca:
        conf.ssl_ca_cert = ca
    else:
        conf.verify_ssl = False
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
        return f"https://127.0.0.1:{self.port}"   # TLS passes through

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
