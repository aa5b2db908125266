"""`pacific demo`: the newcomer's first run (sandbox, controller, pods, matrix).

Brings up (or reuses) the sandbox with the real Kubernetes control plane, a pod
runner per node, two controller replicas and the node daemons; creates two
namespaces bound to two subnets, a Deployment whose pods the scheduler spreads
over the nodes, and two pods through the real CNI path (`pacific sandbox pod
add`), one of them with a fixed address; pings every pod and every node's
ovn0 from every pod and prints the result as a matrix; leaves everything
running until `pacific sandbox down`.  Running it again on a running sandbox
only adds what is missing.
"""
from __future__ import annotations

import os
import time

from pacific import contract, names
from pacific.cli.sandbox import errors_to_exit


SUBNETS = {  # subnet -> (cidr, namespace)
    "blue": ("10.17.0.0/24", "demo-blue"),
    "green": ("10.18.0.0/24", "demo-green"),
}
FIXED_IP = "10.18.0.100"
WEB_NS, WEB_REPLICAS = "demo-blue", 3
PODS = [  # (namespace, name, node, annotations)
    ("demo-green", "db-1", "node1", {}),
    ("demo-green", "db-fixed", "node3", {names.ANN_IP_ADDRESS: FIXED_IP}),
]


def register(sub):
    p = sub.add_parser(
        "demo", help="bring up the sandbox cluster and show pods talking",
        description="Bring up the sandbox (etcd, kube-apiserver, kube-controller-manager, "
                    "kube-scheduler, a containerd and a kubelet per node, 2 controllers, node daemons), create two "
                    "namespaces bound to two subnets, a Deployment spread over the nodes and two "
                    "pods (one with a fixed address), print a connectivity matrix and how to explore with kubectl. "
                    "Idempotent; stop everything with `pacific sandbox down`.")
    p.add_argument("--name", default=names.SANDBOX_DEFAULT_NAME, help="sandbox name")
    p.add_argument("--nodes", type=int, default=3, help="number of nodes (new sandbox only)")
    p.add_argument("--pod-runner", action="store_true",
                   help="a new sandbox runs its pods with the lighter pod runner instead of a "
                   "containerd and a kubelet per node (then kubectl exec/logs/run do not work)")
    p.add_argument("--central-pods", action="store_true",
                   help="a new sandbox runs Pacific and OVN central as pods from its image "
                   "(`make image` first) and deploy/: pacific-central on three labelled nodes "
                   "(as `pacific sandbox up --central-pods`)")
    p.add_argument("--ovs-pods", action="store_true",
                   help="as --central-pods, and Open vSwitch and ovn-controller as "
                   "pacific-vswitch pods too: nodes with only a kubelet and containerd "
                   "(as `pacific sandbox up --ovs-pods`)")
    p.add_argument("--dual-stack", action="store_true",
                   help="a new sandbox is a dual-stack cluster (its join network, service "
                   "CIDR and default Subnet): every pod gets an IPv4 and an IPv6 address "
                   "(as `pacific sandbox up --dual-stack`; docs/dual-stack.md)")
    p.set_defaults(func=run)


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
    if r.get(api, r.DEPLOYMENTS, "web", WEB_NS) is None:
        labels = {"app": "web"}
        r.create(api, r.DEPLOYMENTS, {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": WEB_NS},
            "spec": {"replicas": WEB_REPLICAS, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "terminationGracePeriodSeconds": 0,
                         "topologySpreadConstraints": [{
                             "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                             "whenUnsatisfiable": "ScheduleAnyway",
                             "labelSelector": {"matchLabels": labels}}],
                         "containers": [{"name": "web", "image": "localhost/busybox:latest",
                                         "imagePullPolicy": "IfNotPresent"}]}}}},
            namespace=WEB_NS)


