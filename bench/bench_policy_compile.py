#!/usr/bin/env python3
"""What a relabel costs the controller in NetworkPolicy compiling, pure CPU.

    .venv/bin/python bench/bench_policy_compile.py [--baseline REV] [--policies 200] [--pods 60]
        [--relabels 200]

A relabel of a pod under a group's podSelector recompiles every policy of that
group against a new World (pacific/controller/policy.py): bench_fairness's
churner has ~200 policies on its `role=a` group, each opening one port to a
namespace-wide peer, and relabels a pod every 0.2 s.  This times
`compile_policy` over such a group, a new World per relabel, in milliseconds per
relabel (p50 / p99); with `--baseline REV`, against the policy model of that
git revision (`git show REV:pacific/controller/policy_model.py`), in one run.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pacific.controller import policy_model as pm  # noqa: E402


REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def model_at(rev: str):
    """pacific/controller/policy_model.py as it was at `rev`, as its own module."""
    text = subprocess.run(["git", "-C", REPO, "show", f"{rev}:pacific/controller/policy_model.py"],
                          capture_output=True, text=True, check=True).stdout
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(text)
    name = f"policy_model_{rev.replace('~', '_').replace('^', '_')}"
    spec = importlib.util.spec_from_file_location(name, f.name)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    os.unlink(f.name)
    return mod


def group(n: int) -> list[dict]:
    peers = [{"namespaceSelector": {}}, {"podSelector": {}},
             {"namespaceSelector": {"matchLabels": {"team": "x"}}, "podSelector": {}}]
    return [{"metadata": {"namespace": "churn", "name": f"np{i}"},
             "spec": {"podSelector": {"matchLabels": {"role": "a"}},
                      "ingress": [{"from": [peers[i % len(peers)]], "ports": [{"port": 1000 + i}]}]}}
            for i in range(n)]


def pods(m, n: int, flip: int) -> list:
    spaces = ("churn", "victim", "other")
    return [m.PodInfo(spaces[i % 3], f"p{i}", {"role": "ab"[(i + flip) % 2]},
                       f"10.16.{i // 250}.{i % 250 + 1}", f"pod:{spaces[i % 3]}/p{i}")
            for i in range(n)]


def relabels(m, policies: list[dict], n_pods: int, count: int) -> list[float]:
    out = []
    for k in range(count):
        world = m.World(pods(m, n_pods, k), {"churn": {}, "victim": {}, "other": {"team": "x"}})
        t = time.perf_counter()
        for pol in policies:
            m.compile_policy(pol, world)
        out.append((time.perf_counter() - t) * 1000)
    return sorted(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policies", type=int, default=200, help="policies of the relabelled group")
    ap.add_argument("--pods", type=int, default=60, help="pods of the cluster")
    ap.add_argument("--relabels", type=int, default=200)
    ap.add_argument("--baseline", metavar="REV", help="also time the policy model of this git revision")
    args = ap.parse_args()
    pols = group(args.policies)
    models = [("this tree", pm)] + ([(args.baseline, model_at(args.baseline))] if args.baseline else [])
    p50 = {}
    for _ in range(2):                  # interleaved twice: both see the same machine
        for label, m in models:
            relabels(m, pols, args.pods, 5)                      # warm-up
            xs = relabels(m, pols, args.pods, args.relabels)
            p50.setdefault(label, []).append(xs[len(xs) // 2])
            print(f"{label:12s} p50 {xs[len(xs) // 2]:6.2f} ms  p99 {xs[int(len(xs) * 0.99) - 1]:6.2f} ms"
                  f"  per relabel of a group of {args.policies} policies", flush=True)
    if args.baseline:
        ratio = min(p50["this tree"]) / min(p50[args.baseline])
        print(f"this tree / {args.baseline}, best p50: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
