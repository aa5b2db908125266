#!/usr/bin/env python3
"""Audit under a flood: what logging a policy's drops costs, and what the
meter bounds (issue 28).

    .venv/bin/python bench/bench_audit.py [--rate 10000] [--seconds 5] [--keep]

A 2-node sandbox with the whole stack: a server pod on node2 whose namespace
has a deny-all ingress NetworkPolicy, a client pod on node1 that sends UDP
datagrams at --rate per second, each to another port (every one a new
connection, every one dropped by the policy's ACL on node2).  In one run:

  A. the flood with the policy not audited (the baseline);
  B. the same with `pacific.io/audit: deny` (meter pacific-audit, --audit-rate
     20/s, --audit-burst 40 per ACL: the defaults);
  C. the same with the meter raised to 100,000/s (what the meter holds back).

Per phase: datagrams sent per second, acl_log lines ovn-controller wrote and
records pacific-node wrote (per second, and bytes), and CPU (% of one core)
of node2's pacific-node and ovn-controller over the phase.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))

from controller_fixtures import wait_until  # noqa: E402
from pacific import contract, names  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402
from pacific.ovn.query import Query, as_list  # noqa: E402
from pacific.sandbox import cnipods  # noqa: E402
from pacific.sandbox import nodedaemons  # noqa: E402
from pacific.sandbox.cluster import Sandbox  # noqa: E402

NS = "bench-audit"
SENDER = r"""
import socket, sys, time
dst, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
n, t0 = 0, time.monotonic()
end = t0 + seconds
while True:
    now = time.monotonic()
    if now >= end:
        break
    due = int((now - t0) * rate)
    while n < due:
        s.sendto(b"x" * 64, (dst, 1024 + n % 60000))
        n += 1
    time.sleep(0.0005)
print(n, time.monotonic() - t0)
"""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_of(path: str) -> int:
    with open(path) as f:
        return int(f.read().strip())


def count_lines(path: str, needle: str) -> tuple[int, int]:
    """(lines holding needle, bytes) of a file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0, 0
    return data.count(needle.encode()), len(data)


def set_meter(nb_remote: str, rate: int) -> None:
    """The meter's band, as pacific-controller --audit-rate would write it."""
    with Query(nb_remote, "OVN_Northbound") as q:
        band = as_list(q.select("Meter", ["bands"], [["name", "==", names.METER_AUDIT]])[0]["bands"])[0]
        q.transact({"op": "update", "table": "Meter_Band", "where": [["_uuid", "==", ["uuid", band]]],
                    "row": {"rate": rate, "burst_size": rate * 2}})


def phase(sb, client_ns, server_ip, rate, seconds, flows_path, ctl_log, pids) -> dict:
    lines0, _ = count_lines(ctl_log, "acl_log")
    recs0, bytes0 = count_lines(flows_path, "\n")
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    t0 = time.monotonic()
    out = subprocess.run(["ip", "netns", "exec", client_ns, sys.executable, "-c", SENDER,
                          server_ip, str(rate), str(seconds)], capture_output=True, text=True,
                         check=True).stdout.split()
    time.sleep(1.5)            # the node daemon's next passes read what was logged
    wall = time.monotonic() - t0
    lines1, _ = count_lines(ctl_log, "acl_log")
    recs1, bytes1 = count_lines(flows_path, "\n")
    sent, took = int(out[0]), float(out[1])
    return {"sent/s": sent / took, "log lines/s": (lines1 - lines0) / took,
            "records/s": (recs1 - recs0) / took, "record bytes/s": (bytes1 - bytes0) / took,
            **{f"{k} CPU %": 100 * (cpu_seconds(p) - cpu0[k]) / wall for k, p in pids.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=10000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up on a failure")
    args = ap.parse_args()
    sb = Sandbox(f"ba{os.getpid() % 10000}", nodes=2)
    print(f"sandbox {sb.name}: client on node1, server on node2; {args.rate:.0f} datagrams/s "
          f"for {args.seconds:.0f} s per phase", flush=True)
    sb.up()
    failed = True
    try:
        api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
        r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
        cl = cnipods.add_pod(sb, NS, "client", "node1", api=api).netns
        cnipods.add_pod(sb, NS, "server", "node2", api=api, labels={"app": "server"})
        server_ip = contract.own_record(r.get(api, r.PODS, "server", NS)).ip
        r.create(api, r.NETWORKPOLICIES, {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny", "namespace": NS},
            "spec": {"podSelector": {"matchLabels": {"app": "server"}},
                     "policyTypes": ["Ingress"]}}, NS)
        wait_until(lambda: (r.get(api, r.NETWORKPOLICIES, "deny", NS)["metadata"].get("annotations")
                            or {}).get(names.ANN_ENFORCED) == "True", 30, what="the policy enforced")
        node2 = sb.node("node2")
        flows_path = nodedaemons.flow_log(node2)
        ctl_log = nodedaemons.ovn_controller_log(node2)
        pids = {"pacific-node": pid_of(os.path.join(sb.dir, "services",
                                                    f"{nodedaemons.tag(node2)}.pid")),
                "ovn-controller": pid_of(os.path.join(node2.rundir, "ovn-controller.pid"))}
        rows = {}
        rows["A. not audited"] = phase(sb, cl, server_ip, args.rate, args.seconds, flows_path,
                                       ctl_log, pids)
        r.patch_merge(api, r.NETWORKPOLICIES, "deny", {"metadata": {"annotations": {
            names.ANN_AUDIT: "deny"}}}, NS)
        def logging():
            with Query(sb.nb_remote, "OVN_Northbound") as q:
                return any(row["log"] for row in q.select("ACL", ["log"]))
        wait_until(logging, 30, what="ACLs logging")
        time.sleep(1.0)     # ovn-controller applied it (no barrier for an annotation yet)
        rows[f"B. audited, meter {names.AUDIT_RATE}/s"] = phase(
            sb, cl, server_ip, args.rate, args.seconds, flows_path, ctl_log, pids)
        set_meter(sb.nb_remote, 100000)
        time.sleep(1.0)
        rows["C. audited, meter 100000/s"] = phase(sb, cl, server_ip, args.rate, args.seconds,
                                                   flows_path, ctl_log, pids)
        cols = list(next(iter(rows.values())))
        print("| phase | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for name, row in rows.items():
            print(f"| {name} | " + " | ".join(f"{row[c]:.0f}" if row[c] >= 10 else f"{row[c]:.1f}"
                                              for c in cols) + " |")
        failed = False
    finally:
        if not (failed and args.keep):
            sb.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
