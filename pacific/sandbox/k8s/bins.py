"""Where the Kubernetes binaries built by `make setup` live.

hack/build-kubernetes.sh builds kube-apiserver, kube-controller-manager,
kube-scheduler, kubelet and kubectl (v1.20.2, from Debian 12's source package) and
copies etcd from Debian's etcd-server into one cached directory per version.
"""
from __future__ import annotations

import functools
import os
import re
import subprocess

from pacific import names

VERSION = "v1.20.2"


def bin_dir() -> str:
    return os.environ.get(names.KUBE_BIN_ENV) or f"/var/cache/pacific/kubernetes/{VERSION}/bin"


def path(binary: str) -> str:
    p = os.path.join(bin_dir(), binary)
    if not os.access(p, os.X_OK):
        raise FileNotFoundError(
            f"{binary} not found in {bin_dir()}: run `make setup` (it builds the Kubernetes "
            f"{VERSION} binaries once per machine, about 5 minutes) or set {names.KUBE_BIN_ENV}")
    return p


def available() -> bool:
    return all(os.access(os.path.join(bin_dir(), b), os.X_OK)
               for b in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"))


@functools.cache
def server_minor() -> int:
    """The minor version of these binaries' kube-apiserver (20 for v1.20.2)."""
    out = subprocess.run([path("kube-apiserver"), "--version"], capture_output=True, text=True,
                         timeout=60).stdout
    m = re.search(r"v1\.(\d+)", out)
    return int(m.group(1)) if m else 0


def dual_stack_gates() -> dict[str, bool]:
    """The feature gates with which the API server, controller manager and
    kubelet keep both families of a pod (status.podIPs): IPv6DualStack before
    1.23, where it went GA (and 1.25 removed the gate)."""
    return {"IPv6DualStack": True} if server_minor() < 23 else {}


def gates_flag(gates: dict[str, bool]) -> list[str]:
    return [f"--feature-gates={','.join(f'{k}={str(v).lower()}' for k, v in gates.items())}"] \
        if gates else []
