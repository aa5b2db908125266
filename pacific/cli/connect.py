"""Where the day-two commands (trace, topology, diagnose) find Kubernetes and
OVN: flags, environment, or a sandbox by name."""
from __future__ import annotations

import os

from pacific import names


def add_arguments(p) -> None:
    p.add_argument("--sandbox", metavar="NAME",
                   help="use sandbox NAME's kubeconfig and OVN databases")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                   help="kubeconfig (default: $KUBECONFIG, else in-cluster)")
    p.add_argument("--nb", default=os.environ.get("PACIFIC_NB_REMOTE"),
                   help="OVN northbound database, e.g. tcp:10.0.0.1:6641 or a cluster's "
                   "members joined by ',' (default: $PACIFIC_NB_REMOTE)")
    p.add_argument("--sb", default=os.environ.get("PACIFIC_SB_REMOTE"),
                   help="OVN southbound database (default: $PACIFIC_SB_REMOTE)")
    p.add_argument("--ssl-key", default=os.environ.get("PACIFIC_SSL_KEY"),
                   help="private key for ssl: remotes ($PACIFIC_SSL_KEY)")
    p.add_argument("--ssl-cert", default=os.environ.get("PACIFIC_SSL_CERT"),
                   help="certificate for ssl: remotes ($PACIFIC_SSL_CERT)")
    p.add_argument("--ssl-ca", default=os.environ.get("PACIFIC_SSL_CA"),
                   help="CA certificate the servers' certificates must be signed by "
                   "($PACIFIC_SSL_CA)")
    p.add_argument("--global-namespaces", default=",".join(names.DEFAULT_GLOBAL_NAMESPACES),
                   help="the controller's --global-namespaces (default: %(default)s)")


def global_namespaces(args) -> frozenset[str]:
    return frozenset(filter(None, args.global_namespaces.split(",")))


def connect(args, need_sb: bool = True):
    """(kube client, nb remote, sb remote, sandbox or None) from the flags."""
    from pacific.kube import client
    sb = None
    if args.sandbox:
        from pacific.sandbox.cluster import Sandbox
        sb = Sandbox(args.sandbox)
        if not os.path.isdir(sb.dir):
            raise SystemExit(f"error: sandbox {args.sandbox} is not up ({sb.dir} missing)")
        args.kubeconfig = os.path.join(sb.dir, names.SANDBOX_KUBECONFIG)
        args.nb, args.sb = args.nb or sb.nb_remote, args.sb or sb.sb_remote
    if args.ssl_key or args.ssl_cert or args.ssl_ca:
        from pacific.ovn.base import configure_ssl
        from pacific.ovn.errors import OvnError
        try:
            configure_ssl(args.ssl_key, args.ssl_cert, args.ssl_ca)
        except OvnError as e:
            raise SystemExit(f"error: {e}") from None
    elif "ssl:" in f"{args.nb},{args.sb}":
        raise SystemExit("error: an ssl: database needs --ssl-key, --ssl-cert and --ssl-ca")
    if not args.nb or (need_sb and not args.sb):
        raise SystemExit("error: give --nb and --sb (or $PACIFIC_NB_REMOTE and "
                         "$PACIFIC_SB_REMOTE, or --sandbox NAME)")
    return client.load(args.kubeconfig), args.nb, args.sb, sb


