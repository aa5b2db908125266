"""Tenant isolation benchmark: how long a namespace's tenant change takes to be
in force on every chassis, and what it costs in OVN rows.

    .venv/bin/python bench/bench_tenant.py [--pods 20] [--flips 20] [--nodes 3]

A sandbox with the whole stack (the Kubernetes control plane, two controllers, node daemons);
two namespaces, --pods pods each across the nodes.  Each flip labels the second
namespace into the first one's tenant, or back, and measures:

- controller: label patched -> the NB port-group membership of every pod of
  the namespace reflects it (the controller's transaction committed);
- every chassis: then `ovn-nbctl --wait=hv sync` (the NB_Global nb_cfg ->
  hv_cfg barrier: every ovn-controller has installed the flows), so patched ->
  synced is the time until the change is in force everywhere;
- packets: patched -> a probe pod's ping across the namespaces turns
  (reachable <-> blocked); a blocked probe waits 0.2 s for its reply, so
  this is an upper bound with that resolution.

Baseline in the same run: the same barrier with no change (an empty NB
transaction through `--wait=hv`), so the figure shows what the controller adds.
Also printed: logical flows, ACLs and port groups with 1 and 10 tenants' worth
of namespaces, to show the rows grow with tenants, not pods.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pacific import contract, names  # noqa: E402
from pacific.tenancy import group_name, own_tenant  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402
from pacific.sandbox import cnipods  # noqa: E402
from pacific.sandbox.cluster import Sandbox  # noqa: E402


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def port_uuids(sb: Sandbox) -> dict[str, str]:
    """Logical switch port uuid -> name (read once; polling reads only uuids)."""
    rows = json.loads(sb.nbctl("--format=json", "--columns=_uuid,name", "list",
                               "Logical_Switch_Port"))["data"]
    return {u[1]: name for u, name in rows}


def members(sb: Sandbox, pg: str, names_by_uuid: dict[str, str]) -> set[str]:
    """Names of the ports in port group `pg`: one ovn-nbctl call."""
    rows = json.loads(sb.nbctl("--format=json", "--columns=ports", "find", "Port_Group",
                               f"name={pg}"))["data"]
    if not rows:
        return set()
    ports = rows[0][0]
    uuids = [u[1] for u in (ports[1] if ports[0] == "set" else [ports])]
    return {names_by_uuid.get(u, u) for u in uuids}


def reaches(sb: Sandbox, netns: str, ip: str) -> bool:
    return subprocess.run(["ip", "netns", "exec", netns, "ping", "-c1", "-W0.2", ip],
                          capture_output=True).returncode == 0


def count(sb: Sandbox, table: str) -> int:
    return len(json.loads(sb.nbctl("--format=json", "--columns=_uuid", "list", table))["data"])


def lflows(sb: Sandbox) -> int:
    return len(json.loads(subprocess.run(
        ["ovn-sbctl", f"--db={sb.sb_remote}", "--format=json", "--columns=_uuid", "list",
         "Logical_Flow"], capture_output=True, text=True, check=True).stdout)["data"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=20, help="pods per namespace (default 20)")
    ap.add_argument("--flips", type=int, default=20)
    ap.add_argument("--nodes", type=int, default=3)
    args = ap.parse_args()
    sb = Sandbox(f"bt{os.getpid() % 10000}", nodes=args.nodes)
    print(f"sandbox {sb.name}: {args.nodes} nodes, 2 namespaces x {args.pods} pods", flush=True)
    sb.up()
    try:
        api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
        for ns in ("ba", "bb"):   # ba is tenant "ba" (a label), bb its own tenant
            labels = {names.LABEL_TENANT: "ba"} if ns == "ba" else {}
            r.create(api, r.NAMESPACES, {"metadata": {"name": ns, "labels": labels}})
            for i in range(args.pods):
                cnipods.add_pod(sb, ns, f"p{i}", sb.nodes[i % len(sb.nodes)].name, api=api)
        print("pods up", flush=True)
        ports_b = {names.pod_lsp_name("bb", f"p{i}") for i in range(args.pods)}
        by_uuid = port_uuids(sb)
        probe = cnipods.load(sb, "ba", "p0", api).netns
        target = contract.own_record(r.get(api, r.PODS, "p1", "bb")).ip   # on another node
        base = []
        for _ in range(args.flips):
            t0 = time.perf_counter()
            sb.nbctl("--wait=hv", "sync")
            base.append(time.perf_counter() - t0)
        ctl, hv, pkt = [], [], []
        for k in range(args.flips):
            joined = k % 2 == 0
            want_pg = group_name("ba" if joined else own_tenant("bb"))
            label = {names.LABEL_TENANT: "ba" if joined else None}
            t0 = time.perf_counter()
            r.patch_merge(api, r.NAMESPACES, "bb", {"metadata": {"labels": label}})
            while not ports_b <= members(sb, want_pg, by_uuid):
                time.sleep(0.002)
            ctl.append(time.perf_counter() - t0)
            sb.nbctl("--wait=hv", "sync")
            hv.append(time.perf_counter() - t0)
            while reaches(sb, probe, target) != joined:
                pass
            pkt.append(time.perf_counter() - t0)
        print("\ntenant change of a namespace with %d pods (%d flips), seconds:" % (args.pods, args.flips))
        print(f"{'':34}{'p50':>8}{'p90':>8}{'max':>8}")
        for what, vals in (("baseline: --wait=hv sync alone", base),
                           ("label -> NB committed", ctl), ("label -> every chassis (hv_cfg)", hv),
                           ("label -> ping flips", pkt)):
            print(f"{what:34}{pct(vals, 50):8.3f}{pct(vals, 90):8.3f}{max(vals):8.3f}")
        rows1 = (count(sb, "Port_Group"), count(sb, "ACL"), lflows(sb))
        for i in range(8):    # 8 more tenants, 1 pod each
            ns = f"bx{i}"
            r.create(api, r.NAMESPACES, {"metadata": {"name": ns}})
            cnipods.add_pod(sb, ns, "p0", sb.nodes[i % len(sb.nodes)].name, api=api)
        sb.nbctl("--wait=hv", "sync")
        rows2 = (count(sb, "Port_Group"), count(sb, "ACL"), lflows(sb))
        print("\nOVN rows (port groups, ACLs, logical flows):")
        print(f"  2 tenants, {2 * args.pods} pods: {rows1}")
        print(f"  10 tenants, {2 * args.pods + 8} pods: {rows2}  (+8 tenants: "
              f"+{rows2[1] - rows1[1]} ACLs, +{rows2[2] - rows1[2]} flows)")
    finally:
        sb.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
