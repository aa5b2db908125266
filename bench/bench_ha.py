#!/usr/bin/env python3
"""Stalls and outages when OVN's RAFT leaders die (`pacific sandbox up --ha`).

    .venv/bin/python bench/bench_ha.py [--runs 5]

2-node HA sandbox, whole stack.  Per run:
- NB leader killed (SIGKILL), a pod created at once: seconds until Pacific's
  write (the pod's allocation record, its port in NB), and until the pod runs
  (that also waits for ovn-northd to find the new leader).  Baseline in the same
  run: the same pod made with every member up.
- SB leader killed under a 10 ms ping between pods on two nodes: packets lost.
The killed member is restarted with its database file after each run.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "tests" / "lib"))

from controller_fixtures import wait_until  # noqa: E402
from pacific import contract, names  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402

NS = "bench"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def timed_pod(sb, api, name, node, kill=None):
    """(seconds to allocation, seconds to Running) of a pod made right after `kill()`."""
    from pacific.sandbox import cnipods
    made = {}
    t0 = time.monotonic()
    if kill:
        kill()
    t = threading.Thread(target=lambda: made.update(pod=cnipods.add_pod(sb, NS, name, node,
                                                                         api=api, timeout=120)))
    t.start()
    wait_until(lambda: contract.own_record(r.get(api, r.PODS, name, NS) or {}), 60,
               interval=0.02, what="allocation")
    alloc = time.monotonic() - t0
    t.join(120)
    return alloc, time.monotonic() - t0


def restore(sb, db):
    from pacific.sandbox import ovnha
    for i in range(1, ovnha.MEMBERS + 1):
        if i not in ovnha.members_running(sb, db):
            ovnha.member_start(sb, i, db)
    wait_until(lambda: len(ovnha.members_up(sb, db)) == ovnha.MEMBERS, 60, interval=0.2,
               what="members back")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from pacific.sandbox import cnipods, ovnha
    from pacific.sandbox.cluster import Sandbox
    sb = Sandbox(f"bh{os.getpid() % 10000}", nodes=2, ha=True)
    try:
        sb.up()
        api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
        r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
        a = cnipods.add_pod(sb, NS, "a", "node1", api=api)
        cnipods.add_pod(sb, NS, "b", "node2", api=api)
        b_ip = contract.own_record(r.get(api, r.PODS, "b", NS)).ip
        base, nb_alloc, nb_run, sb_lost = [], [], [], []
        for k in range(args.runs):
            base.append(timed_pod(sb, api, f"base{k}", "node1"))
            lead = ovnha.leader(sb, "nb")
            al, rn = timed_pod(sb, api, f"nbkill{k}", "node1",
                               kill=lambda: ovnha.member_stop(sb, lead, "nb"))
            nb_alloc.append(al)
            nb_run.append(rn)
            restore(sb, "nb")
            lead = ovnha.leader(sb, "sb")
            ping = subprocess.Popen(["ip", "netns", "exec", a.netns, "ping", "-q", "-i", "0.01",
                                     "-c", "500", "-W", "1", b_ip], stdout=subprocess.PIPE,
                                    text=True)
            time.sleep(1)
            ovnha.member_stop(sb, lead, "sb")
            out, _ = ping.communicate(timeout=60)
            sb_lost.append(500 - int(out.split(" received")[0].rsplit(" ", 1)[-1]))
            restore(sb, "sb")
            print(f"run {k + 1}: NB kill -> allocation {al:.2f} s, Running {rn:.2f} s "
                  f"(baseline {base[-1][0]:.2f} / {base[-1][1]:.2f} s); SB kill: "
                  f"{sb_lost[-1]} of 500 pings lost", flush=True)
        print(f"\nover {args.runs} runs (p50 / max):")
        print(f"  baseline pod: allocation {pct([x[0] for x in base], 50):.2f} / "
              f"{max(x[0] for x in base):.2f} s, Running {pct([x[1] for x in base], 50):.2f} / "
              f"{max(x[1] for x in base):.2f} s")
        print(f"  NB leader killed: allocation {pct(nb_alloc, 50):.2f} / {max(nb_alloc):.2f} s, "
              f"Running {pct(nb_run, 50):.2f} / {max(nb_run):.2f} s")
        print(f"  SB leader killed: pings lost (10 ms apart) {pct(sb_lost, 50)} / {max(sb_lost)}")
    finally:
        sb.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
