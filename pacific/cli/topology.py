"""`pacific topology`: the logical network, named from Kubernetes.

    pacific topology                       # text
    pacific topology --format svg -o net.svg
    pacific topology --check               # NB against what Kubernetes says should exist
"""
from __future__ import annotations

import argparse
import json
import sys

from pacific.cli import connect

_DESCRIPTION = """\
Draw the logical network from the OVN northbound database, named from
Kubernetes: the cluster router, each Subnet's switch with its CIDR, gateway and
namespaces, the join switch with every node's management port, pods grouped by
node (coloured by tenant in pictures), load-balancer counts, tenants.

--check compares NB with what Kubernetes says should exist (Subnets, pods with
an allocation, nodes, Services) and lists missing and stale rows; exit status 1
when it finds any.  Formats: text, json, dot, svg, png (svg/png need Graphviz)."""


def register(sub) -> None:
    p = sub.add_parser("topology", help="draw the logical network; --check it against "
                       "Kubernetes", description=_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--format", choices=("text", "json", "dot", "svg", "png"), default="text")
    p.add_argument("-o", "--output", metavar="FILE", help="write here (default: stdout)")
    p.add_argument("--check", action="store_true",
                   help="list rows NB lacks or holds beyond what Kubernetes asks for")
    connect.add_arguments(p)
    p.set_defaults(func=cmd_topology)


def cmd_topology(args) -> int:
    from pacific.tools import topodraw, topology
    from pacific.ovn.query import Query, QueryError
    try:
        kube, nb_remote, _, _ = connect.connect(args, need_sb=False)
        with Query(nb_remote, "OVN_Northbound") as nb:
            topo = topology.read(kube, nb, connect.global_namespaces(args))
    except (QueryError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        problems = topology.check(topo)
        for line in problems:
            print(line)
        if not problems:
            print("NB holds what Kubernetes asks for: nothing missing, nothing stale")
        return 1 if problems else 0
    public = {k: v for k, v in topo.items() if not k.startswith("_")}
    try:
        if args.format == "text":
            data = (topodraw.text(public) + "\n").encode()
        elif args.format == "json":
            data = (json.dumps(public, indent=2) + "\n").encode()
        elif args.format == "dot":
            data = (topodraw.dot(public) + "\n").encode()
        else:
            data = topodraw.render_image(topodraw.dot(public), args.format)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.output:
        with open(args.output, "wb") as f:
            f.write(data)
        print(f"wrote {args.output} ({len(data)} bytes)", file=sys.stderr)
    else:
        sys.stdout.buffer.write(data)
    return 0
