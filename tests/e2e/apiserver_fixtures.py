"""The API emulator as a real process (HTTPS, bearer token, state file) for the
apiserver tests, and clients for it."""
from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import kubernetes.client
import kubernetes.config

REPO = Path(__file__).resolve().parents[2]
TOKEN = "pacific-apiserver-test-token"


class Emulator:
    """`python -m pacific.sandbox.apiserver` on a free loopback port (TLS unless
    tls=False)."""

    def __init__(self, workdir: str, history: int = 1000, port: int = 0, extra=(),
                 tls: bool = True):
        self.workdir = workdir
        self.history = history
        self.tls = tls
        self.extra = list(extra)
        self.state_file = os.path.join(workdir, "state.json")
        self.kubeconfig = os.path.join(workdir, "kubeconfig")
        self.ca = os.path.join(workdir, "tls", "ca.crt")
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self, port: int | None = None) -> None:
        port = self.port if port is None else port
        ready = os.path.join(self.workdir, "ready.json")
        if os.path.exists(ready):
            os.remove(ready)
        argv = [sys.executable, "-m", "pacific.sandbox.apiserver", "--listen", f"127.0.0.1:{port}",
                "--token", TOKEN,
                *(["--tls-dir", os.path.join(self.workdir, "tls")] if self.tls else []),
                "--kubeconfig", self.kubeconfig, "--ready-file", ready, "--state-file", self.state_file,
                "--history", str(self.history), "--bookmark-interval", "1", *self.extra]
        self.log = open(os.path.join(self.workdir, "apiserver.log"), "ab")
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 20
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"emulator did not start: {self.log_text()[-2000:]}")
            time.sleep(0.02)
        with open(ready) as f:
            self.port = json.load(f)["addresses"][0]["port"]

    def log_text(self) -> str:
        with open(os.path.join(self.workdir, "apiserver.log"), errors="replace") as f:
            return f.read()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if self.proc is not None:
            self.log.close()
        self.proc = None

    def api_client(self) -> kubernetes.client.ApiClient:
        return kubernetes.config.new_client_from_config(config_file=self.kubeconfig)

    def request(self, method: str, path: str, body=None, content_type: str = "application/json",
                token: str | None = TOKEN, raw: bytes | None = None) -> tuple[int, dict]:
        """Raw HTTP request; returns (status, decoded JSON body)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        ctx = ssl.create_default_context(cafile=self.ca)
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")


def new_emulator(**kw) -> tuple[Emulator, tempfile.TemporaryDirectory]:
    d = tempfile.TemporaryDirectory(prefix="pacific-apiserver-test-")
    try:
        return Emulator(d.name, **kw), d
    except Exception:
        d.cleanup()
        raise
