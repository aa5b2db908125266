"""The per-namespace Event budget (pacific/kube/budget.py) and the controller
writing Events through it."""
from __future__ import annotations

from controller_fakes import make_controller
from pacific.kube import resources as r
from pacific.kube.budget import NamespaceBudget


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_namespace_gets_its_burst_then_its_rate_and_others_keep_theirs():
    clock = Clock()
    b = NamespaceBudget(burst=3, per_second=2.0, clock=clock)
    assert [b.take("noisy") for _ in range(5)] == [True, True, True, False, False]
    assert all(b.take("quiet") for _ in range(3))       # its own budget, untouched
    clock.now += 0.5                                     # one token back
    assert [b.take("noisy") for _ in range(2)] == [True, False]
    clock.now += 60                                      # refilled up to the burst, no more
    assert [b.take("noisy") for _ in range(4)] == [True, True, True, False]
    assert b.take_suppressed() == {"noisy": 4}
    assert b.take_suppressed() == {}


def test_rate_zero_is_no_limit():
    b = NamespaceBudget(burst=1, per_second=0)
    assert all(b.take("ns") for _ in range(1000)) and b.take_suppressed() == {}


def test_full_buckets_are_forgotten_when_too_many_namespaces_are_tracked():
    clock = Clock()
    b = NamespaceBudget(burst=1, per_second=1.0, clock=clock)
    b.MAX_TRACKED = 10
    for i in range(10):
        b.take(f"ns{i}")
    clock.now += 5                                       # all refilled
    b.take("x")
    b.take("x")                                          # over: triggers the clean-up
    assert set(b._tokens) == {"x"}


def test_controller_events_past_the_budget_are_counted_not_written():
    ctl = make_controller(event_burst=2, event_rate=0.001)
    pods = [{"kind": "Pod", "apiVersion": "v1",
             "metadata": {"name": f"p{i}", "namespace": "noisy", "uid": f"u{i}"}}
            for i in range(5)]
    for p in pods:
        ctl.event(p, "AddressTaken", "taken")
    ctl.event({"kind": "Pod", "apiVersion": "v1",
               "metadata": {"name": "q", "namespace": "quiet", "uid": "uq"}}, "AddressTaken", "x")
    written = [(e["involvedObject"]["namespace"], e["involvedObject"]["name"])
               for e in ctl.kube.of(r.EVENTS)]
    assert written == [("noisy", "p0"), ("noisy", "p1"), ("quiet", "q")]
    assert ctl.event_budget.take_suppressed() == {"noisy": 3}
