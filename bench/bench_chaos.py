#!/usr/bin/env python3
"""The chaos run at size: 500 pods churned in an HA sandbox while the NB
leader, the SB leader, the controller leader, a pacific-node and an
ovn-controller are each killed twice at random moments (tests/e2e/chaos.py).

    .venv/bin/python bench/bench_chaos.py [--pods 500] [--rounds 2] [--nodes 3]

Prints how long the churn took, the faults and when, the pod creations that
had to be retried, and the final check (no address twice, nothing left over,
every live pod reaching 3 others).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests" / "e2e"))
sys.path.insert(0, str(REPO / "tests" / "lib"))

import chaos  # noqa: E402
from pacific import names  # noqa: E402
from pacific.kube import client  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up (to inspect)")
    args = ap.parse_args()
    from pacific.sandbox.cluster import Sandbox
    sb = Sandbox(f"bc{os.getpid() % 10000}", nodes=args.nodes, ha=True)
    try:
        sb.up()
        api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
        rep = chaos.run(sb, api, pods=args.pods, rounds=args.rounds, seed=args.seed)
        print(f"churn of {rep['made']} pods (every third deleted) in {rep['seconds']:.0f} s; "
              f"{len(rep['failed_attempts'])} creations retried, {rep['gave_up']} given up")
        for at, name in rep["injected"]:
            print(f"  {at:6.1f} s  killed {name}")
        t0 = time.monotonic()
        res = chaos.check(sb, api)
        print(f"check passed in {time.monotonic() - t0:.0f} s: {res['live']} live pods, no "
              f"address twice, no IP object or NB row left over, {res['checked_pairs']} pod "
              "pairs reached")
    finally:
        if not args.keep:
            sb.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
