"""`pacific diagnose`: one command that checks the cluster's network."""
from __future__ import annotations

import argparse
import json
import sys

from pacific.cli import connect

_DESCRIPTION = """\
Check the cluster's network and list what is wrong: every node's OVN chassis
registered; a change to NB reaching every chassis (this bumps NB_Global.nb_cfg,
as `ovn-nbctl --wait=hv sync` does; --no-sync only compares); the controller's
leader; every node daemon's health report (ready, tunnels to every peer up);
Subnets not Ready or 90 %% full; the multicast groups joined on each Subnet
and their members; NB rows missing or stale.

Exit status: 0 when nothing is wrong, 1 when something is (a FAIL or WARN line),
2 when the check itself cannot run."""


def register(sub) -> None:
    p = sub.add_parser("diagnose", help="check the cluster's network and list what is wrong",
                       description=_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds every chassis has to apply an NB change (default: %(default)s)")
    p.add_argument("--no-sync", action="store_true",
                   help="do not write NB_Global.nb_cfg; compare what the chassis report")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("-q", "--quiet", action="store_true", help="print only what is wrong")
    connect.add_arguments(p)
    p.set_defaults(func=cmd_diagnose)


def cmd_diagnose(args) -> int:
    from pacific.kube import errors as kerr
    from pacific.tools import diagnose
    try:
        kube, nb, sb_remote, _ = connect.connect(args)
        findings = diagnose.run(kube, nb, sb_remote, args.timeout, not args.no_sync,
                                connect.global_namespaces(args))
    except (kerr.ApiError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    bad = [f for f in findings if f.level != "ok"]
    if args.json:
        json.dump([f.__dict__ for f in findings], sys.stdout, indent=2)
        print()
    else:
        for f in (bad if args.quiet else findings):
            print(f)
        print(f"{len(bad)} problem{'s' * (len(bad) != 1)} found" if bad else "no problem found")
    return 1 if bad else 0
