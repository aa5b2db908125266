"""Benchmark of the Kubernetes API emulator at 10,000 pods.

Measures, against a real emulator process on 127.0.0.1 (plain HTTP and HTTPS):
create throughput, full LIST throughput (objects/s, raw HTTP + json decode, and
through the official client), WATCH throughput (initial ADDED replay of every
pod, and live MODIFIED events while pods are patched), and the emulator's RSS.
Baseline measured in the same run: the same LIST bytes served by a static
ThreadingHTTPServer (transport + decode floor).

Custom resources (`--only crd` runs just this): create rate of `IP` objects
validated against deploy/crds/ip.yaml's structural schema (pruning, defaulting,
validation), against the baseline of the same objects in a CRD whose schema
preserves unknown fields (nothing to check), interleaved in the same run.

    .venv/bin/python bench/bench_apiserver.py [--pods 10000] [--only crd]
"""
import argparse
import http.client
import http.server
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "bench-token"


def start(workdir, tls: bool):
    ready = os.path.join(workdir, f"ready-{tls}.json")
    if os.path.exists(ready):       # left by an earlier emulator of this run
        os.remove(ready)
    argv = [sys.executable, "-m", "pacific.sandbox.apiserver", "--listen", "127.0.0.1:0",
            "--token", TOKEN, "--ready-file", ready, "--history", "50000"]
    if tls:
        argv += ["--tls-dir", os.path.join(workdir, "tls")]
    p = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    while not os.path.exists(ready):
        if p.poll() is not None:
            raise SystemExit("emulator failed to start")
        time.sleep(0.02)
    port = json.load(open(ready))["addresses"][0]["port"]
    return p, port


def conn(port, tls, workdir):
    if tls:
        ctx = ssl.create_default_context(cafile=os.path.join(workdir, "tls", "ca.crt"))
        return http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=120)
    return http.client.HTTPConnection("127.0.0.1", port, timeout=120)


H = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", "Accept": "application/json"}


def pod(i):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i}", "labels": {"app": f"app-{i % 50}", "bench": "yes"},
                         "annotations": {"pacific.io/ip_address": f"10.16.{i // 250}.{i % 250 + 2}"}},
            "spec": {"nodeName": f"node{i % 3 + 1}",
                     "containers": [{"name": "c", "image": "registry.example/app:1.0",
                                     "ports": [{"containerPort": 8080}]}]}}


def create_all(port, tls, workdir, n, threads=4):
    def work(k):
        c = conn(port, tls, workdir)
        for i in range(k, n, threads):
            c.request("POST", "/api/v1/namespaces/default/pods", json.dumps(pod(i)), H)
            r = c.getresponse()
            r.read()
            assert r.status == 201, r.status
        c.close()
    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return n / (time.perf_counter() - t0)


def post_all(port, path, bodies, threads=4) -> float:
    """POST every body (4 client threads, plain HTTP); returns seconds taken."""
    def work(k):
        c = conn(port, False, None)
        for b in bodies[k::threads]:
            c.request("POST", path, b, H)
            r = c.getresponse()
            r.read()
            assert r.status == 201, (r.status, path)
        c.close()
    t0 = time.perf_counter()
    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    return time.perf_counter() - t0


