"""A control plane without nodes: NB ovsdb-server + etcd and kube-apiserver (+ controllers).

    with ControlPlane(tmp_path) as cp:
        cp.start_controller()            # a pacific-controller subprocess
        cp.kube                          # ApiClient (pacific.kube helpers)
        cp.nb                            # NorthboundAPI

Used by the controller's e2e tests and its benchmark; `cp` (a fixture: one
controller, c1, leading with the default Subnet ready) and the helpers after it
serve test_controller_api and test_controller_review.  The NB ovsdb-server and
every controller are child processes (killed in close(), even on failure), and
so are etcd and kube-apiserver (pacific.sandbox.k8s.controlplane, on 127.0.0.1).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ovsdb_fixtures import NB_SCHEMA, OvsdbServer
from waiting import wait_until  # noqa: F401 (the modules import it from here too)
from pacific import contract, names
from pacific.kube import resources as r

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
        lease = r.get(self.kube, r.LEASES, names.CONTROLLER_NAME, names.CONTROLLER_LEASE_NAMESPACE)
        return ((lease or {}).get("spec") or {}).get("holderIdentity") or None


def subnet_ready(api, name: str) -> bool:
    """Is the Subnet's Ready condition True (the controller applied it)?"""
    st = (r.get(api, r.SUBNETS, name) or {}).get("status") or {}
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in st.get("conditions") or [])


def create_subnet(api, name: str, cidr: str, namespaces, timeout: float = 60.0, **spec) -> None:
    """Create a Subnet bound to `namespaces` and wait until it is Ready, so that
    pods created next get its addresses."""
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": name},
                              "spec": {"cidrBlock": cidr, "namespaces": list(namespaces), **spec}})
    wait_until(lambda: subnet_ready(api, name), timeout, what=f"Subnet {name} Ready")


QUARANTINE = 5               # s the `cp` controller holds a released address back


@pytest.fixture
def cp(tmp_path):
    with ControlPlane(tmp_path) as plane:
        if r.get(plane.kube, r.NAMESPACES, "default") is None:
            r.create(plane.kube, r.NAMESPACES, {"metadata": {"name": "default"}})
        # a released address rests QUARANTINE s before another pod gets it (issue 51)
        plane.start_controller("c1", restart=True,
                               extra=("--address-quarantine", str(QUARANTINE)))
        wait_until(lambda: plane.leader() == "c1", 30, what="c1 leading")
        wait_until(lambda: subnet_ready(plane.kube, names.DEFAULT_SUBNET), 30, what="default subnet ready")
        try:
            yield plane
        except BaseException:
            print(plane.log("c1")[-4000:])
            raise


def subnet_condition(cp, subnet) -> dict:
    s = r.get(cp.kube, r.SUBNETS, subnet) or {}
    return next(iter((s.get("status") or {}).get("conditions") or []), {})


def make_pod(cp, name, ns="default", node="node1", ann=None, sts=None):
    meta = {"name": name, "namespace": ns, "annotations": ann or {}}
    if sts:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": sts,
                                    "uid": "u-" + sts, "controller": True}]
    return r.create(cp.kube, r.PODS, {"metadata": meta, "spec": {
        "nodeName": node, "containers": [{"name": "c", "image": "pause"}]}}, ns)


def ann(cp, name, ns="default") -> dict:
    p = r.get(cp.kube, r.PODS, name, ns)
    return (p or {}).get("metadata", {}).get("annotations") or {}


def record(cp, name, ns="default") -> contract.PodRecord | None:
    """The controller's record on the pod, if it is one made for this pod."""
    return contract.own_record(r.get(cp.kube, r.PODS, name, ns) or {})


def allocated(cp, name, ns="default", timeout=20) -> contract.PodRecord:
    return wait_until(lambda: record(cp, name, ns), timeout, what=f"allocation of {ns}/{name}")


def refused(cp, name, ns="default", timeout=20) -> str:
    return wait_until(lambda: ann(cp, name, ns).get(names.ANN_ALLOCATION_ERROR), timeout,
                      what=f"allocation error on {ns}/{name}")


def events_for(cp, name, ns="default") -> list[str]:
    items, _ = r.list_(cp.kube, r.EVENTS, ns)
    return [f"{e.get('reason')}: {e.get('message')}" for e in items
            if (e.get("involvedObject") or {}).get("name") == name]


def lsp(cp, name):
    return cp.nb.lookup("Logical_Switch_Port", name, default=None)


def make_subnet(cp, name, cidr, **spec):
    return r.create(cp.kube, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                         "metadata": {"name": name}, "spec": {"cidrBlock": cidr, **spec}})
