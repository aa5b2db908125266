"""A control plane without nodes: NB ovsdb-server + etcd and kube-apiserver (+ controllers).

    with ControlPlane(tmp_path) as cp:
        cp.start_controller()            # a pacific-controller subprocess
        cp.kube                          # ApiClient (pacific.kube helpers)
        cp.nb                            # NorthboundAPI

Used by the controller's e2e tests and its benchmark.  The NB ovsdb-server and
every controller are child processes (killed in close(), even on failure), and
so are etcd and kube-apiserver (pacific.sandbox.k8s.controlplane, on 127.0.0.1).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ovsdb_fixtures import NB_SCHEMA, OvsdbServer
from pacific import names

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "deploy" / "crds"


class ControlPlane:
    def __init__(self, workdir: Path, nb_remote: str | None = None):
        """nb_remote: use this NB (e.g. a sandbox's) instead of a private ovsdb-server."""
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.nbdb = None if nb_remote else OvsdbServer(self.dir / "nb", NB_SCHEMA)
        self.nb_remote = nb_remote or self.nbdb.remote
        self.apiserver = None
        self.kubeconfig = self.dir / "kubeconfig"
        self.controllers: dict[str, subprocess.Popen] = {}
        self._restarts = threading.Lock()     # a restart and close() do not cross
        self._closing = False
        self.kube = None
        self.nb = None

    # -- life cycle ------------------------------------------------------------
    def start(self) -> "ControlPlane":
        from pacific.kube import client
        from pacific.ovn import NorthboundAPI
        from pacific.sandbox.k8s import bins
        from pacific.sandbox.k8s.controlplane import ControlPlane as KubeControlPlane
        from pacific.sandbox.k8s.controlplane import ProcessSpawner
        if not bins.available():
            pytest.skip(f"Kubernetes binaries missing in {bins.bin_dir()} (run `make setup`)")
        try:
            if self.nbdb is not None:
                self.nbdb.start()
            self.spawner = ProcessSpawner(str(self.dir / "kube-logs"))
            # etcd + kube-apiserver only: pods are created with their node, as
            # after scheduling; nothing needs the controller-manager here
            self.apiserver = KubeControlPlane(str(self.dir / "kube"), self.spawner,
                                              controller_manager=False, scheduler=False).start()
            self.kubeconfig = Path(self.apiserver.admin_kubeconfig)
            self.kube = client.load(str(self.kubeconfig))
            self.nb = NorthboundAPI(self.nb_remote, timeout=20, created_by="test")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        with self._restarts:
            self._closing = True
        for tag in list(self.controllers):
            self.kill_controller(tag, signal.SIGKILL)
        if self.nb is not None:
            self.nb.close()
            self.nb = None
        if self.apiserver is not None:
            self.spawner.stop_all()
            self.apiserver = None
        if self.nbdb is not None:
            self.nbdb.stop()

    def __enter__(self) -> "ControlPlane":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- controllers -----------------------------------------------------------------
    def start_controller(self, tag: str = "c1", leader_elect: bool = True, extra=(),
                         restart: bool = False) -> subprocess.Popen:
        """A pacific-controller subprocess; with `restart`, started again whenever it
        exits on its own, as its Deployment would (a leader whose 3 s Lease could not
        be renewed on a loaded machine steps down and exits).  kill_controller() and
        close() end it for good."""
        argv = [sys.executable, "-m", "pacific.controller.main", "--kubeconfig", str(self.kubeconfig),
                "--nb-remote", self.nb_remote, "--identity", tag, "--gc-interval", "30",
                "--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5",
                "--log-file", str(self.dir / f"{tag}.log"), *extra]
        if not leader_elect:
            argv.append("--no-leader-elect")
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=open(self.dir / f"{tag}.err", "ab"), cwd=str(REPO))
        self.controllers[tag] = p
        if restart:
            threading.Thread(target=self._restart_when_gone, args=(tag, p, leader_elect, extra),
                             daemon=True, name=f"restart-{tag}").start()
        return p

    def _restart_when_gone(self, tag: str, p: subprocess.Popen, leader_elect: bool, extra) -> None:
        p.wait()
        with self._restarts:
            if not self._closing and self.controllers.get(tag) is p:  # ended on its own
                self.start_controller(tag, leader_elect, extra, restart=True)

    def kill_controller(self, tag: str, sig=signal.SIGKILL, timeout: float = 15) -> None:
        p = self.controllers.pop(tag, None)
        if p is None:
            return
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def log(self, tag: str) -> str:
        path = self.dir / f"{tag}.log"
        return path.read_text() if path.exists() else ""

    def leader(self) -> str | None:
        from pacific.kube import resources as r
        lease = r.get(self.kube, r.LEASES, names.CONTROLLER_NAME, names.CONTROLLER_LEASE_NAMESPACE)
        return ((lease or {}).get("spec") or {}).get("holderIdentity") or None


def wait_until(pred, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)



def subnet_ready(api, name: str) -> bool:
    """Is the Subnet's Ready condition True (the controller applied it)?"""
    from pacific.kube import resources as r
    st = (r.get(api, r.SUBNETS, name) or {}).get("status") or {}
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in st.get("conditions") or [])


def create_subnet(api, name: str, cidr: str, namespaces, timeout: float = 60.0, **spec) -> None:
    """Create a Subnet bound to `namespaces` and wait until it is Ready, so that
    pods created next get its addresses."""
    from pacific.kube import resources as r
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": name},
                              "spec": {"cidrBlock": cidr, "namespaces": list(namespaces), **spec}})
    wait_until(lambda: subnet_ready(api, name), timeout, what=f"Subnet {name} Ready")
