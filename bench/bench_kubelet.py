#!/usr/bin/env python3
"""Pod created -> Running with an address, on real kubelet nodes: Pacific's
conflist against Debian's bridge + host-local, on the same nodes in one run.

A 2-node sandbox with kubelets (`pacific sandbox up --kubelet`: containerd 1.6 +
kubelet v1.20.2 per node).  Each node's containerd reads its CNI configuration
from the directory pacific-node writes `10-pacific.conflist` into; for the
reference rounds the benchmark puts `00-bench-bridge.conflist` (bridge `cni0` in
the node's namespace, host-local, a /24 per node) beside it, which containerd
takes first (max_conf_num = 1, reloaded on file events), and removes it again for
the Pacific rounds.  Rounds alternate, so machine noise hits both.

Measured per pod: from just before the Pod is created (scheduler places it) to
the first time the API reports it Running with a podIP (polled every 20 ms).
Single pods one at a time (--single N per plugin) and bursts of 20 created at
once (--bursts B per plugin).  Pods use localhost/busybox:latest with
imagePullPolicy IfNotPresent.

With --runner the same rounds (Pacific only) run afterwards on a 2-node sandbox
whose pods are made by the lighter pod runners, and both report the cycle the
tests use (`pacific sandbox pod add` then `delete`) and the sandbox's up/down
times: the figures that decide whether the lighter mode pays for itself.

    .venv/bin/python bench/bench_kubelet.py [--single 20] [--bursts 3] [--runner]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import logging
import os
import platform
import statistics
import sys
import time

from pacific.kube import client as kclient
from pacific.kube import resources as kr
from pacific.sandbox import nodedaemons
from pacific.sandbox.cluster import Sandbox
from pacific.sandbox.k8s.sandbox import kubeconfig_path

BURST = 20
REF_CONF = "00-bench-bridge.conflist"
NS = "bench"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def ref_conflist(sb, node) -> dict:
    i = node.index
    return {"cniVersion": "0.4.0", "name": "bench-bridge", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
         "hairpinMode": True, "mtu": node.mtu,
         "ipam": {"type": "host-local", "dataDir": os.path.join(sb.dir, f"bench-ipam-{i}"),
                  "ranges": [[{"subnet": f"10.88.{i}.0/24", "gateway": f"10.88.{i}.1"}]],
                  "routes": [{"dst": "0.0.0.0/0"}]}}]}


def set_mode(sb, mode: str) -> None:
    for n in sb.nodes:
        p = nodedaemons.paths(n)
        path = os.path.join(p.conf_dir, REF_CONF)
        if mode == "reference":
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump(ref_conflist(sb, n), f)
            os.replace(tmp, path)
            for plugin in ("bridge", "host-local"):
                link = os.path.join(p.bin_dir, plugin)
                if not os.path.exists(link):
                    os.symlink(f"/usr/lib/cni/{plugin}", link)
        elif os.path.exists(path):
            os.unlink(path)
    time.sleep(1.0)    # containerd reloads its CNI configuration on the file event


def pod_body(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"bench": "kubelet"}},
            "spec": {"terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": "localhost/busybox:latest",
                                     "imagePullPolicy": "IfNotPresent"}]}}


def start_and_time(api, names_: list[str], timeout: float = 120.0) -> dict[str, float]:
    """Create the pods at once; seconds from each create to Running with podIP."""
    t0 = {}

    def create(n):
        t0[n] = time.monotonic()
        kr.create(api, kr.PODS, pod_body(n), namespace=NS)
    with concurrent.futures.ThreadPoolExecutor(len(names_)) as ex:
        list(ex.map(create, names_))
    done: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(names_):
        items, _ = kr.list_(api, kr.PODS, NS, label_selector="bench=kubelet")
        now = time.monotonic()
        for p in items:
            n, st = p["metadata"]["name"], p.get("status") or {}
            if n in t0 and n not in done and st.get("phase") == "Running" and st.get("podIP"):
                done[n] = now - t0[n]
        if now > deadline:
            raise SystemExit(f"pods not Running after {timeout:.0f} s: "
                             f"{sorted(set(names_) - set(done))}")
        time.sleep(0.02)
    return done


def delete_all(api) -> None:
    items, _ = kr.list_(api, kr.PODS, NS, label_selector="bench=kubelet")
    for p in items:
        kr.delete(api, kr.PODS, p["metadata"]["name"], namespace=NS, grace_period=0)
    while kr.list_(api, kr.PODS, NS, label_selector="bench=kubelet")[0]:
        time.sleep(0.1)


def summary(xs):
    return {"n": len(xs), "p50_ms": round(pct(xs, 50) * 1000),
            "p90_ms": round(pct(xs, 90) * 1000), "p99_ms": round(pct(xs, 99) * 1000),
            "mean_ms": round(statistics.mean(xs) * 1000)}


def sandbox_pod_cycle(sb, api, n: int) -> dict:
    """What the tests do: `pacific sandbox pod add` then `delete`, one pod at a time
    (add returns once the pod is Running and its namespace is known; delete once
    the pod's network is gone)."""
    from pacific.sandbox import cnipods
    adds, dels = [], []
    for i in range(n):
        t = time.monotonic()
        cnipods.add_pod(sb, NS, f"cyc{i}", sb.nodes[i % len(sb.nodes)].name, api=api)
        adds.append(time.monotonic() - t)
        t = time.monotonic()
        cnipods.delete_pod(sb, NS, f"cyc{i}", api=api)
        dels.append(time.monotonic() - t)
    return {"add": summary(adds), "delete": summary(dels)}


def runner_rounds(a) -> dict:
    """The same single pods and bursts, and the add/delete cycle, on pod-runner nodes."""
    t0 = time.monotonic()
    sb = Sandbox(a.name + "r", nodes=2, kubelet=False)
    sb.up()
    out = {"sandbox_up_s": round(time.monotonic() - t0, 1)}
    api = kclient.load(kubeconfig_path(sb))
    try:
        kr.create(api, kr.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": NS}})
        start_and_time(api, ["w0", "w1"])
        delete_all(api)
        single, burst = [], []
        for i in range(a.single):
            single += start_and_time(api, [f"s{i}"]).values()
            delete_all(api)
        for b in range(a.bursts):
            burst += start_and_time(api, [f"b{b}-{i}" for i in range(BURST)]).values()
            delete_all(api)
        out.update(single=summary(single), burst=summary(burst),
                   sandbox_pod_cycle=sandbox_pod_cycle(sb, api, a.single))
    finally:
        t0 = time.monotonic()
        sb.down()
        out["sandbox_down_s"] = round(time.monotonic() - t0, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--single", type=int, default=20, help="single pods per plugin")
    ap.add_argument("--bursts", type=int, default=3, help="bursts of 20 per plugin")
    ap.add_argument("--name", default="benchkubelet")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--runner", action="store_true",
                    help="also measure pod-runner nodes (pacific.sandbox.k8s.podrunner), to "
                    "weigh the lighter mode against kubelets")
    a = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    t0 = time.monotonic()
    sb = Sandbox(a.name, nodes=2, kubelet=True)
    sb.up()
    up_s = time.monotonic() - t0
    api = kclient.load(kubeconfig_path(sb))
    out = {"machine": f"{platform.node()} {os.cpu_count()} cores, {platform.platform()}",
           "sandbox_up_s": round(up_s, 1)}
    try:
        try:
            kr.create(api, kr.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": NS}})
        except Exception:
            pass
        res = {m: {"single": [], "burst": []} for m in ("pacific", "reference")}
        seq = 0
        for _ in range(2):            # warm-up: images, first pod per node, both plugins
            for mode in ("pacific", "reference"):
                set_mode(sb, mode)
                seq += 1
                start_and_time(api, [f"w{seq}-{i}" for i in range(2)])
                delete_all(api)
        for i in range(a.single):
            for mode in ("pacific", "reference") if i % 2 == 0 else ("reference", "pacific"):
                set_mode(sb, mode)
                seq += 1
                res[mode]["single"] += start_and_time(api, [f"s{seq}"]).values()
                delete_all(api)
        for b in range(a.bursts):
            for mode in ("pacific", "reference") if b % 2 == 0 else ("reference", "pacific"):
                set_mode(sb, mode)
                seq += 1
                res[mode]["burst"] += start_and_time(
                    api, [f"b{seq}-{i}" for i in range(BURST)]).values()
                delete_all(api)
        set_mode(sb, "pacific")
        for mode, r in res.items():
            out[mode] = {k: summary(v) for k, v in r.items()}
        for k in ("single", "burst"):
            out[f"p99_ratio_{k}"] = round(out["pacific"][k]["p99_ms"] /
                                          out["reference"][k]["p99_ms"], 2)
        out["sandbox_pod_cycle"] = sandbox_pod_cycle(sb, api, a.single)
    finally:
        if not a.keep:
            t0 = time.monotonic()
            sb.down()
            out["sandbox_down_s"] = round(time.monotonic() - t0, 1)
    if a.runner:
        out["runner"] = runner_rounds(a)
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
