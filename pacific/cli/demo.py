"""`pacific demo`: the newcomer's first run (sandbox, controller, pods, matrix).

Brings up (or reuses) the sandbox with the API emulator, two controller
replicas and the node daemons; creates two namespaces bound to two subnets and
a handful of pods across the nodes through the real CNI path (`pacific sandbox
pod add`), one of them with a fixed address; pings every pod and every node's
ovn0 from every pod and prints the result as a matrix; leaves everything
running until `pacific sandbox down`.  Running it again on a running sandbox
only adds what is missing.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

from pacific import names

LOG = logging.getLogger("pacific.demo")

SUBNETS = {  # subnet -> (cidr, namespace)
    "blue": ("10.17.0.0/24", "demo-blue"),
    "green": ("10.18.0.0/24", "demo-green"),
}
FIXED_IP = "10.18.0.100"
PODS = [  # (namespace, name, node, annotations)
    ("demo-blue", "web-1", "node1", {}),
    ("demo-blue", "web-2", "node2", {}),
    ("demo-blue", "web-3", "node3", {}),
    ("demo-green", "db-1", "node1", {}),
    ("demo-green", "db-fixed", "node3", {names.ANN_IP_ADDRESS: FIXED_IP}),
]


def register(sub):
    p = sub.add_parser(
        "demo", help="bring up the sandbox cluster and show pods talking",
        description="Bring up the sandbox (API emulator, 2 controllers, node daemons), create two "
                    "namespaces bound to two subnets and pods across the nodes (one with a fixed "
                    "address), print a connectivity matrix and how to explore with kubectl. "
                    "Idempotent; stop everything with `pacific sandbox down`.")
    p.add_argument("--name", default=names.SANDBOX_DEFAULT_NAME, help="sandbox name")
    p.add_argument("--nodes", type=int, default=3, help="number of nodes (new sandbox only)")
    p.set_defaults(func=run)


# -- services --------------------------------------------------------------------

def _services(kube_holder: dict):
    from pacific.controller import launch as controller_launch
    from pacific.node import launch as node_launch
    from pacific.sandbox.apiserver import sandbox as api_launch

    def apiserver(sb):
        if sb.daemon_pid(names.SANDBOX_APISERVER_TAG) is None:
            api_launch.start_for_sandbox(sb)
        kube_holder["kubeconfig"] = api_launch.kubeconfig_path(sb)
        _ensure_nodes(sb, kube_holder["kubeconfig"])

    def controllers(sb):
        controller_launch.service(sb)

    def node_daemons(sb):
        missing = [n for n in sb.nodes if sb.daemon_pid(node_launch.tag(n)) is None]
        for n in missing:
            node_launch.start(sb, n, os.path.join(sb.dir, names.SANDBOX_KUBECONFIG_UNDERLAY), wait=False)
        for n in missing:
            node_launch.wait_ready(sb, n)

    return [apiserver, controllers, node_daemons]


def _ensure_nodes(sb, kubeconfig: str) -> None:
    """Node objects (a real cluster's kubelets register them)."""
    from pacific.kube import client, errors
    from pacific.kube import resources as r
    api = client.load(kubeconfig)
    for n in sb.nodes:
        try:
            if r.get(api, r.NODES, n.name) is None:
                r.create(api, r.NODES, {"metadata": {"name": n.name}})
        except errors.AlreadyExists:
            pass


# -- objects -----------------------------------------------------------------------

def _ensure_objects(api) -> None:
    from pacific.kube import errors
    from pacific.kube import resources as r
    for subnet, (cidr, ns) in SUBNETS.items():
        for res, body in ((r.NAMESPACES, {"metadata": {"name": ns}}),
                          (r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                       "metadata": {"name": subnet},
                                       "spec": {"cidrBlock": cidr, "namespaces": [ns]}})):
            try:
                if r.get(api, res, body["metadata"]["name"]) is None:
                    r.create(api, res, body)
            except errors.AlreadyExists:
                pass


