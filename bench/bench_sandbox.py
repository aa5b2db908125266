"""Sandbox benchmark: bring-up / tear-down time and pod-to-first-ping latency of
pacific.sandbox, against the shell reference recipe (shared/reference/sandbox.sh)
measured in the same run as the baseline.

    .venv/bin/python bench/bench_sandbox.py [--rounds 3] [--nodes 3] [--pods 5]

Each round brings up a Pacific sandbox and a recipe sandbox (alternating, so both
see the same machine noise), times N test pods (LSP + netns + veth + OVS port,
until the first cross-node ping on one switch answers), then tears both down.
Medians are printed; the recipe is skipped if it is missing or its `mn-*`
namespaces are in use.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pacific.sandbox.cluster import Sandbox  # noqa: E402

RECIPE = os.environ.get("PACIFIC_SANDBOX_RECIPE", "/work/shared/reference/sandbox.sh")


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def first_ping(netns: str, dst: str, timeout: int = 20) -> None:
    """Probe every 10 ms until the first reply (the recipe's own measurement)."""
    argv = ["ip", "netns", "exec", netns, "ping", "-q", "-c1", f"-w{timeout}", "-i0.01", dst]
    if subprocess.run(argv, capture_output=True).returncode != 0:
        raise RuntimeError(f"no reply within {timeout}s: {' '.join(argv)}")


def mac(i: int) -> str:
    return f"0a:00:0a:0a:00:{i:02x}"


# --------------------------------------------------------------------- Pacific
def pacific_round(nodes: int, npods: int) -> dict:
    sb = Sandbox(f"bench{os.getpid()}", nodes=nodes)
    res = {"up": timed(lambda: sb.up(services=()))}
    try:
        sb.nbctl("ls-add", "bench")
        sb.nbctl("lsp-add", "bench", "target", "--", "lsp-set-addresses", "target",
                 f"{mac(1)} 10.10.0.1")
        target = sb.add_test_pod("node1", "target", "target", mac(1), "10.10.0.1/24")
        target.wait_installed(20)
        pods = []
        for k in range(npods):
            i = k + 2

            def one():
                sb.nbctl("lsp-add", "bench", f"p{i}", "--", "lsp-set-addresses", f"p{i}",
                         f"{mac(i)} 10.10.0.{i}")
                p = sb.add_test_pod("node2", f"p{i}", f"p{i}", mac(i), f"10.10.0.{i}/24")
                first_ping(p.netns, "10.10.0.1")
            pods.append(timed(one))
        res["pod_first_ping"] = statistics.median(pods)
        res["pod_first_ping_all"] = pods
        target.spawn("iperf3", ["iperf3", "-s", "-B", "10.10.0.1"])
        time.sleep(0.3)
        out = subprocess.run(["ip", "netns", "exec", f"{sb.netns_prefix}node2-p2", "iperf3",
                              "-c", "10.10.0.1", "-t", "3", "-J"], capture_output=True,
                             text=True, timeout=30)
        if out.returncode == 0:
            res["iperf3_mbps"] = json.loads(out.stdout)["end"]["sum_received"][
                "bits_per_second"] / 1e6
    finally:
        res["down"] = timed(sb.down)
    return res


# --------------------------------------------------------------------- recipe
def recipe_available() -> str | None:
    if not os.access(RECIPE, os.X_OK) and not os.path.exists(RECIPE):
        return f"{RECIPE} not found"
    if any(n.startswith("mn-") for n in os.listdir("/run/netns") if os.path.isdir("/run/netns")):
        return "mn-* namespaces in use"
    return None


def recipe_round(nodes: int, npods: int) -> dict:
    base = tempfile.mkdtemp(prefix="pacific-bench-mn-")
    env = dict(os.environ, MN_BASE=base, MN_NODES=str(nodes))

    def sh(*args):
        subprocess.run(["bash", RECIPE, *args], env=env, check=True, capture_output=True,
                       timeout=120)
    res = {"up": timed(lambda: sh("up"))}
    try:
        sh("topo")  # no pods, just switches; add a flat switch for the pods
        sh("pod-add", "1", "target", "ls-flat", "10.10.0.1/24", mac(1))
        pods = []
        for k in range(npods):
            i = k + 2

            def one():
                sh("pod-add", "2", f"p{i}", "ls-flat", f"10.10.0.{i}/24", mac(i))
                first_ping(f"mn-n2-p{i}", "10.10.0.1")
            pods.append(timed(one))
        res["pod_first_ping"] = statistics.median(pods)
    finally:
        res["down"] = timed(lambda: sh("down"))
        shutil.rmtree(base, ignore_errors=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--pods", type=int, default=5, help="timed pods per round")
    args = ap.parse_args()
    skip = recipe_available()
    rows: dict[str, list[dict]] = {"pacific": [], "recipe (sandbox.sh)": []}
    for r in range(args.rounds):
        rows["pacific"].append(pacific_round(args.nodes, args.pods))
        if not skip:
            rows["recipe (sandbox.sh)"].append(recipe_round(args.nodes, args.pods))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    print(f"sandbox benchmark: {args.nodes} nodes, {args.rounds} rounds, {args.pods} pods "
          f"per round, {os.cpu_count()} CPUs; medians")
    print(f"{'':22} {'up (s)':>8} {'down (s)':>9} {'pod->1st ping (ms)':>19} {'iperf3 Mbit/s':>14}")
    for name, rs in rows.items():
        if not rs:
            print(f"{name:22} skipped: {skip}")
            continue
        med = lambda k: statistics.median(x[k] for x in rs if k in x)  # noqa: E731
        iperf = [x["iperf3_mbps"] for x in rs if "iperf3_mbps" in x]
        print(f"{name:22} {med('up'):8.2f} {med('down'):9.2f} "
              f"{med('pod_first_ping') * 1000:19.0f} "
              f"{(f'{statistics.median(iperf):.0f}' if iperf else '-'):>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
