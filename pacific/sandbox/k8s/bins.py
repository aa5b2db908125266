"""Where the Kubernetes binaries built by `make setup` live.

hack/build-kubernetes.sh builds kube-apiserver, kube-controller-manager,
kube-scheduler, kubelet and kubectl (v1.20.2, from Debian 12's source package) and
copies etcd from Debian's etcd-server into one cached directory per version.
"""
from __future__ import annotations

import os

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
