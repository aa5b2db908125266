#!/usr/bin/env python3
"""`pacific trace` response time at scale (goal: under 2 s).

    .venv/bin/python bench/bench_trace.py [--pods 1000] [--policies 100] [--keep]

A 3-node sandbox with six real pods (CNI, in 10 namespaces of one tenant) and a
Service, plus `--pods` pods allocated by the controller on three Node objects
without a kubelet (their ports are in NB and SB like any other; nothing runs
them), and `--policies` NetworkPolicies.  Then, 10 runs each, the wall time of
the whole `pacific trace` command (Python start-up, Kubernetes lookups, NB/SB
reads, ovn-trace for the request and the reply) for an allowed path, a
NetworkPolicy drop and a Service path.  Baseline in the same run: `ovn-trace`
alone for the same request.
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
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "tests" / "lib"))

from bench_policy import parallel, pct, policies_in_nb, policy  # noqa: E402
from controller_fixtures import wait_until  # noqa: E402
from pacific import names  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402


def timed(argv, n=10):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        cp = subprocess.run(argv, capture_output=True, text=True)
        out.append(time.perf_counter() - t0)
        if cp.returncode not in (0, 1):
            raise SystemExit(f"{argv[:6]} failed: {cp.stderr}")
    return out, cp.stdout.splitlines()[0] if cp.stdout else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--policies", type=int, default=100)
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up")
    args = ap.parse_args()
    from pacific.sandbox import cnipods
    from pacific.sandbox.cluster import Sandbox
    from pacific.sandbox.k8s.sandbox import kubeconfig_path
    from pacific.tools import trace as tr
    sb = Sandbox(f"bt{os.getpid() % 10000}", nodes=3)
    try:
        sb.up()
        kc = kubeconfig_path(sb)
        api = client.load(kc)
        nss = [f"bench{i}" for i in range(10)]
        for i, ns in enumerate(nss):
            r.create(api, r.NAMESPACES, {"metadata": {"name": ns, "labels": {
                "team": f"t{i % 3}", names.LABEL_TENANT: "bench"}}})
        real = []
        for i in range(6):
            ns = nss[i % len(nss)]
            cnipods.add_pod(sb, ns, f"w{i}", sb.nodes[i % 3].name, api=api,
                            labels={"app": f"{'ab'[i % 2]}{i % 5}"})
            real.append(f"{ns}/w{i}")
        r.create(api, r.SERVICES, {"metadata": {"name": "web", "namespace": nss[1]},
                                   "spec": {"selector": {"app": "b1"},
                                            "ports": [{"port": 80}]}}, nss[1])
        for k in range(3):
            r.create(api, r.NODES, {"metadata": {"name": f"virtual{k}"}})

        def mk_pod(local, i):
            if not hasattr(local, "api"):
                local.api = client.load(kc)
            ns = nss[i % len(nss)]
            r.create(local.api, r.PODS, {"metadata": {"name": f"v{i}", "namespace": ns,
                                                      "labels": {"app": f"{'ab'[i % 2]}{i % 5}"}},
                                         "spec": {"nodeName": f"virtual{i % 3}", "containers": [
                                             {"name": "c", "image": "none"}]}}, ns)
        t0 = time.perf_counter()
        parallel(mk_pod, range(args.pods))
        want = args.pods + len(real)
        wait_until(lambda: len(sb.nbctl("--bare", "--columns=_uuid", "find",
                                        "Logical_Switch_Port",
                                        f'external_ids:"{names.EXT_OWNER_KIND}"='
                                        f'{names.OWNER_KIND_POD}').split()) >= want,
                   900, interval=1, what=f"{want} pod ports in NB")
        print(f"{args.pods} pods allocated in {time.perf_counter() - t0:.1f} s", flush=True)

        def mk_pol(local, i):
            if not hasattr(local, "api"):
                local.api = client.load(kc)
            r.create(local.api, r.NETWORKPOLICIES, policy(nss[i % len(nss)], i),
                     nss[i % len(nss)])
        parallel(mk_pol, range(args.policies))
        wait_until(lambda: len(policies_in_nb(sb)) >= args.policies,
                   600, interval=1, what=f"{args.policies} policies in NB")
        sb.nbctl("--wait=hv", "sync")
        flows = int(subprocess.run(f"ovn-sbctl --db={sb.sb_remote} lflow-list | wc -l",
                                   shell=True, capture_output=True, text=True).stdout)
        print(f"{args.policies} policies in force; {flows} logical flow lines", flush=True)

        cli = [sys.executable, "-m", "pacific.cli.main", "trace", "--sandbox", sb.name]
        # policies select a-pods only (bench_policy.policy): w1 (b1) takes anything;
        # w2 (a2 in bench2) is selected by p2, p12, ... which allow TCP 80 only
        cases = [("allowed", [real[0], real[1], "--tcp", "80"]),
                 ("policy drop", [real[1], real[2], "--tcp", "81"]),
                 ("Service", [real[0], f"svc/{nss[1]}/web", "--tcp", "80"])]
        print(f"{'case':<12} {'pacific trace p50':>18} {'max':>8}   {'ovn-trace alone p50':>20}"
              "   verdict")
        for label, argv in cases:
            times, verdict = timed(cli + argv)
            src = tr.resolve(api, argv[0], "source")
            dst = tr.resolve(api, argv[1], "destination", int(argv[3]))
            from pacific.ovn.query import Query
            with Query(sb.nb_remote, "OVN_Northbound") as nb:
                mac = tr._dst_mac(nb, src, dst)
            flow = tr.microflow(src, dst.ip, mac, "tcp", tr.SOURCE_PORT, int(argv[3]))
            base, _ = timed(["ovn-trace", f"--db={sb.sb_remote}", "--detailed",
                             *["--ct=trk,new"] * 12, src.switch, flow])
            print(f"{label:<12} {pct(times, 50):>16.2f} s {max(times):>6.2f} s   "
                  f"{pct(base, 50):>18.2f} s   {verdict}", flush=True)
    finally:
        if not args.keep:
            sb.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
