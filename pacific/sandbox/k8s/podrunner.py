"""The sandbox node's pod runner: what a kubelet does for networking, nothing more.

    python -m pacific.sandbox.k8s.podrunner --kubeconfig node1.kubeconfig \
        --node node1 --node-netns pac-x-node1 --node-ip 192.168.77.11 \
        --conflist .../net.d/10-pacific.conflist --cni-bin-dir .../bin \
        --state-dir <sandbox>/pods --netns-prefix pac-x-pod-

It registers its Node (Ready, with capacity, its InternalIP) and renews the node's
Lease in kube-node-lease, as a kubelet does, with the node's own identity
(system:node:NAME: the Node authorizer and NodeRestriction apply).  It watches the
pods bound to its node; for each new one it creates a network namespace, runs the
node's CNI conflist through the `pacific` plugin exactly as containerd does, and
reports the pod Running with its addresses.  A failed ADD is retried with
back-off and reported as an Event (FailedCreatePodSandBox), as kubelets do.  When
a pod is deleted it runs CNI DEL, stops the processes left in the pod's namespace,
removes it and completes the deletion.  Each running pod is recorded in
`--state-dir/<ns>_<name>.json` (container id, netns, CNI result) for `pacific sandbox
pod exec` and for the next start of the runner.  The image is ignored (issue
"Real nodes" brings containerd).
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import signal
import threading
import time

from pacific.kube import client, errors
from pacific.kube import resources as r
from pacific.kube.informer import Informer
from pacific.kube.workqueue import WorkQueue, run_workers
from pacific.sandbox import cniruntime as runtime
from pacific.sandbox import netns as sbnetns
from pacific.sandbox.proc import start_time, stop_pid

log = logging.getLogger("pacific.sandbox.podrunner")
LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
RENEW_EVERY = 10.0
POD_CAPACITY = "1000"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _micro_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def record_path(state_dir: str, namespace: str, name: str) -> str:
    return os.path.join(state_dir, f"{namespace}_{name}.json")


def load_record(state_dir: str, namespace: str, name: str) -> dict | None:
    try:
        with open(record_path(state_dir, namespace, name)) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def pod_netns_name(prefix: str, namespace: str, name: str) -> str:
    full = f"{prefix}{namespace}-{name}"
    if len(full) <= 64:
        return full
    return f"{prefix}{hashlib.sha256(f'{namespace}/{name}'.encode()).hexdigest()[:16]}"


class PodRunner:
    def __init__(self, args):
        self.a = args
        self.api = client.load(args.kubeconfig)
        self.queue = WorkQueue(rate_limit_base=1.0, rate_limit_max=30.0)
        self.stopping = threading.Event()
        os.makedirs(args.state_dir, exist_ok=True)
        self.pods = Informer(self.api, r.PODS, field_selector=f"spec.nodeName={args.node}",
                             on_add=self._enqueue, on_update=lambda _o, n: self._enqueue(n),
                             on_delete=self._enqueue)

    def _enqueue(self, pod: dict) -> None:
        self.queue.add(r.object_key(pod))

    # ------------------------------------------------------------------ node
    def register(self) -> None:
        a = self.a
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": a.node, "labels": {"kubernetes.io/hostname": a.node, "kubernetes.io/os": "linux",
                                       "kubernetes.io/arch": "amd64"}}}
        try:
            r.create(self.api, r.NODES, body)
        except errors.AlreadyExists:
            pass
        now = _now()
        cap = {"cpu": "2", "memory": "8Gi", "pods": POD_CAPACITY, "ephemeral-storage": "10Gi"}
        r.patch_merge(self.api, r.NODES, a.node, {"status": {
            "capacity": cap, "allocatable": cap,
            "addresses": [*({"type": "InternalIP", "address": ip} for ip in node_ips(a)),
                          {"type": "Hostname", "address": a.node}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "pacific sandbox pod runner is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"kubeletVersion": "v1.20.2", "kubeProxyVersion": "v1.20.2",
                         "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "pacific-sandbox://1", "osImage": "sandbox",
                         "kernelVersion": os.uname().release, "machineID": "", "systemUUID": "",
                         "bootID": ""}}}, subresource="status")
        log.info("node %s registered (%s)", a.node, a.node_ip)

    def heartbeat(self) -> None:
        while not self.stopping.wait(RENEW_EVERY if self._renew() else 2.0):
            pass

    def _renew(self) -> bool:
        name = self.a.node
        try:
            cur = r.get(self.api, r.LEASES, name, LEASE_NAMESPACE)
            spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_SECONDS,
                    "renewTime": _micro_now()}
            if cur is None:
                r.create(self.api, r.LEASES, {"metadata": {"name": name, "namespace": LEASE_NAMESPACE},
                                         "spec": spec}, namespace=LEASE_NAMESPACE)
            else:
                cur["spec"].update(spec)
                r.replace(self.api, r.LEASES, cur, namespace=LEASE_NAMESPACE)
            return True
        except (errors.ApiError, OSError) as e:
            log.warning("node lease renewal failed: %s", e)
            return False

    # ------------------------------------------------------------------ pods
    def reconcile(self, key: str) -> None:
        ns, name = r.split_key(key)
        pod = self.pods.get(key)
        rec = load_record(self.a.state_dir, ns, name)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            if rec is not None:
                self.teardown(rec)
            if pod is not None:
                self.finish_delete(pod)
            return
        if rec is not None and rec["uid"] != pod["metadata"]["uid"]:
            self.teardown(rec)          # an old pod of the same name
            rec = None
        if pod["spec"].get("hostNetwork"):
            if pod.get("status", {}).get("phase") != "Running":
                self.report_running(pod, node_ips(self.a), "host")
            return
        if rec is None:
            try:
                rec = self.start(pod)
            except Exception as e:
                delay = self.queue.add_rate_limited(key)
                log.warning("pod %s: network set-up failed (retry in %.0f s): %s", key, delay, e)
                self.event(pod, "FailedCreatePodSandBox",
                           f"Failed to create pod sandbox: {e}", "Warning")
                return
            self.queue.forget(key)
        if pod.get("status", {}).get("podIP") != rec["ips"][0]:
            self.report_running(pod, rec["ips"], rec["container_id"])

    def _attachment(self, rec: dict, with_netns: bool) -> runtime.Attachment:
        return runtime.Attachment(rec["container_id"],
                                  f"/run/netns/{rec['netns']}" if with_netns else "", "eth0",
                                  runtime.k8s_args(rec["namespace"], rec["name"], rec["uid"],
                                                   rec["container_id"]))

    def start(self, pod: dict) -> dict:
        md = pod["metadata"]
        ns_name = pod_netns_name(self.a.netns_prefix, md["namespace"], md["name"])
        rec = {"namespace": md["namespace"], "name": md["name"], "uid": md["uid"],
               "node": self.a.node, "container_id": runtime.new_container_id(),
               "netns": ns_name, "ips": [], "result": {}, "started": time.time()}
        with self._netns_names():
            self._fresh_netns(ns_name, rec)
        try:
            rec["result"] = runtime.add(runtime.load_conflist(self.a.conflist), [self.a.cni_bin_dir],
                                        self._attachment(rec, True), self.a.cni_timeout,
                                        run_in_netns=f"/run/netns/{self.a.node_netns}")
        except BaseException:
            self._del(rec)
            with self._netns_names():
                if sbnetns.identity(ns_name) == rec["netns_id"]:
                    sbnetns.delete(ns_name)
            raise
        rec["ips"] = [i["address"].split("/")[0] for i in rec["result"].get("ips", [])]
        self._save(rec)
        log.info("pod %s/%s: %s in %s", md["namespace"], md["name"], rec["ips"], ns_name)
        return rec

    @contextlib.contextmanager
    def _netns_names(self):
        """Every node's runner shares this kernel's netns names: one at a time
        checks and changes them (a lock file beside the nodes' state dirs)."""
        with open(os.path.join(os.path.dirname(os.path.abspath(self.a.state_dir)),
                               ".netns.lock"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            yield

    def _fresh_netns(self, ns_name: str, rec: dict) -> None:
        if sbnetns.exists(ns_name):
            # the name is still held by the pod's earlier incarnation on another
            # node (deleted with grace 0, its runner not done yet): that runner
            # leaves the new one alone (netns_id)
            self._kill_netns_procs(ns_name)
            sbnetns.delete(ns_name)
        sbnetns.create(ns_name)
        rec["netns_id"] = sbnetns.identity(ns_name)

    def _del(self, rec: dict) -> list[str]:
        errs = []
        for with_netns in (True, False):      # as containerd: with the netns, then without
            try:
                runtime.delete(runtime.load_conflist(self.a.conflist), [self.a.cni_bin_dir],
                               self._attachment(rec, with_netns), self.a.cni_timeout,
                               run_in_netns=f"/run/netns/{self.a.node_netns}")
            except (runtime.CniCallError, OSError, ValueError) as e:
                errs.append(str(e))
        return errs

    def teardown(self, rec: dict) -> None:
        errs = self._del(rec)
        if len(errs) == 2:
            log.warning("pod %s/%s: CNI DEL failed: %s", rec["namespace"], rec["name"], errs[0])
        with self._netns_names():
            now = sbnetns.identity(rec["netns"])
            if now is not None and now == rec.get("netns_id"):
                self._kill_netns_procs(rec["netns"])
                sbnetns.delete(rec["netns"])
            elif now is not None:
                log.info("pod %s/%s: %s now belongs to a pod of that name on another node; "
                         "left alone", rec["namespace"], rec["name"], rec["netns"])
        try:
            os.unlink(record_path(self.a.state_dir, rec["namespace"], rec["name"]))
        except FileNotFoundError:
            pass
        log.info("pod %s/%s: network removed", rec["namespace"], rec["name"])

    @staticmethod
    def _kill_netns_procs(ns: str) -> None:
        for pid in sbnetns.pids(ns):
            stop_pid(pid, start_time(pid), what=f"pid {pid} in {ns}")

    def finish_delete(self, pod: dict) -> None:
        md = pod["metadata"]
        try:
            r.delete(self.api, r.PODS, md["name"], namespace=md["namespace"], uid=md["uid"],
                     grace_period=0)
        except errors.Conflict:
            pass               # a new pod of that name: its own events handle it

    def report_running(self, pod: dict, ips: list[str], container_id: str) -> None:
        now = _now()
        md = pod["metadata"]
        conds = [{"type": t, "status": "True", "lastTransitionTime": now}
                 for t in ("Initialized", "ContainersReady", "Ready", "PodScheduled")]
        statuses = [{"name": c["name"], "image": c.get("image", ""), "imageID": "",
                     "ready": True, "started": True, "restartCount": 0,
                     "containerID": f"sandbox://{container_id}",
                     "state": {"running": {"startedAt": now}}}
                    for c in pod["spec"].get("containers", [])]
        patch = {"status": {"phase": "Running", "hostIP": node_ips(self.a)[0], "startTime": now,
                            "podIP": ips[0], "podIPs": [{"ip": ip} for ip in ips],
                            "conditions": conds, "containerStatuses": statuses}}
        try:
            r.patch_merge(self.api, r.PODS, md["name"], patch, namespace=md["namespace"],
                          subresource="status")
        except errors.NotFound:
            pass

    def event(self, pod: dict, reason: str, message: str, type_: str = "Normal") -> None:
        try:
            r.create_event(self.api, pod, reason, message[:1000], type=type_,
                           component=f"pacific-podrunner/{self.a.node}")
        except Exception as e:  # events are best effort
            log.debug("event %s not recorded: %s", reason, e)

    def _save(self, rec: dict) -> None:
        path = record_path(self.a.state_dir, rec["namespace"], rec["name"])
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(rec, f)
        os.replace(tmp, path)

    # ------------------------------------------------------------------ main
    def run(self) -> None:
        self.register()
        threading.Thread(target=self.heartbeat, name="lease", daemon=True).start()
        self.pods.start()
        if not self.pods.wait_synced(60):
            raise SystemExit("pods on this node were never listed")
        # pods recorded by an earlier run whose Pod is gone
        for f in os.listdir(self.a.state_dir):
            if f.endswith(".json"):
                ns, _, name = f[:-5].partition("_")
                self.queue.add(f"{ns}/{name}")
        workers = run_workers(self.queue, self.reconcile, n=self.a.workers)
        log.info("pod runner for %s running (%d workers)", self.a.node, self.a.workers)
        self.stopping.wait()
        self.queue.shutdown()
        self.pods.stop()
        for t in workers:
            t.join(5)


def node_ips(args) -> list[str]:
    """The node's InternalIP addresses (--node-ip), IPv4 first."""
    return [ip.strip() for ip in args.node_ip.split(",")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pacific.sandbox.k8s.podrunner",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True, help="the node's own credentials")
    p.add_argument("--node", required=True, help="Node name")
    p.add_argument("--node-netns", required=True, help="the node's network namespace")
    p.add_argument("--node-ip", required=True,
                   help="the node's InternalIP, or both families' (dual-stack: IPv4,IPv6)")
    p.add_argument("--conflist", required=True, help="the node's CNI conflist")
    p.add_argument("--cni-bin-dir", required=True)
    p.add_argument("--state-dir", required=True, help="records of the pods this runner runs")
    p.add_argument("--netns-prefix", required=True, help="pod network namespaces: PREFIX<ns>-<pod>")
    p.add_argument("--workers", type=int, default=8, help="pods set up in parallel (default 8)")
    p.add_argument("--cni-timeout", type=float, default=120.0)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    runner = PodRunner(a)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: runner.stopping.set())
    runner.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
