"""HTTP front end: authentication, URL routing, answers and watch streams.

URL shapes (as kube-apiserver):
  /api/v1[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]
  /apis/{group}/{version}[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]
"""
import hmac
import logging
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

from pacific.sandbox.apiserver import discovery, errors, reqctx, rest, tables
from pacific.sandbox.apiserver.resources import ResourceType
from pacific.sandbox.apiserver.store import encode
from pacific.sandbox.apiserver.watch import Watcher

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
DEFAULT_WATCH_TIMEOUT = 1800
UNAUTHENTICATED_PATHS = {"/healthz", "/livez", "/readyz"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pacific-apiserver"
    # headers and body go out in one write and without Nagle delays (else every
    # small answer waits for the client's delayed ACK: ~40 ms per request)
    disable_nagle_algorithm = True
    # set on the server object: store, token, ssl_context, bookmark_interval

    def setup(self):
        ctx = getattr(self.server, "ssl_context", None)
        if ctx is not None:
            self.request.settimeout(10)
            self.request = ctx.wrap_socket(self.request, server_side=True)
            self.request.settimeout(None)
        super().setup()

    def log_message(self, fmt, *args):
        log.debug("%s %s", self.address_string(), fmt % args)

    # ------------------------------------------------------------ plumbing
    def _send(self, code: int, body: bytes, ctype: str = "application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        for w in reqctx.take_warnings():
            self.send_header("Warning", '299 - "%s"' % w.replace("\\", "\\\\").replace('"', '\\"'))
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(body)
        self.wfile.write(b"".join(self._headers_buffer))
        self._headers_buffer = []

    def _send_error(self, e: errors.ApiError):
        self._send(e.code, encode(e.status()))

    def _body(self) -> bytes:
        length = (self.headers.get("Content-Length") or "0").strip()
        if not length.isdigit():
            # where this body ends is unknown: answer and drop the connection
            self.close_connection = True
            raise errors.bad_request(f"invalid Content-Length header {length!r}")
        n = int(length)
        if n > MAX_BODY:
            self.close_connection = True
            raise errors.ApiError(413, "RequestEntityTooLarge", f"request body too large: {n} bytes")
        if n:
            return self.rfile.read(n)
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";")[0], 16)
                except ValueError:
                    size = -1
                if size < 0:
                    self.close_connection = True
                    raise errors.bad_request(f"invalid chunk size {line[:40]!r} in a chunked body")
                total += size
                if total > MAX_BODY:
                    self.close_connection = True
                    raise errors.ApiError(413, "RequestEntityTooLarge",
                                          f"request body too large: over {MAX_BODY} bytes")
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""

    def _authorized(self, path: str) -> bool:
        token = self.server.token
        if not token or path in UNAUTHENTICATED_PATHS:
            return True
        auth = self.headers.get("Authorization") or ""
        return auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].strip().encode(), token.encode())

    def do_GET(self):
        self._dispatch()

    def do_HEAD(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def do_PUT(self):
        self._dispatch()

    def do_PATCH(self):
        self._dispatch()

    def do_DELETE(self):
        self._dispatch()

    def _dispatch(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        path = url.path.rstrip("/") or "/"
        t0 = time.monotonic()
        try:
            reqctx.begin(None)
            raw = self._body() if self.command in ("POST", "PUT", "PATCH", "DELETE") else b""
            if not self._authorized(path):
                raise errors.unauthorized()
            if self.command in ("POST", "PUT", "PATCH"):
                reqctx.begin(q.get("fieldValidation"))
            self._route(path, q, raw)
        except errors.ApiError as e:
            if e.code >= 500:
                log.error("%s %s: %s", self.command, self.path, e.message)
            self._send_error(e)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a bug: answer 500 like the real server, keep serving
            log.exception("internal error on %s %s", self.command, self.path)
            self._send_error(errors.ApiError(500, "InternalError", f"Internal error occurred: {e}"))
        finally:
            log.debug("%s %s %.1fms", self.command, self.path, (time.monotonic() - t0) * 1000)

    # ------------------------------------------------------------ routing
    def _route(self, path: str, q: dict, raw: bytes):
        reg = self.server.store.registry
        if path in UNAUTHENTICATED_PATHS:
            return self._send(200, b"ok", "text/plain; charset=utf-8")
        if path == "/version":
            return self._send(200, encode(discovery.version()))
        if path == "/api":
            return self._send(200, encode(discovery.api_versions()))
        if path == "/apis":
            return self._send(200, encode(discovery.api_group_list(reg)))
        if path == "/openapi/v3":
            return self._send(200, encode(discovery.openapi_root(reg)))
        if path.startswith("/openapi/v3/"):
            rest_ = path[len("/openapi/v3/"):].split("/")
            if rest_[0] == "api" and len(rest_) == 2:
                doc = discovery.openapi_gv(reg, "", rest_[1])
            elif rest_[0] == "apis" and len(rest_) == 3:
                doc = discovery.openapi_gv(reg, rest_[1], rest_[2])
            else:
                doc = None
            if doc is None:
                raise errors.page_not_found()
            return self._send(200, encode(doc))
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest_parts = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) == 2:
            g = discovery.api_group(reg, parts[1])
            if g is None:
                raise errors.page_not_found()
            return self._send(200, encode(g))
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest_parts = parts[1], parts[2], parts[3:]
        else:
            raise errors.page_not_found()
        if not rest_parts:
            doc = discovery.resource_list(reg, group, version)
            if doc is None:
                raise errors.page_not_found()
            return self._send(200, encode(doc))
        ns = None
        if rest_parts[0] == "namespaces" and len(rest_parts) >= 3 and \
                not (len(rest_parts) == 3 and rest_parts[2] in ("status", "finalize")):
            ns, rest_parts = rest_parts[1], rest_parts[2:]
        if len(rest_parts) > 3:
            raise errors.page_not_found()
        rt = reg.get(group, version, rest_parts[0])
        if rt is None or (ns is not None and not rt.namespaced):
            raise errors.page_not_found()
        name = rest_parts[1] if len(rest_parts) > 1 else None
        sub = rest_parts[2] if len(rest_parts) > 2 else ""
        if sub and not (sub == "status" and rt.status_subresource) and \
                not (sub == "binding" and rt.key == ("", "pods")):
            raise errors.page_not_found()
        if rt.namespaced and name is not None and ns is None:
            raise errors.page_not_found()
        if name is None:
            return self._collection(rt, ns, q, raw)
        return self._item(rt, ns or "", name, sub, q, raw)

    # ------------------------------------------------------------ collection verbs
    def _collection(self, rt: ResourceType, ns, q, raw):
        store = self.server.store
        accept = self.headers.get("Accept") or ""
        if self.command in ("GET", "HEAD"):
            if q.get("watch") in ("1", "true", "True"):
                return self._watch(rt, ns, q, accept)
            return self._send(200, rest.list_body(store, rt, ns, q, accept))
        if self.command == "POST":
            if rt.namespaced and ns is None:
                raise errors.method_not_allowed()
            body = rest.decode_body(raw, self.headers.get("Content-Type"))
            obj = rest.create_body(rt, ns or "", body)
            e = store.create(rt, ns or "", obj, rest.dry_run(q))
            return self._send(201, rest.object_body(rt, e, accept, q))
        if self.command == "DELETE":
            ls, fs = rest.selectors(rt, q)
            _, entries, _ = store.list(rt, ns, ls, fs)
            dry = rest.dry_run(q)
            out = []
            for e in entries:
                m = e.obj["metadata"]
                try:
                    d, _ = store.delete(rt, m.get("namespace", ""), m["name"], dry_run=dry)
                    out.append(rest.out_raw(rt, d))
                except errors.ApiError as err:
                    if err.code != 404:
                        raise
            head = encode({"kind": rt.kind + "List", "apiVersion": rt.api_version,
                           "metadata": {"resourceVersion": str(store.rv)}})
            return self._send(200, head[:-1] + b',"items":[' + b",".join(out) + b"]}")
        raise errors.method_not_allowed()

    # ------------------------------------------------------------ item verbs
    def _item(self, rt: ResourceType, ns: str, name: str, sub: str, q, raw):
        store = self.server.store
        accept = self.headers.get("Accept") or ""
        ctype = self.headers.get("Content-Type") or ""
        if sub == "binding":
            return self._binding(rt, ns, name, raw)
        if self.command in ("GET", "HEAD"):
            e = store.get(rt, ns if rt.namespaced else "", name)
            return self._send(200, rest.object_body(rt, e, accept, q))
        if self.command == "PUT":
            body = rest.decode_body(raw, ctype)
            obj = rest.check_object(rt, body)
            if rt.namespaced and obj.get("metadata", {}).get("namespace") not in (None, "", ns):
                raise errors.bad_request("the namespace of the provided object does not match the "
                                         "namespace sent on the request")
            e, created = store.update(rt, ns, name, obj, sub, rest.dry_run(q))
            return self._send(201 if created else 200, rest.object_body(rt, e, accept, q))
        if self.command == "PATCH":
            e, created = rest.patch(store, rt, ns, name, ctype, raw, sub, rest.dry_run(q))
            return self._send(201 if created else 200, rest.object_body(rt, e, accept, q))
        if self.command == "DELETE" and not sub:
            opts = rest.delete_options(raw, q)
            pre = opts.get("preconditions") or {}
            dry = opts.get("dryRun") in ("All", ["All"])
            e, gone = store.delete(rt, ns, name, pre.get("uid"), pre.get("resourceVersion"), dry)
            return self._send(200 if gone else 202, rest.out_raw(rt, e))
        raise errors.method_not_allowed()

    def _binding(self, rt, ns, name, raw):
        if self.command != "POST":
            raise errors.method_not_allowed()
        body = rest.decode_body(raw, self.headers.get("Content-Type"))
        if not isinstance(body, dict) or not isinstance(body.get("target") or {}, dict):
            raise errors.bad_request("the body of a binding must be a Binding object with a target object")
        node = (body.get("target") or {}).get("name")
        if node is not None and not isinstance(node, str):
            raise errors.bad_request("Binding target.name must be a string")
        if not node:
            raise errors.invalid("", "Binding", name, [("FieldValueRequired", "target.name", "Required value")])

        def bind(cur):
            if cur.get("spec", {}).get("nodeName"):
                raise errors.conflict("", "pods/binding", name,
                                      f"pod {name} is already assigned to node \"{cur['spec']['nodeName']}\"")
            cur["spec"]["nodeName"] = node
            return cur
        # binding is allowed to set nodeName, which a pod update may not change once set
        self.server.store.mutate(rt, ns, name, bind)
        return self._send(201, encode({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                       "status": "Success", "code": 201}))

    # ------------------------------------------------------------ watch
    def _watch(self, rt: ResourceType, ns, q, accept):
        store = self.server.store
        ls, fs = rest.selectors(rt, q)
        rv = q.get("resourceVersion", "")
        try:
            since = None if rv in ("", "0") else int(rv)
        except ValueError:
            raise errors.bad_request(f"invalid resourceVersion {rv!r}: must be an integer")
        try:    # an integer, as kube-apiserver's int64 (a float nan/inf never ended the watch)
            timeout = int(q.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
        except ValueError:
            raise errors.bad_request(f"invalid timeoutSeconds {q.get('timeoutSeconds')!r}: "
                                     "must be an integer") from None
        bookmarks = q.get("allowWatchBookmarks") in ("1", "true", "True")
        initial_end = q.get("sendInitialEvents") in ("1", "true", "True")
        if initial_end:
            since = None
        as_table = tables.wants_table(accept)
        include = q.get("includeObject", "")
        watcher = Watcher(ns, ls, fs)
        gone = None
        try:
            store.watch(rt, ns, since, watcher)
        except errors.ApiError as e:
            if e.code != 410:
                raise
            gone = e
        try:    # registered above: unregister even if the client is gone before the headers
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            if gone is not None:
                self._chunk(b'{"type":"ERROR","object":' + encode(gone.status()) + b"}\n")
                return
            self._stream(rt, store, watcher, timeout, bookmarks, initial_end, as_table, include)
        finally:
            store.unwatch(rt, watcher)
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass
            self.close_connection = True

    def _chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _bookmark(self, rt, rv: int, initial_end: bool = False) -> bytes:
        meta = {"resourceVersion": str(rv)}
        if initial_end:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return encode({"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                                      "metadata": meta}}) + b"\n"

    def _stream(self, rt, store, watcher: Watcher, timeout, bookmarks, initial_end, as_table, include):
        deadline = time.monotonic() + timeout
        interval = self.server.bookmark_interval
        last_bookmark = time.monotonic()
        first_table = True
        if initial_end:
            # the initial ADDED events are queued already; the bookmark follows them
            pass
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or watcher.overflow or self.server.stopping:
                return
            evs = watcher.take(min(remaining, interval, 1.0))
            out = []
            for ev in evs:
                etype = watcher.translate(ev)
                if etype is None:
                    continue
                if as_table:
                    t = tables.table(rt, [ev.obj], ev.obj["metadata"]["resourceVersion"], include,
                                     with_columns=first_table)
                    first_table = False
                    out.append(b'{"type":"%s","object":%s}\n' % (etype.encode(), encode(t)))
                else:
                    out.append(b'{"type":"%s","object":%s}\n' % (etype.encode(), rest.out_raw_obj(rt, ev)))
            if initial_end:
                out.append(self._bookmark(rt, watcher.start_rv, initial_end=True))
                initial_end = False
            if out:
                self._chunk(b"".join(out))
            elif bookmarks and time.monotonic() - last_bookmark >= interval:
                with store.lock:
                    idle = not watcher.queue
                    rv = store.rv
                if idle:
                    self._chunk(self._bookmark(rt, rv))
                    last_bookmark = time.monotonic()
