"""`pacific trace SRC DST`: why can (or can't) SRC reach DST, in Kubernetes terms.

    pacific trace a/client b/db --tcp 5432
    pacific trace node/node1 a/web --detailed
    pacific trace a/client a/web --tcp 80 --sandbox demo --probe   # and a real packet
    pacific trace -6 a/client svc/a/web --tcp 80                    # over IPv6
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from pacific.cli import connect

_DESCRIPTION = """\
Trace the first packet of a connection from SRC to DST through OVN's logical
network (ovn-trace against the southbound database) and, if it arrives, the
reply.  The first line is the verdict in Kubernetes terms (delivered through
Service X; dropped by NetworkPolicy Y, ingress rule 0; dropped by tenant
isolation between tenants A and B); then each hop, named by its Subnet, pod,
node, Service, policy and rule.

SRC: NS/POD, pod/NS/POD or node/NAME (the node's management port ovn0).
DST: the same, svc/NS/NAME (a Service's ClusterIP: give --tcp/--udp PORT), or
an address.  Without --tcp/--udp the trace is an ICMP echo.  With -6, over
IPv6: each end by its IPv6 address (a dual-stack Service by its IPv6 cluster
IP); an end without one is named.  Without -4 or -6: the family of an
address DST, else of the source's first address.

DST a multicast group (224.0.0.0/4 or ff00::/8, with --udp PORT): which pods
the group's datagram reaches (the members IGMP or MLD snooping knows, on every
Subnet through the cluster router's relay), which copies are dropped and why;
--receiver NS/POD (repeatable) also says why that pod is not reached.  An
IPv6 group is sent from the source's IPv6 address.

Exit status: 0 when the trace (and the probe, if asked) says it gets through,
1 when it does not, 2 on a usage or lookup error."""


def register(sub) -> None:
    p = sub.add_parser("trace", help="trace a packet between pods, nodes, Services, in "
                       "Kubernetes terms", description=_DESCRIPTION,
                       formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("src", metavar="SRC")
    p.add_argument("dst", metavar="DST")
    proto = p.add_mutually_exclusive_group()
    proto.add_argument("--tcp", type=int, metavar="PORT", help="a TCP connection to PORT")
    proto.add_argument("--udp", type=int, metavar="PORT", help="a UDP datagram to PORT")
    fam = p.add_mutually_exclusive_group()
    fam.add_argument("-4", "--ipv4", dest="family", action="store_const", const=4,
                     help="trace over IPv4 (each end by its IPv4 address)")
    fam.add_argument("-6", "--ipv6", dest="family", action="store_const", const=6,
                     help="trace over IPv6 (each end by its IPv6 address); neither: the "
                     "family of an address DST, else of the source's first address (IPv4 "
                     "for a dual-stack pod, IPv6 in an IPv6-only cluster)")
    p.add_argument("--receiver", action="append", default=[], metavar="NS/POD",
                   help="with a multicast DST: say why this pod is or is not reached (repeatable)")
    p.add_argument("--detailed", action="store_true", help="also print ovn-trace's logical flows")
    p.add_argument("--ovs", nargs="?", const="", default=None, metavar="REMOTE",
                   help="add the OpenFlow trace of the source's chassis (REMOTE: its br-int "
                   "management socket; with --sandbox found by itself)")
    p.add_argument("--probe", action="store_true",
                   help="send a real packet (sandbox only) and say whether it agrees")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    connect.add_arguments(p)
    p.set_defaults(func=cmd_trace)


def cmd_trace(args) -> int:
    from pacific.tools import mtrace
    from pacific.tools import trace as tr
    from pacific.ovn.query import QueryError
    if mtrace.is_group(args.dst):
        return _trace_group(args)
    if args.receiver:
        print("error: --receiver goes with a multicast group as DST", file=sys.stderr)
        return 2
    proto, port = ("tcp", args.tcp) if args.tcp else ("udp", args.udp) if args.udp else ("icmp", None)
    try:
        kube, nb, sb_remote, sb = connect.connect(args)
        ovs = args.ovs
        if ovs == "":
            ovs = _sandbox_ovs(sb, kube, args.src)
        res = tr.trace(kube, nb, sb_remote, args.src, args.dst, proto, port, ovs,
                       connect.global_namespaces(args), family=args.family)
    except (tr.TraceError, QueryError, subprocess.SubprocessError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    probe = None
    if args.probe:
        if sb is None:
            print("error: --probe sends a real packet, only in a sandbox (--sandbox NAME)",
                  file=sys.stderr)
            return 2
        probe = _probe(sb, res)
    if args.json:
        json.dump({"ok": res.ok, "verdict": res.request.verdict,
                   "reply": res.reply and res.reply.verdict,
                   "hops": {d.title: [f"{h.where}: {h.what}" for h in d.hops]
                            for d in (res.request, res.reply) if d},
                   "probe": probe}, sys.stdout, indent=2)
        print()
    else:
        print(tr.render(res, args.detailed or args.ovs is not None))
        if probe:
            print(f"probe: {probe['said']}; "
                  + ("agrees with the trace" if probe["agrees"] else "DISAGREES with the trace"))
    if probe and not probe["agrees"]:
        return 1
    return 0 if res.ok else 1


def _trace_group(args) -> int:
    from pacific.tools import mtrace
    from pacific.tools import trace as tr
    from pacific.ovn.query import QueryError
    if not args.udp or args.tcp or args.probe:
        print("error: a multicast group is traced as a UDP datagram: give --udp PORT "
              "(--tcp and --probe do not apply)", file=sys.stderr)
        return 2
    try:
        kube, nb, sb_remote, sb = connect.connect(args)
        ovs = _sandbox_ovs(sb, kube, args.src) if args.ovs == "" else args.ovs
        res = mtrace.trace_group(kube, nb, sb_remote, args.src, args.dst, args.udp,
                                 args.receiver, ovs, connect.global_namespaces(args))
    except (tr.TraceError, QueryError, subprocess.SubprocessError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump({"ok": res.ok, "sender_drop": res.sender_drop, "delivered": res.delivered,
                   "dropped": [{"receiver": w, "why": y} for w, y in res.dropped],
                   "not_reached": [{"receiver": w, "why": y} for w, y in res.missing]},
                  sys.stdout, indent=2)
        print()
    else:
        print(mtrace.render(res, args.detailed or args.ovs is not None))
    return 0 if res.ok else 1


def _sandbox_ovs(sb, kube, src_ref: str) -> str:
    from pacific.tools import trace as tr
    if sb is None:
        raise tr.TraceError("--ovs without REMOTE needs --sandbox (else give the source "
                            "chassis' br-int management socket, unix:.../br-int.mgmt)")
    src = tr.resolve(kube, src_ref, "source")
    return f"unix:{os.path.join(sb.node(src.node).rundir, 'br-int.mgmt')}"


_TCP_PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2); print("connected")
except ConnectionRefusedError: print("refused")
except OSError as e: print("no answer", e)
"""


def _probe(sb, res) -> dict:
    """A real packet from the source's namespace: does it get an answer?"""
    from pacific.sandbox import cnipods
    src = res.src
    if src.kind == "pod":
        ns_, name = src.name.split("/", 1)
        rec = cnipods.load(sb, ns_, name)
        if rec is None:
            return {"said": f"pod {src.name} is not a sandbox pod", "agrees": True}
        netns = rec.netns
    else:
        netns = sb.node(src.name).netns
    if res.proto == "icmp":
        cp = sb.exec(netns, ["ping", "-c1", "-W2", res.dst.ip], check=False)
        got, said = cp.returncode == 0, ("echo reply received" if cp.returncode == 0
                                         else "no echo reply")
    elif res.proto == "tcp":
        cp = sb.exec(netns, [sys.executable, "-c", _TCP_PROBE, res.dst.ip, str(res.port)],
                     check=False)
        out = cp.stdout.strip()
        got = out in ("connected", "refused")
        said = {"connected": "TCP connection established",
                "refused": "answered with a reset (reached, nothing listening)"}.get(out, out)
    else:
        return {"said": "a UDP probe needs a server that answers: not probed", "agrees": True}
    return {"said": said, "reached": got, "agrees": got == res.ok}
