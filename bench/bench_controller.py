#!/usr/bin/env python3
"""Controller benchmark: NB programming rate, restart/rebuild time, memory.

    .venv/bin/python bench/bench_controller.py            # full run (a few minutes)
    .venv/bin/python bench/bench_controller.py --quick    # smaller sizes
    .venv/bin/python bench/bench_controller.py --baseline-rev 25cbc3a --only 1
        # the same parts, then again with the controller (and everything it
        # imports) of that git revision, extracted with `git archive`: a
        # before/after comparison in one run on this noisy machine

1. programming: pods allocated (IPAM) and programmed into NB (switch port with
   addresses + port security) per second by 16 concurrent reconcile workers
   through the controller's NBWriter: batched (default settings) against the
   baseline of one NB transaction per pod, same run, same ovsdb-server; 1,000
   and 10,000 pods.
2. end to end: 1,000 pods created in kube-apiserver, time until the
   controller (a real `pacific-controller` process) has annotated all of them,
   and the controller's CPU time per pod (utime+stime: robust on a busy machine).
3. rebuild: a new leader's restart work with N IP objects in
   kube-apiserver: list+watch sync of the IP objects plus IPAM restore, N = 10,000
   and 100,000 (what `rebuild.rebuild` does before workers start).
4. memory: RSS of a `pacific-controller` process started against 100,000
   allocated pods (pods and IP objects in kube-apiserver, NB empty) once it has
   re-programmed all their ports.
Everything runs on loopback / unix sockets in a temporary directory.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# --tree DIR: import pacific (and the test fixtures, which start the controller
# from their own tree) from another checkout, for a baseline run
TREE = Path(sys.argv[sys.argv.index("--tree") + 1]) if "--tree" in sys.argv else REPO
sys.path.insert(0, str(TREE))
sys.path.insert(0, str(TREE / "tests" / "e2e"))

from controller_fixtures import ControlPlane, wait_until  # noqa: E402
from pacific import names  # noqa: E402
try:   # the controller's record; older revisions (--baseline-rev) wrote several annotations
    from pacific import contract  # noqa: E402
except ImportError:
    contract = None
from pacific.controller import model  # noqa: E402
try:   # the startup topology; older revisions (--baseline-rev) called it topology.py
    from pacific.controller import cluster_router as topology  # noqa: E402
except ImportError:
    from pacific.controller import topology  # noqa: E402
# a namespaced object's key; older revisions (--baseline-rev) called it pod_key
object_key = getattr(model, "object_key", None) or getattr(model, "pod_key")
try:   # the NB ensure commands; older revisions (--baseline-rev) kept them in the controller
    from pacific.ovn import ensure as nbcmds  # noqa: E402
except ImportError:
    from pacific.controller import nbcmds  # noqa: E402
from pacific.controller.config import Config  # noqa: E402
from pacific.controller.nbwriter import NBWriter  # noqa: E402
from pacific.controller.pod import pod_ids  # noqa: E402
from pacific.controller.subnet import subnet_ids  # noqa: E402
from pacific.ipam import IPAM  # noqa: E402
from pacific.kube import resources as r  # noqa: E402
from pacific.kube.informer import Informer  # noqa: E402

WORKERS = int(os.environ.get("BENCH_WORKERS", "16"))
BIG_CIDR = "10.16.0.0/14"   # 262,144 addresses: room for 100,000 pods in one subnet


def cpu_seconds(pid: int) -> float:
    """utime+stime of a process (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def json_parser() -> str:
    import ovs.json
    return ovs.json.PARSER


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def program(cp: ControlPlane, n: int, batch: bool, switch: str) -> float:
    """n pods: IPAM allocate + EnsurePort through the writer, WORKERS threads."""
    ipam = IPAM()
    ipam.add_subnet(switch, "10.32.0.0/16")
    lock = threading.Lock()
    # the controller's own batching settings (Config defaults)
    cfg = Config(nb_remote="")
    w = NBWriter(cp.nb, batch=batch, max_batch=cfg.batch_max, max_delay=cfg.batch_delay).start()
    ids = subnet_ids(switch)
    w.run([lambda api: nbcmds.EnsureRouter(api, names.CLUSTER_ROUTER, topology.cluster_ids()),
           lambda api: nbcmds.EnsureSwitch(api, switch, ids),
           *topology.router_link_builders(switch, "10.32.0.1", 16, ids)])

    def work(k: int) -> None:
        for i in range(k, n, WORKERS):
            key = f"bench/p{i}"
            with lock:
                a = ipam.allocate(switch, key)
            addr = f"{a.mac} {a.ip}"
            lsp = names.pod_lsp_name("bench", f"p{i}")
            w.run([lambda api: nbcmds.EnsurePort(api, switch, lsp, [addr], [addr],
                                                 pod_ids("bench", f"p{i}", switch))], what=lsp)

    t0 = time.perf_counter()
    c0 = time.process_time()
    ts = [threading.Thread(target=work, args=(k,)) for k in range(WORKERS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    txns = w.transactions
    w.stop()
    assert len(cp.nb.lookup("Logical_Switch", switch).ports) == n + 1
    # clean up for the next round (one transaction)
    cp.nb.commit(nbcmds.DeleteSwitch(cp.nb, switch))
    print(f"  {n:>6} pods {'batched  ' if batch else 'unbatched'}: {dt:7.2f} s  "
          f"{n / dt:8.0f} pods/s  ({txns} transactions, {cpu / n * 1000:.2f} ms CPU per pod)", flush=True)
    return n / dt


def fill_store(cp: ControlPlane, n: int, with_pods: bool, workers: int = 16) -> None:
    """Create n allocated pods (and their IP objects) through kube-apiserver, 16
    requests in flight: what a controller finds when it restarts."""
    from concurrent.futures import ThreadPoolExecutor
    from pacific.kube import client
    ipam = IPAM()
    ipam.add_subnet(names.DEFAULT_SUBNET, BIG_CIDR)
    for ns in ("bench",):
        if r.get(cp.kube, r.NAMESPACES, ns) is None:
            r.create(cp.kube, r.NAMESPACES, {"metadata": {"name": ns}})
    local = threading.local()

    def one(i: int) -> None:
        if not hasattr(local, "api"):
            local.api = client.load(str(cp.kubeconfig))
        api = local.api
        a = ipam_results[i]
        node = f"node{i % 3 + 1}"
        r.create(api, r.IPS, model.ip_object("bench", f"p{i}", a.subnet, a.ip, a.mac, node))
        if with_pods:
            port = names.pod_lsp_name("bench", f"p{i}")
            pod = r.create(api, r.PODS, {"metadata": {"name": f"p{i}"},
                                         "spec": {"nodeName": node,
                                                  "containers": [{"name": "c", "image": "pause"}]}},
                           "bench")
            if contract:   # the record names the uid the server gave the pod
                rec = contract.PodRecord(uid=pod["metadata"]["uid"], port=port, ip=a.ip,
                                         mac=a.mac, cidr=a.cidr, gateway=a.gateway, subnet=a.subnet)
                ann = {k: v for k, v in rec.annotations().items() if v is not None}
            else:
                ann = {k: v for k, v in model.pod_annotations(a.ip, a.mac, a.cidr, a.gateway,
                                                              a.subnet, port).items()
                       if v is not None}
            r.patch_merge(api, r.PODS, f"p{i}", {"metadata": {"annotations": ann}}, "bench")

    ipam_results = [ipam.allocate(names.DEFAULT_SUBNET, f"bench/p{i}") for i in range(n)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        for k, _ in enumerate(pool.map(one, range(n)), 1):
            if k % 10000 == 0:
                print(f"    ... {k} of {n} created ({time.perf_counter() - t0:.0f} s)", flush=True)


def rebuild_time(workdir: Path, n: int) -> tuple[float, float]:
    with ControlPlane(workdir) as cp:
        fill_store(cp, n, with_pods=False)
        t0 = time.perf_counter()
        inf = Informer(cp.kube, r.IPS).start()
        assert inf.wait_synced(300)
        t1 = time.perf_counter()
        ipam = IPAM()
        ipam.add_subnet(names.DEFAULT_SUBNET, BIG_CIDR)
        for ip in inf.list():
            s = ip["spec"]
            ipam.restore(s["subnet"], object_key(s["namespace"], s["pod"]), s["ipAddress"], s["macAddress"])
        t2 = time.perf_counter()
        inf.stop()
        assert ipam.usage(names.DEFAULT_SUBNET)[0] == n
    print(f"  {n:>6} IP objects: list+sync {t1 - t0:6.2f} s, IPAM restore {t2 - t1:6.2f} s, "
          f"total {t2 - t0:6.2f} s", flush=True)
    return t1 - t0, t2 - t1


def allocated(pod: dict) -> bool:
    """The controller has recorded the pod's allocation (either contract)."""
    if contract:
        return contract.own_record(pod) is not None
    return model.annotations(pod).get("pacific.io/allocated") == "true"


def end_to_end(workdir: Path, n: int) -> float:
    with ControlPlane(workdir) as cp:
        r.create(cp.kube, r.NAMESPACES, {"metadata": {"name": "bench"}})
        p = cp.start_controller("c1", leader_elect=False)
        wait_until(lambda: cp.nb.lookup("Logical_Switch", names.DEFAULT_SUBNET, default=None), 60,
                   what="default subnet")
        inf = Informer(cp.kube, r.PODS, namespace="bench").start()
        inf.wait_synced(30)
        t0 = time.perf_counter()
        c0 = cpu_seconds(p.pid)
        for i in range(n):
            r.create(cp.kube, r.PODS, {"metadata": {"name": f"p{i}"}, "spec": {
                "nodeName": "node1", "containers": [{"name": "c", "image": "pause"}]}}, "bench")
        t1 = time.perf_counter()
        for i in range(n):
            inf.wait_for(f"bench/p{i}", allocated, 300)
        t2 = time.perf_counter()
        cpu = cpu_seconds(p.pid) - c0
        inf.stop()
    print(f"  {n:>6} pods via the API: created in {t1 - t0:.2f} s, all allocated+programmed+annotated "
          f"after {t2 - t0:.2f} s: {n / (t2 - t0):.0f} pods/s end to end; controller CPU "
          f"{cpu / n * 1000:.2f} ms per pod", flush=True)
    return n / (t2 - t0)


def memory(workdir: Path, n: int, extra: tuple = ()) -> None:
    with ControlPlane(workdir) as cp:
        fill_store(cp, n, with_pods=True)
        t0 = time.perf_counter()
        p = cp.start_controller("c1", leader_elect=False, extra=("--default-cidr", BIG_CIDR,
                                                                     "--gc-interval", "3600", *extra))
        wait_until(lambda: "controller ready" in cp.log("c1"), 600, interval=0.2, what="controller ready")
        t1 = time.perf_counter()
        def ports() -> int:
            with cp.nb.ovsdb_connection.lock:   # the IDL thread updates the rows
                return len(cp.nb.lookup("Logical_Switch", names.DEFAULT_SUBNET).ports)
        wait_until(lambda: ports() >= n + 1, 900, interval=0.5, what="all ports programmed")
        t2 = time.perf_counter()
        time.sleep(1)
        rss = rss_mib(p.pid)
        cpu = cpu_seconds(p.pid)
    print(f"  {n:>6} pods: restart to ready (caches synced, IPAM rebuilt) {t1 - t0:.1f} s, "
          f"all {n} ports re-programmed after {t2 - t0:.1f} s (controller CPU {cpu:.0f} s); "
          f"controller RSS {rss:.0f} MiB", flush=True)


def run_baseline(rev: str, argv: list[str]) -> int:
    """Run this script again with pacific (and the test fixtures) taken from
    git revision `rev`, extracted read-only into a temporary directory."""
    tree = Path(tempfile.mkdtemp(prefix="bench-controller-baseline-"))
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        print(f"\n=== baseline: controller of revision {rev} ===", flush=True)
        return subprocess.run([sys.executable, __file__, *argv, "--tree", str(tree)]).returncode
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--only", type=int, action="append", choices=(1, 2, 3, 4),
                    help="run only these parts (repeatable)")
    ap.add_argument("--baseline-rev", metavar="REV",
                    help="afterwards, run the same parts with the code of this git revision")
    ap.add_argument("--controller-arg", action="append", metavar="ARG",
                    help="extra pacific-controller argument for part 4 (repeatable), e.g. "
                    "--controller-arg=--no-isolation")
    ap.add_argument("--tree", help=argparse.SUPPRESS)   # internal: code tree of a baseline run
    args = ap.parse_args()
    big = 10_000 if not args.quick else 2_000
    huge = 100_000 if not args.quick else 10_000
    tmp = Path(tempfile.mkdtemp(prefix="bench-controller-"))
    try:
        print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; {WORKERS} workers; "
              f"code: {TREE}")
        parts = set(args.only or (1, 2, 3, 4))
        if 1 in parts:
            print("1. IPAM + NB programming (pods/s), batched vs one transaction per pod:")
            with ControlPlane(tmp / "prog") as cp:
                print(f"  (OVSDB JSON parser in this process: {json_parser()})")
                for n in (1_000, big):
                    program(cp, n, True, f"b{n}")
                    program(cp, n, False, f"u{n}")
        if 2 in parts:
            print("2. end to end through the API emulator and a pacific-controller process:")
            end_to_end(tmp / "e2e", 1_000)
        if 3 in parts:
            print("3. restart: IP objects listed + IPAM rebuilt:")
            for n in (big, huge):
                rebuild_time(tmp / f"rebuild{n}", n)
        if 4 in parts:
            print("4. controller process at scale:")
            memory(tmp / "mem", huge, tuple(args.controller_arg or ()))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.baseline_rev:
        again, skip = [], False
        for a in sys.argv[1:]:
            if skip or a.startswith("--baseline-rev="):
                skip = False
            elif a == "--baseline-rev":
                skip = True
            else:
                again.append(a)
        return run_baseline(args.baseline_rev, again)
    return 0


if __name__ == "__main__":
    sys.exit(main())
