"""`pacific tls`: the certificates OVN central, the controller and the nodes
speak TLS with, made by one CA and stored where deploy/ reads them.

    pacific tls init                       # CA, central's and controller's Secrets
    pacific tls init --node-certs ./nodes  # ... and each node's files, to copy to its host
    pacific tls init --renew               # new certificates from the same CA

Secrets in pacific-system (deploy/README.md, "OVSDB over TLS"):
  pacific-ovn-ca        ca.crt, ca.key   the CA (kept: every certificate chains to it)
  pacific-ovn-central   tls.key, tls.crt, ca.crt   pacific-central (deploy/central.yaml);
                        subjectAltNames: the nodes labelled pacific.io/role=central
  pacific-ovn-tls       tls.key, tls.crt, ca.crt   pacific-controller (CN pacific-controller)
Each node's certificate (CN = its node name, SB's RBAC identity) is written to
--node-certs DIR/<node>/ for /etc/pacific/ovn-tls on that host: a node's key
never goes into the API, where every node could read it.  Existing Secrets are
kept unless --renew; the CA is never replaced (delete pacific-ovn-ca to start over).
"""
from __future__ import annotations

import base64
import os
import shutil
import sys
import tempfile

from pacific import names
from pacific.pki import CertAuthority, PkiError

CA_SECRET, CENTRAL_SECRET, CONTROLLER_SECRET = \
    "pacific-ovn-ca", "pacific-ovn-central", names.OVN_TLS_SECRET


def register(sub) -> None:
    p = sub.add_parser("tls", help="make OVN's TLS certificates (CA, central, controller, nodes)",
                       description="One CA signs OVN central's, the controller's and every "
                       "node's certificate.  `init` stores the CA in Secret pacific-ovn-ca, "
                       "central's in pacific-ovn-central (subjectAltNames: the nodes labelled "
                       "pacific.io/role=central), the controller's in pacific-ovn-tls, and "
                       "writes each node's (CN = its name) to --node-certs DIR/<node>/ for "
                       "/etc/pacific/ovn-tls on that host.  What exists is kept unless "
                       "--renew; the CA is never replaced.")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                   help="kubeconfig (default: $KUBECONFIG, else in-cluster)")
    tsub = p.add_subparsers(dest="tls_command", metavar="ACTION", required=True)
    i = tsub.add_parser("init", help="create what is missing (or --renew the certificates)")
    i.add_argument("--namespace", default=names.PACIFIC_NAMESPACE)
    i.add_argument("--central-host", action="append", default=[], metavar="HOST",
                   help="another address or name central is reached at (repeatable; the "
                        "labelled nodes' InternalIPs are always in)")
    i.add_argument("--node-certs", metavar="DIR",
                   help="write each node's tls.key, tls.crt, ca.crt into DIR/<node>/")
    i.add_argument("--renew", action="store_true",
                   help="issue new certificates (and keys) from the same CA")
    i.set_defaults(func=_init)


def _b64(path: str) -> str:
    with open(path, "rb") as f:
        return base64.b64encode(f.read()).decode()


def _unb64(data: dict, key: str) -> bytes:
    return base64.b64decode(data[key])


def _secret(ns: str, name: str, files: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"app.kubernetes.io/part-of": "pacific"}},
            "data": {k: _b64(p) for k, p in files.items()}}


def _put(api, body: dict, replace: bool) -> str:
    from pacific.kube import errors
    from pacific.kube import resources as r
    ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
    try:
        r.create(api, r.SECRETS, body, ns)
        return "created"
    except errors.AlreadyExists:
        if not replace:
            return "kept"
        r.replace(api, r.SECRETS, body, ns)
        return "renewed"


def init(api, namespace: str, workdir: str, central_hosts=(), node_certs: str | None = None,
         renew: bool = False, out=sys.stdout) -> CertAuthority:
    """What `pacific tls init` does (workdir: a private scratch directory)."""
    from pacific.central.discovery import member_addresses
    from pacific.kube import resources as r
    if r.get(api, r.NAMESPACES, namespace) is None:
        raise PkiError(f"namespace {namespace} does not exist: create it first "
                       "(kubectl apply -f deploy/namespace.yaml)")
    ca = CertAuthority(workdir)
    have = r.get(api, r.SECRETS, CA_SECRET, namespace)
    if have is not None:
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        for key, path in (("ca.crt", ca.ca_crt), ("ca.key", ca.ca_key)):
            with open(path, "wb") as f:
                f.write(_unb64(have["data"], key))
        os.chmod(ca.ca_key, 0o600)
    ca.ensure("pacific-ovn-ca")
    print(f"secret {namespace}/{CA_SECRET}: "
          f"{_put(api, _secret(namespace, CA_SECRET, {'ca.crt': ca.ca_crt, 'ca.key': ca.ca_key}), False)}",
          file=out)
    nodes, _ = r.list_(api, r.NODES)
    hosts = member_addresses(nodes) + list(central_hosts)
    for secret, name, sans in ((CENTRAL_SECRET, "pacific-central", hosts),
                               (CONTROLLER_SECRET, names.CONTROLLER_NAME, ())):
        if not renew and r.get(api, r.SECRETS, secret, namespace) is not None:
            what = "kept"
        else:
            crt, key = ca.issue(name, sans)
            what = _put(api, _secret(namespace, secret, {"tls.key": key, "tls.crt": crt,
                                                         "ca.crt": ca.ca_crt}), renew)
        print(f"secret {namespace}/{secret}: {what}"
              + (f" (subjectAltNames: {', '.join(sans) or 'none: no node is labelled'})"
                 if secret == CENTRAL_SECRET else ""), file=out)
    if node_certs:
        for n in sorted(nodes, key=lambda n: n["metadata"]["name"]):
            node = n["metadata"]["name"]
            d = os.path.join(node_certs, node)
            if os.path.exists(os.path.join(d, "tls.crt")) and not renew:
                print(f"node {node}: {d} kept", file=out)
                continue
            crt, key = ca.issue(node, renew=True)
            os.makedirs(d, mode=0o700, exist_ok=True)
            for src, dst in ((key, "tls.key"), (crt, "tls.crt"), (ca.ca_crt, "ca.crt")):
                shutil.copyfile(src, os.path.join(d, dst))
            os.chmod(os.path.join(d, "tls.key"), 0o600)
            print(f"node {node}: {d} (copy to /etc/pacific/ovn-tls on {node})", file=out)
    return ca


def _init(args) -> int:
    from pacific.kube import client
    from pacific.kube import errors as kerr
    try:
        api = client.load(args.kubeconfig)
        with tempfile.TemporaryDirectory(prefix="pacific-tls-") as work:
            init(api, args.namespace, os.path.join(work, "ca"), args.central_host,
                 args.node_certs, args.renew)
    except (PkiError, client.KubeconfigError, kerr.ApiError) as exc:
        print(f"pacific tls: {exc}", file=sys.stderr)
        return 1
    return 0
