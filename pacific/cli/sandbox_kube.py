"""`pacific sandbox kubeconfig` / `pacific sandbox apiserver` (Kubernetes API emulator)."""
import os
import sys

from pacific import names

_APISERVER_DESCRIPTION = """\
Run the Kubernetes API emulator standalone (the sandbox starts it by itself).
It serves the Kubernetes REST API (core/v1 namespaces, pods, nodes, services,
endpoints, events, configmaps, secrets; apps/v1; coordination.k8s.io/v1 leases;
discovery.k8s.io/v1; networking.k8s.io/v1; apiextensions.k8s.io/v1 CRDs and their
custom resources) to kubectl and the official client.  Example:

  pacific sandbox apiserver --listen 127.0.0.1:6443 --token-file /tmp/tok \\
      --tls-dir /tmp/tls --kubeconfig /tmp/kubeconfig --crd-dir deploy/crds
  KUBECONFIG=/tmp/kubeconfig kubectl get ns"""


def cmd_kubeconfig(args) -> int:
    from pacific.sandbox.cluster import base_dir
    d = os.path.join(base_dir(), args.name)
    path = os.path.join(d, names.SANDBOX_KUBECONFIG_UNDERLAY if args.underlay else names.SANDBOX_KUBECONFIG)
    if not os.path.exists(path):
        print(f"error: no kubeconfig at {path}: is sandbox {args.name!r} up with its API emulator? "
              f"(`pacific sandbox up --name {args.name}`)", file=sys.stderr)
        return 1
    print(path)
    return 0


def cmd_apiserver(args) -> int:
    from pacific.sandbox.apiserver.main import run
    return run(args)


def register(sp):
    p = sp.add_parser("kubeconfig", help="print the path of the sandbox's kubeconfig",
                      description="Print the path of the kubeconfig the sandbox wrote for its API "
                                  "emulator, e.g. `KUBECONFIG=$(pacific sandbox kubeconfig) kubectl get pods`.")
    p.add_argument("--name", default=names.SANDBOX_DEFAULT_NAME, help="sandbox name")
    p.add_argument("--underlay", action="store_true",
                   help="the kubeconfig for processes inside node namespaces (central underlay address)")
    p.set_defaults(func=cmd_kubeconfig)

    from pacific.sandbox.apiserver.main import add_arguments
    import argparse
    p = sp.add_parser("apiserver", help="run the Kubernetes API emulator standalone",
                      description=_APISERVER_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=cmd_apiserver)
