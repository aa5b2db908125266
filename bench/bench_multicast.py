#!/usr/bin/env python3
"""Multicast benchmark: one sender to 1, 10 and 30 receivers over 3 nodes,
against unicast to the same receivers in the same run; logical flows for 100
groups.

    .venv/bin/python bench/bench_multicast.py [--receivers 1,10,30] [--rates 1000,0]
        [--seconds 2] [--size 1000] [--groups 100] [--keep]

A 3-node sandbox with the whole stack (pod runners), one namespace with
`pacific.io/multicast=true`: the sender on node1, 30 receivers spread over
node1..3 (the first receiver on node2, so N=1 crosses nodes).

1. For each rate and N: the first N receivers join a group; the sender offers
   `rate` datagrams of `--size` bytes per second per receiver (0: as fast as
   it can) `rate` x `--seconds` times (0: 2,000):
   - multicast: one stream to the group (the network makes the N copies);
   - unicast: one stream to each receiver's address, round robin (the
     sender makes the N copies).
   Per mode: the sender's achieved rate, the loss over all receivers (and the
   worst receiver's), and the throughput delivered (all receivers, Mbit/s).
2. Logical flows (SB Logical_Flow rows) and node1's br-int OpenFlow flows with
   no group, then with `--groups` groups joined (spread over the receivers).
3. How soon delivery stops, `--rounds` times each: the sender sends every
   10 ms; a receiver (node2) leaves (IGMPv3, then IGMPv2), or the namespace's
   annotation is removed: the action -> the last datagram on the receiver's
   eth0 (what the network still delivered).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
E2E = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e")
sys.path.insert(0, E2E)
sys.path.insert(0, os.path.join(os.path.dirname(E2E), "lib"))   # the test library

from pacific import contract, names  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402
from pacific.ovn.query import Query, as_list  # noqa: E402
from pacific.sandbox import cnipods  # noqa: E402
from pacific.sandbox.cluster import Sandbox  # noqa: E402

MCASTCHECK = os.path.join(E2E, "mcastcheck.py")
NS, PORT, GROUP = "bench-mc", 5100, "239.10.0.1"


def wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(0.1)


class Counter:
    """mcastcheck count in a pod: joined to `groups`, counting datagrams to PORT."""

    def __init__(self, netns: str, groups: list[str]):
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, MCASTCHECK, "count", str(PORT),
             ",".join(groups) or "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def result(self) -> tuple[int, int, float]:
        out, _ = self.proc.communicate("", timeout=30)
        _, n, _, nbytes, _, span = out.split()
        return int(n), int(nbytes), float(span)


def members(sb_remote: str, group: str) -> int:
    with Query(sb_remote, "OVN_Southbound") as sb:
        return sum(len(as_list(g["ports"])) for g in sb.select(
            "IGMP_Group", ["address", "ports"], [["address", "==", group]]))


def groups_joined(sb_remote: str) -> int:
    with Query(sb_remote, "OVN_Southbound") as sb:
        return len({g["address"] for g in sb.select("IGMP_Group", ["address"])
                    if g["address"] != "mrouters"})


def flow_counts(sb, sb_remote: str) -> tuple[int, int]:
    with Query(sb_remote, "OVN_Southbound") as q:
        lflows = len(q.select("Logical_Flow", ["_uuid"]))
    mgmt = f"unix:{os.path.join(sb.node('node1').rundir, 'br-int.mgmt')}"
    out = sb.exec(None, [sb.ovs.program("ovs-ofctl"), "dump-flows", mgmt]).stdout
    return lflows, sum(1 for ln in out.splitlines() if "cookie=" in ln)


def run_mode(sb, sender: str, dests: list[str], counters: list[Counter], per_dest: int,
             size: int, rate: float) -> dict:
    cp = sb.exec(sender, [sys.executable, MCASTCHECK, "blast", ",".join(dests), str(PORT),
                          str(per_dest), str(size), str(rate)], timeout=600)
    sent, took = int(cp.stdout.split()[1]), float(cp.stdout.split()[3])
    time.sleep(0.5)          # the last datagrams in flight: nothing to wait on
    got = [c.result() for c in counters]
    expected = per_dest * len(counters)
    received = sum(n for n, _, _ in got)
    span = max((s for _, _, s in got), default=0) or took
    return {"sent": sent, "sender_rate": sent / took, "loss": 1 - received / expected,
            "worst_loss": max(1 - n / per_dest for n, _, _ in got),
            "mbit": sum(b for _, b, _ in got) * 8 / span / 1e6}


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def stopping(sb, api, sender: str, rx_netns: str, rounds: int) -> dict[str, list[float]]:
    import mcast_fixtures as mf
    out: dict[str, list[float]] = {"leave, IGMPv3": [], "leave, IGMPv2": [],
                                   "namespace switched off": []}
    for _ in range(rounds):
        for what in out:
            rx = mf.Receiver(sb, rx_netns, GROUP, PORT, igmp=2 if "v2" in what else 3)
            try:
                mf.warm(sb, sender, GROUP, PORT, [rx])
                tag = mf.new_tag()
                feed = subprocess.Popen(["ip", "netns", "exec", sender, sys.executable,
                                         MCASTCHECK, "send", GROUP, str(PORT), "600", "0.01",
                                         "8", "0", tag], stdout=subprocess.DEVNULL)
                wait(lambda: rx.wire(tag), 10, "the stream arrives")
                t0 = time.monotonic()
                if what.startswith("leave"):
                    rx.leave()
                else:
                    r.patch_merge(api, r.NAMESPACES, NS, {"metadata": {"annotations": {
                        names.ANN_MULTICAST: None}}})
                # stopped: nothing new for 1 s (the stream lasts 6 s)
                wait(lambda: time.monotonic() - (rx.last_wire(tag) or 0) > 1.0, 5,
                     f"{what}: delivery stops")
                out[what].append(max(0.0, rx.last_wire(tag) - t0))   # 0: none after it
                feed.kill()
                feed.wait()
            finally:
                rx.close()
                r.patch_merge(api, r.NAMESPACES, NS, {"metadata": {"annotations": {
                    names.ANN_MULTICAST: "true"}}})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--receivers", default="1,10,30")
    ap.add_argument("--rates", default="1000,0",
                    help="datagrams/s per receiver, each a round (0: as fast as the sender can)")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up on a failure")
    args = ap.parse_args()
    sizes = [int(x) for x in args.receivers.split(",")]
    n_rx = max(sizes)
    sb = Sandbox(f"bm{os.getpid() % 10000}", nodes=3)
    print(f"sandbox {sb.name}: 3 nodes; sender on node1, {n_rx} receivers over node1..3",
          flush=True)
    sb.up()
    failed = True
    try:
        api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
        sb_remote = sb.sb_remote
        r.create(api, r.NAMESPACES, {"metadata": {"name": NS, "annotations": {
            names.ANN_MULTICAST: "true"}}})
        sender = cnipods.add_pod(sb, NS, "sender", "node1", api=api).netns
        rx, ips = [], []
        for i in range(n_rx):
            p = cnipods.add_pod(sb, NS, f"r{i}", f"node{(i + 1) % 3 + 1}", api=api)
            rx.append(p.netns)
            ips.append(contract.own_record(r.get(api, r.PODS, f"r{i}", NS)).ip)
        print(f"   {n_rx + 1} pods up", flush=True)
        print("1. one sender, N receivers: multicast against unicast")
        print("   | datagrams/s offered per receiver | receivers | mode | sender datagrams/s | "
              "loss (worst receiver) | delivered Mbit/s |")
        print("   |---|---|---|---|---|---|")
        for rate in (float(x) for x in args.rates.split(",")):
            per_dest = int(rate * args.seconds) or 10000
            for n in sizes:
                rows = {}
                # the joins reach SB before the multicast stream starts
                joined = [Counter(x, [GROUP]) for x in rx[:n]]
                wait(lambda: members(sb_remote, GROUP) >= n, 30, f"{n} members of {GROUP}")
                rows["multicast"] = run_mode(sb, sender, [GROUP], joined, per_dest, args.size,
                                             rate)
                wait(lambda: members(sb_remote, GROUP) == 0, 30, f"the members of {GROUP} left")
                rows["unicast"] = run_mode(sb, sender, ips[:n], [Counter(x, []) for x in rx[:n]],
                                           per_dest, args.size, rate)
                for mode, v in rows.items():
                    print(f"   | {rate:.0f} ({per_dest} of {args.size} B) | {n} | {mode} | "
                          f"{v['sender_rate']:.0f} | {v['loss'] * 100:.1f} % "
                          f"({v['worst_loss'] * 100:.1f} %) | {v['mbit']:.1f} |", flush=True)
        print(f"2. logical flows with 0 and {args.groups} groups")
        wait(lambda: groups_joined(sb_remote) == 0, 120, "no group joined")
        before = flow_counts(sb, sb_remote)
        groups = [f"239.20.{g // 250}.{g % 250 + 1}" for g in range(args.groups)]
        holders = [Counter(x, groups[i::n_rx]) for i, x in enumerate(rx)]
        wait(lambda: groups_joined(sb_remote) >= args.groups, 60, f"{args.groups} groups in SB")
        sb.exec(None, [sb.ovs.program("ovn-nbctl"), f"--db={sb.nb_remote}", "--wait=hv", "sync"])
        after = flow_counts(sb, sb_remote)
        for c in holders:
            c.result()
        print(f"   Logical_Flow rows {before[0]} -> {after[0]} (+{after[0] - before[0]}, "
              f"{(after[0] - before[0]) / args.groups:.1f} per group); node1 br-int OpenFlow "
              f"flows {before[1]} -> {after[1]} (+{after[1] - before[1]})")
        if args.rounds:
            print(f"3. action -> delivery stopped, {args.rounds} rounds each")
            for what, took in stopping(sb, api, sender, rx[0], args.rounds).items():
                print(f"   {what}: p50 {pct(took, 50) * 1000:.0f} ms, max {max(took) * 1000:.0f} ms",
                      flush=True)
        failed = False
        return 0
    finally:
        if failed and args.keep:
            print(f"sandbox {sb.name} kept: pacific sandbox down --name {sb.name}")
        else:
            sb.down()


if __name__ == "__main__":
    sys.exit(main())
