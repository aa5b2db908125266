"""`pacific sandbox ...` sub-commands.

The network part (up/down/status) lives here; other areas add their own
sub-commands through the modules imported in `register`.
"""
import argparse
import functools
import json
import os
import sys

from pacific import names, ovsinstall
from pacific.cli import sandbox_kube, sandbox_pods

_NAME_HELP = (f"sandbox name (default {names.SANDBOX_DEFAULT_NAME!r}); lower-case letters and "
              f"digits, it prefixes the namespaces {names.SANDBOX_NETNS_PREFIX}-NAME-*")
_DESCRIPTION = f"""\
A real multi-node OVN cluster network on this machine, in network namespaces:
  {names.SANDBOX_NETNS_PREFIX}-NAME-central  NB/SB ovsdb-server, ovn-northd, underlay bridge br-ul
  {names.SANDBOX_NETNS_PREFIX}-NAME-nodeI    ovsdb-server, ovs-vswitchd (netdev), ovn-controller
  {names.SANDBOX_NETNS_PREFIX}-NAME-ext      the "outside world" on the underlay
and, unless --bare, Kubernetes and Pacific on top: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler (v1.20.2, built by `make setup`), a
containerd and a kubelet per node (its pods plumbed by Pacific's CNI plugin;
`up --pod-runner`: a lighter pod runner instead, no containers), two
leader-elected pacific-controller replicas and a pacific-node per node
(`pacific sandbox kubeconfig` tells kubectl where the API is).
Sockets, logs and pidfiles live under ${names.SANDBOX_DIR_ENV} (default {names.SANDBOX_DIR})/NAME/.
Needs root."""


def _sandbox(args, nodes=None, ha=None, kubelet=None, deploy=None, ovs_prefix=None,
             central_pods=None, ovs_pods=None, dual_stack=None, ipv6_only=None):
    from pacific.sandbox.cluster import Sandbox
    return Sandbox(args.name, nodes=nodes, ha=ha, kubelet=kubelet, deploy=deploy,
                   ovs_prefix=ovs_prefix, central_pods=central_pods, ovs_pods=ovs_pods,
                   dual_stack=dual_stack, ipv6_only=ipv6_only)


def errors_to_exit(fn):
    """A SandboxError becomes one clear line on stderr and exit status 1."""
    @functools.wraps(fn)
    def wrapper(args):
        from pacific.sandbox.proc import SandboxError
        try:
            return fn(args)
        except SandboxError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return wrapper


@errors_to_exit
def cmd_up(args) -> int:
    sb = _sandbox(args, nodes=args.nodes, ha=args.ha, kubelet=args.kubelet,
                  deploy=args.deploy or None, ovs_prefix=args.ovs_prefix,
                  central_pods=args.central_pods or None, ovs_pods=args.ovs_pods or None,
                  dual_stack=args.dual_stack or None, ipv6_only=args.ipv6_only or None)
    sb.up(timeout=args.timeout, services=() if args.bare else None)
    _print_where(sb.status())
    return 0


def _print_where(st: dict) -> None:
    print(f"sandbox {st['name']}: {'ready' if st['ready'] else 'NOT ready'}  (dir {st['dir']})")
    pods = {"kubelet": "a containerd and a kubelet per node", "runner": "a pod runner per node"}
    print(f"  pods     {pods.get(st.get('pods'), '?')}"
          + ("; Pacific from its image and deploy/ (--deploy)" if st.get("deploy") else ""))
    print(f"  OVN NB   {st['nb_remote']}   (from node namespaces: {st['nb_tcp_remote']})")
    print(f"  OVN SB   {st['sb_remote']}   (from node namespaces: {st['sb_tcp_remote']})")
    c = st["central"]
    print(f"  central  netns {c['netns']}  underlay {c['underlay_ip']}  logs "
          f"{', '.join(c['logs'].values())}")
    e = st["external"]
    print(f"  external netns {e['netns']}  underlay {e['underlay_ip']}  remote {e['remote_ip']}")
    for n in st["nodes"]:
        dead = [d for d, ok in n["daemons_alive"].items() if not ok]
        health = "ok" if n["netns_exists"] and not dead else f"DOWN: {', '.join(dead) or 'netns'}"
        print(f"  {n['name']:<8} netns {n['netns']}  underlay {n['underlay_ip']}  pod MTU "
              f"{n['mtu']}  [{health}]")
        print(f"           ovsdb {n['sockets']['ovsdb']}   logs {n['rundir']}/*.log")
    if isinstance(st["chassis"], str):
        print(f"  chassis: unavailable ({st['chassis']})")
    else:
        print("  chassis: " + (", ".join(f"{c['name']} ({'/'.join(c['encaps'])})"
                                        for c in st["chassis"]) or "none"))
    extra = [(t, d) for t, d in st["daemons"].items() if d["kind"] == "spawn"]
    for tag, d in extra:
        print(f"  service  {tag:<20} pid {d['pid']:<7} {'alive' if d['alive'] else 'DEAD'}  "
              f"log {d['log']}")
    if st["test_pods"]:
        print(f"  test pods: {', '.join(st['test_pods'])}")
    kubeconfig = os.path.join(st["dir"], names.SANDBOX_KUBECONFIG)
    if os.path.exists(kubeconfig):
        from pacific.sandbox.k8s.bins import bin_dir
        print(f"  kubectl  export KUBECONFIG={kubeconfig} PATH={bin_dir()}:$PATH; "
              "kubectl get nodes,pods,subnets,ips -A")


