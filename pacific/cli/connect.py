"""Where the day-two commands (trace, topology, diagnose) find Kubernetes and
OVN: flags, environment, a sandbox by name, or else the cluster itself (the
remotes and TLS files deploy/ gives Pacific's controller)."""
from __future__ import annotations

import os

from pacific import names


def add_arguments(p) -> None:
    p.add_argument("--sandbox", metavar="NAME",
                   help="use sandbox NAME's kubeconfig and OVN databases")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                   help="kubeconfig (default: $KUBECONFIG, else in-cluster)")
    p.add_argument("--nb", default=os.environ.get("PACIFIC_NB_REMOTE"),
                   help="OVN northbound database, e.g. ssl:10.0.0.1:6641 or a cluster's "
                   "members joined by ',' (default: $PACIFIC_NB_REMOTE, else nb-remote of "
                   "ConfigMap pacific-system/pacific-config, with the TLS files of Secret "
                   "pacific-system/pacific-ovn-tls: an administrator's kubeconfig)")
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


def from_cluster(api, args, need_sb: bool) -> None:
    """NB and SB as deploy/ configures Pacific's daemons: the remotes from
    ConfigMap pacific-config, and (for ssl: remotes, unless --ssl-* are given)
    the controller's TLS files from Secret pacific-ovn-tls, written to a private
    directory that is removed at exit.  Needs get on both in pacific-system: an
    administrator's right (whoever holds that certificate can rewrite NB)."""
    from pacific.kube import errors
    from pacific.kube import resources as r
    ns = names.PACIFIC_NAMESPACE

    def read(res, name: str, what: str) -> dict:
        try:
            obj = r.get(api, res, name, ns)
        except errors.ApiError as e:
            if e.status in (401, 403):
                raise SystemExit(
                    f"error: finding OVN central through the cluster needs get on {what} "
                    f"{ns}/{name}, which your credentials lack ({e.status}): OVN's databases "
                    "are an administrator's (whoever reaches them can read and rewrite "
                    "every tenant's network).  Ask one, or give --nb/--sb and --ssl-*") from None
            raise SystemExit(f"error: reading {what} {ns}/{name}: {e}") from None
        if obj is None:
            raise SystemExit(f"error: no {what} {ns}/{name}: is Pacific installed "
                             "(kubectl apply -k deploy/)? Or give --nb/--sb")
        return obj.get("data") or {}
    cfg = read(r.CONFIGMAPS, names.CONFIG_MAP, "configmap")
    args.nb = args.nb or cfg.get("nb-remote")
    args.sb = args.sb or cfg.get("sb-remote")
    if not args.nb or (need_sb and not args.sb):
        raise SystemExit(f"error: configmap {ns}/{names.CONFIG_MAP} names no nb-remote/sb-remote")
    if "ssl:" not in f"{args.nb},{args.sb}" or args.ssl_key or args.ssl_cert or args.ssl_ca:
        return
    import atexit
    import base64
    import shutil
    import tempfile
    data = read(r.SECRETS, names.OVN_TLS_SECRET, "secret")
    d = tempfile.mkdtemp(prefix="pacific-ovn-tls-")      # 0700
    atexit.register(shutil.rmtree, d, True)
    paths = {}
    for key in ("tls.key", "tls.crt", "ca.crt"):
        if key not in data:
            raise SystemExit(f"error: secret {ns}/{names.OVN_TLS_SECRET} has no {key} "
                             "(pacific tls init makes it)")
        paths[key] = os.path.join(d, key)
        fd = os.open(paths[key], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(data[key]))
    args.ssl_key, args.ssl_cert, args.ssl_ca = paths["tls.key"], paths["tls.crt"], paths["ca.crt"]


def connect(args, need_sb: bool = True):
    """(kube client, nb remote, sb remote, sandbox or None) from the flags; with
    neither --nb/--sb nor --sandbox, from the cluster (`from_cluster`)."""
    from pacific.kube import client
    sb = None
    if args.sandbox:
        from pacific.sandbox.cluster import Sandbox
        sb = Sandbox(args.sandbox)
        if not os.path.isdir(sb.dir):
            raise SystemExit(f"error: sandbox {args.sandbox} is not up ({sb.dir} missing)")
        args.kubeconfig = os.path.join(sb.dir, names.SANDBOX_KUBECONFIG)
        args.nb, args.sb = args.nb or sb.nb_remote, args.sb or sb.sb_remote
    api = client.load(args.kubeconfig)
    if not args.nb or (need_sb and not args.sb):
        from_cluster(api, args, need_sb)
    if args.ssl_key or args.ssl_cert or args.ssl_ca:
        from pacific.ovn.base import configure_ssl
        from pacific.ovn.errors import OvnError
        try:
            configure_ssl(args.ssl_key, args.ssl_cert, args.ssl_ca)
        except OvnError as e:
            raise SystemExit(f"error: {e}") from None
    elif "ssl:" in f"{args.nb},{args.sb}":
        raise SystemExit("error: an ssl: database needs --ssl-key, --ssl-cert and --ssl-ca")
    return api, args.nb, args.sb, sb


