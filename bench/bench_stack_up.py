#!/usr/bin/env python3
"""Whole-stack sandbox bring-up: how long `pacific sandbox up` takes, and where it goes.

    .venv/bin/python bench/bench_stack_up.py [--rounds 2] [--nodes 3] [--baseline-rev REV]

Each round brings up a sandbox with the default services (Kubernetes control plane,
a containerd and a kubelet per node, two controllers, a pacific-node per node: what
an e2e module's fixture waits for), prints the seconds until `up` returned and the
offset at which each service started (the birth time of its log), then tears it
down.  With --baseline-rev, the same rounds run alternately with the code of that
git revision (`git worktree`, selected through PYTHONPATH), so both see the same
machine noise.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACIFIC = [sys.executable, "-m", "pacific.cli.main"]


def born(path: str) -> float:
    """A file's creation time (statx birth time, through stat(1))."""
    return float(subprocess.run(["stat", "-c", "%W", path], capture_output=True,
                                text=True, check=True).stdout)


def one_round(tree: str, name: str, nodes: int) -> tuple[float, list[tuple[float, str]]]:
    env = dict(os.environ, PYTHONPATH=tree)
    sandbox_dir = os.path.join(os.environ.get("PACIFIC_SANDBOX_DIR", "/run/pacific-sandbox"),
                               name)
    t0 = time.time()
    cp = subprocess.run([*PACIFIC, "sandbox", "up", "--name", name, "--nodes", str(nodes)],
                        env=env, capture_output=True, text=True)
    took = time.time() - t0
    try:
        if cp.returncode != 0:
            raise SystemExit(f"sandbox up failed ({tree}): {cp.stderr[-800:]}")
        logs = os.path.join(sandbox_dir, "services")
        starts = sorted((born(os.path.join(logs, f)) - t0, f[:-4])
                        for f in os.listdir(logs) if f.endswith(".log"))
        return took, starts
    finally:
        subprocess.run([*PACIFIC, "sandbox", "down", "--name", name], env=env,
                       capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--baseline-rev", metavar="REV", help="also run this git revision's code")
    args = ap.parse_args()
    trees = {"this tree": REPO}
    worktree = None
    if args.baseline_rev:
        worktree = tempfile.mkdtemp(prefix="bench-stack-base-")
        os.rmdir(worktree)
        subprocess.run(["git", "-C", REPO, "worktree", "add", "-q", "--detach", worktree,
                        args.baseline_rev], check=True)
        trees = {args.baseline_rev: worktree, "this tree": REPO}
    name = f"su{os.getpid() % 100000}"
    took: dict[str, list[float]] = {k: [] for k in trees}
    try:
        for i in range(args.rounds):
            for label, tree in trees.items():
                t, starts = one_round(tree, name, args.nodes)
                took[label].append(t)
                print(f"round {i + 1}, {label}: up in {t:.1f} s; services started at "
                      + ", ".join(f"{s} +{o:.0f}" for o, s in starts if not s.endswith("guard")),
                      flush=True)
    finally:
        if worktree:
            subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", worktree])
    for label, ts in took.items():
        print(f"{label}: median {statistics.median(ts):.1f} s over {len(ts)} rounds "
              f"({', '.join(f'{t:.1f}' for t in ts)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
