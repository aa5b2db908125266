"""Health and Prometheus endpoints of the Pacific daemons (one HTTP listener).

    from pacific.metrics import MetricsServer, parse_address
    srv = MetricsServer(parse_address("127.0.0.1:9476"), liveness=alive, readiness=ready)
    srv.start()          # one daemon thread; raises MetricsError if it cannot bind
    ...
    srv.stop()

Paths:
- ``/metrics``: every collector of the registry (default: prometheus_client's
  REGISTRY, which also has process_* and python_* metrics) in the Prometheus
  text format; OpenMetrics, gzip and ``?name[]=`` filters as prometheus_client
  serves them.
- ``/healthz``: liveness, the ``liveness()`` callable; ``/readyz``: readiness,
  the ``readiness()`` callable.  Each returns ``(ok, message)``; the answer is
  200 ``ok: <message>`` or 503 ``<message>`` as text/plain (a callable that
  raises answers 503 naming the exception), so ``curl`` and kubelet probes
  read the same thing.

Connections are bounded: at most ``max_connections`` (MAX_CONNECTIONS) are
served at once, one thread each; a connection beyond that is answered 503 at
once (best effort, without waiting for its request) and closed, so a flood of
connections costs no threads.  A connection is closed after
``connection_deadline`` (CONNECTION_DEADLINE) seconds whatever it does (a
client that trickles its request or never reads the answer holds its thread
no longer), and each read or write waits at most ``_Handler.timeout``.  The
node's host firewall also keeps pods from these ports (pacific/node/firewall.py).

The metric objects themselves live with their component
(``pacific/controller/metrics.py``, ``pacific/node/metrics.py``).  ``scrape()``
reads an endpoint back into a dict (tests, benchmarks).
"""
from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer
from typing import Callable
from urllib.parse import urlparse

from prometheus_client import REGISTRY, disable_created_metrics
from prometheus_client.exposition import MetricsHandler
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)

# no "<name>_created" series beside every counter and histogram: they double
# the output and no Pacific dashboard needs a series' creation time
disable_created_metrics()

Check = Callable[[], "tuple[bool, str]"]
MAX_CONNECTIONS = 16          # connections served at once (one thread each)
CONNECTION_DEADLINE = 30.0    # seconds a connection may last, whatever it does
_BUSY_BODY = b"too many connections to this endpoint now; try again\n"
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
         b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(_BUSY_BODY)) + _BUSY_BODY
PATH_METRICS, PATH_HEALTHZ, PATH_READYZ = "/metrics", "/healthz", "/readyz"


class MetricsError(RuntimeError):
    """The metrics address is invalid or cannot be served; the message says which."""


def parse_address(text: str | None) -> tuple[str, int] | None:
    """"HOST:PORT", "[v6]:PORT" or ":PORT" (all addresses) -> (host, port);
    "" or None -> None (endpoints off).  Port 0 picks a free port."""
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise MetricsError(f"metrics address {text!r} is not HOST:PORT (e.g. 127.0.0.1:9476, "
                           "[::1]:9476, :9476 for every address)")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host, int(port)


def _family(host: str, port: int) -> socket.AddressFamily:
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise MetricsError(f"metrics address {host}:{port}: {e}") from None
    return infos[0][0]


