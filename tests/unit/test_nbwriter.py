"""NBWriter failure handling against a fake NB API: an outage fails the whole
batch at once, a named command fails only its own submission, the queue is
bounded, and nothing commits once the fence (leadership) says no."""
from __future__ import annotations

import contextlib
import threading

import pytest

from pacific.controller.nbwriter import NBWriteError, NBWriter
from pacific.ovn.errors import OvnTimeoutError, OvnTransactionError


class Cmd:
    def __init__(self, name):
        self.name, self.result = name, None

    def __str__(self):
        return f"Cmd({self.name})"


class FakeNB:
    """transaction() collects commands; `fail(names) -> exception or None`
    decides the outcome of each commit."""

    def __init__(self, fail=lambda names: None):
        self.fail = fail
        self.commits: list[list[str]] = []
        self.attempts = 0

    @contextlib.contextmanager
    def transaction(self, check_error=True):
        cmds = []
        txn = type("T", (), {"add": lambda self_, c: cmds.append(c)})()
        yield txn
        self.attempts += 1
        exc = self.fail([c.name for c in cmds])
        if exc is not None:
            raise exc
        for c in cmds:
            c.result = f"ok:{c.name}"
        self.commits.append([c.name for c in cmds])


def submit_all(writer, names):
    return {n: writer.submit([lambda api, n=n: Cmd(n)], what=n) for n in names}


def run_batch(nb, names, **kw):
    """Submit all before the writer starts, so they form one batch."""
    w = NBWriter(nb, max_batch=100, max_delay=0.05, **kw)
    futs = submit_all(w, names)
    w.start()
    out = {}
    for n, f in futs.items():
        try:
            out[n] = f.result(5)
        except NBWriteError as e:
            out[n] = e
    w.stop()
    return out


def test_an_outage_fails_the_whole_batch_in_one_attempt():
    nb = FakeNB(lambda names: OvnTimeoutError("unix:nb", [], "no answer within 60 s"))
    out = run_batch(nb, ["a", "b", "c"])
    assert nb.attempts == 1, "no submission retried alone during an outage"
    assert all(isinstance(e, NBWriteError) and "NB unavailable" in str(e) and n in str(e)
               for n, e in out.items())


def test_a_named_command_fails_only_its_submission_and_the_rest_commit_together():
    def fail(names):
        if "bad" in names:
            return OvnTransactionError("unix:nb", [], "referential integrity", failed_command="Cmd(bad)")
        return None
    nb = FakeNB(fail)
    out = run_batch(nb, ["a", "bad", "c"])
    assert isinstance(out["bad"], NBWriteError) and "referential integrity" in str(out["bad"])
    assert out["a"] == ["ok:a"] and out["c"] == ["ok:c"]
    assert nb.commits == [["a", "c"]]       # one more transaction, together


def test_an_unnamed_refusal_isolates_each_submission():
    nb = FakeNB(lambda names: OvnTransactionError("unix:nb", [], "constraint violation")
                if "bad" in names else None)
    out = run_batch(nb, ["a", "bad", "c"])
    assert isinstance(out["bad"], NBWriteError)
    assert out["a"] == ["ok:a"] and out["c"] == ["ok:c"]
    assert sorted(nb.commits) == [["a"], ["c"]]


def test_the_queue_is_bounded():
    w = NBWriter(FakeNB(), max_pending=3)          # not started: nothing drains
    submit_all(w, ["a", "b", "c"])
    with pytest.raises(NBWriteError, match="queue full"):
        w.submit([lambda api: Cmd("d")], what="d")


def test_nothing_commits_once_the_fence_says_no():
    leading = threading.Event()
    nb = FakeNB()
    out = run_batch(nb, ["a", "b"], fence=leading.is_set)
    assert nb.attempts == 0 and nb.commits == []
    assert all("not the leader" in str(e) for e in out.values())


def test_on_transaction_hears_of_every_transaction_with_its_size_and_outcome():
    heard = []
    nb = FakeNB(lambda names: OvnTransactionError("unix:nb", [], "referential integrity",
                                                  failed_command="Cmd(bad)")
                if "bad" in names else None)
    out = run_batch(nb, ["a", "bad", "c"], on_transaction=lambda n, s, ok: heard.append((n, ok)))
    assert out["a"] == ["ok:a"]
    assert heard == [(3, False), (2, True)] and nb.attempts == 2


def test_wait_gives_a_submissions_results_and_names_it_when_none_come():
    nb = FakeNB()
    w = NBWriter(nb, max_batch=100, max_delay=0.001)
    fut = w.submit([lambda api: Cmd("port")], what="pod port p")
    w.start()
    try:
        assert w.wait(fut, "pod port p") == ["ok:port"]
    finally:
        w.stop()
    stalled = NBWriter(FakeNB())          # never started: nothing commits
    with pytest.raises(NBWriteError, match="pod port q: no answer within 0.05 s"):
        stalled.wait(stalled.submit([lambda api: Cmd("q")], what="pod port q"), "pod port q",
                     timeout=0.05)
