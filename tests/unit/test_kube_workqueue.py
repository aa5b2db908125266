"""WorkQueue semantics: de-duplication, no concurrent hand-out, rate limiting."""

import threading
import time

import pytest

from pacific.kube.workqueue import WorkQueue, run_workers


def test_add_deduplicates_waiting_keys():
    q = WorkQueue()
    for k in ("a", "b", "a", "a", "c", "b"):
        q.add(k)
    assert len(q) == 3
    assert [q.get(), q.get(), q.get()] == ["a", "b", "c"]
    assert q.get(timeout=0.01) is None


def test_a_drained_queue_gives_back_the_table_a_burst_grew():
    import sys
    q = WorkQueue()
    small = sys.getsizeof(q._dirty)
    for i in range(20_000):
        q.add(f"ns/p{i}")
    grown = sys.getsizeof(q._dirty)
    got = [q.get() for _ in range(20_000)]
    assert len(set(got)) == 20_000 and q.get(timeout=0.01) is None
    assert grown > 100 * small and sys.getsizeof(q._dirty) == small
    q.add("ns/again")                      # still a working queue
    assert q.get(timeout=1) == "ns/again"


def test_key_added_while_processing_comes_back_only_after_done():
    q = WorkQueue()
    q.add("a")
    assert q.get() == "a"
    q.add("a")                     # change arrived during processing
    assert q.get(timeout=0.05) is None, "key handed out twice at once"
    q.done("a")
    assert q.get(timeout=1) == "a"
    q.done("a")
    assert q.get(timeout=0.01) is None


def test_rate_limited_backoff_grows_and_forget_resets():
    q = WorkQueue(rate_limit_base=0.01, rate_limit_max=0.05)
    delays = [q.add_rate_limited("k") for _ in range(5)]
    assert delays == [0.01, 0.02, 0.04, 0.05, 0.05]
    assert q.num_requeues("k") == 5
    q.forget("k")
    assert q.num_requeues("k") == 0
    assert q.add_rate_limited("k") == 0.01


def test_add_after_delivers_when_due():
    q = WorkQueue()
    t0 = time.monotonic()
    q.add_after("late", 0.15)
    q.add("now")
    assert q.get() == "now"
    assert q.get(timeout=2) == "late"
    assert time.monotonic() - t0 >= 0.14


def test_shutdown_wakes_blocked_getters():
    q = WorkQueue()
    got = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    time.sleep(0.05)
    q.shutdown()
    t.join(2)
    assert not t.is_alive() and got == [None]
    q.add("x")                     # ignored after shutdown
    assert q.get() is None


def test_run_workers_retries_failures_then_forgets():
    q = WorkQueue(rate_limit_base=0.001)
    attempts: dict[str, int] = {}
    finished = threading.Event()

    def handler(key):
        attempts[key] = attempts.get(key, 0) + 1
        if key == "flaky" and attempts[key] < 3:
            raise RuntimeError("transient")
        if attempts.get("flaky", 0) >= 3 and "ok" in attempts:
            finished.set()

    threads = run_workers(q, handler, n=2, name="test")
    q.add("flaky")
    q.add("ok")
    assert finished.wait(5)
    q.shutdown()
    for t in threads:
        t.join(2)
        assert not t.is_alive()
    assert attempts["flaky"] == 3
    assert q.num_requeues("flaky") == 0


def test_workers_never_process_one_key_concurrently():
    q = WorkQueue()
    active: set[str] = set()
    lock = threading.Lock()
    overlaps = []
    count = [0]

    def handler(key):
        with lock:
            if key in active:
                overlaps.append(key)
            active.add(key)
        time.sleep(0.001)
        with lock:
            active.discard(key)
            count[0] += 1

    threads = run_workers(q, handler, n=4)
    for i in range(400):
        q.add(f"k{i % 5}")
        if i % 50 == 0:
            time.sleep(0.002)
    deadline = time.monotonic() + 5
    while q.pending() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    q.shutdown()
    for t in threads:
        t.join(2)
    assert overlaps == []
    assert count[0] >= 5


@pytest.mark.parametrize("n", [0, 1, 3])
def test_pending_counts_waiting_and_delayed(n):
    q = WorkQueue()
    for i in range(n):
        q.add(i)
    q.add_after("later", 10)
    assert q.pending() == n + 1
    q.shutdown()


def test_namespaces_take_turns_so_one_tenant_s_backlog_does_not_stall_another():
    q = WorkQueue()
    for i in range(1000):
        q.add(f"churn/p{i}")
    q.add("victim/p0")
    q.add("cluster-wide")
    got = [q.get(timeout=1) for _ in range(3)]
    assert got == ["churn/p0", "victim/p0", "cluster-wide"]
    # within a namespace, first in first out
    assert [q.get(timeout=1) for _ in range(2)] == ["churn/p1", "churn/p2"]
    assert len(q) == 997
