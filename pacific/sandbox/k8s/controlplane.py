"""The real Kubernetes control plane: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, from the binaries `make setup` builds (hack/build-kubernetes.sh).

    cp = ControlPlane("<dir>/kube", spawner, nodes=["node1", "node2"],
                      server_hosts=["192.168.77.1"])
    cp.start()                  # returns when all four answer and the CRDs are served
    cp.admin_kubeconfig         # https://127.0.0.1:<port>, user in system:masters
    cp.node_kubeconfig("node1", server=None)   # system:node:node1 (Node authorizer)
    cp.stop()

Everything listens on 127.0.0.1 (free ports picked once and kept in ports.json, so
a restart keeps its URLs); `server_hosts` are extra names in the API server's
certificate, for a forwarder that carries node namespaces' requests to it
(pacific.sandbox.k8s.forward).  Authorization is `Node,RBAC` with the
NodeRestriction admission plugin; the components and node identities use static
tokens (tokens.csv), workloads use ServiceAccount tokens.

The spawner decides where processes live: `Sandbox` adapts its `spawn`/`stop`
(down() then stops them), `ProcessSpawner` runs them as children of this process
(tests without a sandbox network).
"""
from __future__ import annotations

import glob
import json
import logging
import os
import secrets
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from typing import Protocol, Sequence

import yaml

from pacific import names
from pacific.sandbox import proc
from pacific.sandbox.k8s import bins
from pacific.sandbox.k8s.kubeconfig import write_kubeconfig
from pacific.sandbox.k8s.pki import Pki

log = logging.getLogger(__name__)