class _Handler(MetricsHandler):
    timeout = 10          # seconds for a client to send its request
    server: "_Server"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        path = urlparse(self.path).path
        if path == PATH_METRICS:
            return super().do_GET()
        if path in (PATH_HEALTHZ, PATH_READYZ):
            check = self.server.liveness if path == PATH_HEALTHZ else self.server.readiness
            try:
                ok, msg = check()
            except Exception as e:  # noqa: BLE001 - a failing check is an answer
                log.exception("%s check failed", path)
                ok, msg = False, f"{path} check raised {type(e).__name__}: {e}"
            return self._text(200 if ok else 503, f"ok: {msg}" if ok else msg)
        if path == "/":
            return self._text(200, f"pacific endpoints: {PATH_METRICS} {PATH_HEALTHZ} "
                                   f"{PATH_READYZ}")
        self._text(404, f"no such path {path[:100]!r}; try {PATH_METRICS}, {PATH_HEALTHZ}, "
                        f"{PATH_READYZ}")

    def _text(self, status: int, text: str) -> None:
        data = (text.rstrip("\n") + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        log.debug("metrics http %s: " + fmt, self.address_string(), *args)


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer with a cap on its threads and a deadline per connection."""
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, addr, family, registry, liveness: Check, readiness: Check,
                 max_connections: int = MAX_CONNECTIONS,
                 connection_deadline: float = CONNECTION_DEADLINE):
        self.address_family = family
        self.liveness, self.readiness = liveness, readiness
        self.max_connections, self.connection_deadline = max_connections, connection_deadline
        self._slots = threading.BoundedSemaphore(max_connections)
        self._open: dict = {}           # socket -> monotonic deadline, while served
        self._open_lock = threading.Lock()
        self.refused = 0                # connections closed at once: no slot free
        super().__init__(addr, _Handler.factory(registry))

    @property
    def active(self) -> int:
        """Connections being served now (each holds a thread)."""
        with self._open_lock:
            return len(self._open)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            log.debug("metrics http: %d connections served already: %s refused",
                      self.max_connections, client_address)
            try:
                request.setblocking(False)
                request.send(_BUSY)        # fits a socket buffer; never waits
            except OSError:
                pass
            self.shutdown_request(request)
            return
        with self._open_lock:
            self._open[request] = time.monotonic() + self.connection_deadline
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request) -> None:
        with self._open_lock:
            if self._open.pop(request, None) is None:
                return
        self._slots.release()

    def service_actions(self) -> None:
        """Every poll of serve_forever: a connection past its deadline is shut
        down (its thread's next read or write fails, and the thread ends)."""
        now = time.monotonic()
        with self._open_lock:
            late = [s for s, deadline in self._open.items() if deadline <= now]
        for s in late:
            log.debug("metrics http: connection open for %g s: closed", self.connection_deadline)
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request, client_address):
        log.debug("metrics http: error serving %s", client_address, exc_info=True)


def _always_ok() -> tuple[bool, str]:
    return True, "alive"


class MetricsServer:
    """`/metrics`, `/healthz` and `/readyz` on `address` (host, port)."""

    def __init__(self, address: tuple[str, int], liveness: Check = _always_ok,
                 readiness: Check = _always_ok, registry=REGISTRY,
                 max_connections: int = MAX_CONNECTIONS,
                 connection_deadline: float = CONNECTION_DEADLINE):
        if max_connections < 1 or connection_deadline <= 0:
            raise MetricsError("max_connections must be >= 1 and connection_deadline > 0")
        self.max_connections, self.connection_deadline = max_connections, connection_deadline
        self.requested = address
        self.liveness, self.readiness, self.registry = liveness, readiness, registry
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._retry: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port): the real port when 0 was asked for."""
        if self._server is None:
            return self.requested
        return self._server.server_address[:2]

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    def start(self, retry_interval: float | None = None) -> "MetricsServer":
        """Bind and serve.  A bind failure (port taken) raises MetricsError, or
        with `retry_interval` is logged and retried in the background every
        that many seconds (as kube-proxy does): the daemon's real work does not
        stop for its metrics port, and its probes fail meanwhile, which shows."""
        if self._server is not None:
            return self
        self._stopping.clear()
        try:
            self._bind()
        except MetricsError as e:
            if retry_interval is None:
                raise
            log.error("%s; retrying every %g s", e, retry_interval)
            self._retry = threading.Thread(target=self._retry_loop, args=(retry_interval,),
                                           name="metrics-bind", daemon=True)
            self._retry.start()
        return self

    def _bind(self) -> None:
        host, port = self.requested
        family = _family(host, port)
        try:
            server = _Server((host, port), family, self.registry, self.liveness, self.readiness,
                             self.max_connections, self.connection_deadline)
        except OSError as e:
            raise MetricsError(f"cannot serve metrics on {host or '*'}:{port}: {e.strerror or e}"
                               " (another daemon on that port? pick one with "
                               "--metrics-address, or '' to turn the endpoints off)") from None
        with self._lock:
            if self._stopping.is_set():
                server.server_close()
                return
            self._server = server
            self._thread = threading.Thread(target=server.serve_forever,
                                            kwargs={"poll_interval": 0.2}, name="metrics-http",
                                            daemon=True)
            self._thread.start()
        log.info("serving %s, %s and %s on %s", PATH_METRICS, PATH_HEALTHZ, PATH_READYZ, self.url)

    def _retry_loop(self, interval: float) -> None:
        while not self._stopping.wait(interval):
            try:
                self._bind()
                return
            except MetricsError as e:
                log.debug("%s", e)

    @property
    def serving(self) -> bool:
        return self._server is not None

    @property
    def active(self) -> int:
        """Connections being served now (at most max_connections)."""
        server = self._server
        return server.active if server is not None else 0

    @property
    def refused(self) -> int:
        """Connections closed at once because max_connections were being served."""
        server = self._server
        return server.refused if server is not None else 0

    def stop(self) -> None:
        self._stopping.set()
        if self._retry is not None:
            self._retry.join(5)
            self._retry = None
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(5)
        log.info("metrics endpoints on %s:%s stopped", *server.server_address[:2])


# -- reading endpoints back (tests, benchmarks, debugging) --------------------------
Samples = dict  # {(sample name, frozenset of (label, value))): value}


def parse_metrics(text: str) -> Samples:
    """Prometheus text -> {(name, frozenset(labels.items())): value}."""
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(samples: Samples, name: str, default: float = 0.0, **labels: str) -> float:
    """The sample `name` with exactly `labels` (default if absent)."""
    return samples.get((name, frozenset(labels.items())), default)


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of every `name` sample whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= lab)


# never through an http_proxy from the environment: endpoints are local
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(HTTP status, body) of a GET; a 4xx/5xx is an answer, not an exception."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.read().decode()


def scrape(base_url: str, timeout: float = 5.0) -> Samples:
    status, body = get(base_url.rstrip("/") + PATH_METRICS, timeout)
    if status != 200:
        raise MetricsError(f"{base_url}{PATH_METRICS} answered {status}: {body[:200]}")
    return parse_metrics(body)
