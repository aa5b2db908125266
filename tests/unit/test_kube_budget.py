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


def test_deferred_items_wait_for_their_namespace_and_only_the_latest_per_key_is_kept():
    clock = Clock()
    b = NamespaceBudget(burst=1, per_second=1.0, clock=clock)
    assert b.take("noisy") and not b.take("noisy")
    b.defer("noisy", ("svc", "a"), "a: first")
    b.defer("noisy", ("svc", "b"), "b")
    b.defer("noisy", ("svc", "a"), "a: latest")           # replaces, goes to the back
    assert b.due() == []                                   # no token yet
    clock.now += 1.0
    assert b.due() == ["b"]                                # one token: the oldest
    clock.now += 1.0
    assert b.due() == ["a: latest"] and b.due() == []
    b.MAX_DEFERRED = 2
    for i in range(3):
        b.defer("noisy", i, i)
    clock.now += 10
    assert b.due() == [1]                                  # the oldest was dropped;
    clock.now += 1                                         # one token a second
    assert b.due() == [2]


def test_a_flood_of_deferred_items_evicts_its_own_not_another_namespace_s():
    """The deferred pool is shared: over it, the namespace holding the most
    loses its oldest, so a tenant's thousand refusals cannot push another
    tenant's one report out."""
    clock = Clock()
    b = NamespaceBudget(burst=1, per_second=1.0, clock=clock)
    b.MAX_DEFERRED = 5
    b.defer("victim", "svc", "the victim's report")
    for i in range(1000):
        b.defer("flood", i, i)
    clock.now += 1
    assert sorted(map(str, b.due())) == ["996", "the victim's report"]
    assert b._n_deferred == 3


def test_controller_events_past_the_budget_are_counted_and_written_later():
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
    # a report made once is late, not lost: written when the namespace may spend
    ctl.write_deferred_events()
    assert len(ctl.kube.of(r.EVENTS)) == 3                 # still over its budget
    ctl.event_budget.burst, ctl.event_budget.rate = 10, 1e9    # (time passing)
    ctl.write_deferred_events()
    assert sorted(e["involvedObject"]["name"] for e in ctl.kube.of(r.EVENTS)) == \
        ["p0", "p1", "p2", "p3", "p4", "q"]
