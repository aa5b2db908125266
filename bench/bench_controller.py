#!/usr/bin/env python3
"""Controller benchmark: NB programming rate, restart/rebuild time, memory;
dual-stack (IPv4+IPv6) against IPv4 in parts 1 and 2.

    .venv/bin/python bench/bench_controller.py            # full run (a few minutes)
    .venv/bin/python bench/bench_controller.py --quick    # smaller sizes, one round each
    .venv/bin/python bench/bench_controller.py --quick --only 1 --only 2
        # the smallest run of the two parts with a dual-stack variant
    .venv/bin/python bench/bench_controller.py --no-dual-stack   # IPv4 only, as before
    .venv/bin/python bench/bench_controller.py --baseline-rev 25cbc3a --only 1
        # the same parts, then again with the controller (and everything it
        # imports) of that git revision, extracted with `git archive`: a
        # before/after comparison in one run on this noisy machine

1. programming: pods allocated (IPAM) and programmed into NB (switch port with
   addresses + port security) per second by 16 concurrent reconcile workers
   through the controller's NBWriter: batched (default settings) against the
   baseline of one NB transaction per pod, same run, same ovsdb-server; 1,000
   and 10,000 pods.
   "dual-stack" rows: the same batched programming on a dual-stack switch
   (IPAM with an IPv4 and an IPv6 pool, each port's addresses and port
   security "mac v4 v6", the router port with both gateways), taking turns with
   the IPv4 batched row (IPv4, dual, IPv4, dual... --rounds each); the ratio
   line is the median dual-stack pods/s over the median IPv4 one (issue 27's
   goal: >= 0.8x).
2. end to end: 1,000 pods created in kube-apiserver, time until the
   controller (a real `pacific-controller` process) has annotated all of them,
   and the controller's CPU time per pod (utime+stime: robust on a busy machine).
   "dual-stack" rows: the same with the controller run with --ipv6-subnets and
   a dual-stack default Subnet (10.16.0.0/16,fd00:16::/64), so every pod gets
   an address of each family; a fresh control plane per run, the runs taking
   turns with the IPv4 ones; ratio lines as in part 1 (pods/s goal >= 0.8x).
3. rebuild: a new leader's restart work with N IP objects in
   kube-apiserver: list+watch sync of the IP objects plus IPAM restore, N = 10,000
   and 100,000 (what `rebuild.rebuild` does before workers start).
4. memory: RSS of a `pacific-controller` process started against 100,000
   allocated pods (pods and IP objects in kube-apiserver, NB empty) once it has
   re-programmed all their ports.
Everything runs on loopback / unix sockets in a temporary directory.  With
--baseline-rev (or --tree) a revision without dual-stack Subnets runs the IPv4
rows only.
"""
from __future__ import annotations

import argparse
import inspect
import ipaddress
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
# --tree DIR: import pacific (and the test fixtures, which start the controller
# from their own tree) from another checkout, for a baseline run
TREE = Path(sys.argv[sys.argv.index("--tree") + 1]) if "--tree" in sys.argv else REPO
sys.path.insert(0, str(TREE))
sys.path.insert(0, str(TREE / "tests" / "e2e"))
sys.path.insert(0, str(TREE / "tests" / "lib"))

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
PROG_CIDRS = ("10.32.0.0/16", "fd00:32::/64")   # part 1's switch: IPv4, and IPv6 when dual-stack
# dual-stack Subnets (the controller's alpha --ipv6-subnets); older revisions
# (--baseline-rev) have none and run the IPv4 rows only
DUAL_STACK = "ipv6_subnets" in getattr(Config, "__dataclass_fields__", {})
DUAL_GOAL = 0.8   # issue 27: dual-stack pods/s at least 0.8x IPv4's


class Rate(NamedTuple):
    """One run's throughput: pods per second, and CPU milliseconds per pod."""
    pods_per_s: float
    cpu_ms_per_pod: float


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


