"""EgressIP and EgressFirewall benchmark.

    .venv/bin/python bench/bench_egressip.py [--failovers 20] [--egressips 100]
                                             [--pods 1000] [--firewalls 100] [--rules 10]
                                             [--dns-changes 10] [--keep]

A 3-node sandbox with the whole stack (pod runners); node1 and node2 are
labelled pacific.io/egress-assignable and are the gatewayNodes of a
centralized Subnet.  Two parts:

1. Failover outage, EgressIP beside the centralized gateway in the same run:
   a pod on node3 selected by an EgressIP, another on the centralized Subnet,
   each opening a new TCP connection to the external host every 20 ms.  Rounds
   alternate: cut the underlay link of the node holding the EgressIP address
   (outage: last answer before the cut -> first answer with the address
   again), then of the active gateway; the link restored and BFD up between
   rounds.  p50 / p99 of each (goal: EgressIP p99 <= 1 s).
2. Programming: --pods pods over --egressips namespaces (bound to a Node
   object nobody runs: the controller allocates them, nothing plumbs them),
   then --egressips EgressIPs created at once, one address and one namespace
   each; time until every status names a holder and all its pods.
3. EgressFirewalls: --firewalls namespaces, each with a firewall of --rules
   CIDR rules (1,000 in all by default), created at once; time until every
   status says programmed and every chassis applied NB (`--wait=hv sync`).
   Goal: <= 10 s.
4. A DNS name's answer changed (dnsmasq on the controllers' --dns-servers,
   TTL 1 s; firewall: Allow the name, Deny 0.0.0.0/0): time from the change
   until the probe pod reaches the new address and no longer the old one,
   --dns-changes times.  Goal: <= TTL + 1 s.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
E2E = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e")
sys.path.insert(0, E2E)
sys.path.insert(0, os.path.join(os.path.dirname(E2E), "lib"))   # the test library

from bench_gateway import active, pct, subnet, wait  # noqa: E402
from gateway_fixtures import (bfd_settled, cut_link, failover_sample,  # noqa: E402
                              priorities, restore_link, steady_gateway)
from pacific import egressip, names  # noqa: E402
from pacific.kube import client  # noqa: E402
from pacific.kube import resources as r  # noqa: E402
from pacific.sandbox import cnipods  # noqa: E402
from pacific.sandbox.cluster import Sandbox  # noqa: E402

NETCHECK = os.path.join(E2E, "netcheck.py")
PORT = 7383
EIP = "192.168.77.160"


def egress_ip(name, ips, ns):
    return {"apiVersion": names.API_VERSION, "kind": "EgressIP", "metadata": {"name": name},
            "spec": {"egressIPs": ips,
                     "namespaceSelector": {"matchLabels": {"bench-eip": ns}}}}


def holder(sb, ip):
    """The one node holding `ip` on its underlay interface (None: none or two)."""
    got = [n.name for n in sb.nodes
           if f" {ip}/32" in sb.exec(n.netns, ["ip", "-4", "-o", "addr", "show"],
                                     check=False).stdout]
    return got[0] if len(got) == 1 else None


def eip_round(sb, netns):
    wait(lambda: holder(sb, EIP) is not None, 30, "the address held by one node")
    gw = holder(sb, EIP)
    other = "node2" if gw == "node1" else "node1"
    group = names.egress_switch_name(egressip.gateway_name(f"bench-probe/{EIP}"))
    try:
        s = failover_sample(sb, netns, sb.external_remote_ip, PORT, lambda: cut_link(sb, gw),
                            old=lambda who: who.endswith(EIP), new=lambda who: who.endswith(EIP))
        # while the old holder is cut off: the new one ranked first, so the old
        # one comes back as standby (no flapping back)
        wait(lambda: (lambda p: p.get(other, 0) > p.get(gw, 0))(priorities(sb, group)), 30,
             f"{other} ranked first")
    finally:
        restore_link(sb, gw)
    return gw, s


def gw_round(sb, api, netns):
    gw = steady_gateway(sb, netns, PORT)
    other = "node2" if gw == "node1" else "node1"
    try:
        s = failover_sample(sb, netns, sb.external_remote_ip, PORT, lambda: cut_link(sb, gw),
                            old=lambda who: who.endswith(sb.node(gw).underlay_ip),
                            new=lambda who: who.endswith(sb.node(other).underlay_ip))
        if not s.crashes:
            wait(lambda: active(api, "bench-gw") == other, 30, f"{other} active")
    finally:
        restore_link(sb, gw)
    return gw, s


def failovers(sb, api, eip_netns, gw_netns, rounds):
    got: dict[str, list[float]] = {"EgressIP": [], "centralized gateway": []}
    disturbed = 0
    while min(len(v) for v in got.values()) < rounds:
        for kind in got:
            wait(lambda: bfd_settled(sb), 30, "BFD up both ways between every pair")
            gw, s = (eip_round(sb, eip_netns) if kind == "EgressIP"
                     else gw_round(sb, api, gw_netns))
            if s.crashes:
                disturbed += 1
                print(f"  ({kind}: an ovs-vswitchd crash inside the outage: taken again)")
                if disturbed > rounds:
                    raise SystemExit("more disturbed rounds than rounds asked for")
                continue
            got[kind].append(s.outage)
            print(f"  {kind} failover {len(got[kind])}: {gw} cut: {s.outage * 1000:.0f} ms",
                  flush=True)
    return got, disturbed


def programming(sb, api, n_eips, n_pods):
    ghost = "bench-ghost"
    r.create(api, r.NODES, {"metadata": {"name": ghost}})
    for i in range(n_eips):
        r.create(api, r.NAMESPACES, {"metadata": {"name": f"beip{i}",
                                                  "labels": {"bench-eip": f"n{i}"}}})
    t0 = time.perf_counter()
    for j in range(n_pods):
        r.create(api, r.PODS, {"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": f"p{j}"},
                               "spec": {"nodeName": ghost, "tolerations": [{"operator": "Exists"}],
                                        "containers": [{"name": "c", "image": "none"}]}},
                 f"beip{j % n_eips}")

    def allocated():
        items, _ = r.list_(api, r.PODS)
        return sum(1 for p in items if names.ANN_ALLOCATION in (
            p["metadata"].get("annotations") or {}) and p["metadata"]["namespace"].startswith(
                "beip")) >= n_pods
    wait(allocated, 600, "every pod allocated")
    print(f"   {n_pods} pods over {n_eips} namespaces allocated in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    per = n_pods // n_eips
    t0 = time.perf_counter()
    for i in range(n_eips):
        r.create(api, r.EGRESSIPS, egress_ip(f"beip{i}", [f"192.168.77.{20 + i}"], f"n{i}"))
    created = time.perf_counter() - t0

    def programmed():
        items, _ = r.list_(api, r.EGRESSIPS)
        done = 0
        for o in items:
            st = o.get("status") or {}
            if o["metadata"]["name"].startswith("beip") and any(
                    it.get("node") and it.get("pods", 0) >= per for it in st.get("items", [])):
                done += 1
        return done >= n_eips
    wait(programmed, 600, "every EgressIP programmed and held")
    return created, time.perf_counter() - t0


def firewalls(sb, api, n_ns, n_rules):
    for i in range(n_ns):
        r.create(api, r.NAMESPACES, {"metadata": {"name": f"befw{i}"}})
    t0 = time.perf_counter()
    for i in range(n_ns):
        rules = [{"type": "Deny" if j % 2 else "Allow",
                  "to": {"cidrSelector": f"203.{i % 200}.{j}.0/24"},
                  "ports": [{"protocol": "TCP", "port": 1000 + j}]} for j in range(n_rules)]
        r.create(api, r.EGRESSFIREWALLS, {"apiVersion": names.API_VERSION,
                                          "kind": "EgressFirewall",
                                          "metadata": {"name": "default"},
                                          "spec": {"egress": rules}}, f"befw{i}")
    created = time.perf_counter() - t0

    def programmed():
        items, _ = r.list_(api, r.EGRESSFIREWALLS)
        return sum(1 for o in items if (o.get("status") or {}).get("status") == "programmed"
                   and o["metadata"]["namespace"].startswith("befw")) >= n_ns
    wait(programmed, 600, "every firewall programmed")
    in_status = time.perf_counter() - t0
    sb.nbctl("--wait=hv", "sync", timeout=600)
    return created, in_status, time.perf_counter() - t0


def dns_changes(sb, api, changes):
    from pacific.sandbox import controllers
    hosts = os.path.join(sb.dir, "bench-hosts")
    near, far = sb.external_ip, sb.external_remote_ip
    with open(hosts, "w") as f:
        f.write(f"{far} moving.bench.test\n")
    dnsmasq = controllers.serve_dns(sb, hosts)
    try:
        r.create(api, r.NAMESPACES, {"metadata": {"name": "bench-dns"}})
        r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                  "metadata": {"name": "bench-dns"},
                                  "spec": {"cidrBlock": "10.72.0.0/24", "natOutgoing": True,
                                           "namespaces": ["bench-dns"]}})
        netns = cnipods.add_pod(sb, "bench-dns", "probe", "node3", api=api).netns
        r.create(api, r.EGRESSFIREWALLS, {
            "apiVersion": names.API_VERSION, "kind": "EgressFirewall",
            "metadata": {"name": "default"}, "spec": {"egress": [
                {"type": "Allow", "to": {"dnsName": "moving.bench.test"}},
                {"type": "Deny", "to": {"cidrSelector": "0.0.0.0/0"}}]}}, "bench-dns")

        def reach(ip):
            return sb.exec(netns, [sys.executable, NETCHECK, "ask", "tcp", ip, str(PORT),
                                   "0.1"], check=False).returncode == 0
        wait(lambda: reach(far) and not reach(near), 60, "the name's first answer allowed")
        took, cur, other = [], far, near
        for _ in range(changes):
            with open(hosts, "w") as f:
                f.write(f"{other} moving.bench.test\n")
            t0 = time.monotonic()
            dnsmasq.send_signal(signal.SIGHUP)
            wait(lambda: reach(other) and not reach(cur), 30, "the rule following the answer")
            took.append(time.monotonic() - t0)
            print(f"   answer {cur} -> {other}: rule followed after {took[-1]:.2f} s",
                  flush=True)
            cur, other = other, cur
        return took
    finally:
        dnsmasq.kill()
        dnsmasq.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--failovers", type=int, default=20)
    ap.add_argument("--egressips", type=int, default=100)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--firewalls", type=int, default=100)
    ap.add_argument("--rules", type=int, default=10)
    ap.add_argument("--dns-changes", type=int, default=10)
    ap.add_argument("--keep", action="store_true", help="leave the sandbox up on a failure")
    args = ap.parse_args()
    if args.egressips > 120:
        ap.error("--egressips: at most 120 (addresses 192.168.77.20-139)")
    sb = Sandbox(f"be{os.getpid() % 10000}", nodes=3)
    print(f"sandbox {sb.name}: 3 nodes", flush=True)
    sb.up()
    server, failed = None, True
    try:
        api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
        for node in ("node1", "node2"):
            r.patch_merge(api, r.NODES, node, {"metadata": {"labels": {
                names.LABEL_EGRESS_ASSIGNABLE: ""}}})
        r.create(api, r.NAMESPACES, {"metadata": {"name": "bench-gw"}})
        r.create(api, r.SUBNETS, subnet("bench-gw", "10.66.0.0/16", "bench-gw",
                                        ["node1", "node2"]))
        r.create(api, r.NAMESPACES, {"metadata": {"name": "bench-eip",
                                                  "labels": {"bench-eip": "probe"}}})
        gw_netns = cnipods.add_pod(sb, "bench-gw", "probe", "node3", api=api).netns
        eip_netns = cnipods.add_pod(sb, "bench-eip", "probe", "node3", api=api).netns
        r.create(api, r.EGRESSIPS, egress_ip("bench-probe", [EIP], "probe"))
        server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable,
                                   NETCHECK, "serve", str(PORT), "outside"],
                                  stdout=subprocess.PIPE, text=True)
        server.stdout.readline()
        wait(lambda: active(api, "bench-gw") in ("node1", "node2"), 30, "gateway active")
        if args.failovers:
            print(f"1. failover outage, {args.failovers} rounds each (link of the holder cut)",
                  flush=True)
            got, disturbed = failovers(sb, api, eip_netns, gw_netns, args.failovers)
            for kind, v in got.items():
                print(f"   {kind}: p50 {pct(v, 50) * 1000:.0f} ms, p99 {pct(v, 99) * 1000:.0f} ms"
                      f", max {max(v) * 1000:.0f} ms", flush=True)
            print(f"   rounds taken again for a crash inside the outage: {disturbed}")
            ok = pct(got["EgressIP"], 99) <= 1.0
            print(f"   EgressIP p99 <= 1 s: {'met' if ok else 'MISSED'}")
        if args.egressips:
            print(f"2. {args.egressips} EgressIPs over {args.pods} pods", flush=True)
            created, took = programming(sb, api, args.egressips, args.pods)
            print(f"   created in {created:.1f} s; every one held with all its pods after "
                  f"{took:.1f} s", flush=True)
        if args.firewalls:
            print(f"3. {args.firewalls} EgressFirewalls of {args.rules} rules", flush=True)
            created, in_status, applied = firewalls(sb, api, args.firewalls, args.rules)
            print(f"   created in {created:.1f} s; all programmed (status) after {in_status:.1f} s"
                  f", applied on every chassis after {applied:.1f} s (goal <= 10 s: "
                  f"{'met' if applied <= 10 else 'MISSED'})", flush=True)
        if args.dns_changes:
            print(f"4. a DNS answer changed {args.dns_changes} times (TTL 1 s)", flush=True)
            took = dns_changes(sb, api, args.dns_changes)
            print(f"   p50 {pct(took, 50):.2f} s, max {max(took):.2f} s (goal <= TTL + 1 s = 2 s: "
                  f"{'met' if max(took) <= 2 else 'MISSED'})", flush=True)
        failed = False
    finally:
        if server:
            server.kill()
        if failed and args.keep:
            print(f"left sandbox {sb.name} up (--keep)")
        else:
            sb.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
