"""pacific.controller.metrics: what is counted, and how (pure logic, no daemons)."""
import pytest
from prometheus_client import REGISTRY

from pacific.controller import metrics as cm
from pacific.controller import model
from pacific.ipam import IPAM
from pacific.ipam import errors as ipam_errors


def sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_timed_reconcile_counts_successes_and_failures():
    calls = []

    def reconcile(key):
        calls.append(key)
        if key == "bad":
            raise RuntimeError("NB down")

    before = (sample("pacific_controller_reconciles_total", kind="node"),
              sample("pacific_controller_reconcile_errors_total", kind="node"),
              sample("pacific_controller_reconcile_duration_seconds_count", kind="node"))
    timed = cm.timed_reconcile("node", reconcile)
    timed("good")
    with pytest.raises(RuntimeError, match="NB down"):     # the work queue still sees it
        timed("bad")
    assert calls == ["good", "bad"]
    assert sample("pacific_controller_reconciles_total", kind="node") == before[0] + 2
    assert sample("pacific_controller_reconcile_errors_total", kind="node") == before[1] + 1
    assert sample("pacific_controller_reconcile_duration_seconds_count", kind="node") == before[2] + 2


def test_every_kind_is_exported_before_its_first_reconcile():
    for kind in cm.KINDS:
        assert REGISTRY.get_sample_value("pacific_controller_reconciles_total", {"kind": kind}) \
            is not None


def test_pods_allocated_counts_new_pod_addresses_only():
    ipam = IPAM(on_allocated=cm.ipam_allocated)
    ipam.add_subnet("blue", "10.9.0.0/24")
    ipam.add_subnet("join", "100.64.0.0/16")
    before = sample("pacific_controller_pods_allocated_total", subnet="blue")
    ipam.allocate("blue", model.object_key("ns", "a"))
    ipam.allocate("blue", model.object_key("ns", "a"))            # idempotent: same address
    ipam.allocate("blue", model.object_key("ns", "b"), ip="10.9.0.50")
    ipam.allocate("join", model.node_owner_key("node1"))       # a node, not a pod
    ipam.restore("blue", model.object_key("ns", "c"), "10.9.0.60")  # start-up rebuild
    assert sample("pacific_controller_pods_allocated_total", subnet="blue") == before + 2
    assert sample("pacific_controller_pods_allocated_total", subnet="join") == 0
    with pytest.raises(ipam_errors.IPAMError):
        ipam.allocate("blue", model.object_key("ns", "d"), ip="10.9.0.50")   # taken
    assert sample("pacific_controller_pods_allocated_total", subnet="blue") == before + 2


def test_refusals_are_counted_by_reason():
    before = {r: sample("pacific_controller_allocation_refusals_total", reason=r)
              for r in ("AddressInUse", "AddressExcluded")}
    cm.refused("AddressInUse")
    cm.refused("AddressInUse")
    assert sample("pacific_controller_allocation_refusals_total", reason="AddressInUse") == \
        before["AddressInUse"] + 2
    assert sample("pacific_controller_allocation_refusals_total", reason="AddressExcluded") == \
        before["AddressExcluded"]


def test_nb_transactions_are_counted_timed_and_failures_counted():
    before = [sample("pacific_controller_nb_transactions_total"),
              sample("pacific_controller_nb_transaction_failures_total")]
    cm.nb_transaction(3, 0.01, False)
    cm.nb_transaction(2, 0.02, True)
    assert sample("pacific_controller_nb_transactions_total") == before[0] + 2
    assert sample("pacific_controller_nb_transaction_failures_total") == before[1] + 1
