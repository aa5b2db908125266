#!/usr/bin/env python3
"""The sandbox on the real control plane: start-up times and pods per second.

    .venv/bin/python bench/bench_kube.py            # N = 100 and 1,000
    .venv/bin/python bench/bench_kube.py --sizes 100

1. `Sandbox.up()` of a new 3-node sandbox: network ready, control plane ready
   (etcd, kube-apiserver, kube-controller-manager, kube-scheduler), every service
   started, and the first pod Running (a Deployment of 1, timed from the start of up).
2. `kubectl create deployment --replicas=N` until all N pods are Running with an
   address (ReplicaSet controller, scheduler, pod runners, pacific-controller,
   pacific-node, the CNI plugin), N = 100 and 1,000.  Baseline in the same run:
   the same Deployment with `hostNetwork: true` (everything but the pod network).
3. pacific-controller CPU per pod (both replicas' utime+stime) during step 2.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402
from pacific.sandbox import controllers  # noqa: E402
from pacific.sandbox.cluster import Sandbox  # noqa: E402
from pacific.sandbox.k8s import bins  # noqa: E402
from pacific.sandbox.k8s.sandbox import kubeconfig_path  # noqa: E402


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kubectl(sb, *args) -> str:
    return subprocess.run([bins.path("kubectl"), f"--kubeconfig={kubeconfig_path(sb)}", *args],
                          check=True, capture_output=True, text=True).stdout


def running(api, ns: str, label: str) -> int:
    items, _ = r.list_(api, r.PODS, ns, label_selector=label)
    return sum(1 for p in items if (p.get("status") or {}).get("phase") == "Running"
               and (p["status"].get("podIP")))


def wait_count(api, ns, label, n, timeout) -> float:
    t0 = time.perf_counter()
    while running(api, ns, label) < n:
        if time.perf_counter() - t0 > timeout:
            raise SystemExit(f"only {running(api, ns, label)} of {n} pods Running after {timeout} s")
        time.sleep(0.1)
    return time.perf_counter()


def wait_gone(api, ns, label, timeout=600) -> None:
    t0 = time.perf_counter()
    while r.list_(api, r.PODS, ns, label_selector=label)[0]:
        if time.perf_counter() - t0 > timeout:
            raise SystemExit("pods not gone")
        time.sleep(0.2)


def deployment(name: str, n: int, host_network: bool) -> dict:
    labels = {"app": name}
    spec = {"terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "localhost/busybox:latest",
                            "imagePullPolicy": "IfNotPresent"}]}
    if host_network:
        spec["hostNetwork"] = True
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"replicas": n, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up")
    a = ap.parse_args()
    sb = Sandbox(f"bk{os.getpid() % 10000}", nodes=3)
    try:
        t0 = time.perf_counter()
        sb.up(services=())
        t_net = time.perf_counter()
        from pacific.sandbox import services
        services.kube_control_plane(sb)
        t_cp = time.perf_counter()
        for svc in services.DEFAULT_SERVICES[1:]:
            svc(sb)
        t_all = time.perf_counter()
        api = client.load(kubeconfig_path(sb))
        r.create(api, r.DEPLOYMENTS, deployment("first", 1, False), "default")
        t_first = wait_count(api, "default", "app=first", 1, 120)
        print("1. sandbox up (3 nodes), seconds from the start of up():")
        print(f"   network ready {t_net - t0:.2f}; control plane ready {t_cp - t0:.2f}; "
              f"all services {t_all - t0:.2f}; first pod Running {t_first - t0:.2f}")
        kubectl(sb, "delete", "deployment", "first")
        ctl = [sb.daemon_pid(controllers.controller_tag(i)) for i in (1, 2)]
        print("2./3. kubectl create deployment --replicas=N until all Running with an address:")
        for n in a.sizes:
            for host in (True, False):
                name = f"h{n}" if host else f"p{n}"
                c0 = sum(cpu_seconds(p) for p in ctl if p)
                t0 = time.perf_counter()
                if host:
                    r.create(api, r.DEPLOYMENTS, deployment(name, n, True), "default")
                else:
                    kubectl(sb, "create", "deployment", name, "--image=localhost/busybox:latest",
                            f"--replicas={n}")
                t1 = wait_count(api, "default", f"app={name}", n, 1200)
                cpu = sum(cpu_seconds(p) for p in ctl if p) - c0
                what = "hostNetwork (baseline)" if host else "pod network (Pacific)"
                print(f"   N={n:>5} {what:<24} {t1 - t0:7.2f} s  {n / (t1 - t0):7.1f} pods/s"
                      + ("" if host else f"  controller CPU {cpu / n * 1000:.2f} ms per pod"),
                      flush=True)
                kubectl(sb, "delete", "deployment", name)
                wait_gone(api, "default", f"app={name}")
    finally:
        if not a.keep:
            sb.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
