"""A read-only image registry for the sandbox's kubelet nodes (`localhost/...` images).

    python -m pacific.sandbox.k8s.registry --netns pac-x-central \
        --listen 192.168.77.1:5000 <dir>/images/busybox.tar <dir>/images/pause.tar

The images are imported on every node at `up`, so pods that say
`imagePullPolicy: IfNotPresent` never ask for them.  A pod that does not (a
`:latest` image defaults to Always, as with `kubectl create deployment` or
`kubectl run`) makes its kubelet pull: each node's containerd has this registry
as the mirror of `localhost`, and it answers with the very manifests and blobs of
the OCI archives it serves (the distribution API's GET/HEAD of /v2/,
manifests and blobs, nothing else), so the pull finds everything in place.
"""
from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pacific.sandbox.k8s.listen import listen_socket

log = logging.getLogger("pacific.sandbox.registry")
PATH = re.compile(r"^/v2/(?P<repo>[a-z0-9._/-]+)/(?P<kind>manifests|blobs)/(?P<ref>[A-Za-z0-9_.:-]+)$")


class Store:
    def __init__(self, archives):
        self.blobs: dict[str, tuple[bytes, str]] = {}     # digest -> (data, media type)
        self.tags: dict[tuple[str, str], str] = {}        # (repo, tag) -> manifest digest
        for path in archives:
            with tarfile.open(path) as t:
                index = json.load(t.extractfile("index.json"))
                for m in t.getmembers():
                    if m.isfile() and m.name.startswith("blobs/sha256/"):
                        digest = "sha256:" + m.name.rsplit("/", 1)[1]
                        self.blobs[digest] = (t.extractfile(m).read(),
                                              "application/octet-stream")
                for man in index["manifests"]:
                    name = man["annotations"]["io.containerd.image.name"]
                    repo_tag = name.split("/", 1)[1]
                    repo, _, tag = repo_tag.rpartition(":")
                    self.tags[(repo, tag)] = man["digest"]
                    data, _ = self.blobs[man["digest"]]
                    self.blobs[man["digest"]] = (data, man["mediaType"])

    def lookup(self, repo: str, kind: str, ref: str):
        if kind == "manifests" and not ref.startswith("sha256:"):
            ref = self.tags.get((repo, ref), "")
        return ref, self.blobs.get(ref)


def handler(store: Store):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            log.info("%s %s", self.address_string(), fmt % args)

        def _answer(self, body: bool) -> None:
            if self.path in ("/v2", "/v2/"):
                return self._send(200, b"{}", "application/json", body)
            m = PATH.match(self.path.split("?", 1)[0])
            digest, found = store.lookup(*m.group("repo", "kind", "ref")) if m else ("", None)
            if found is None:
                return self._send(404, b'{"errors":[{"code":"NOT_FOUND"}]}',
                                  "application/json", body)
            self._send(200, found[0], found[1], body, digest)

        def _send(self, code, data, ctype, body, digest=None):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            if digest:
                self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_GET(self):
            self._answer(True)

        def do_HEAD(self):
            self._answer(False)
    return Handler


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pacific.sandbox.k8s.registry",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--netns", help="network namespace to listen in")
    p.add_argument("--listen", required=True, help="HOST:PORT")
    p.add_argument("archives", nargs="+", help="OCI archives (pacific.sandbox.k8s.images)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    host, _, port = a.listen.rpartition(":")
    sock = listen_socket(host, int(port), a.netns)
    store = Store(a.archives)
    server = ThreadingHTTPServer((host, int(port)), handler(store), bind_and_activate=False)
    server.socket.close()
    server.socket = sock
    server.daemon_threads = True
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: threading.Thread(target=server.shutdown).start())
    log.info("serving %s on %s (netns %s)", ", ".join(f"{r}:{t}" for r, t in store.tags),
             a.listen, a.netns or "root")
    server.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
