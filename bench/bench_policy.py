#!/usr/bin/env python3
"""NetworkPolicy at scale: enforcement latency, restart reprogramming, OVN sizes.

    .venv/bin/python bench/bench_policy.py
    .venv/bin/python bench/bench_policy.py --only 1 --namespaces 20 --pods 1000 --policies 200

1. Restart: 1,000 policies over 100 namespaces and 5,000 pods (allocated) in
   kube-apiserver, a pacific-controller starts on an empty NB; seconds until
   every policy's port group and ACLs are in NB (goal <= 30 s), and the ACL,
   port-group and address-set counts.  Baseline in the same run: the same
   start without policies (ports only).
2. In the 3-node sandbox with 100, then 1,000 policies in place: a new
   policy created -> listed by its group in NB (its ACLs there) -> in force on every chassis (nb_cfg ->
   hv_cfg, `ovn-nbctl --wait=hv sync`), p50/p99 over 20 policies each; ACL
   and logical-flow counts.  Baseline: `--wait=hv sync` with nothing to apply.
   Then (issue 28, `--cnps`, 100): ClusterNetworkPolicies beside the 1,000
   NetworkPolicies, created at once, then 20 more one by one: created ->
   status `Enforced=True` (the controller's own nb_cfg/hv_cfg barrier: every
   chassis applied it), p50/p99 (goal p99 <= 1 s).
3. Cost follows change (issue 23): `--churn-pods` (1,000) pods created and
   deleted at `--churn-rate` a second over `--namespaces` namespaces (at most
   `--churn-live` alive at once), first with no policy, then with
   `--policies` in place (same control plane, same controller, one run): pod
   created -> its port in NB, p50/p99, and the controller's CPU seconds per
   pod (utime+stime of the process).  Goal: with policies within 1.5x of
   without.
"""
from __future__ import annotations

