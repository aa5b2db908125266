"""The node daemon's CNI server: HTTP+JSON on a root-only unix socket.

`POST /cni` carries one ADD/DEL/CHECK/GC request from the Python plugin
(see pacific.cni.plugin.build_request); `GET /status` answers the plugin's
STATUS.  Every answer is JSON: the result on HTTP 200, else a CNI error object
{"code", "msg", "details"} the plugin prints as is.  `POST /exec` is the
`pacific` shim's whole call (pacific/cni/shim.c, plugin.PATH_EXEC): the
Python plugin's own `run` executes it here, calling this server in-process.

Requests are served by one thread each; requests for the same container id are
serialized (a DEL racing its ADD waits for it), different containers run
concurrently.  The socket file is created mode 0600 (and its directory, if
the server creates it, mode 0700), so only root can connect.
"""
import http.server
import json
import logging
import os
import socket
import socketserver
import stat
import threading
import time
from typing import Protocol

from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError
from pacific.node import metrics
from pacific.node.cnirequest import MAX_BODY, CniRequest, parse_exec, parse_request, \
    request_from

log = logging.getLogger(__name__)
DISCARD_MAX = 64 << 20     # bytes of an oversized body read before answering 413


class Backend(Protocol):
    """What the server calls; pacific.node.cnihandler.CniHandler implements it."""

    def add(self, req: CniRequest) -> dict: ...
    def delete(self, req: CniRequest) -> None: ...
    def check(self, req: CniRequest) -> None: ...
    def gc(self, req: CniRequest) -> None: ...
    def status(self) -> None: ...


