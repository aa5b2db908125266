"""What the metrics cost on the hot paths, against the uninstrumented code in the
same run (the machine is noisy: compare the two columns, not runs).

    .venv/bin/python bench/bench_metrics.py [--n 200000] [--repeat 5]

1. a reconcile wrapped by controller.metrics.timed_reconcile vs the bare call
   (a no-op reconcile: the wrapper's whole cost);
2. one CNI answer recorded by node.metrics.cni_request (counter + histogram);
3. 10,000 pod allocations in an IPAM with the metrics hook vs without;
4. one /metrics scrape of a controller with 100 subnets (the scrape-time IPAM
   and queue gauges) over HTTP on 127.0.0.1, and /readyz.

No daemons are needed.  Figures go to docs/benchmarks.md ("Metrics and health").
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pacific import metrics as m  # noqa: E402
from pacific.controller import metrics as cm  # noqa: E402
from pacific.ipam import IPAM  # noqa: E402
from pacific.kube.workqueue import WorkQueue  # noqa: E402
from pacific.node import metrics as nm  # noqa: E402


def best(fn, repeat: int) -> float:
    """Best-of-`repeat` seconds of fn()."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def per_call(fn, n: int, repeat: int) -> float:
    def loop():
        for i in range(n):
            fn(i)
    return best(loop, repeat) / n


def reconcile_overhead(n: int, repeat: int) -> tuple[float, float]:
    def noop(key):
        return None
    return per_call(noop, n, repeat), per_call(cm.timed_reconcile("pod", noop), n, repeat)


def cni_record(n: int, repeat: int) -> tuple[float, float]:
    def nothing(i):
        return None
    return per_call(nothing, n, repeat), \
        per_call(lambda i: nm.cni_request("ADD", 0, 0.05), n, repeat)


def allocations(repeat: int, count: int = 10_000) -> tuple[float, float]:
    def run(hook):
        def go():
            ipam = IPAM(on_allocated=hook)
            ipam.add_subnet("s", "10.16.0.0/16")
            for i in range(count):
                ipam.allocate("s", f"ns/p{i}")
        return best(go, repeat) / count
    return run(None), run(cm.ipam_allocated)


class _FakeNB:
    remote = "unix:/nonexistent (bench)"

    def is_connected(self):
        return True


class _Feature:
    def __init__(self, name: str):
        self.name, self.queue = name, WorkQueue(name=name)


class _Ctl:
    """The attributes the scrape collector and readiness read from a Controller."""

    def __init__(self, subnets: int):
        self.ipam = IPAM(on_allocated=cm.ipam_allocated)
        for i in range(subnets):
            self.ipam.add_subnet(f"subnet{i}", f"10.{i // 256 + 16}.{i % 256}.0/24")
            for j in range(50):
                self.ipam.allocate(f"subnet{i}", f"ns{i}/p{j}")
        self.features = [_Feature(n) for n in ("subnet", "node", "pod")]
        self.ready = threading.Event()
        self.ready.set()
        self.informers = {}
        self.last_tick = time.monotonic()


def scrape(repeat: int, subnets: int = 100) -> tuple[float, float, int]:
    health = cm.install(cm.ControllerHealth(_FakeNB(), "bench"))
    health.leading(_Ctl(subnets))
    srv = m.MetricsServer(("127.0.0.1", 0), health.liveness, health.readiness).start()
    try:
        body = m.get(srv.url + m.PATH_METRICS)[1]
        t_metrics = best(lambda: m.get(srv.url + m.PATH_METRICS), repeat * 10)
        t_ready = best(lambda: m.get(srv.url + m.PATH_READYZ), repeat * 10)
    finally:
        srv.stop()
        health.not_leading()
    return t_metrics, t_ready, len(body)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=200_000, help="calls per timing")
    p.add_argument("--repeat", type=int, default=5, help="best of this many runs")
    a = p.parse_args()
    print(f"bench_metrics: best of {a.repeat}, {a.n:,} calls per timing")
    base, timed = reconcile_overhead(a.n, a.repeat)
    print(f"1. reconcile call            bare {base * 1e6:6.2f} us   timed_reconcile "
          f"{timed * 1e6:6.2f} us   (+{(timed - base) * 1e6:.2f} us per reconcile)")
    base, rec = cni_record(a.n, a.repeat)
    print(f"2. CNI answer recorded       bare {base * 1e6:6.2f} us   cni_request     "
          f"{rec * 1e6:6.2f} us   (+{(rec - base) * 1e6:.2f} us per request)")
    base, met = allocations(a.repeat)
    print(f"3. pod allocation (10,000)   IPAM {base * 1e6:6.2f} us   with the hook   "
          f"{met * 1e6:6.2f} us   (+{(met - base) * 1e6:.2f} us per allocation)")
    t_metrics, t_ready, size = scrape(a.repeat)
    print(f"4. GET /metrics, 100 subnets {t_metrics * 1e3:6.2f} ms ({size:,} bytes)   "
          f"GET /readyz {t_ready * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
