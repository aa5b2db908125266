"""Helpers of the modules whose sandbox runs kubelet nodes (`--kubelet`):
the Deployment they run, `kubectl` against a sandbox, the Running pods of a
selector, and the skip when containerd, runc, the kubelet or busybox are not
installed (`make setup` installs them)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from pacific.kube import resources as r
from pacific.sandbox.k8s import bins, images, kubelet
from pacific.sandbox.k8s import sandbox as k8s

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: kl}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: httpd
        image: localhost/busybox:latest
        imagePullPolicy: IfNotPresent
        command: [sh, -c, "echo serving as $(hostname); exec httpd -f -p 8080 -h /var/www"]
"""


def skip_without_kubelets():
    for b in kubelet.NEEDED:
        if not shutil.which(b):
            pytest.skip(f"{b} missing (make setup installs containerd, runc)")
    try:
        bins.path("kubelet")
    except FileNotFoundError as e:
        pytest.skip(str(e))
    if not os.access(images.BUSYBOX_BIN, os.X_OK):
        pytest.skip("busybox-static missing (make setup)")


def kubectl(sb, *args, check=True, timeout=60, input=None,
            kubeconfig=None) -> subprocess.CompletedProcess:
    """kubectl against the sandbox, as its administrator (or `kubeconfig`'s user)."""
    return subprocess.run([bins.path("kubectl"),
                           f"--kubeconfig={kubeconfig or k8s.kubeconfig_path(sb)}", *args],
                          capture_output=True, text=True, check=check, timeout=timeout,
                          input=input)


def running(api, ns, selector):
    items, _ = r.list_(api, r.PODS, ns, label_selector=selector)
    return [p for p in items if (p.get("status") or {}).get("phase") == "Running"
            and p["status"].get("podIP") and not p["metadata"].get("deletionTimestamp")]
