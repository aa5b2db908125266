"""`pacific sandbox pod add|delete` and `pacific sandbox exec` (real CNI path).

The pod commands need the sandbox up with its control plane, the node's pod
runner and pacific-node, and pacific-controller (which allocates)."""
import argparse
import json
import subprocess
import sys

from pacific import names

_ADD_DESCRIPTION = """\
Create Pod NS/NAME in the sandbox's Kubernetes API (on --node, or where
kube-scheduler places it) and wait until it runs: the node's pod runner creates
a network namespace for it and runs the node's CNI conflist through the
`pacific` plugin exactly as containerd does (CNI_* environment, config on stdin,
exit code, result on stdout), which returns once the pod can talk.  The CNI
result is printed as JSON.  If the network set-up fails, the Pod is deleted
again and the plugin's error is printed."""


def _split_ref(ref: str) -> tuple[str, str]:
    ns, sep, name = ref.partition("/")
    if not sep:
        ns, name = "default", ref
    return ns, name


def _kv(items, what) -> dict:
    out = {}
    for item in items or []:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise SystemExit(f"error: --{what} expects KEY=VALUE, got {item!r}")
        out[k] = v
    return out


def _port(spec: str) -> dict:
    """NAME:PORT/PROTO (PROTO defaults to TCP) -> a container port."""
    name, sep, rest = spec.partition(":")
    port, _, proto = rest.partition("/")
    proto = (proto or "TCP").upper()
    if not sep or not name or not port.isdigit() or not 0 < int(port) < 65536 \
            or proto not in ("TCP", "UDP", "SCTP"):
        raise SystemExit(f"error: --port expects NAME:PORT[/TCP|UDP|SCTP], got {spec!r}")
    return {"name": name, "containerPort": int(port), "protocol": proto}


def _sandbox(args):
    from pacific.sandbox.cluster import Sandbox
    return Sandbox(args.name)


def cmd_pod_add(args) -> int:
    from pacific.sandbox import cnipods as sandboxpods
    ns, name = _split_ref(args.pod)
    try:
        pod = sandboxpods.add_pod(_sandbox(args), ns, name, args.node,
                                  annotations=_kv(args.annotation, "annotation"),
                                  labels=_kv(args.label, "label"), timeout=args.timeout,
                                  container_ports=[_port(p) for p in args.port or []])
    except Exception as e:  # noqa: BLE001 - one clear line for the user
        print(f"error: pod {ns}/{name}: {e}", file=sys.stderr)
        return 1
    json.dump(pod.result, sys.stdout, indent=2)
    print(f"\n# pod {ns}/{name} on {pod.node}: {pod.ip}, netns {pod.netns}", file=sys.stderr)
    return 0


def cmd_pod_delete(args) -> int:
    from pacific.sandbox import cnipods as sandboxpods
    ns, name = _split_ref(args.pod)
    try:
        found = sandboxpods.delete_pod(_sandbox(args), ns, name)
    except Exception as e:  # noqa: BLE001
        print(f"error: pod {ns}/{name}: {e}", file=sys.stderr)
        return 1
    print(f"pod {ns}/{name} {'deleted' if found else 'was not there'}")
    return 0


def cmd_exec(args) -> int:
    from pacific.sandbox import cnipods as sandboxpods
    ns, name = _split_ref(args.pod)
    argv = args.argv
    if not argv:
        print("error: no command given (pacific sandbox exec NS/NAME -- CMD...)",
              file=sys.stderr)
        return 2
    try:
        if args.detach:
            pid = sandboxpods.detach_pod(_sandbox(args), ns, name, argv)
            print(f"started pid {pid} in pod {ns}/{name} (stopped with the pod)")
            return 0
        return sandboxpods.exec_pod(_sandbox(args), ns, name, argv).returncode
    except (sandboxpods.PodError, OSError, subprocess.SubprocessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def register(sp):
    name_help = f"sandbox name (default {names.SANDBOX_DEFAULT_NAME!r})"
    pod = sp.add_parser("pod", help="pods through the real CNI plugin and node daemon",
                        description="Sandbox pods: a Pod object plus a network namespace "
                        "plumbed by the real `pacific` CNI plugin.")
    psp = pod.add_subparsers(dest="pod_command", metavar="SUBCOMMAND", required=True)

    add = psp.add_parser("add", help="create a pod and run CNI ADD for it",
                         description=_ADD_DESCRIPTION,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    add.add_argument("pod", metavar="NS/NAME", help="pod reference (namespace 'default' "
                     "if no NS/)")
    add.add_argument("--node", help="node to run on (node1..nodeN; default: the scheduler "
                     "chooses)")
    add.add_argument("--annotation", action="append", metavar="K=V",
                     help=f"pod annotation, e.g. {names.ANN_IP_ADDRESS}=10.16.0.50 "
                     "(repeatable)")
    add.add_argument("--label", action="append", metavar="K=V", help="pod label (repeatable)")
    add.add_argument("--port", action="append", metavar="NAME:PORT/PROTO",
                     help="declare a container port, e.g. http:8080/TCP (named ports of "
                     "NetworkPolicies resolve through these; repeatable)")
    add.add_argument("--timeout", type=float, default=120, metavar="S",
                     help="seconds to wait for the plugin (default 120)")
    add.add_argument("--name", default=names.SANDBOX_DEFAULT_NAME, help=name_help)
    add.set_defaults(func=cmd_pod_add)

    dl = psp.add_parser("delete", help="delete the Pod and wait until it is gone",
                        description="Delete the Pod and wait until its node's pod runner ran "
                        "CNI DEL (with its netns, then again without, as containerd does), "
                        "stopped what ran in the pod and removed its network namespace.  "
                        "Idempotent.")
    dl.add_argument("pod", metavar="NS/NAME")
    dl.add_argument("--name", default=names.SANDBOX_DEFAULT_NAME, help=name_help)
    dl.set_defaults(func=cmd_pod_delete)

    ex = sp.add_parser("exec", help="run a command in a pod's network namespace",
                       description="Run CMD inside the pod's network namespace, e.g. "
                       "`pacific sandbox exec default/web-0 -- ping -c1 10.16.0.7`. "
                       "Exit status is the command's.  With --detach the command runs in "
                       "the background (a test server, say) until the pod or the sandbox goes.")
    ex.add_argument("pod", metavar="NS/NAME")
    ex.add_argument("--detach", action="store_true",
                    help="start CMD in the background and return (log under the sandbox's "
                    "services/ directory)")
    ex.add_argument("--name", default=names.SANDBOX_DEFAULT_NAME, help=name_help)
    # "*" not REMAINDER: options before "--" are options (--name X), all after it the command
    ex.add_argument("argv", nargs="*", metavar="-- CMD...")
    ex.set_defaults(func=cmd_exec)
