"""GroupCommit: concurrent callers' commands joined into one transaction (the node
daemon's port changes in a burst of pod ADDs and DELs), each caller answered as
its own transaction would have been."""
from __future__ import annotations

import contextlib
import threading
import time

import pytest

from pacific.ovn.base import GroupCommit
from pacific.ovn.errors import OvnTimeoutError, OvnTransactionError


class FakeApi:
    """transaction() records each committed batch of commands; a command named
    "bad" fails the transaction it is in; `hold` keeps the first one in flight."""

    def __init__(self, fail_with=OvnTransactionError):
        self.batches: list[list[str]] = []
        self.kwargs: list[dict] = []
        self.hold = threading.Event()
        self.hold.set()
        self.in_flight = threading.Event()
        self.fail_with = fail_with

    @contextlib.contextmanager
    def transaction(self, **kwargs):
        cmds: list[str] = []
        yield type("Txn", (), {"add": staticmethod(cmds.append)})
        self.in_flight.set()
        self.hold.wait(5)
        self.kwargs.append(kwargs)
        if "bad" in cmds:
            if self.fail_with is OvnTimeoutError:
                raise OvnTimeoutError("unix:db", cmds, "no answer within 30s")
            raise self.fail_with("unix:db", cmds, "constraint violation")
        self.batches.append(cmds)


def run_all(gc: GroupCommit, names: list[str]) -> dict[str, BaseException | None]:
    out: dict[str, BaseException | None] = {}

    def one(n):
        try:
            gc.run([n])
            out[n] = None
        except Exception as e:   # noqa: BLE001
            out[n] = e
    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    return out, threads


def test_a_lone_caller_commits_at_once_with_the_given_options():
    api = FakeApi()
    gc = GroupCommit(api, wait_vswitchd=False)
    gc.run(["a", "b"])
    assert api.batches == [["a", "b"]] and api.kwargs == [{"wait_vswitchd": False}]


def test_callers_arriving_during_a_commit_share_the_next_transaction():
    api = FakeApi()
    api.hold.clear()
    gc = GroupCommit(api)
    first, t1 = run_all(gc, ["p0"])
    assert api.in_flight.wait(5)                   # p0's transaction is in flight
    rest, ts = run_all(gc, [f"p{i}" for i in range(1, 8)])
    deadline = time.monotonic() + 5
    while len(gc._queued) < 7 and time.monotonic() < deadline:
        time.sleep(0.005)
    api.hold.set()
    for t in t1 + ts:
        t.join(5)
    assert first == {"p0": None} and set(rest.values()) == {None} and len(rest) == 7
    assert api.batches[0] == ["p0"]
    assert sorted(api.batches[1]) == [f"p{i}" for i in range(1, 8)] and len(api.batches) == 2


def test_a_failing_command_fails_only_its_caller():
    api = FakeApi()
    api.hold.clear()
    gc = GroupCommit(api)
    _, t1 = run_all(gc, ["p0"])
    assert api.in_flight.wait(5)
    out, ts = run_all(gc, ["p1", "bad", "p2"])
    deadline = time.monotonic() + 5
    while len(gc._queued) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    api.hold.set()
    for t in t1 + ts:
        t.join(5)
    assert out["p1"] is None and out["p2"] is None
    assert isinstance(out["bad"], OvnTransactionError) and "constraint" in str(out["bad"])
    # the joined attempt failed, then each alone: p1 and p2 committed once each
    assert sorted(c for b in api.batches for c in b) == ["p0", "p1", "p2"]


def test_a_timeout_is_every_callers_answer_without_a_retry_each():
    api = FakeApi(fail_with=OvnTimeoutError)
    api.hold.clear()
    gc = GroupCommit(api)
    _, t1 = run_all(gc, ["p0"])
    assert api.in_flight.wait(5)
    out, ts = run_all(gc, ["bad", "p1"])
    deadline = time.monotonic() + 5
    while len(gc._queued) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    api.hold.set()
    for t in t1 + ts:
        t.join(5)
    assert all(isinstance(out[n], OvnTimeoutError) for n in ("bad", "p1"))
    assert gc.transactions == 2                    # p0's, then the joined one only


def test_an_error_reaches_a_lone_caller_unchanged():
    api = FakeApi()
    gc = GroupCommit(api)
    with pytest.raises(OvnTransactionError, match="constraint"):
        gc.run(["bad"])
    gc.run(["ok"])                                 # not left busy
    assert api.batches == [["ok"]]