import argparse
import os
import subprocess
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
from pacific.controller.policy import programmed  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def policy(ns: str, i: int) -> dict:
    """Pods `app=a<i%5>` accept TCP 80 from pods `app=b<i%5>` of namespaces team=t<i%3>."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"p{i}", "namespace": ns},
            "spec": {"podSelector": {"matchLabels": {"app": f"a{i % 5}"}},
                     "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": f"t{i % 3}"}},
                                            "podSelector": {"matchLabels": {"app": f"b{i % 5}"}}}],
                                  "ports": [{"protocol": "TCP", "port": 80}]}]}}


def policies_in_nb(sb) -> set[str]:
    """The policies in force in NB: policies share port groups and their ACLs
    (decision 0031), each group lists its policies (external_ids
    pacific.io/policies)."""
    out = sb.nbctl("--bare", "--columns=external_ids", "find", "Port_Group",
                   f'external_ids:"{names.EXT_OWNER_KIND}"={names.OWNER_KIND_POLICY_GROUP}')
    found = set()
    for line in out.splitlines():
        ids = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        ns = ids.get(names.EXT_OWNER, "").split("/", 1)[0]
        found |= {f"{ns}/{p}" for p in ids.get(names.EXT_POLICIES, "").split(",") if p}
    return found


def parallel(fn, items, workers=16):
    local = threading.local()

    def run(item):
        return fn(local, item)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(run, items))


def nb_counts(nb) -> dict:
    with nb.ovsdb_connection.lock:
        return {t: len(nb.tables[t].rows) for t in ("ACL", "Port_Group", "Address_Set")}


def part1(tmp: Path, n_ns: int, n_pods: int, n_pol: int) -> None:
    print(f"1. restart with {n_pol} policies over {n_ns} namespaces and {n_pods} pods:",
          flush=True)
    with ControlPlane(tmp / "p1") as cp:
        kc = str(cp.kubeconfig)

        def api(local):
            if not hasattr(local, "api"):
                local.api = client.load(kc)
            return local.api
        parallel(lambda l, i: r.create(api(l), r.NAMESPACES, {"metadata": {
            "name": f"ns{i}", "labels": {"team": f"t{i % 3}"}}}), range(n_ns))
        parallel(lambda l, i: r.create(api(l), r.PODS, {
            "metadata": {"name": f"p{i}", "labels": {"app": f"{'ab'[i % 2]}{i % 5}"}},
            "spec": {"nodeName": f"node{i % 3 + 1}",
                     "containers": [{"name": "c", "image": "pause"}]}}, f"ns{i % n_ns}"),
                 range(n_pods))
        # the pods get their allocation from a first controller run
        cp.start_controller("alloc", leader_elect=False)
        t0 = time.perf_counter()
        wait_until(lambda: sum(1 for _ in cp.nb.rows_owned("Logical_Switch_Port",
                                                            names.OWNER_KIND_POD)) >= n_pods,
                   600, interval=0.5, what="pods allocated")
        time.sleep(2)
        base = time.perf_counter() - t0
        cp.kill_controller("alloc")
        parallel(lambda l, i: r.create(api(l), r.NETWORKPOLICIES, policy(f"ns{i % n_ns}", i),
                                       f"ns{i % n_ns}"), range(n_pol))
        t0 = time.perf_counter()
        cp.start_controller("c1", leader_elect=False)
        def done():
            return all(programmed(cp.nb, f"ns{i % n_ns}/p{i}") for i in range(n_pol))
        wait_until(done, 900, interval=0.2, what="all policies programmed")
        dt = time.perf_counter() - t0
        counts = nb_counts(cp.nb)
    print(f"   first start, {n_pods} pods allocated and programmed (for scale): {base:6.1f} s")
    print(f"   restart -> all {n_pol} policies' port groups and ACLs in NB: {dt:6.2f} s "
          f"(goal <= 30 s)")
    print(f"   NB: {counts['ACL']} ACLs, {counts['Port_Group']} port groups, "
          f"{counts['Address_Set']} address sets", flush=True)


def part2(args) -> None:
    from pacific.sandbox import cnipods
    from pacific.sandbox.cluster import Sandbox
    from pacific.sandbox.k8s.sandbox import kubeconfig_path
    sb = Sandbox(f"bp{os.getpid() % 10000}", nodes=3)
    try:
        sb.up()
        kc = kubeconfig_path(sb)
        api = client.load(kc)
        nss = [f"bench{i}" for i in range(10)]
        for i, ns in enumerate(nss):
            r.create(api, r.NAMESPACES, {"metadata": {"name": ns, "labels": {
                "team": f"t{i % 3}", names.LABEL_TENANT: "bench"}}})
        for i in range(6):
            cnipods.add_pod(sb, nss[i % len(nss)], f"w{i}", sb.nodes[i % 3].name, api=api,
                            labels={"app": f"{'ab'[i % 2]}{i % 5}"})
        base = []
        for _ in range(10):
            t0 = time.perf_counter()
            sb.nbctl("--wait=hv", "sync")
            base.append(time.perf_counter() - t0)
        print(f"2. new policy -> every chassis (baseline `--wait=hv sync` alone: p50 "
              f"{pct(base, 50) * 1000:.1f} ms, p99 {pct(base, 99) * 1000:.1f} ms)", flush=True)
        made = 0
        for target in (100, 1000):
            def mk(local, i):
                if not hasattr(local, "api"):
                    local.api = client.load(kc)
                r.create(local.api, r.NETWORKPOLICIES, policy(nss[i % len(nss)], i),
                         nss[i % len(nss)])
            parallel(mk, range(made, target))
            made = target
            wait_until(lambda: len(policies_in_nb(sb)) >= target,
                       600, interval=0.5, what=f"{target} policies in NB")
            to_nb, to_hv = [], []
            for k in range(20):
                i = 100000 + target + k
                ns = nss[k % len(nss)]
                t0 = time.perf_counter()
                r.create(api, r.NETWORKPOLICIES, policy(ns, i), ns)
                while f"{ns}/p{i}" not in policies_in_nb(sb):
                    time.sleep(0.002)
                t1 = time.perf_counter()
                sb.nbctl("--wait=hv", "sync")
                t2 = time.perf_counter()
                to_nb.append(t1 - t0)
                to_hv.append(t2 - t0)
            acls = len(sb.nbctl("--bare", "--columns=_uuid", "list", "ACL").split())
            flows = int(subprocess.run(f"ovn-sbctl --db={sb.sb_remote} lflow-list | wc -l",
                                       shell=True, capture_output=True, text=True).stdout)
            print(f"   with {target:>4} policies: created -> ACLs in NB p50 "
                  f"{pct(to_nb, 50) * 1000:6.1f} ms p99 {pct(to_nb, 99) * 1000:6.1f} ms; "
                  f"-> every chassis p50 {pct(to_hv, 50) * 1000:6.1f} ms p99 "
                  f"{pct(to_hv, 99) * 1000:6.1f} ms (goal p99 <= 1 s); {acls} ACLs, "
                  f"{flows} logical flow lines", flush=True)
        if args.cnps:
            cluster_policies(api, kc, args.cnps)
    finally:
        if not args.keep:
            sb.down()


def cluster_policy(i: int) -> dict:
    """Admin (even) or Baseline (odd): namespaces team=t<i%3> may not be reached
    from team=t<(i+1)%3> on TCP port 1000+i."""
    return {"apiVersion": "policy.networking.k8s.io/v1alpha2", "kind": "ClusterNetworkPolicy",
            "metadata": {"name": f"cnp{i}"},
            "spec": {"tier": "Baseline" if i % 2 else "Admin", "priority": i % 1000,
                     "subject": {"namespaces": {"matchLabels": {"team": f"t{i % 3}"}}},
                     "ingress": [{"action": "Deny", "from": [{"namespaces": {"matchLabels": {
                         "team": f"t{(i + 1) % 3}"}}}],
                         "protocols": [{"tcp": {"destinationPort": {"number": 1000 + i}}}]}]}}


def enforced(api, name: str) -> bool:
    o = r.get(api, r.CLUSTERNETWORKPOLICIES, name) or {}
    return any(c.get("type") == "Enforced" and c.get("status") == "True"
               and c.get("observedGeneration") == (o.get("metadata") or {}).get("generation")
               for c in (o.get("status") or {}).get("conditions") or [])


def cluster_policies(api, kc: str, n: int) -> None:
    def mk(local, i):
        if not hasattr(local, "api"):
            local.api = client.load(kc)
        r.create(local.api, r.CLUSTERNETWORKPOLICIES, cluster_policy(i))
    t0 = time.perf_counter()
    parallel(mk, range(n))
    wait_until(lambda: all(enforced(api, f"cnp{i}") for i in range(n)), 600, interval=0.5,
               what=f"{n} ClusterNetworkPolicies enforced")
    print(f"   {n} ClusterNetworkPolicies created at once: all Enforced after "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    took = []
    for k in range(20):
        i = n + k
        t0 = time.perf_counter()
        r.create(api, r.CLUSTERNETWORKPOLICIES, cluster_policy(i))
        while not enforced(api, f"cnp{i}"):
            time.sleep(0.005)
        took.append(time.perf_counter() - t0)
    print(f"   one more ClusterNetworkPolicy: created -> Enforced (every chassis) p50 "
          f"{pct(took, 50) * 1000:.0f} ms p99 {pct(took, 99) * 1000:.0f} ms (goal p99 <= 1 s)",
          flush=True)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def churn(cp, kc: str, n_ns: int, n: int, rate: float, live: int, tag: str) -> dict:
    """Create n pods at `rate`/s (deleting the oldest past `live`); created ->
    port in NB per pod, and the controller's CPU over the churn."""
    from pacific.ovn import ensure
    apis = threading.local()

    def api():
        if not hasattr(apis, "api"):
            apis.api = client.load(kc)
        return apis.api
    pid = cp.controllers["c1"].pid
    created: dict[str, float] = {}
    seen: dict[str, float] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def watch():
        while not stop.is_set() or len(seen) < len(created):
            with lock:
                pending = [k for k in created if k not in seen]
            now = time.perf_counter()
            for k in pending:
                if ensure.row_exists(cp.nb, "Logical_Switch_Port", k):
                    seen[k] = now
            if stop.is_set() and time.perf_counter() - t_stop > 120:
                return
            time.sleep(0.005)
    t_stop = 0.0
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    names_ = [(f"ns{i % n_ns}", f"{tag}{i}") for i in range(n)]

    def one(item):
        k, (ns, name) = item
        due = t0 + k / rate
        time.sleep(max(0.0, due - time.perf_counter()))
        body = {"metadata": {"name": name, "labels": {"app": f"{'ab'[k % 2]}{k % 5}"}},
                "spec": {"nodeName": f"node{k % 3 + 1}",
                         "containers": [{"name": "c", "image": "pause"}]}}
        r.create(api(), r.PODS, body, ns)
        with lock:
            created[names.pod_lsp_name(ns, name)] = time.perf_counter()
        if k >= live:
            old_ns, old = names_[k - live]
            r.delete(api(), r.PODS, old, old_ns, grace_period=0)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, enumerate(names_)))
    t_stop = time.perf_counter()
    stop.set()
    watcher.join(130)
    cpu = cpu_seconds(pid) - cpu0
    lat = [seen[k] - created[k] for k in created if k in seen]
    for ns, name in names_[max(0, n - live):]:
        r.delete(api(), r.PODS, name, ns, grace_period=0)
    return {"p50": pct(lat, 50), "p99": pct(lat, 99), "missing": n - len(lat),
            "cpu_per_pod": cpu / n, "seconds": t_stop - t0}