def crd_rates(port, n, rounds=4) -> tuple[float, float]:
    """(validated IP creates/s, schemaless baseline creates/s), interleaved in rounds."""
    import yaml
    with open(os.path.join(REPO, "deploy", "crds", "ip.yaml")) as f:
        crd = yaml.safe_load(f)
    free = json.loads(json.dumps(crd))
    free["metadata"]["name"] = "ips.bench.pacific.io"
    free["spec"]["group"] = "bench.pacific.io"
    free["spec"]["versions"][0]["schema"] = {"openAPIV3Schema": {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    c = conn(port, False, None)
    for body in (crd, free):
        c.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", json.dumps(body), H)
        r = c.getresponse()
        r.read()
        assert r.status in (201, 409), r.status
    c.close()

    def ip(group, i):
        return json.dumps({"apiVersion": f"{group}/v1", "kind": "IP", "metadata": {"name": f"pod-{i}.default"},
                           "spec": {"pod": f"pod-{i}", "namespace": "default", "subnet": "ovn-default",
                                    "ipAddress": f"10.16.{i // 250}.{i % 250 + 2}",
                                    "macAddress": "0a:58:0a:10:00:02", "nodeName": f"node{i % 3 + 1}",
                                    "ownerKind": "Pod", "ownerName": f"pod-{i}"}}).encode()
    t_val = t_free = 0.0
    per = n // rounds
    for k in range(rounds):
        idx = range(k * per, (k + 1) * per)
        t_val += post_all(port, "/apis/pacific.io/v1/ips", [ip("pacific.io", i) for i in idx])
        t_free += post_all(port, "/apis/bench.pacific.io/v1/ips", [ip("bench.pacific.io", i) for i in idx])
    return per * rounds / t_val, per * rounds / t_free


def list_rate(get_body, n, rounds=3):
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        body = get_body()
        items = json.loads(body)["items"]
        dt = time.perf_counter() - t0
        assert len(items) == n, len(items)
        best = max(best, n / dt)
    return best, len(body)


def paged_list_rate(c, n, page=500):
    """LIST in pages of `page` (kubectl asks limit=500; informers use larger pages)."""
    t0 = time.perf_counter()
    got, cont = 0, ""
    while True:
        q = f"?limit={page}" + (f"&continue={cont}" if cont else "")
        c.request("GET", "/api/v1/namespaces/default/pods" + q, headers=H)
        body = json.loads(c.getresponse().read())
        got += len(body["items"])
        cont = body["metadata"].get("continue")
        if not cont:
            break
    assert got == n, got
    return n / (time.perf_counter() - t0)


def watch_initial(port, tls, workdir, n):
    c = conn(port, tls, workdir)
    t0 = time.perf_counter()
    c.request("GET", "/api/v1/namespaces/default/pods?watch=true&timeoutSeconds=60", headers=H)
    r = c.getresponse()
    got = 0
    while got < n:
        line = r.readline()
        if json.loads(line)["type"] == "ADDED":
            got += 1
    dt = time.perf_counter() - t0
    c.close()
    return n / dt


def watch_live(port, tls, workdir, n, rv):
    """Events/s delivered to a watcher while 4 threads patch n pods."""
    c = conn(port, tls, workdir)
    c.request("GET", f"/api/v1/namespaces/default/pods?watch=true&resourceVersion={rv}&timeoutSeconds=120",
              headers=H)
    r = c.getresponse()
    done = threading.Event()

    def patcher(k, threads=4):
        pc = conn(port, tls, workdir)
        ph = dict(H, **{"Content-Type": "application/strategic-merge-patch+json"})
        for i in range(k, n, threads):
            pc.request("PATCH", f"/api/v1/namespaces/default/pods/pod-{i}",
                       json.dumps({"metadata": {"annotations": {"pacific.io/allocated": "true"}}}), ph)
            resp = pc.getresponse()
            resp.read()
        pc.close()
    t0 = time.perf_counter()
    ts = [threading.Thread(target=patcher, args=(k,)) for k in range(4)]
    [t.start() for t in ts]
    got = 0
    while got < n:
        if json.loads(r.readline())["type"] == "MODIFIED":
            got += 1
    dt = time.perf_counter() - t0
    [t.join() for t in ts]
    done.set()
    c.close()
    return n / dt


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def static_baseline(body: bytes, n: int) -> float:
    class H_(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H_)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    c = http.client.HTTPConnection("127.0.0.1", srv.server_address[1])

    def get():
        c.request("GET", "/")
        return c.getresponse().read()
    rate, _ = list_rate(get, n)
    srv.shutdown()
    srv.server_close()
    return rate


def client_list_rate(port, workdir, tls, n):
    from kubernetes import client
    cfg = client.Configuration()
    cfg.host = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    cfg.api_key = {"authorization": TOKEN}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    if tls:
        cfg.ssl_ca_cert = os.path.join(workdir, "tls", "ca.crt")
    with client.ApiClient(cfg) as api:
        v1 = client.CoreV1Api(api)
        t0 = time.perf_counter()
        items = v1.list_namespaced_pod("default").items
        dt = time.perf_counter() - t0
        assert len(items) == n
        t0 = time.perf_counter()
        resp = v1.list_namespaced_pod("default", _preload_content=False)
        raw_items = json.loads(resp.data)["items"]
        dt_raw = time.perf_counter() - t0
        assert len(raw_items) == n
    return n / dt, n / dt_raw


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--only", choices=["crd"], help="run only the custom resource measurement")
    args = ap.parse_args()
    n = args.pods
    print(f"machine: {os.cpu_count()} cpus, python {sys.version.split()[0]}; {n} pods")
    with tempfile.TemporaryDirectory(prefix="bench-apiserver-") as workdir:
        p, port = start(workdir, False)
        try:
            val, free = crd_rates(port, n)
            print(f"[crd] create IP objects: {val:,.0f}/s validated against ip.yaml's schema; "
                  f"baseline {free:,.0f}/s with a preserve-unknown-fields schema ({val / free:.2f}x)")
        finally:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(10)
        if args.only == "crd":
            return
        for tls in (False, True):
            p, port = start(workdir, tls)
            try:
                label = "https" if tls else "http"
                rss0 = rss_mib(p.pid)
                cr = create_all(port, tls, workdir, n)
                rss = rss_mib(p.pid)
                c = conn(port, tls, workdir)

                def get():
                    c.request("GET", "/api/v1/namespaces/default/pods", headers=H)
                    return c.getresponse().read()
                lr, size = list_rate(get, n)
                paged = {pg: paged_list_rate(c, n, pg) for pg in (500, 5000)}
                sel_t0 = time.perf_counter()
                c.request("GET", "/api/v1/pods?labelSelector=app%3Dapp-7&fieldSelector=spec.nodeName%3Dnode2",
                          headers=H)
                sel_n = len(json.loads(c.getresponse().read())["items"])
                sel_ms = (time.perf_counter() - sel_t0) * 1000
                body = get()
                c.close()
                rv = json.loads(body)["metadata"]["resourceVersion"]
                wi = watch_initial(port, tls, workdir, n)
                wl = watch_live(port, tls, workdir, n, rv)
                cl, cl_raw = client_list_rate(port, workdir, tls, n)
                rss_end = rss_mib(p.pid)
                print(f"[{label}] create {cr:,.0f} pods/s (4 client threads)")
                print(f"[{label}] LIST {n} pods: {lr:,.0f} objects/s ({size / 1e6:.1f} MB, raw HTTP + json.loads)")
                print(f"[{label}] LIST in pages (limit/continue): " + ", ".join(
                    f"{pg}/page {r:,.0f} objects/s ({r / lr:.2f}x unpaged)" for pg, r in paged.items()))
                print(f"[{label}] LIST via official client: {cl:,.0f} objects/s as models, "
                      f"{cl_raw:,.0f} objects/s with _preload_content=False")
                print(f"[{label}] LIST with label+field selector over all namespaces: {sel_n} items in {sel_ms:.0f} ms")
                print(f"[{label}] WATCH initial replay: {wi:,.0f} events/s; live MODIFIED while patching: "
                      f"{wl:,.0f} events/s (end to end, 4 patch threads)")
                print(f"[{label}] emulator RSS: {rss0:.0f} MiB empty, {rss:.0f} MiB at {n} pods, "
                      f"{rss_end:.0f} MiB after the {n}-event patch round (history window holds old versions)")
                if not tls:
                    base = static_baseline(body, n)
                    print(f"[baseline] same LIST bytes from a static ThreadingHTTPServer: {base:,.0f} objects/s")
            finally:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(10)


if __name__ == "__main__":
    main()
