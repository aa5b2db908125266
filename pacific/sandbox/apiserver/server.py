"""The emulator process: listening sockets (optionally in other network
namespaces, optionally TLS), state file persistence, CRD preloading, signals.

`ApiServer` is usable in-process (tests, benchmarks); `main()` is the
`pacific sandbox apiserver` command.
"""
import glob
import json
import logging
import os
import signal
import socketserver
import ssl
import threading
from http.server import ThreadingHTTPServer

import yaml

from pacific.sandbox.apiserver import errors
from pacific.sandbox.apiserver.handler import Handler
from pacific.sandbox.apiserver.netns import listen_socket
from pacific.sandbox.apiserver.resources import CRD_KEY
from pacific.sandbox.apiserver.store import Store

log = logging.getLogger(__name__)


def parse_listen(spec: str) -> tuple[str, int, str | None]:
    """'HOST:PORT[@NETNS]' -> (host, port, netns)."""
    addr, _, netns = spec.partition("@")
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bad listen address {spec!r}: expected HOST:PORT[@NETNS]")
    return host.strip("[]"), int(port), netns or None


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 512

    def handle_error(self, request, client_address):
        log.debug("connection from %s ended with an error", client_address, exc_info=True)


class ApiServer:
    """Kubernetes API emulator: one Store served on one or more sockets."""

    def __init__(self, listens: list[str], token: str | None = None, state_file: str | None = None,
                 tls: tuple[str, str] | None = None, history: int = 10000,
                 bookmark_interval: float = 5.0, save_interval: float = 2.0):
        self.store = Store(history=history)
        self.token = token
        self.state_file = state_file
        self.save_interval = save_interval
        self.bookmark_interval = bookmark_interval
        self.listens = [parse_listen(s) for s in listens]
        self.ssl_context = None
        if tls:
            self.ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ssl_context.load_cert_chain(tls[0], tls[1])
        self.servers: list[_HTTPServer] = []
        self.addresses: list[dict] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._save_lock = threading.Lock()

    # ------------------------------------------------------------ state
    def load_state(self) -> None:
        if self.state_file and os.path.exists(self.state_file):
            try:
                with open(self.state_file) as f:
                    state = json.load(f)
            except (OSError, ValueError) as e:
                raise RuntimeError(f"cannot read state file {self.state_file}: {e}") from None
            n = self.store.load(state)
            log.info("loaded %d objects from %s at resourceVersion %d", n, self.state_file, self.store.rv)
        self.store.ensure_default_namespaces()

    def save_state(self) -> None:
        if not self.state_file:
            return
        with self._save_lock:
            snap = self.store.snapshot()      # clears store.dirty
            tmp = f"{self.state_file}.tmp.{os.getpid()}"
            try:
                with open(tmp, "w") as f:
                    json.dump(snap, f, separators=(",", ":"))
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.state_file)
            except BaseException:
                with self.store.lock:         # not saved: the saver tries again
                    self.store.dirty = True
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            log.debug("saved %d objects to %s", len(snap["objects"]), self.state_file)

    def _saver(self) -> None:
        while not self._stop.wait(self.save_interval):
            if self.store.dirty:
                try:
                    self.save_state()
                except OSError as e:
                    log.error("cannot save state to %s: %s", self.state_file, e)

    def load_crds(self, directory: str) -> int:
        """Create (or update) every CustomResourceDefinition found in directory's YAML/JSON files."""
        rt = self.store.registry.by_key(CRD_KEY)
        n = 0
        files = sorted(glob.glob(os.path.join(directory, "*.yaml")) + glob.glob(os.path.join(directory, "*.yml"))
                       + glob.glob(os.path.join(directory, "*.json")))
        for path in files:
            with open(path) as f:
                try:
                    docs = list(yaml.safe_load_all(f))
                except yaml.YAMLError as e:
                    raise RuntimeError(f"{path}: not valid YAML: {e}") from None
            for doc in docs:
                if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                name = doc.get("metadata", {}).get("name", "")
                try:
                    with self.store.lock:
                        if ("", name) in self.store.objects[CRD_KEY]:
                            cur = self.store.objects[CRD_KEY][("", name)].obj
                            if cur["spec"] != doc.get("spec"):
                                doc["metadata"].pop("resourceVersion", None)
                                self.store.update(rt, "", name, doc)
                        else:
                            self.store.create(rt, "", doc)
                except errors.ApiError as e:
                    raise RuntimeError(f"{path}: CRD {name!r} rejected: {e.message}") from None
                n += 1
                log.info("preloaded CRD %s from %s", name, path)
        return n

    # ------------------------------------------------------------ serving
    def start(self) -> None:
        """Open every socket (raises if one fails), then serve in background threads."""
        socks = []
        try:
            for host, port, netns in self.listens:
                socks.append((listen_socket(host, port, netns), netns))
        except OSError:
            for s, _ in socks:
                s.close()
            raise
        for sock, netns in socks:
            srv = _HTTPServer(sock.getsockname()[:2], Handler, bind_and_activate=False)
            srv.socket.close()
            srv.socket = sock
            srv.server_address = sock.getsockname()[:2]
            srv.store = self.store
            srv.token = self.token
            srv.ssl_context = self.ssl_context
            srv.bookmark_interval = self.bookmark_interval
            srv.stopping = False
            self.servers.append(srv)
            host, port = srv.server_address
            self.addresses.append({"host": host, "port": port, "netns": netns})
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2},
                                 name=f"apiserver-{host}:{port}", daemon=True)
            t.start()
            self._threads.append(t)
            log.info("serving the Kubernetes API on %s://%s:%d%s", "https" if self.ssl_context else "http",
                     host, port, f" in netns {netns}" if netns else "")
        if self.state_file:
            t = threading.Thread(target=self._saver, name="apiserver-saver", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        """Stop serving, end watch streams, save state."""
        self._stop.set()
        for srv in self.servers:
            srv.stopping = True
        with self.store.lock:
            for ws in self.store.watchers.values():
                for w in ws:
                    w.close()
        for srv in self.servers:
            srv.shutdown()
            srv.server_close()
        try:
            self.save_state()
        except OSError as e:
            log.error("cannot save state to %s: %s", self.state_file, e)

    def wait(self) -> None:
        """Block until SIGTERM/SIGINT, then stop (main thread only)."""
        done = threading.Event()

        def on_signal(signum, _frame):
            log.info("signal %d: stopping", signum)
            done.set()
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        while not done.wait(1.0):
            pass
        self.stop()


socketserver.TCPServer.allow_reuse_address = True