@errors_to_exit
def cmd_status(args) -> int:
    sb = _sandbox(args)
    st = sb.status()
    if args.json:
        json.dump(st, sys.stdout, indent=2)
        print()
    elif not st["exists"]:
        print(f"sandbox {args.name} is not up (no {st['dir']})")
    else:
        _print_where(st)
    return 0 if st["ready"] else 3


@errors_to_exit
def cmd_down(args) -> int:
    _sandbox(args).down()
    print(f"sandbox {args.name} is down")
    return 0


def register(sub):
    p = sub.add_parser("sandbox", help="single-machine sandbox of real OVN nodes",
                       description=_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = p.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND", required=True)

    up = sp.add_parser("up", help="bring the sandbox up (idempotent; cleans a crashed one first)",
                       description="Start OVN central, N nodes and the external host; wait "
                       "until every chassis is registered and the Geneve tunnels are warm; "
                       "then start the Kubernetes control plane, the pod runners, two "
                       "controllers and the node daemons "
                       "(not with --bare); print where sockets and logs are. A healthy "
                       "sandbox is left as is; the leftovers of a crashed one are removed "
                       "first.")
    up.add_argument("--bare", action="store_true",
                    help="only the OVN network: no Kubernetes, pod runners, controllers or "
                    "node daemons")
    up.add_argument("--name", default=names.SANDBOX_DEFAULT_NAME, help=_NAME_HELP)
    up.add_argument("--nodes", type=int, default=3, metavar="N", help="number of nodes (default 3)")
    up.add_argument("--ha", action="store_true",
                    help="OVN NB and SB as 3-member RAFT clusters (namespaces ovn1..3, two "
                    "ovn-northd); every client is given all members and follows the leader")
    pods = up.add_mutually_exclusive_group()
    pods.add_argument("--kubelet", action="store_const", const=True, dest="kubelet",
                      help="(the default for a new sandbox) real nodes: a containerd "
                      "(Debian's 1.6, runc) and a kubelet v1.20.2 "
                      "per node run the pods through Pacific's CNI configuration; `kubectl "
                      "exec/logs/run` work (images localhost/busybox:latest and "
                      "localhost/pause:latest are built offline and imported on every node)")
    pods.add_argument("--pod-runner", action="store_const", const=False, dest="kubelet",
                      help="the lighter pod runner per node (a network namespace per pod, no "
                      "containers, no kubectl exec/logs) instead of kubelets; Pacific's CNI "
                      "tests use it to drive CNI verbs a kubelet cannot be asked for")
    up.set_defaults(kubelet=None)
    up.add_argument("--deploy", action="store_true",
                    help="kubelet nodes, and Pacific itself run as pods from its image "
                    "(`make image` first) and deploy/'s manifests instead of sandbox processes")
    up.add_argument("--central-pods", action="store_true",
                    help="with --deploy, OVN central too: deploy/central.yaml's pacific-central "
                    "pods on the first three nodes (labelled pacific.io/role=central), NB and "
                    "SB as RAFT clusters over TLS (certificates from `pacific tls init`)")
    up.add_argument("--ovs-pods", action="store_true",
                    help="with --central-pods, Open vSwitch and ovn-controller too: "
                    "deploy/vswitch.yaml's pacific-vswitch pods; the nodes run only a kubelet "
                    "and containerd, the whole network comes from the image and deploy/ "
                    "(implies --central-pods)")
    up.add_argument("--dual-stack", action="store_true",
                    help="a dual-stack cluster: the join network, the service CIDR and "
                    "the default Subnet in both families "
                    f"({names.DEFAULT_CIDR},{names.SANDBOX_DEFAULT_CIDR6}): every pod gets an "
                    "address of each family (docs/dual-stack.md)")
    up.add_argument("--ipv6-only", action="store_true",
                    help="an IPv6-only cluster: the default Subnet "
                    f"({names.SANDBOX_DEFAULT_CIDR6}), the join network "
                    f"({names.SANDBOX_JOIN_CIDR6}), the service CIDR "
                    f"({names.SANDBOX_SERVICE_CIDR6}) and the Nodes' addresses in IPv6 only; "
                    "the underlay and OVN's tunnels keep IPv4 beside it (docs/dual-stack.md)")
    # neither: an existing sandbox keeps its mode, a new one follows
    # $PACIFIC_SANDBOX_PODS (kubelet or runner, default names.SANDBOX_PODS_DEFAULT)
    up.add_argument("--ovs-prefix", metavar="DIR",
                    help="the Open vSwitch / OVN installation to run: /usr for Debian's "
                    f"packages (default: ${ovsinstall.PREFIX_ENV}, else the build of "
                    f"hack/build-ovs-ovn.sh under {names.OVS_BUILD_CURRENT} when there is "
                    "one, else /usr; an existing sandbox keeps its own)")
    up.add_argument("--timeout", type=float, default=60, metavar="S",
                    help="seconds to wait for chassis and tunnels (default 60)")
    up.set_defaults(func=cmd_up)

    st = sp.add_parser("status", help="chassis, daemons alive, per-node sockets and logs",
                       description="Show the sandbox: chassis in the SB database, whether each "
                       "daemon is alive, per-node sockets and log paths. Exit status 0 when "
                       "ready, 3 otherwise.")
    st.add_argument("--name", default=names.SANDBOX_DEFAULT_NAME, help=_NAME_HELP)
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=cmd_status)

    dn = sp.add_parser("down", help="stop everything and remove every namespace and file",
                       description="Stop every daemon the sandbox started (by its own pid), "
                       "delete its namespaces, links and files. Works after a crash; "
                       "idempotent.")
    dn.add_argument("--name", default=names.SANDBOX_DEFAULT_NAME, help=_NAME_HELP)
    dn.set_defaults(func=cmd_down)

    sandbox_kube.register(sp)
    sandbox_pods.register(sp)