def _web_pods(api, timeout: float = 120) -> list[dict]:
    """The Deployment's pods, once all replicas run."""
    from pacific.kube import resources as r
    deadline = time.monotonic() + timeout
    while True:
        pods = [p for p in r.list_(api, r.PODS, WEB_NS, label_selector="app=web")[0]
                if not p["metadata"].get("deletionTimestamp")]
        running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"
                   and contract.own_record(p) is not None]
        if len(running) == WEB_REPLICAS == len(pods):
            return sorted(running, key=lambda p: p["spec"]["nodeName"])
        if time.monotonic() > deadline:
            raise RuntimeError(f"Deployment {WEB_NS}/web: {len(running)} of {WEB_REPLICAS} "
                               "pods running")
        time.sleep(0.2)


def _add_pods(sb, api) -> None:
    from pacific.sandbox import cnipods as sandboxpods
    from pacific.kube import resources as r
    for ns, name, node, ann in PODS:
        pod = r.get(api, r.PODS, name, ns)
        if pod is not None and sandboxpods.load(sb, ns, name) is not None and \
                contract.own_record(pod) is not None:
            continue
        if pod is not None:   # half-made by an interrupted run: start over
            sandboxpods.delete_pod(sb, ns, name, api=api)
        print(f"  pod {ns}/{name} on {node}" + (f" (fixed address {ann[names.ANN_IP_ADDRESS]})"
                                                if names.ANN_IP_ADDRESS in ann else ""), flush=True)
        sandboxpods.add_pod(sb, ns, name, node, annotations=ann, api=api)


def _targets(api) -> list[tuple[str, str]]:
    from pacific.kube import resources as r
    out = []
    for p in _web_pods(api):
        md = p["metadata"]
        print(f"  pod {md['namespace']}/{md['name']} (Deployment web) on {p['spec']['nodeName']}",
              flush=True)
        out.append((f"{md['namespace']}/{md['name']}", contract.own_record(p).ip))
    for ns, name, _, _ in PODS:
        rec = contract.own_record(r.get(api, r.PODS, name, ns))
        out.append((f"{ns}/{name}", rec.ip if rec else "?"))
    for n in sorted(r.list_(api, r.NODES)[0], key=lambda n: n["metadata"]["name"]):
        ip = (n["metadata"].get("annotations") or {}).get(names.ANN_NODE_JOIN_IP, "?").split("/")[0]
        out.append((f"{n['metadata']['name']}/ovn0", ip))
    return out


def _matrix(sb, targets: list[tuple[str, str]]) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from pacific.sandbox import cnipods as sandboxpods
    sources = [t for t in targets if not t[0].endswith("/ovn0")]

    def ping(src: str, ip: str) -> bool:
        ns, name = src.split("/")
        return sandboxpods.exec_pod(sb, ns, name, ["ping", "-c1", "-W2", ip],
                                    capture_output=True).returncode == 0

    with ThreadPoolExecutor(8) as pool:
        results = {(s, d): pool.submit(ping, s, ip)
                   for s, _ in sources for d, ip in targets if d != s}
    def expected(src: str, dst: str) -> bool:
        # tenant isolation: each demo namespace is a tenant; nodes reach everyone
        return dst.endswith("/ovn0") or src.split("/")[0] == dst.split("/")[0]

    width = max(len(t[0]) for t in targets) + 2
    print("\nconnectivity (ping from row to column; ok = reply, -- = blocked by tenant "
          "isolation, as expected; !! = not what was expected):\n")
    print(" " * width + "".join(f"{i + 1:>5}" for i in range(len(targets))))
    failures = 0
    for src, _ in sources:
        cells = []
        for dst, _ in targets:
            if dst == src:
                cells.append("    .")
                continue
            ok = results[(src, dst)].result()
            want = expected(src, dst)
            cells.append("   !!" if ok != want else "   ok" if ok else "   --")
            failures += ok != want
        print(f"{src:<{width}}" + "".join(cells), flush=True)
    print("\ncolumns: " + "  ".join(f"{i + 1}={name} ({ip})" for i, (name, ip) in enumerate(targets)))
    print("\ndemo-blue and demo-green are two tenants: their pods do not reach each other; "
          "every node reaches every pod.  Join them with\n  .venv/bin/pacific tenant join "
          f"demo-green --to demo-blue   (it sets the namespace label {names.LABEL_TENANT}),\n"
          f"  or: kubectl label namespace demo-green {names.LABEL_TENANT}=demo-blue")
    return failures