def _cli(*args: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pacific.cli.main", *args]
    return subprocess.run(cmd, check=check, text=True, capture_output=quiet, timeout=120)


def _add_pods(api, sandbox_name: str) -> None:
    from pacific.kube import resources as r
    for ns, name, node, ann in PODS:
        pod = r.get(api, r.PODS, name, ns)
        if pod is not None and (pod["metadata"].get("annotations") or {}).get(names.ANN_ALLOCATED) == "true":
            continue
        if pod is not None:   # half-made by an interrupted run: start over
            _cli("sandbox", "pod", "delete", f"{ns}/{name}", "--name", sandbox_name, check=False, quiet=True)
        argv = ["sandbox", "pod", "add", f"{ns}/{name}", "--node", node, "--name", sandbox_name]
        for k, v in ann.items():
            argv += ["--annotation", f"{k}={v}"]
        print(f"  pod {ns}/{name} on {node}" + (f" (fixed address {ann[names.ANN_IP_ADDRESS]})"
                                                if names.ANN_IP_ADDRESS in ann else ""), flush=True)
        _cli(*argv, quiet=True)


def _targets(api) -> list[tuple[str, str]]:
    from pacific.kube import resources as r
    out = []
    for ns, name, _, _ in PODS:
        a = r.get(api, r.PODS, name, ns)["metadata"].get("annotations") or {}
        out.append((f"{ns}/{name}", a.get(names.ANN_IP_ADDRESS, "?")))
    for n in sorted(r.list_(api, r.NODES)[0], key=lambda n: n["metadata"]["name"]):
        ip = (n["metadata"].get("annotations") or {}).get(names.ANN_NODE_JOIN_IP, "?").split("/")[0]
        out.append((f"{n['metadata']['name']}/ovn0", ip))
    return out


def _matrix(sandbox_name: str, targets: list[tuple[str, str]]) -> int:
    sources = [t for t in targets if not t[0].endswith("/ovn0")]
    width = max(len(t[0]) for t in targets) + 2
    failures = 0
    print("\nconnectivity (ping from row to column; ok = reply, -- = no reply):\n")
    print(" " * width + "".join(f"{i + 1:>5}" for i in range(len(targets))))
    for src, _ in sources:
        cells = []
        for dst, ip in targets:
            if dst == src:
                cells.append("    .")
                continue
            r = _cli("sandbox", "exec", src, "--name", sandbox_name, "--", "ping", "-c1", "-W2", ip,
                     check=False, quiet=True)
            cells.append("   ok" if r.returncode == 0 else "   --")
            failures += r.returncode != 0
        print(f"{src:<{width}}" + "".join(cells), flush=True)
    print("\ncolumns: " + "  ".join(f"{i + 1}={name} ({ip})" for i, (name, ip) in enumerate(targets)))
    return failures


def run(args) -> int:
    from pacific.kube import client
    from pacific.sandbox.cluster import Sandbox
    t0 = time.monotonic()
    holder: dict = {}
    sb = Sandbox(args.name, nodes=None if os.path.isdir(os.path.join(
        os.environ.get(names.SANDBOX_DIR_ENV) or names.SANDBOX_DIR, args.name)) else args.nodes)
    services = _services(holder)
    if os.path.exists(f"/run/netns/{sb.central_netns}"):
        print(f"sandbox {sb.name} is up: checking its services", flush=True)
        for svc in services:
            svc(sb)
    else:
        print(f"bringing up sandbox {sb.name} ({len(sb.nodes)} nodes) ...", flush=True)
        sb.up(services=services)
    api = client.load(holder["kubeconfig"])
    _ensure_objects(api)
    print("pods (real CNI path through each node's pacific-node):", flush=True)
    _add_pods(api, sb.name)
    failures = _matrix(sb.name, _targets(api))
    kc = holder["kubeconfig"]
    print(f"""
ready in {time.monotonic() - t0:.0f} s.  Explore the sandbox's Kubernetes API:

  export KUBECONFIG={kc}
  kubectl get pods -A -o wide
  kubectl get subnets
  kubectl get ips
  kubectl get pod -n demo-green db-fixed -o jsonpath='{{.metadata.annotations}}'

The sandbox keeps running; stop everything with:  pacific sandbox down --name {sb.name}
""")
    if failures:
        print(f"WARNING: {failures} ping(s) failed; see the logs under {sb.dir}/services/")
        return 1
    return 0
