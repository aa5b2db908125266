"""`pacific flows`: audit records across nodes (pacific/tools/flows.py)."""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from pacific import names

_DESCRIPTION = f"""\
Show the audit records of the policies that log (a NetworkPolicy,
ClusterNetworkPolicy or EgressFirewall annotated {names.ANN_AUDIT}=allow|deny|all,
a Namespace's tenant isolation annotated {names.ANN_AUDIT}=deny, any policy
annotated {names.ANN_ENFORCEMENT}=dry-run): one line per connection with its
time, node, verdict (allow, deny, would-deny), protocol, both ends (pod or
address, port) and the policy and rule that decided.  Every pacific-node writes
them to its --flow-log ({names.FLOW_LOG}); this reads those of a sandbox's
nodes (--sandbox) or the files named, merges them by time, filters, and with
--follow keeps printing new ones.  On a cluster, --cluster reads every
pacific-node pod's records through the API server (kubectl exec), or run it
on a node, where the default file is.  OVN writes at most
--audit-rate records per second per ACL (pacific-controller)."""


def register(sub) -> None:
    p = sub.add_parser("flows", help="audit records of logging and dry-run policies",
                       description=_DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", metavar="FILE",
                   help=f"records files (default: {names.FLOW_LOG}, or the sandbox's nodes')")
    p.add_argument("--sandbox", metavar="NAME", help="every node of sandbox NAME")
    p.add_argument("--cluster", action="store_true",
                   help="every pacific-node pod's records, through the API server (kubectl "
                   f"exec in {names.PACIFIC_NAMESPACE}: administrators' right)")
    p.add_argument("--kubeconfig", help="with --cluster (default: $KUBECONFIG)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    p.add_argument("-n", "--namespace", help="records with either end, or the policy, in it")
    p.add_argument("--pod", metavar="NS/NAME", help="records with this pod at either end")
    p.add_argument("--policy", metavar="[KIND/][NS/]NAME", help="records of this policy")
    p.add_argument("--verdict", choices=("allow", "deny", "would-deny", "pass"))
    p.add_argument("--since", metavar="TIME", help="records at or after this ISO time "
                   "(e.g. 2026-11-27T06:00:00)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=cmd_flows)


def paths_of(args) -> list[str]:
    if args.sandbox:
        from pacific.sandbox.cluster import Sandbox
        d = Sandbox(args.sandbox).dir
        if not os.path.isdir(d):
            raise SystemExit(f"error: sandbox {args.sandbox} is not up ({d} missing)")
        return sorted(glob.glob(os.path.join(d, "node*", "flows",
                                             os.path.basename(names.FLOW_LOG))))
    return list(args.files) or [names.FLOW_LOG]


def cmd_flows(args) -> int:
    from pacific.tools import flows
    filters = {"namespace": args.namespace, "pod": args.pod, "policy": args.policy,
               "verdict": args.verdict}
    show = (lambda rec: json.dumps(rec, sort_keys=True)) if args.json else flows.line
    if args.cluster:
        import threading
        from pacific.kube import client
        from pacific.tools import flowsremote
        try:
            api = client.load(args.kubeconfig)
            now = flowsremote.read(api, filters, args.since)
        except Exception as e:        # ApiError, OSError, the client library's own
            print(f"error: reading the nodes' records: {e}", file=sys.stderr)
            return 2
        later = flowsremote.follow(api, filters, threading.Event()) if args.follow else ()
    else:
        paths = paths_of(args)
        now = flows.read(paths, filters, args.since)
        later = flows.follow(paths, filters) if args.follow else ()
    try:
        for rec in now:
            print(show(rec), flush=True)
        for rec in later:
            print(show(rec), flush=True)
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        sys.stderr.close()
    return 0
