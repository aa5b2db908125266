#!/usr/bin/env python3
"""CPU a sandbox cluster burns when nothing happens, per component.

A 3-node sandbox with the whole stack (kubelet nodes unless --pod-runner), no
workload.  After a settle period, the CPU time (user + system, from
/proc/<pid>/stat) every process of the sandbox spends over --seconds is summed
per component: Pacific's daemons (pacific-node, pacific-controller) against
the baseline of the same run, the OVS/OVN daemons and Kubernetes' own
(kubelet, containerd, control plane).  Idle CPU matters on a real node (it is
taken from the pods) and in the sandbox (2 cores shared by every daemon: what
one burns delays another's BFD, ovn-controller's claim or a probe).

    .venv/bin/python bench/bench_idle.py [--seconds 30] [--settle 20] [--pod-runner]
                                         [--gateway-nodes N]

--gateway-nodes labels N nodes `pacific.io/egress-gateway: "true"` (the nodes
that follow SB for egress SNAT).  To compare with another revision, run the
daemons from its tree, from a directory outside this one (`python -m` looks
in the current directory first): `cd /tmp && PYTHONPATH=/old/tree
/work/main/.venv/bin/python /work/main/bench/bench_idle.py` (this script and
the sandbox stay this tree's).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pacific import names  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402
from pacific.sandbox.cluster import Sandbox  # noqa: E402

HZ = os.sysconf("SC_CLK_TCK")
# component -> the program (argv[0]'s base name, or a Python program's module)
GROUPS = {"pacific-node": ("pacific.node.main", "pacific-node"),
          "pacific-controller": ("pacific.controller.main", "pacific-controller"),
          "ovs-vswitchd": ("ovs-vswitchd",), "ovsdb-server": ("ovsdb-server",),
          "ovn-controller": ("ovn-controller",), "ovn-northd": ("ovn-northd",),
          "kubelet": ("kubelet",), "containerd": ("containerd", "containerd-shim-runc-v2"),
          "control plane": ("kube-apiserver", "kube-controller-manager", "kube-scheduler",
                            "etcd")}


def component(argv: list[str]) -> str:
    prog = os.path.basename(argv[0]) if argv else ""
    if prog.startswith("python") and len(argv) > 1:       # python3 -m MODULE / python3 SCRIPT
        prog = argv[2] if argv[1] == "-m" and len(argv) > 2 else os.path.basename(argv[1])
    return next((g for g, progs in GROUPS.items() if prog in progs), f"other ({prog})")


def processes(marker: str) -> dict[int, str]:
    """pid -> component, for every process whose command line names the sandbox."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = open(f"/proc/{d}/cmdline", "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(marker in a for a in argv):
            out[int(d)] = component(argv)
    return out


def cpu_seconds(pid: int) -> float | None:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / HZ      # utime + stime


def measure(marker: str, seconds: float) -> dict[str, float]:
    procs = processes(marker)
    before = {p: cpu_seconds(p) for p in procs}
    time.sleep(seconds)
    per: dict[str, float] = {}
    for p, group in procs.items():
        a, b = before[p], cpu_seconds(p)
        if a is not None and b is not None:
            per[group] = per.get(group, 0.0) + (b - a)
    return {g: 100.0 * s / seconds for g, s in per.items()}      # % of one core


def label_gateways(sb: Sandbox, count: int) -> None:
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    for node in sb.nodes[:count]:
        r.patch_merge(api, r.NODES, node.name, {"metadata": {"labels": {
            names.LABEL_EGRESS_GATEWAY: "true"}}})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measured interval")
    ap.add_argument("--settle", type=float, default=20.0, help="wait after up before measuring")
    ap.add_argument("--pod-runner", action="store_true", help="pod runners instead of kubelets")
    ap.add_argument("--gateway-nodes", type=int, default=0,
                    help="label this many nodes pacific.io/egress-gateway=true")
    args = ap.parse_args()
    sb = Sandbox(f"bi{os.getpid() % 10000}", nodes=3, kubelet=not args.pod_runner)
    print(f"sandbox {sb.name}: 3 nodes, {'pod runners' if args.pod_runner else 'kubelets'}, "
          f"{args.gateway_nodes} labelled egress gateway; daemons from "
          f"{os.environ.get('PYTHONPATH') or 'this tree'}", flush=True)
    try:
        sb.up()
        label_gateways(sb, args.gateway_nodes)
        time.sleep(args.settle)            # start-up work done (informers synced, images in)
        usage = measure(f"/pacific-sandbox/{sb.name}/", args.seconds)
    finally:
        sb.down()
    print(f"idle CPU over {args.seconds:.0f} s, % of one core (all nodes together):")
    for group, pct in sorted(usage.items(), key=lambda kv: -kv[1]):
        print(f"  {group:<20} {pct:6.1f}")
    print(f"  {'total':<20} {sum(usage.values()):6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