def router_link(switch: str, cidrs: tuple[str, ...]) -> list:
    """The controller's builders linking `switch` to the cluster router at each
    CIDR's first address (both families for a dual-stack switch); older
    revisions (--baseline-rev) took one gateway and its prefix length."""
    nets = [ipaddress.ip_network(c) for c in cidrs]
    gateway = str(nets[0].network_address + 1)
    ids = subnet_ids(switch)
    if "networks" in inspect.signature(topology.router_link_builders).parameters:
        networks = [f"{net.network_address + 1}/{net.prefixlen}" for net in nets]
        return topology.router_link_builders(switch, gateway, networks, ids)
    return topology.router_link_builders(switch, gateway, nets[0].prefixlen, ids)


def program(cp: ControlPlane, n: int, batch: bool, switch: str, dual: bool = False) -> Rate:
    """n pods: IPAM allocate + EnsurePort through the writer, WORKERS threads.
    dual: a dual-stack switch, each pod an address of each family (its port's
    addresses and port security "mac v4 v6"), as the controller programs a
    dual-stack Subnet's pods."""
    cidrs = PROG_CIDRS if dual else PROG_CIDRS[:1]
    ipam = IPAM()
    ipam.add_subnet(switch, ",".join(cidrs))
    lock = threading.Lock()
    # the controller's own batching settings (Config defaults)
    cfg = Config(nb_remote="")
    w = NBWriter(cp.nb, batch=batch, max_batch=cfg.batch_max, max_delay=cfg.batch_delay).start()
    ids = subnet_ids(switch)
    w.run([lambda api: nbcmds.EnsureRouter(api, names.CLUSTER_ROUTER, topology.cluster_ids()),
           lambda api: nbcmds.EnsureSwitch(api, switch, ids),
           *router_link(switch, cidrs)])

    def work(k: int) -> None:
        for i in range(k, n, WORKERS):
            key = f"bench/p{i}"
            with lock:
                a = ipam.allocate(switch, key)
            addr = " ".join((a.mac, *a.ips)) if dual else f"{a.mac} {a.ip}"
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
    families = len(cp.nb.lookup("Logical_Switch_Port", names.pod_lsp_name("bench", "p0"))
                   .addresses[0].split()) - 1
    assert families == len(cidrs), f"port p0 has {families} addresses, not {len(cidrs)}"
    # clean up for the next round (one transaction)
    cp.nb.commit(nbcmds.DeleteSwitch(cp.nb, switch))
    kind = 'batched  ' if batch else 'unbatched'
    if dual:
        kind = f"{kind.strip()}, dual-stack"
    print(f"  {n:>6} pods {kind}: {dt:7.2f} s  "
          f"{n / dt:8.0f} pods/s  ({txns} transactions, {cpu / n * 1000:.2f} ms CPU per pod)", flush=True)
    return Rate(n / dt, cpu / n * 1000)


def dual_ratio(label: str, v4: list[Rate], dual: list[Rate]) -> None:
    """Print the median dual-stack rate over the median IPv4 one (pods/s, and
    CPU per pod), against issue 27's goal."""
    def med(rates: list[Rate], i: int) -> float:
        return statistics.median(r[i] for r in rates)
    ratio = med(dual, 0) / med(v4, 0)
    print(f"  {label} dual-stack/IPv4: {ratio:.2f}x pods/s "
          f"({'meets' if ratio >= DUAL_GOAL else 'misses'} the goal >= {DUAL_GOAL}x), "
          f"{med(dual, 1) / med(v4, 1):.2f}x CPU per pod; "
          + (f"medians of {len(v4)} runs each, taking turns" if len(v4) > 1
             else "one run each, one after the other"), flush=True)


def programming(cp: ControlPlane, sizes: tuple[int, ...], rounds: int, dual: bool) -> None:
    """Part 1 at each size: batched IPv4 and (dual) batched dual-stack taking
    turns `rounds` times, then the unbatched IPv4 baseline."""
    for n in sizes:
        v4, ds = [], []
        for _ in range(rounds if dual else 1):
            v4.append(program(cp, n, True, f"b{n}"))
            if dual:
                ds.append(program(cp, n, True, f"d{n}", dual=True))
        program(cp, n, False, f"u{n}")
        if ds:
            dual_ratio(f"{n:>6} pods batched,", v4, ds)


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


