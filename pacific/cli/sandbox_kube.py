"""`pacific sandbox kubeconfig`: where the sandbox's admin kubeconfig is."""
import os
import sys

from pacific import names


def cmd_kubeconfig(args) -> int:
    from pacific.sandbox.cluster import base_dir
    d = os.path.join(base_dir(), args.name)
    path = os.path.join(d, names.SANDBOX_KUBECONFIG_UNDERLAY if args.underlay else names.SANDBOX_KUBECONFIG)
    if not os.path.exists(path):
        print(f"error: no kubeconfig at {path}: is sandbox {args.name!r} up with its control plane? "
              f"(`pacific sandbox up --name {args.name}`)", file=sys.stderr)
        return 1
    print(path)
    return 0


def register(sp):
    p = sp.add_parser("kubeconfig", help="print the path of the sandbox's kubeconfig",
                      description="Print the path of the admin kubeconfig of the sandbox's "
                                  "Kubernetes API server (kube-apiserver v1.20.2 on 127.0.0.1), "
                                  "e.g. `KUBECONFIG=$(pacific sandbox kubeconfig) kubectl get pods -A`.")
    p.add_argument("--name", default=names.SANDBOX_DEFAULT_NAME, help="sandbox name")
    p.add_argument("--underlay", action="store_true",
                   help="pacific-node's kubeconfig instead (its ServiceAccount, at the central "
                        "underlay address that node namespaces reach)")
    p.set_defaults(func=cmd_kubeconfig)