def _kubelet_hints(sb) -> str:
    if not sb.kubelet:
        return ("  (pods run by pod runners: no containers, so no kubectl exec/logs/run; "
                "`pacific sandbox down` and `pacific demo` give real kubelets)\n")
    return """  kubectl run one --image=localhost/busybox:latest --restart=Never -- sh -c 'ip -4 addr show eth0'
  kubectl logs one
  kubectl exec -n demo-blue deploy/web -- hostname
  kubectl exec -n demo-blue deploy/web -- ping -c1 <a demo-blue pod's IP>
""" + ("""  kubectl get pods -n pacific-system -o wide -L pacific.io/ovn-nb-leader   # OVN central as pods
  kubectl logs -n pacific-system -l app.kubernetes.io/name=pacific-central
""" if sb.central_pods else "") + ("""  kubectl logs -n pacific-system -l app.kubernetes.io/name=pacific-vswitch   # Open vSwitch as pods
""" if sb.ovs_pods else "")


@errors_to_exit
def run(args) -> int:
    from pacific.kube import client
    from pacific.sandbox.k8s.bins import bin_dir
    from pacific.sandbox.k8s.sandbox import kubeconfig_path
    from pacific.sandbox.cluster import Sandbox
    t0 = time.monotonic()
    exists = os.path.isdir(os.path.join(
        os.environ.get(names.SANDBOX_DIR_ENV) or names.SANDBOX_DIR, args.name))
    # a new demo sandbox has real nodes (containerd + kubelet) unless --pod-runner
    sb = Sandbox(args.name, nodes=None if exists else args.nodes,
                 kubelet=None if exists else not args.pod_runner,
                 central_pods=None if exists else args.central_pods,
                 ovs_pods=None if exists else args.ovs_pods,
                 dual_stack=None if exists else args.dual_stack)
    print(f"sandbox {sb.name}: bringing up what is not running ({len(sb.nodes)} nodes) ...",
          flush=True)
    sb.up()     # idempotent: keeps a healthy network, starts only missing services
    kc = kubeconfig_path(sb)
    api = client.load(kc)
    _ensure_objects(api)
    runner = "kubelet (containerd)" if sb.kubelet else "pod runner"
    print("pods (scheduled by kube-scheduler or placed on a node; each one's network set up "
          f"by its node's {runner} through the pacific CNI plugin):", flush=True)
    _add_pods(sb, api)
    failures = _matrix(sb, _targets(api))
    print(f"""
ready in {time.monotonic() - t0:.0f} s.  Explore the sandbox's Kubernetes API:

  export KUBECONFIG={kc} PATH={bin_dir()}:$PATH   # kubectl v1.20.2, as the server
  kubectl get pods -A -o wide
  kubectl create deployment hello --image=localhost/busybox:latest --replicas=4
  kubectl scale deployment hello --replicas=8
  kubectl expose deployment hello --port 80     # a ClusterIP in OVN's load balancers
  kubectl get pods -o wide -w
  kubectl get subnets
  kubectl get ips
  kubectl get pod -n demo-green db-fixed -o jsonpath='{{.metadata.annotations}}'
{_kubelet_hints(sb)}
The sandbox keeps running; stop everything with:  pacific sandbox down --name {sb.name}
""")
    if failures:
        print(f"WARNING: {failures} ping(s) did not behave as expected; see the logs under {sb.dir}/services/")
        return 1
    return 0
