"""`pacific flows --cluster`: the records of every pacific-node pod, read
through the API server (`kubectl exec`: it needs `pods/exec` in Pacific's
namespace, which administrators have and tenants do not)."""
from __future__ import annotations

import queue
import threading

import kubernetes

from pacific import names
from pacific.kube import resources as r
from pacific.tools import flows

NODE_PODS = "app.kubernetes.io/name=pacific-node"


def node_pods(api) -> list[dict]:
    pods, _ = r.list_(api, r.PODS, names.PACIFIC_NAMESPACE, label_selector=NODE_PODS)
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]


def _exec(api, pod: str, command: list[str], **kw):
    from kubernetes.stream import stream
    core = kubernetes.client.CoreV1Api(api)
    return stream(core.connect_get_namespaced_pod_exec, pod, names.PACIFIC_NAMESPACE,
                  command=command, stderr=True, stdin=False, stdout=True, tty=False, **kw)


def read(api, filters: dict, since: str | None = None) -> list[dict]:
    """Every node's records now (its rotated file first), merged by time."""
    path = names.FLOW_LOG
    recs = []
    for pod in node_pods(api):
        text = _exec(api, pod["metadata"]["name"],
                     ["sh", "-c", f"cat {path}.1 {path} 2>/dev/null; true"])
        recs += flows.parse_text(text)
    return flows.select(recs, filters, since)


def follow(api, filters: dict, stop: threading.Event):
    """Records as every node writes them (one `tail -F` per pacific-node pod)."""
    out: queue.Queue = queue.Queue()

    def one(pod: str) -> None:
        resp = _exec(api, pod, ["tail", "-n", "0", "-F", names.FLOW_LOG], _preload_content=False)
        buf = ""
        while resp.is_open() and not stop.is_set():
            resp.update(timeout=1)
            if resp.peek_stdout():
                buf += resp.read_stdout()
                *lines, buf = buf.split("\n")
                for rec in flows.parse_text("\n".join(lines)):
                    out.put(rec)
        resp.close()
    for pod in node_pods(api):
        threading.Thread(target=one, args=(pod["metadata"]["name"],), daemon=True).start()
    while not stop.is_set():
        try:
            rec = out.get(timeout=0.5)
        except queue.Empty:
            continue
        if flows.select([rec], filters):
            yield rec