REPO_CRDS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                         "deploy", "crds"))
TAGS = ("kube-etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
CLIENT_QPS = ("--kube-api-qps=200", "--kube-api-burst=400")


class Spawner(Protocol):
    def spawn(self, tag: str, argv: Sequence[str]) -> int: ...
    def stop(self, tag: str) -> bool: ...
    def running(self, tag: str) -> bool: ...
    def log_path(self, tag: str) -> str: ...


class ProcessSpawner:
    """Children of this process, logs in `directory`; stop_all() ends them."""

    def __init__(self, directory: str):
        self.dir = directory
        self.procs: dict[str, subprocess.Popen] = {}
        os.makedirs(directory, exist_ok=True)

    def log_path(self, tag: str) -> str:
        return os.path.join(self.dir, f"{tag}.log")

    def spawn(self, tag: str, argv: Sequence[str]) -> int:
        with open(self.log_path(tag), "ab") as out:
            p = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[tag] = p
        return p.pid

    def running(self, tag: str) -> bool:
        p = self.procs.get(tag)
        return p is not None and p.poll() is None

    def stop(self, tag: str) -> bool:
        p = self.procs.pop(tag, None)
        if p is None or p.poll() is not None:
            return False
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
        return True

    def stop_all(self) -> None:
        for tag in reversed(list(self.procs)):
            self.stop(tag)


class ControlPlaneError(RuntimeError):
    pass


class ControlPlane:
    def __init__(self, directory: str, spawner: Spawner, nodes: Sequence[str] = (),
                 server_hosts: Sequence[str] = (), controller_manager: bool = True,
                 scheduler: bool = True, crd_dirs: Sequence[str] | None = None,
                 apiserver_args: Sequence[str] = (), kcm_args: Sequence[str] = (),
                 service_cidr: str = names.SERVICE_CIDR):
        self.dir = directory
        self.service_cidr = service_cidr      # --service-cluster-ip-range (dual: "v4,v6")
        # of the primary service range's family (Kubernetes 1.20 does not check;
        # the `kubernetes` Service would have an endpoint of the other family)
        self.advertise_address = "::1" if ":" in service_cidr.split(",")[0] else "127.0.0.1"
        self.spawner = spawner
        self.nodes = list(nodes)
        self.server_hosts = list(server_hosts)
        self.with_kcm = controller_manager
        self.with_scheduler = scheduler
        self.crd_dirs = list(crd_dirs) if crd_dirs is not None else [REPO_CRDS]
        self.apiserver_args = list(apiserver_args)
        self.kcm_args = list(kcm_args)
        self.pki = Pki(os.path.join(directory, "pki"))
        self.admin_kubeconfig = os.path.join(directory, "admin.kubeconfig")
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self.ports = self._ports()
        self.tokens = self._tokens()

    # ------------------------------------------------------------------ state
    def _ports(self) -> dict[str, int]:
        path = os.path.join(self.dir, "ports.json")
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            pass
        from pacific.sandbox.controllers import free_ports
        keys = ("etcd", "etcd_peer", "apiserver", "kcm", "scheduler")
        ports = dict(zip(keys, free_ports(len(keys))))
        with open(path, "w") as f:
            json.dump(ports, f)
        return ports

    def _tokens(self) -> dict[str, str]:
        """user -> token for the static identities, created once (tokens.json)."""
        path = os.path.join(self.dir, "tokens.json")
        try:
            with open(path) as f:
                tokens = json.load(f)
        except FileNotFoundError:
            tokens = {}
        users = ["admin", "system:kube-controller-manager", "system:kube-scheduler",
                 *(f"system:node:{n}" for n in self.nodes)]
        for u in users:
            tokens.setdefault(u, secrets.token_hex(16))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(tokens, f)
        lines = []
        for i, (user, tok) in enumerate(sorted(tokens.items())):
            group = ("system:masters" if user == "admin"
                     else "system:nodes" if user.startswith("system:node:") else "")
            lines.append(f'{tok},{user},{1000 + i}' + (f',"{group}"' if group else ""))
        fd = os.open(os.path.join(self.dir, "tokens.csv"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o600)
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        return tokens

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    def kubeconfig(self, name: str, user: str, server: str | None = None) -> str:
        """A kubeconfig file for a static identity (written once per call)."""
        return write_kubeconfig(os.path.join(self.dir, f"{name}.kubeconfig"), server or self.url,
                                self.tokens[user], self.pki.ca_crt)

    def node_kubeconfig(self, node: str, server: str | None = None) -> str:
        return self.kubeconfig(f"node-{node}", f"system:node:{node}", server)

    # ------------------------------------------------------------------ start/stop
    def start(self, timeout: float = 90.0) -> "ControlPlane":
        t0 = time.monotonic()
        self.pki.ensure(self.server_hosts)
        self.pki.client("kubelet-client", cn="kube-apiserver-kubelet-client", org="system:masters")
        write_kubeconfig(self.admin_kubeconfig, self.url, self.tokens["admin"], self.pki.ca_crt)
        kcm_kc = self.kubeconfig("kube-controller-manager", "system:kube-controller-manager")
        sched_kc = self.kubeconfig("kube-scheduler", "system:kube-scheduler")
        deadline = t0 + timeout
        self._ensure("kube-etcd", self._etcd_argv(), deadline,
                     lambda: _http_ok(f"http://127.0.0.1:{self.ports['etcd']}/health"))
        self._ensure("kube-apiserver", self._apiserver_argv(), deadline, self._apiserver_ready)
        log.info("kube-apiserver ready at %s (%.1f s)", self.url, time.monotonic() - t0)
        self._apply_crds(deadline)
        if self.with_kcm:
            self._ensure("kube-controller-manager", self._kcm_argv(kcm_kc), deadline,
                         lambda: _https_ok(f"https://127.0.0.1:{self.ports['kcm']}/healthz"))
        if self.with_scheduler:
            self._ensure("kube-scheduler", self._scheduler_argv(sched_kc), deadline,
                         lambda: _https_ok(f"https://127.0.0.1:{self.ports['scheduler']}/healthz"))
        log.info("control plane ready in %.1f s", time.monotonic() - t0)
        return self

    def stop(self) -> None:
        for tag in reversed(TAGS):
            self.spawner.stop(tag)

    def _ensure(self, tag: str, argv: list[str], deadline: float, ready) -> None:
        if not self.spawner.running(tag):
            self.spawner.spawn(tag, argv)
        while not ready():
            if not self.spawner.running(tag):
                raise ControlPlaneError(f"{tag} exited during start-up: "
                                        f"{_tail(self.spawner.log_path(tag))}")
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"{tag} not ready in time; log "
                                        f"{self.spawner.log_path(tag)}: "
                                        f"{_tail(self.spawner.log_path(tag))}")
            time.sleep(0.1)

    def _apiserver_ready(self) -> bool:
        return _https_ok(f"{self.url}/readyz", self.tokens["admin"], self.pki.ca_crt)

    # ------------------------------------------------------------------ argv
    def _etcd_argv(self) -> list[str]:
        p = self.ports
        return [bins.path("etcd"), "--name", "pacific", "--data-dir", os.path.join(self.dir, "etcd"),
                "--listen-client-urls", f"http://127.0.0.1:{p['etcd']}",
                "--advertise-client-urls", f"http://127.0.0.1:{p['etcd']}",
                "--listen-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
                "--initial-cluster", f"pacific=http://127.0.0.1:{p['etcd_peer']}",
                "--listen-metrics-urls", "http://127.0.0.1:0", "--log-level", "warn"]

    def _apiserver_argv(self) -> list[str]:
        k, kc = self.pki, self.pki.client("kubelet-client")
        return [bins.path("kube-apiserver"),
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1", f"--secure-port={self.ports['apiserver']}",
                "--insecure-port=0", f"--advertise-address={self.advertise_address}",
                "--endpoint-reconciler-type=none",
                f"--service-cluster-ip-range={self.service_cidr}",
                f"--tls-cert-file={k.server_crt}", f"--tls-private-key-file={k.server_key}",
                f"--client-ca-file={k.ca_crt}",
                f"--token-auth-file={os.path.join(self.dir, 'tokens.csv')}",
                f"--service-account-key-file={k.sa_pub}",
                f"--service-account-signing-key-file={k.sa_key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
                *([] if self.with_kcm else ["--disable-admission-plugins=ServiceAccount"]),
                "--allow-privileged=true",
                f"--kubelet-client-certificate={kc[0]}", f"--kubelet-client-key={kc[1]}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                "--max-requests-inflight=800", "--max-mutating-requests-inflight=400",
                "--profiling=false", "--v=1", *self.apiserver_args]

    def _kcm_argv(self, kubeconfig: str) -> list[str]:
        k = self.pki
        return [bins.path("kube-controller-manager"), f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1", f"--secure-port={self.ports['kcm']}", "--port=0",
                "--leader-elect=false",
                # no cloud, no routes, no LoadBalancer services: Pacific is the network
                "--controllers=*,-cloud-node-lifecycle,-route,-service",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={k.sa_key}", f"--root-ca-file={k.ca_crt}",
                f"--service-cluster-ip-range={self.service_cidr}",
                f"--cluster-signing-cert-file={k.ca_crt}", f"--cluster-signing-key-file={k.ca_key}",
                "--concurrent-deployment-syncs=10", "--concurrent-replicaset-syncs=10",
                *CLIENT_QPS, "--profiling=false", "--v=1", *self.kcm_args]

    def _scheduler_argv(self, kubeconfig: str) -> list[str]:
        return [bins.path("kube-scheduler"), f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1", f"--secure-port={self.ports['scheduler']}",
                "--port=0", "--leader-elect=false", *CLIENT_QPS, "--profiling=false", "--v=1"]

    # ------------------------------------------------------------------ CRDs
    def _apply_crds(self, deadline: float) -> None:
        """Create (or update) Pacific's CRDs and wait until they are served."""
        from pacific.kube import client, errors
        from pacific.kube import resources as r
        api = client.load(self.admin_kubeconfig)
        wanted = []
        for d in self.crd_dirs:
            for path in sorted(glob.glob(os.path.join(d, "*.yaml"))):
                with open(path) as f:
                    for doc in yaml.safe_load_all(f):
                        if doc and doc.get("kind") == "CustomResourceDefinition":
                            wanted.append(doc)
        for doc in wanted:
            try:
                r.create(api, r.CRDS, doc)
            except errors.AlreadyExists:
                cur = r.get(api, r.CRDS, doc["metadata"]["name"])
                doc["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
                r.replace(api, r.CRDS, doc)
        for doc in wanted:
            name = doc["metadata"]["name"]
            while True:
                cur = r.get(api, r.CRDS, name) or {}
                # status and its conditions are null until the server fills them
                conds = {c["type"]: c["status"]
                         for c in (cur.get("status") or {}).get("conditions") or []}
                if conds.get("Established") == "True":
                    break
                if time.monotonic() > deadline:
                    raise ControlPlaneError(f"CRD {name} not established: {conds}")
                time.sleep(0.1)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def _https_ok(url: str, token: str | None = None, ca: str | None = None) -> bool:
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl._create_unverified_context()
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=2, context=ctx) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def _tail(path: str) -> str:
    return proc.tail(path, 1500, missing="(no log)")
