#!/usr/bin/env python3
"""Rolling upgrades of each of Pacific's components, and the time from applying
the manifests to the first pod Running (issue 29).

    .venv/bin/python bench/bench_upgrade.py            # about 6 minutes
    .venv/bin/python bench/bench_upgrade.py --rounds 2 --keep

1. apply -> first pod: a fresh sandbox of kubelet nodes (`--ovs-pods`: no OVN,
   no Open vSwitch, no Pacific process of the sandbox's own) has its control
   plane and kubelets up; then the clock starts and the sandbox does what an
   administrator does (label three nodes, `pacific tls init`, apply
   deploy/central.yaml and vswitch.yaml, then the controller and node daemons
   from deploy/), and a pod is created: time until OVN central and Open vSwitch
   are Ready, until Pacific is Ready, until the pod is Running.
2. per component (pacific-central, pacific-vswitch, pacific-node,
   pacific-controller), a rolling update to a new image tag while pod p1
   (node1) pings pod p2 (node2) every 20 ms and streams TCP to it: pings lost
   (by sequence number), whether the connection held, its longest stall, and
   how long the rollout took.  Goal: no loss and no stall beyond the stream's
   10 ms pace.  Then pacific-vswitch once more replacing its daemons, as a new
   Open vSwitch version makes it (`PACIFIC_VSWITCH_REPLACE_DAEMONS=1`): goal
   at most 1 s of pings lost on each of the two nodes.

Needs `make image` (the archive) and root.  Nothing else should run meanwhile.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402
from pacific.sandbox import services  # noqa: E402
from pacific.sandbox.cluster import Sandbox  # noqa: E402
from pacific.sandbox.k8s import rollout, traffic  # noqa: E402
from pacific.sandbox.k8s import sandbox as k8s  # noqa: E402
from pacific.sandbox.proc import wait_for  # noqa: E402

NS = "upg"
COMPONENTS = (("DaemonSet", "pacific-central", None), ("DaemonSet", "pacific-vswitch", None),
              ("DaemonSet", "pacific-node", None), ("Deployment", "pacific-controller", None),
              ("DaemonSet", "pacific-vswitch", {"PACIFIC_VSWITCH_REPLACE_DAEMONS": "1"}))
# what runs before the clock starts: the cluster without its network
BEFORE = (services.kube_control_plane, services.pacific_credentials, services.cluster_dns,
          services.pod_runners)
# what the clock measures: the network from Pacific's manifests
APPLY = (services.ovn_central, services.controllers, services.node_daemons)


def pod(name: str, node: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": "upg"}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "localhost/busybox:latest",
                                     "imagePullPolicy": "IfNotPresent",
                                     "command": ["sh", "-c", "exec sleep 100000"]}]}}


def running(api, name: str) -> dict | None:
    p = r.get(api, r.PODS, name, NS)
    return p if p and (p.get("status") or {}).get("phase") == "Running" \
        and p["status"].get("podIP") else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=1, help="rolling updates per component")
    ap.add_argument("--name", default=f"upg{os.getpid() % 100000}")
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up")
    args = ap.parse_args()

    sb = Sandbox(args.name, nodes=3, ovs_pods=True)
    try:
        print(f"bringing up sandbox {args.name}: network, control plane, kubelets", flush=True)
        sb.up(services=BEFORE, timeout=120)
        api = client.load(k8s.kubeconfig_path(sb))
        t0 = time.monotonic()
        services.ovn_central(sb)
        t_central = time.monotonic() - t0
        services.controllers(sb)
        services.node_daemons(sb)
        t_pacific = time.monotonic() - t0
        r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
        # ServiceAccount admission refuses pods until the default account has its token
        wait_for(lambda: (r.get(api, r.SERVICEACCOUNTS, "default", NS) or {}).get("secrets"),
                 60, f"ServiceAccount {NS}/default and its token")
        r.create(api, r.PODS, pod("p1", "node1"), namespace=NS)
        wait_for(lambda: running(api, "p1"), 120, "p1 Running")
        t_pod = time.monotonic() - t0
        print("\n| apply -> | seconds |\n|---|---|")
        print(f"| OVN central Ready (3 members), Open vSwitch Ready (3 nodes) | {t_central:.1f} |")
        print(f"| Pacific Ready (controller, node daemons, Nodes) | {t_pacific:.1f} |")
        print(f"| first pod Running | {t_pod:.1f} |", flush=True)

        r.create(api, r.PODS, pod("p2", "node2"), namespace=NS)
        p2 = wait_for(lambda: running(api, "p2"), 120, "p2 Running")
        p1 = running(api, "p1")
        print("\n| component | rollout | pings lost | TCP stream | longest stall |\n"
              "|---|---|---|---|---|", flush=True)
        for _ in range(args.rounds):
            for kind, name, env in COMPONENTS:
                probe = traffic.Probe(sb, p1, p2).start()
                try:
                    took = rollout.upgrade(sb, api, kind, name, env=env)
                finally:
                    res = probe.stop()
                what = f"{name} (daemons replaced)" if env else name
                print(f"| {what} | {took:.1f} s | {res.lost} of {res.sent} "
                      f"({res.lost * traffic.PING_INTERVAL:.2f} s) | "
                      f"{'broken: ' + res.broken if res.broken else 'held'} | "
                      f"{res.stall * 1000:.0f} ms |", flush=True)
    finally:
        if not args.keep:
            sb.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
