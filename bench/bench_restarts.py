#!/usr/bin/env python3
"""Outage per restart of each node daemon, under a 10 ms probe between pods on
two nodes (2-node sandbox, whole stack).

    .venv/bin/python bench/bench_restarts.py [--runs 5]

pacific-node (kill -9 and start, on both nodes), ovn-controller and
ovs-vswitchd (stop and start, on the probe's destination node): seconds of
probes lost per restart, p50 and max.  Baseline in the same run: the same
probe with nothing restarted.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "tests" / "lib"))

from test_node_restarts import NS, ip_of, outage  # noqa: E402
from pacific import names  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from pacific.sandbox import bringup, cnipods, nodedaemons
    from pacific.sandbox.cluster import Sandbox
    sb = Sandbox(f"br{os.getpid() % 10000}", nodes=2)
    try:
        sb.up()
        api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
        r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
        a = cnipods.add_pod(sb, NS, "a", "node1", api=api)
        cnipods.add_pod(sb, NS, "b", "node2", api=api)
        dst = ip_of(api, "b")
        node2 = sb.node("node2")
        cases = {
            "nothing (baseline)": lambda: None,
            "pacific-node (both nodes)": lambda: (nodedaemons.restart(sb, "node1", kill=True),
                                                  nodedaemons.restart(sb, "node2", kill=True)),
            "ovn-controller": lambda: bringup.restart_node_daemon(sb, node2, "ovn-controller"),
            "ovs-vswitchd": lambda: bringup.restart_node_daemon(sb, node2, "ovs-vswitchd"),
        }
        print(f"{'restarted':<28} {'outage p50':>10} {'max':>8}   (seconds of 10 ms probes lost, "
              f"{args.runs} runs)")
        for label, action in cases.items():
            lost = sorted(outage(sb, a.netns, dst, action, seconds=8) for _ in range(args.runs))
            print(f"{label:<28} {lost[len(lost) // 2]:>9.2f}s {lost[-1]:>7.2f}s", flush=True)
    finally:
        sb.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
