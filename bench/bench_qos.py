"""QoS and mirroring benchmark on the sandbox (whole stack, 2 nodes).

    .venv/bin/python bench/bench_qos.py [--seconds 4] [--changes 20]

1. Accuracy: rate set vs measured by iperf3 (receiver side, first second
   omitted), TCP and UDP (sent at twice the limit), into the pod (ingress) and
   out of it (egress), pod pairs on one node and across nodes, at 10, 50, 100
   and 200 Mbit/s; baseline in the same run: the same pairs unlimited.
2. Time from an annotation change on a running pod to the new rate enforced
   (the tbf on the host veth shows it), p50/p90/max over --changes changes.
3. Mirroring: TCP throughput across nodes and ovs-vswitchd CPU seconds per GB
   with mirroring off, one mirrored pod, and --mirror-mode all (tcpdump -w
   /dev/null on mirror0 meanwhile), in one run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pacific import contract, names  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402
from pacific.sandbox import cnipods, nodedaemons  # noqa: E402
from pacific.sandbox.cluster import Sandbox  # noqa: E402

NS = "bq"
RATES = (10, 50, 100, 200)
_port = iter(range(5400, 6400))


class Bench:
    def __init__(self, sb: Sandbox, api, seconds: int):
        self.sb, self.api, self.seconds = sb, api, seconds

    def netns(self, pod):
        return cnipods.load(self.sb, NS, pod, self.api).netns

    def ip(self, pod):
        return contract.own_record(r.get(self.api, r.PODS, pod, NS)).ip

    def annotate(self, pod, **ann):
        r.patch_merge(self.api, r.PODS, pod, {"metadata": {"annotations": ann}}, NS)

    def iperf(self, src, dst, udp_mbps=None, seconds=None) -> float:
        port = str(next(_port))
        server = subprocess.Popen(["ip", "netns", "exec", self.netns(dst), "iperf3", "-s", "-1", "-p",
                                   port], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not subprocess.run(["ip", "netns", "exec", self.netns(dst), "ss", "-Hltn",
                                      f"sport = :{port}"], capture_output=True, text=True).stdout.strip():
                time.sleep(0.01)
            argv = ["ip", "netns", "exec", self.netns(src), "iperf3", "-c", self.ip(dst), "-p", port,
                    "-t", str(seconds or self.seconds), "-O", "1", "--json"]
            if udp_mbps:
                argv += ["-u", "-b", f"{udp_mbps}M"]
            out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        finally:
            server.wait(30)
        return json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6

    def tbf_rate(self, pod) -> str | None:
        att = cnipods.load(self.sb, NS, pod)
        node = self.sb.node(att.node)
        dev = node.vsctl("--bare", "--columns=name", "find", "Interface",
                         f"external_ids:{names.OVS_POD}={NS}/{pod}").split()[0]
        out = subprocess.run(["ip", "netns", "exec", node.netns, "tc", "qdisc", "show", "dev", dev],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("qdisc tbf"):
                return line.split(" rate ")[1].split()[0]
        return None

    def vswitchd_cpu(self) -> float:
        total = 0.0
        for n in self.sb.nodes:
            with open(os.path.join(n.rundir, "ovs-vswitchd.pid")) as f:
                pid = f.read().strip()
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total


def accuracy(b: Bench) -> None:
    print("\n1. accuracy (Mbit/s measured by the receiver; error vs the limit)")
    print(f"{'placement':9} {'dir':8} {'proto':5} " + " ".join(f"{x:>14}" for x in ("unlimited", *RATES)))
    for peer, placement in (("same", "same"), ("far", "cross")):
        for direction, key in (("ingress", names.ANN_INGRESS_RATE), ("egress", names.ANN_EGRESS_RATE)):
            src, dst = (peer, "lim") if direction == "ingress" else ("lim", peer)
            for proto in ("tcp", "udp"):
                base = b.iperf(src, dst, udp_mbps=1000 if proto == "udp" else None)
                cells = [f"{base:14.1f}"]
                for rate in RATES:
                    b.annotate("lim", **{key: str(rate)})
                    while b.tbf_rate("lim") != f"{rate}Mbit" and direction == "ingress":
                        time.sleep(0.02)
                    time.sleep(0.3 if direction == "egress" else 0)   # egress tbf is in the pod
                    got = b.iperf(src, dst, udp_mbps=2 * rate if proto == "udp" else None)
                    cells.append(f"{got:7.1f} {100 * (got - rate) / rate:+5.1f}%")
                b.annotate("lim", **{key: None})
                print(f"{placement:9} {direction:8} {proto:5} " + " ".join(cells), flush=True)


def change_latency(b: Bench, changes: int) -> None:
    print(f"\n2. annotation change on a running pod -> rate enforced on the host veth ({changes} changes)")
    took = []
    for i in range(changes):
        rate = 20 + 10 * (i % 5)
        t0 = time.perf_counter()
        b.annotate("lim", **{names.ANN_INGRESS_RATE: str(rate)})
        while b.tbf_rate("lim") != f"{rate}Mbit":
            time.sleep(0.002)
        took.append(time.perf_counter() - t0)
        if i % 5 == 4:
            b.annotate("lim", **{names.ANN_INGRESS_RATE: None})
            while b.tbf_rate("lim") is not None:
                time.sleep(0.002)
    b.annotate("lim", **{names.ANN_INGRESS_RATE: None})
    s = sorted(took)
    print(f"   p50 {statistics.median(s) * 1000:.0f} ms, p90 {s[int(0.9 * (len(s) - 1))] * 1000:.0f} ms, "
          f"max {s[-1] * 1000:.0f} ms (tc polled every 2 ms, includes one `tc` fork per poll)")


def mirroring(b: Bench) -> None:
    print("\n3. mirroring: TCP across nodes (lim on node1 -> far on node2), ovs-vswitchd CPU")
    rows = []
    for mode in ("off", "one pod", "all"):
        if mode == "one pod":
            b.annotate("lim", **{names.ANN_MIRROR: "true"})
        if mode == "all":
            b.annotate("lim", **{names.ANN_MIRROR: None})
            for n in ("node1", "node2"):
                nodedaemons.restart(b.sb, n, extra=("--mirror-mode", "all"))
                nodedaemons.wait_ready(b.sb, n)
        time.sleep(1)
        dumps = [subprocess.Popen(["ip", "netns", "exec", b.sb.node(n).netns, "tcpdump", "-ni",
                                   names.MIRROR_PORT, "-w", "/dev/null"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL) for n in ("node1", "node2")] \
            if mode != "off" else []
        c0 = b.vswitchd_cpu()
        mbps = b.iperf("lim", "far", seconds=6)
        cpu = b.vswitchd_cpu() - c0
        for d in dumps:
            d.terminate()
            d.wait()
        gb = mbps * 5 / 8 / 1000     # 5 s measured (first omitted)
        rows.append((mode, mbps, cpu / gb if gb else float("nan")))
    for n in ("node1", "node2"):
        nodedaemons.restart(b.sb, n)
        nodedaemons.wait_ready(b.sb, n)
    base = rows[0][1]
    for mode, mbps, cpu_gb in rows:
        print(f"   mirroring {mode:8}: {mbps:7.1f} Mbit/s ({100 * (mbps - base) / base:+5.1f}% vs off), "
              f"ovs-vswitchd {cpu_gb:5.2f} CPU s per GB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=4, help="iperf3 seconds per measurement")
    ap.add_argument("--changes", type=int, default=20)
    args = ap.parse_args()
    sb = Sandbox(f"bq{os.getpid() % 10000}", nodes=2)
    print(f"sandbox {sb.name}: 2 nodes; {os.cpu_count()} CPUs", flush=True)
    sb.up()
    try:
        api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
        for pod, node in (("lim", "node1"), ("same", "node1"), ("far", "node2")):
            cnipods.add_pod(sb, NS, pod, node, api=api)
        b = Bench(sb, api, args.seconds)
        accuracy(b)
        change_latency(b, args.changes)
        mirroring(b)
    finally:
        sb.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
