#!/usr/bin/env python3
"""Services in OVN: programming time, EndpointSlice propagation, data path cost.

    .venv/bin/python bench/bench_services.py                  # all three parts
    .venv/bin/python bench/bench_services.py --only 1 --services 200

1. 1,000 Services x 10 endpoints programmed from scratch: the Services and their
   EndpointSlices exist in kube-apiserver (no nodes), a pacific-controller
   starts; seconds until every balancer is in NB with its 10 backends.  Baseline
   in the same run: the same controller start with no Service (caches, topology).
2. In the 3-node sandbox: an EndpointSlice change (one endpoint replaced) ->
   the balancer rewritten in NB -> in force on every chassis (nb_cfg -> hv_cfg,
   `ovn-nbctl --wait=hv sync`), p50/p99 over 40 changes.
3. Same sandbox, a client pod on node1 and a server pod on node2: TCP request
   latency (connect + one exchange, 200 requests) and iperf3 throughput (3 s),
   through the ClusterIP against the pod's own address in the same run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "tests" / "lib"))

from controller_fixtures import ControlPlane, wait_until  # noqa: E402
from pacific import names  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402

NETCHECK = REPO / "tests" / "e2e" / "netcheck.py"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def slice_body(ns, svc, ips, port=8080, name=None):
    return {"apiVersion": "discovery.k8s.io/v1beta1", "kind": "EndpointSlice",
            "metadata": {"name": name or f"{svc}-bench", "namespace": ns,
                         "labels": {"kubernetes.io/service-name": svc,
                                    "endpointslice.kubernetes.io/managed-by": "bench"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}} for ip in ips]}


def service_body(ns, name, selector=None):
    spec = {"ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}
    if selector:
        spec["selector"] = selector
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": spec}


def balancers_done(cp, n, per) -> bool:
    with cp.nb.ovsdb_connection.lock:
        rows = [row for row in cp.nb.tables["Load_Balancer"].rows.values()
                if row.name.startswith("svc:bench/")]
        return len(rows) == n and all(
            len(v.split(",")) == per for row in rows for v in row.vips.values())


def part1(tmp: Path, n: int, per: int) -> None:
    print(f"1. {n} Services x {per} endpoints programmed from scratch:", flush=True)
    res = r.ENDPOINTSLICES_V1BETA1
    with ControlPlane(tmp / "p1") as cp:
        r.create(cp.kube, r.NAMESPACES, {"metadata": {"name": "bench"}})
        # baseline: the controller's start with nothing to program
        t0 = time.perf_counter()
        cp.start_controller("c0", leader_elect=False)
        wait_until(lambda: "controller ready" in cp.log("c0"), 120, interval=0.05)
        base = time.perf_counter() - t0
        cp.kill_controller("c0")
        local = threading.local()

        def make(i):
            if not hasattr(local, "api"):
                local.api = client.load(str(cp.kubeconfig))
            r.create(local.api, r.SERVICES, service_body("bench", f"s{i}"), "bench")
            ips = [f"10.{16 + i // 25000}.{(i * per + k) // 250 % 250}.{(i * per + k) % 250 + 2}"
                   for k in range(per)]
            r.create(local.api, res, slice_body("bench", f"s{i}", ips), "bench")
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(make, range(n)))
        t0 = time.perf_counter()
        cp.start_controller("c1", leader_elect=False)
        wait_until(lambda: balancers_done(cp, n, per), 600, interval=0.1,
                   what="all balancers programmed")
        dt = time.perf_counter() - t0
        print(f"   controller start, nothing to program (baseline): {base:6.2f} s")
        print(f"   controller start -> {n} balancers x {per} backends in NB: {dt:6.2f} s "
              f"(goal <= 10 s)", flush=True)


def part2_3(args) -> None:
    from pacific.sandbox import cnipods
    from pacific.sandbox.cluster import Sandbox
    from pacific.sandbox.k8s.sandbox import kubeconfig_path
    sb = Sandbox(f"bs{os.getpid() % 10000}", nodes=3)
    try:
        sb.up()
        api = client.load(kubeconfig_path(sb))
        r.create(api, r.NAMESPACES, {"metadata": {"name": "bench"}})
        if 2 in args.only:
            print("2. EndpointSlice change -> NB -> every chassis (40 changes):", flush=True)
            r.create(api, r.SERVICES, service_body("bench", "manual"), "bench")
            ips = [f"10.16.200.{k}" for k in range(2, 12)]
            r.create(api, r.ENDPOINTSLICES_V1BETA1, slice_body("bench", "manual", ips), "bench")
            lb_name = names.service_lb_name("bench", "manual", "tcp")
            to_nb, to_hv = [], []
            for k in range(40):
                ips[k % 10] = f"10.16.201.{k + 2}"
                want = f"10.16.201.{k + 2}:8080"
                cur = r.get(api, r.ENDPOINTSLICES_V1BETA1, "manual-bench", "bench")
                cur["endpoints"] = slice_body("bench", "manual", ips)["endpoints"]
                t0 = time.perf_counter()
                r.replace(api, r.ENDPOINTSLICES_V1BETA1, cur, "bench")
                while want not in sb.nbctl("--columns=vips", "find", "Load_Balancer",
                                           f'name="{lb_name}"'):
                    time.sleep(0.002)
                t1 = time.perf_counter()
                sb.nbctl("--wait=hv", "sync")
                t2 = time.perf_counter()
                to_nb.append(t1 - t0)
                to_hv.append(t2 - t0)
            for what, xs in (("slice replaced -> balancer in NB", to_nb),
                             ("slice replaced -> in force on every chassis", to_hv)):
                print(f"   {what:<45} p50 {pct(xs, 50) * 1000:6.1f} ms  p99 "
                      f"{pct(xs, 99) * 1000:6.1f} ms  max {max(xs) * 1000:6.1f} ms", flush=True)
        if 3 in args.only:
            print("3. data path: ClusterIP against the pod's own address:", flush=True)
            cnipods.add_pod(sb, "bench", "server", "node2", labels={"app": "srv"}, api=api)
            cnipods.add_pod(sb, "bench", "client", "node1", api=api)
            cnipods.detach_pod(sb, "bench", "server", [sys.executable, str(NETCHECK), "serve",
                                                       "8080", "server"])
            cnipods.detach_pod(sb, "bench", "server", ["iperf3", "-s", "-p", "5201"])
            body = service_body("bench", "srv", {"app": "srv"})
            body["spec"]["ports"].append({"name": "iperf", "port": 5201, "protocol": "TCP"})
            r.create(api, r.SERVICES, body, "bench")
            vip = r.get(api, r.SERVICES, "srv", "bench")["spec"]["clusterIP"]
            pod_ip = cnipods.load(sb, "bench", "server").ip
            client_ns = cnipods.load(sb, "bench", "client").netns
            lat_script = (
                "import socket,sys,time\n"
                "ip,port,n=sys.argv[1],int(sys.argv[2]),int(sys.argv[3]);out=[]\n"
                "for _ in range(n):\n"
                "  t=time.perf_counter();s=socket.create_connection((ip,port),2)\n"
                "  s.sendall(b'x');s.recv(100);s.close();out.append(time.perf_counter()-t)\n"
                "print(' '.join(map(str,out)))\n")
            def latency(ip, port):
                wait_until(lambda: sb.exec(client_ns, [sys.executable, str(NETCHECK), "ask",
                                                       "tcp", ip, str(port), "1"],
                                           check=False).returncode == 0, 30)
                out = sb.exec(client_ns, [sys.executable, "-c", lat_script, ip, str(port), "200"])
                return [float(x) for x in out.stdout.split()]

            def iperf(ip):
                out = sb.exec(client_ns, ["iperf3", "-c", ip, "-p", "5201", "-t", "3", "-O", "1",
                                          "-J"], timeout=30)
                return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
            rows = []
            for _ in range(2):      # alternate, so drift hits both alike
                for what, ip, port in (("pod address", pod_ip, 8080), ("ClusterIP", vip, 80)):
                    rows.append((what, latency(ip, port), iperf(ip)))
            for what in ("pod address", "ClusterIP"):
                lat = [x for w, xs, _ in rows if w == what for x in xs]
                tput = [t for w, _, t in rows if w == what]
                print(f"   {what:<12} request p50 {statistics.median(lat) * 1000:6.2f} ms  "
                      f"p99 {pct(lat, 99) * 1000:6.2f} ms   iperf3 "
                      f"{statistics.mean(tput):7.1f} Mbit/s", flush=True)
    finally:
        if not args.keep:
            sb.down()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", type=int, action="append", choices=(1, 2, 3))
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--endpoints", type=int, default=10)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    args.only = set(args.only or (1, 2, 3))
    tmp = Path(tempfile.mkdtemp(prefix="bench-services-"))
    if 1 in args.only:
        part1(tmp, args.services, args.endpoints)
    if args.only & {2, 3}:
        part2_3(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