def part3(tmp: Path, args) -> None:
    n_ns, n_pol = args.namespaces, args.policies
    print(f"3. {args.churn_pods} pods churning ({args.churn_rate:g}/s, at most "
          f"{args.churn_live} alive) over {n_ns} namespaces, without and with {n_pol} "
          "policies (one controller):", flush=True)
    with ControlPlane(tmp / "p3") as cp:
        kc = str(cp.kubeconfig)
        local = threading.local()

        def api():
            if not hasattr(local, "api"):
                local.api = client.load(kc)
            return local.api
        parallel(lambda _l, i: r.create(api(), r.NAMESPACES, {"metadata": {
            "name": f"ns{i}", "labels": {"team": f"t{i % 3}"}}}), range(n_ns))
        cp.start_controller("c1", leader_elect=False)
        wait_until(lambda: cp.nb.rows_owned("Logical_Switch", names.OWNER_KIND_SUBNET), 120,
                   interval=0.2, what="controller up")
        results = {}
        for phase in ("0", str(n_pol)):
            if phase != "0":
                parallel(lambda _l, i: r.create(api(), r.NETWORKPOLICIES,
                                                policy(f"ns{i % n_ns}", i), f"ns{i % n_ns}"),
                         range(n_pol))
                wait_until(lambda: all(programmed(cp.nb, f"ns{i % n_ns}/p{i}")
                                       for i in range(n_pol)), 900, interval=0.5,
                           what="all policies programmed")
            res = results[phase] = churn(cp, kc, n_ns, args.churn_pods, args.churn_rate,
                                         args.churn_live, f"c{phase}-")
            print(f"   {phase:>5} policies: created -> port in NB p50 {res['p50'] * 1000:7.1f} ms, "
                  f"p99 {res['p99'] * 1000:7.1f} ms; controller CPU {res['cpu_per_pod'] * 1000:6.2f} "
                  f"ms/pod; {res['seconds']:.0f} s, {res['missing']} ports never seen", flush=True)
        a, b = results["0"], results[str(n_pol)]
        for key, label in (("p99", "created -> port p99"), ("cpu_per_pod", "CPU per pod")):
            ratio = b[key] / a[key] if a[key] else float("inf")
            print(f"   {label}: {ratio:.2f}x with {n_pol} policies "
                  f"(goal <= 1.5x: {'met' if ratio <= 1.5 else 'MISSED'})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", type=int, action="append", choices=(1, 2, 3))
    ap.add_argument("--namespaces", type=int, default=100)
    ap.add_argument("--pods", type=int, default=5000)
    ap.add_argument("--policies", type=int, default=1000)
    ap.add_argument("--churn-pods", type=int, default=1000)
    ap.add_argument("--churn-rate", type=float, default=20.0, help="pods created a second")
    ap.add_argument("--churn-live", type=int, default=300, help="pods alive at once")
    ap.add_argument("--cnps", type=int, default=100,
                    help="ClusterNetworkPolicies beside the policies of part 2 (0: none)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    only = set(args.only or (1, 2, 3))
    tmp = Path(tempfile.mkdtemp(prefix="bench-policy-"))
    if 1 in only:
        part1(tmp, args.namespaces, args.pods, args.policies)
    if 2 in only:
        part2(args)
    if 3 in only:
        part3(tmp, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