def dual_controller_args() -> tuple[str, ...]:
    """pacific-controller with dual-stack Subnets and a dual-stack default Subnet."""
    v6 = getattr(names, "SANDBOX_DEFAULT_CIDR6", "fd00:16::/64")
    return ("--ipv6-subnets", "--default-cidr", f"{names.DEFAULT_CIDR},{v6}")


def families_of(pod: dict | None) -> int:
    """How many address families the controller's record on `pod` holds."""
    rec = contract.own_record(pod) if contract and pod else None
    return 0 if rec is None else len(rec.ips or (rec.ip,))


def end_to_end(workdir: Path, n: int, dual: bool = False) -> Rate:
    """n pods created through the API, until a pacific-controller process has
    annotated all of them; dual: the controller runs with dual-stack Subnets
    and a dual-stack default Subnet, so each pod gets both families."""
    with ControlPlane(workdir) as cp:
        r.create(cp.kube, r.NAMESPACES, {"metadata": {"name": "bench"}})
        p = cp.start_controller("c1", leader_elect=False, extra=dual_controller_args() if dual else ())
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
        if dual and families_of(inf.get("bench/p0")) != 2:
            raise SystemExit(f"bench_controller: the dual-stack controller gave pod bench/p0 "
                             f"{families_of(inf.get('bench/p0'))} address families, not 2")
        inf.stop()
    via = "via the API, dual-stack" if dual else "via the API"
    print(f"  {n:>6} pods {via}: created in {t1 - t0:.2f} s, all allocated+programmed+annotated "
          f"after {t2 - t0:.2f} s: {n / (t2 - t0):.0f} pods/s end to end; controller CPU "
          f"{cpu / n * 1000:.2f} ms per pod", flush=True)
    return Rate(n / (t2 - t0), cpu / n * 1000)


def end_to_end_turns(workdir: Path, n: int, rounds: int, dual: bool) -> None:
    """Part 2: IPv4 and (dual) dual-stack runs taking turns `rounds` times,
    each on a fresh control plane."""
    v4, ds = [], []
    for i in range(rounds if dual else 1):
        v4.append(end_to_end(workdir / f"e2e{i}", n))
        if dual:
            ds.append(end_to_end(workdir / f"e2e{i}-dual", n, dual=True))
    if ds:
        dual_ratio(f"{n:>6} pods end to end,", v4, ds)


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
    ap.add_argument("--rounds", type=int, metavar="N",
                    help="parts 1 and 2: IPv4 and dual-stack runs taking turns N times each "
                    "(default 3, --quick 1)")
    ap.add_argument("--no-dual-stack", action="store_true",
                    help="parts 1 and 2: the IPv4 rows only")
    ap.add_argument("--controller-arg", action="append", metavar="ARG",
                    help="extra pacific-controller argument for part 4 (repeatable), e.g. "
                    "--controller-arg=--no-isolation")
    ap.add_argument("--tree", help=argparse.SUPPRESS)   # internal: code tree of a baseline run
    args = ap.parse_args()
    big = 10_000 if not args.quick else 2_000
    huge = 100_000 if not args.quick else 10_000
    rounds = args.rounds or (1 if args.quick else 3)
    dual = DUAL_STACK and not args.no_dual_stack
    tmp = Path(tempfile.mkdtemp(prefix="bench-controller-"))
    try:
        print(f"machine: {os.cpu_count()} CPUs; python {sys.version.split()[0]}; {WORKERS} workers; "
              f"code: {TREE}")
        parts = set(args.only or (1, 2, 3, 4))
        if parts & {1, 2} and not DUAL_STACK and not args.no_dual_stack:
            print("(this revision has no dual-stack Subnets: IPv4 rows only)")
        if 1 in parts:
            print("1. IPAM + NB programming (pods/s), batched vs one transaction per pod:")
            with ControlPlane(tmp / "prog") as cp:
                print(f"  (OVSDB JSON parser in this process: {json_parser()})")
                programming(cp, (1_000, big), rounds, dual)
        if 2 in parts:
            print("2. end to end through the API emulator and a pacific-controller process:")
            end_to_end_turns(tmp, 1_000, rounds, dual)
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
