"""pacific.node.loop: when the node daemon's background loops converge."""
from __future__ import annotations

import threading
import time

import pytest

from pacific.node import loop as loopmod
from pacific.node.feature import NodeFeature
from pacific.node.loop import Loop
from pacific.node.podloop import PodLoop
from pacific.node.registry import FEATURES


class Counting(Loop):
    name = "counting"

    def __init__(self, fail_first: int = 0, gate: threading.Event | None = None):
        super().__init__()
        self.passes, self.failures, self.times = 0, [], []
        self.fail_first, self.gate = fail_first, gate
        self.changed = threading.Condition()

    def converge(self) -> None:
        if self.gate is not None:
            self.gate.wait(5)
        with self.changed:
            self.times.append(time.monotonic())
            self.passes += 1
            self.changed.notify_all()
        if self.passes <= self.fail_first:
            raise OSError(f"pass {self.passes} fails")

    def failed(self, error: Exception) -> None:
        self.failures.append(str(error))

    def wait_passes(self, n: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.passes >= n, 5), (self.passes, n)


def test_a_pass_at_start_and_one_after_each_kick_and_none_after_stop():
    loop = Counting().start()
    loop.wait_passes(1)
    loop.kick()
    loop.wait_passes(2)
    loop.stop()
    assert loop.passes == 2 and not loop._thread.is_alive()


def test_kicks_during_a_pass_make_one_more_pass_not_one_each():
    gate = threading.Event()
    loop = Counting(gate=gate).start()
    for _ in range(5):
        loop.kick()
    gate.set()
    loop.wait_passes(2)
    loop.stop()
    assert loop.passes == 2


def test_repair_passes_come_without_kicks():
    loop = Counting()
    loop.repair = 0.05
    loop.start()
    loop.wait_passes(3)
    loop.stop()


def test_a_failed_pass_is_retried_after_a_doubling_back_off(monkeypatch):
    monkeypatch.setattr(loopmod, "BACKOFF_MIN", 0.2)
    loop = Counting(fail_first=2).start()
    loop.wait_passes(3)
    loop.stop()
    assert loop.failures == ["pass 1 fails", "pass 2 fails"]
    assert loop.times[1] - loop.times[0] >= 0.2
    assert loop.times[2] - loop.times[1] >= 0.4      # doubled


def test_a_kick_retries_a_failed_pass_at_once_and_repair_caps_the_back_off(monkeypatch):
    monkeypatch.setattr(loopmod, "BACKOFF_MIN", 30.0)
    loop = Counting(fail_first=1).start()
    loop.wait_passes(1)
    loop.kick()                                 # what it waited for may have come
    loop.wait_passes(2)
    loop.stop()
    capped = Counting(fail_first=1)
    capped.repair = 0.05                        # never waits longer than its repair
    capped.start()
    capped.wait_passes(2)
    capped.stop()


def test_an_unexpected_error_is_logged_with_its_traceback_and_the_loop_goes_on(caplog):
    class Buggy(Counting):
        def converge(self):
            super().converge()
            if self.passes == 1:
                raise KeyError("bug")
    loop = Buggy().start()
    loop.wait_passes(2)                          # retried after the back-off
    loop.stop()
    record = next(r for r in caplog.records if "counting not converged" in r.getMessage())
    assert record.exc_info is not None


@pytest.mark.parametrize("cls", FEATURES, ids=lambda cls: cls.name)
def test_every_node_feature_is_a_loop_and_only_the_pod_loop_runs_its_own_threads(cls):
    """The background parts share the Loop's thread and its rules; the pod
    loop's work is a queue of pod keys with its own workers."""
    assert issubclass(cls, NodeFeature) and issubclass(cls, Loop)
    assert ("start" in vars(cls)) == (cls is PodLoop) and "_loop" not in vars(cls)