class KeyedLocks:
    """One lock per key, created on demand and dropped when nobody holds it."""

    def __init__(self):
        self._mu = threading.Lock()
        self._locks: dict[str, list] = {}  # key -> [lock, users]

    def acquire(self, key: str) -> None:
        with self._mu:
            entry = self._locks.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        entry[0].acquire()

    def release(self, key: str) -> None:
        with self._mu:
            entry = self._locks[key]
            entry[0].release()
            entry[1] -= 1
            if entry[1] == 0:
                del self._locks[key]

    def __len__(self):
        with self._mu:
            return len(self._locks)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: "_UnixHTTPServer"
    protocol_version = "HTTP/1.0"
    default_request_version = "HTTP/1.0"  # always answer with a status line
    timeout = 30  # seconds to send a whole request; slow or silent clients are dropped
    error_content_type = "application/json"

    def address_string(self):  # AF_UNIX peers have no address
        return "unix"

    def log_message(self, fmt, *args):
        log.debug("cni http: " + fmt, *args)

    def send_error(self, code, message=None, explain=None):
        # http.server's own errors (bad request line, headers, ...) as CNI JSON too
        self._reply(code, CniError(proto.ERR_PROTOCOL, f"HTTP {code}: {message or ''}",
                                   explain or "").to_dict())

    def _reply(self, http_status: int, body: dict | bytes, headers: dict | None = None) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(http_status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError as e:  # client went away; nothing else to do
            log.debug("cni http: cannot answer: %s", e)
        self.close_connection = True

    def do_GET(self):
        if self.path != proto.PATH_STATUS:
            return self._reply(404, CniError(proto.ERR_PROTOCOL,
                                             f"no such path {self.path[:100]!r}").to_dict())
        self._reply(*self.server.status())

    def do_POST(self):
        if self.path not in (proto.PATH_CNI, proto.PATH_EXEC):
            return self._reply(404, CniError(proto.ERR_PROTOCOL,
                                             f"no such path {self.path[:100]!r}").to_dict())
        length = self.headers.get("Content-Length")
        try:
            n = int(length)
        except (TypeError, ValueError):
            return self._reply(411, CniError(proto.ERR_PROTOCOL,
                                             "Content-Length header missing or invalid").to_dict())
        if n < 0 or n > MAX_BODY:
            self._discard(n)
            return self._reply(413, CniError(proto.ERR_PROTOCOL, f"request body of {n} bytes "
                                             f"(limit {MAX_BODY})").to_dict())
        try:
            raw = self.rfile.read(n)
        except OSError as e:
            log.debug("cni http: reading body failed: %s", e)
            self.close_connection = True
            return
        if len(raw) != n:
            return self._reply(400, CniError(proto.ERR_PROTOCOL, f"request body truncated: "
                                             f"{len(raw)} of {n} bytes").to_dict())
        if self.path == proto.PATH_EXEC:
            return self._reply(*self.server.execute(
                raw, self.headers.get(proto.EXEC_SOCKET_HEADER, "")))
        status, body = self.server.dispatch(raw)
        self._reply(status, body)

    def _discard(self, n: int) -> None:
        """Read (up to DISCARD_MAX bytes of) a body refused for its size, so the
        client, still sending, gets the answer rather than a reset connection."""
        left = min(n, DISCARD_MAX)
        try:
            while left > 0 and (chunk := self.rfile.read(min(left, 65536))):
                left -= len(chunk)
        except OSError:
            pass

    # Any other method gets a CNI error too (not http.server's HTML 501).
    def __getattr__(self, name):
        if name.startswith("do_"):
            return lambda: self._reply(405, CniError(
                proto.ERR_PROTOCOL, f"method {name[3:][:20]} not allowed").to_dict())
        raise AttributeError(name)


class _Elsewhere(Exception):
    """A shim's call whose configuration names another socket than this one."""


class _UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128
    allow_reuse_address = False

    def __init__(self, path, backend):
        self.backend = backend
        self.locks = KeyedLocks()
        super().__init__(path, _Handler, bind_and_activate=False)

    def server_bind(self):
        old = os.umask(0o177)  # the socket is born 0600: no window where others connect
        try:
            super().server_bind()
        finally:
            os.umask(old)
        os.chmod(self.server_address, 0o600)

    def handle_error(self, request, client_address):
        log.exception("cni http: unexpected error while serving a request")

    def status(self) -> tuple[int, dict]:
        t0 = time.monotonic()
        try:
            with metrics.CNI_IN_FLIGHT.labels("STATUS").track_inprogress():
                self.backend.status()
        except CniError as e:
            metrics.cni_request("STATUS", e.code, time.monotonic() - t0)
            return 503, e.to_dict()
        except Exception as e:  # noqa: BLE001 - answer, log, keep serving
            log.exception("STATUS failed")
            metrics.cni_request("STATUS", proto.ERR_INTERNAL, time.monotonic() - t0)
            return 500, CniError(proto.ERR_INTERNAL, f"STATUS failed: {e}").to_dict()
        metrics.cni_request("STATUS", 0, time.monotonic() - t0)
        return 200, {"status": "ready"}

    def execute(self, raw: bytes, shim_socket: str) -> tuple[int, bytes, dict]:
        """The shim's call: the Python plugin's `run` with this server in place of
        its HTTP round trip.  409 (nothing ran) when the configuration names
        another socket than the one the shim reached: it then runs the plugin."""
        try:
            env, stdin = parse_exec(raw)
        except CniError as e:
            log.info("rejected exec request: %s", e.msg)
            return 400, json.dumps(e.to_dict()).encode(), {}

        def call(sock, path, body, timeout, unavailable_code=proto.ERR_TRY_AGAIN):
            if sock != shim_socket:
                raise _Elsewhere(sock)
            status, answer = self.status() if path == proto.PATH_STATUS \
                else self.dispatch(body, decoded=True)
            if status != 200:
                raise CniError(answer["code"], answer.get("msg", ""), answer.get("details", ""))
            return answer

        said: list[str] = []
        try:
            code, out = proto.run(env, stdin, call=call, say=said.append)
        except _Elsewhere as e:
            return 409, json.dumps(CniError(proto.ERR_PROTOCOL, f"the configuration names "
                                            f"{str(e)[:200]!r}").to_dict()).encode(), {}
        headers = {proto.EXEC_EXIT_HEADER: str(code)}
        if said:
            line = " ".join("; ".join(said).split())[:2000]     # one header-safe line
            headers[proto.EXEC_LOG_HEADER] = line.encode("ascii", "replace").decode()
        return 200, b"" if out is None else proto.json_dumps(out).encode(), headers

    def dispatch(self, raw, decoded: bool = False) -> tuple[int, dict]:
        """One ADD/DEL/CHECK/GC: raw is the POST /cni body, or its decoded dict."""
        t0 = time.monotonic()
        try:
            req = request_from(raw) if decoded else parse_request(raw)
        except CniError as e:
            log.info("rejected CNI request: %s (%s)", e.msg, e.details)
            metrics.cni_request(None, e.code, time.monotonic() - t0)
            return 400, e.to_dict()
        except Exception as e:  # noqa: BLE001 - a parser bug must not kill the server
            log.exception("request validation crashed")
            metrics.cni_request(None, proto.ERR_INTERNAL, time.monotonic() - t0)
            return 500, CniError(proto.ERR_INTERNAL, f"request validation failed: {e}").to_dict()
        key = req.container_id or "\0gc"
        self.locks.acquire(key)
        code = proto.ERR_INTERNAL
        try:
            with metrics.CNI_IN_FLIGHT.labels(req.command).track_inprogress():
                result = self._call(req)
            code = 0
        except CniError as e:
            code = e.code
            log.warning("%s %s %s: error %d: %s%s", req.command, req.container_id[:12],
                        req.pod_key if req.pod_name else "", e.code, e.msg,
                        f" ({e.details})" if e.details else "")
            return (503 if e.code == proto.ERR_TRY_AGAIN else 500), e.to_dict(req.cni_version)
        except Exception as e:  # noqa: BLE001
            log.exception("%s %s failed", req.command, req.container_id[:12])
            return 500, CniError(proto.ERR_INTERNAL, f"{req.command} failed: {e}",
                                 type(e).__name__).to_dict(req.cni_version)
        finally:
            self.locks.release(key)
            metrics.cni_request(req.command, code, time.monotonic() - t0)
        log.info("%s %s %s: ok in %.1f ms", req.command, req.container_id[:12],
                 req.pod_key if req.pod_name else "", (time.monotonic() - t0) * 1000)
        return 200, result

    def _call(self, req: CniRequest) -> dict:
        b = self.backend
        if req.command == "ADD":
            return {"result": b.add(req)}
        if req.command == "DEL":
            b.delete(req)
        elif req.command == "CHECK":
            b.check(req)
        elif req.command == "GC":
            b.gc(req)
        return {}


class CniServer:
    """Serve `backend` on the unix socket `path` in a background thread."""

    def __init__(self, path: str, backend: Backend):
        self.path = path
        self.backend = backend
        self._server: _UnixHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        parent = os.path.dirname(self.path) or "."
        if not os.path.isdir(parent):
            # Ours: root-only (makedirs' mode is subject to the umask).  An
            # existing directory (/run, a hostPath) keeps its mode: the socket
            # itself is born 0600.
            os.makedirs(parent, mode=0o700, exist_ok=True)
            os.chmod(parent, 0o700)
        self._remove_stale()
        self._server = _UnixHTTPServer(self.path, self.backend)
        try:
            self._server.server_bind()
            self._server.server_activate()
        except OSError:
            self._server.server_close()
            raise
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="cni-server", daemon=True)
        self._thread.start()
        log.info("CNI server listening on %s", self.path)

    @property
    def serving(self) -> bool:
        """True while the accept loop's thread runs (liveness)."""
        return self._thread is not None and self._thread.is_alive()

    def _remove_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise RuntimeError(f"{self.path} exists and is not a socket; refusing to "
                               "replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.path)
        except OSError:
            os.unlink(self.path)  # left behind by a daemon that died
            log.info("removed stale CNI socket %s", self.path)
            return
        finally:
            probe.close()
        raise RuntimeError(f"another process is serving {self.path}; is pacific-node "
                           "already running?")

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self._server = None
        log.info("CNI server on %s stopped", self.path)
