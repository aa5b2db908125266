#!/usr/bin/env python3
"""Audit under a flood: what logging a policy's drops costs, what the meter
bounds (issue 28), and what one tenant's flood leaves the others (issue 51).

    .venv/bin/python bench/bench_audit.py [--rate 10000] [--seconds 5] [--name audit] [--keep]

A 2-node sandbox with the whole stack: a server pod on node2 whose namespace
has a deny-all ingress NetworkPolicy, a client pod on node1 that sends UDP
datagrams at --rate per second, each to another port (every one a new
connection, every one dropped by the policy's ACL on node2).  In one run:

  A. the flood with the policy not audited (the baseline);
  B. the same with `pacific.io/audit: deny` (the namespace's meter,
     --audit-rate 20/s, --audit-burst 40: the defaults);
  C. the same with that meter raised to 100,000/s (what the meter holds back).

Per phase: datagrams sent per second, acl_log lines ovn-controller wrote and
records pacific-node wrote (per second, and bytes), and CPU (% of one core)
of node2's pacific-node and ovn-controller over the phase.

Then fairness between tenants on node2 (decision 0050), without and with a
flood, each --seconds long: tenant `bench-flood` has an audited policy of
1,000 rules (1,000 logged allows, one port each) and its client floods its
server on node2 at --rate over those ports; tenant `bench-other` has its own
audited deny-all on a server on node2 and a client on node1 opening 10
connections a second (below its bucket: none may be lost); a third pod
(`bench-arp`, node2) resolves its gateway's MAC every 50 ms (its neighbour
entry flushed first; the time of `ping -c1`, which waits for the ARP answer).
Per phase: the flood's datagrams and records per second, the other tenant's
connections and records, ARP p50 / p99 (ms), and the acl_log lines per
second node2's ovn-controller wrote against --audit-node-cap.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))

from controller_fixtures import wait_until  # noqa: E402
from pacific import audit, contract, names  # noqa: E402
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
        band = as_list(q.select("Meter", ["bands"], [["name", "==", audit.meter_name("ns", NS)]]
                                )[0]["bands"])[0]
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


def table(rows: dict) -> None:
    cols = list(next(iter(rows.values())))
    print("| phase | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for name, row in rows.items():
        print(f"| {name} | " + " | ".join(f"{row[c]:.0f}" if row[c] >= 10 else f"{row[c]:.1f}"
                                          for c in cols) + " |")


NETCHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e",
                        "netcheck.py")
FLOOD, OTHER, ARP = "bench-flood", "bench-other", "bench-arp"
RULES = 1000


def _policy(ns: str, name: str, ann: dict, spec: dict) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": ns, "annotations": ann}, "spec": spec}


def _of(ns: str) -> str:
    """What one record of a policy of `ns` holds once (records are sorted JSON)."""
    return f'"namespace": "{ns}"'


def _flood(netns: str, ip: str, rate: float, seconds: float, ports: int) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, NETCHECK, "flood", ip,
                             str(rate), str(seconds), str(ports)], stdout=subprocess.PIPE, text=True)


def _arp_times(netns: str, gateway: str, seconds: float) -> list[float]:
    """ms of `ping -c1` to the gateway, its neighbour entry flushed first."""
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        subprocess.run(["ip", "netns", "exec", netns, "ip", "neigh", "flush", "dev", "eth0"],
                       check=False)
        t0 = time.monotonic()
        ok = subprocess.run(["ip", "netns", "exec", netns, "ping", "-c1", "-W1", gateway],
                            capture_output=True).returncode == 0
        out.append((time.monotonic() - t0) * 1000 if ok else 1000.0)
        time.sleep(0.05)
    return sorted(out)


def fairness(sb, api, rate: float, seconds: float, ctl_log: str) -> dict:
    """The second table (see the module doc): no flood, then the flood."""
    for ns in (FLOOD, OTHER, ARP):
        r.create(api, r.NAMESPACES, {"metadata": {"name": ns}})
    flooder = cnipods.add_pod(sb, FLOOD, "client", "node2", api=api, labels={"app": "client"}).netns
    cnipods.add_pod(sb, FLOOD, "server", "node2", api=api, labels={"app": "server"})
    prober = cnipods.add_pod(sb, OTHER, "client", "node1", api=api).netns
    cnipods.add_pod(sb, OTHER, "server", "node2", api=api, labels={"app": "server"})
    arp = cnipods.add_pod(sb, ARP, "pod", "node2", api=api).netns
    ip = {ns: contract.own_record(r.get(api, r.PODS, "server", ns)).ip for ns in (FLOOD, OTHER)}
    gateway = contract.own_record(r.get(api, r.PODS, "pod", ARP)).gateway
    r.create(api, r.NETWORKPOLICIES, _policy(FLOOD, "many", {names.ANN_AUDIT: "allow"}, {
        "podSelector": {"matchLabels": {"app": "server"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "client"}}}],
                     "ports": [{"protocol": "UDP", "port": 20000 + i}]} for i in range(RULES)]}),
        FLOOD)
    r.create(api, r.NETWORKPOLICIES, _policy(OTHER, "deny", {names.ANN_AUDIT: "deny"}, {
        "podSelector": {"matchLabels": {"app": "server"}}, "policyTypes": ["Ingress"]}), OTHER)
    for ns, name in ((FLOOD, "many"), (OTHER, "deny")):
        wait_until(lambda ns=ns, name=name: (r.get(api, r.NETWORKPOLICIES, name, ns)["metadata"]
                                             .get("annotations") or {}).get(names.ANN_ENFORCED)
                   == "True", 120, what=f"{ns}/{name} enforced")
    flows_path = nodedaemons.flow_log(sb.node("node2"))
    rows = {}
    for phase, flood_rate in (("no flood", 0), (f"flood of {RULES} audited ACLs", rate)):
        lines0, _ = count_lines(ctl_log, "acl_log")
        recs0 = {ns: count_lines(flows_path, _of(ns))[0] for ns in (FLOOD, OTHER)}
        t0 = time.monotonic()
        procs = [_flood(prober, ip[OTHER], 10, seconds, 1000)]
        if flood_rate:
            procs.append(_flood(flooder, ip[FLOOD], flood_rate, seconds, RULES))
        arp_ms = _arp_times(arp, gateway, seconds)
        sent = [int(p.communicate()[0].split()[0]) for p in procs]
        time.sleep(2.0)          # the node daemon's next passes read what was logged
        took = time.monotonic() - t0 - 2.0
        lines1, _ = count_lines(ctl_log, "acl_log")
        recs = {ns: count_lines(flows_path, _of(ns))[0] - recs0[ns] for ns in (FLOOD, OTHER)}
        rows[phase] = {"flood sent/s": (sent[1] if flood_rate else 0) / took,
                       "flood records/s": recs[FLOOD] / took,
                       "other's connections": sent[0], "other's records": recs[OTHER],
                       "ARP p50 ms": arp_ms[len(arp_ms) // 2],
                       "ARP p99 ms": arp_ms[min(len(arp_ms) - 1, int(len(arp_ms) * 0.99))],
                       "node2 log lines/s": (lines1 - lines0) / took,
                       "cap/s": names.AUDIT_NODE_CAP}
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=10000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--name", default=f"ba{os.getpid() % 10000}", help="the sandbox's name")
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up on a failure")
    args = ap.parse_args()
    sb = Sandbox(args.name, nodes=2)
    print(f"sandbox {sb.name}: client on node1, server on node2; {args.rate:.0f} datagrams/s "
          f"for {args.seconds:.0f} s per phase", flush=True)
    failed = True
    try:
        sb.up()
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
        table(rows)
        table(fairness(sb, api, args.rate, args.seconds, ctl_log))
        failed = False
    finally:
        if not (failed and args.keep):
            sb.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
