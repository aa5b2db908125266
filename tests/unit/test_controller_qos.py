"""Pod bandwidth requests -> the controller's decision (controller/qos.py):
parsing, precedence, namespace defaults, refusals that keep the previous limit;
the reconciler on the fake API (controller_fakes.py)."""
from __future__ import annotations

import pytest

from controller_fakes import drain, make_controller
from pacific import contract, names
from pacific.controller.qos import QosValueError, decide, parse_rate
from pacific.kube import resources as r

IN, OUT = names.ANN_INGRESS_RATE, names.ANN_EGRESS_RATE
K_IN, K_OUT = names.ANN_K8S_INGRESS_BANDWIDTH, names.ANN_K8S_EGRESS_BANDWIDTH


@pytest.mark.parametrize("key,value,kbps", [
    (IN, "10", 10_000), (IN, "0.5", 500), (OUT, " 100 ", 100_000),
    (K_IN, "10M", 10_000), (K_IN, "1G", 1_000_000), (K_OUT, "500k", 500),
    (K_OUT, "1Mi", 1048), (K_IN, "2500000", 2_500),
])
def test_rates_parse_to_kbit(key, value, kbps):
    assert parse_rate(key, value) == kbps


@pytest.mark.parametrize("key,value,why", [
    (IN, "0", "positive"), (IN, "-5", "positive"), (IN, "ten", "not a number"),
    (IN, "nan", "not a number"), (IN, "inf", "not a number"), (IN, "1e9", "above"),
    (OUT, "", "not a number"), (K_IN, "10Mbit", "quantity"), (K_OUT, "-1M", "quantity"),
    (K_IN, "100T", "above"),
])
def test_bad_rates_are_refused_with_key_and_value(key, value, why):
    with pytest.raises(QosValueError) as e:
        parse_rate(key, value)
    assert key in str(e.value) and repr(value) in str(e.value) and why in str(e.value)


def test_directions_are_independent_and_never_swapped():
    want, notes, errs = decide({IN: "1"}, {})
    assert want == {"ingress": 1000, "egress": None} and not notes and not errs
    want, _, _ = decide({OUT: "7"}, {})
    assert want == {"ingress": None, "egress": 7000}


def test_pacific_wins_over_kubernetes_and_says_so():
    want, notes, errs = decide({IN: "20", K_IN: "10M"}, {})
    assert want["ingress"] == 20_000 and not errs
    assert len(notes) == 1 and IN in notes[0] and K_IN in notes[0]


def test_namespace_sets_the_default_for_pods_that_set_none():
    want, _, _ = decide({OUT: "3"}, {IN: "40", OUT: "9"})
    assert want == {"ingress": 40_000, "egress": 3000}
    want, _, _ = decide({}, {K_OUT: "5M"})
    assert want == {"ingress": None, "egress": 5000}


def test_an_invalid_winner_is_refused_and_its_direction_left_out():
    want, _, errs = decide({IN: "fast", OUT: "5"}, {IN: "10"})
    assert "ingress" not in want and want["egress"] == 5000
    assert len(errs) == 1 and "'fast'" in errs[0]


# --- the reconciler ----------------------------------------------------------------

def pod_body(name, ann=None, ns="default"):
    return {"metadata": {"name": name, "namespace": ns, "annotations": dict(ann or {})},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "pause"}]}}


def ann(ctl, name, ns="default"):
    return r.get(ctl.kube, r.PODS, name, ns)["metadata"].get("annotations") or {}


def qos(ctl, name, ns="default"):
    return contract.own_qos(r.get(ctl.kube, r.PODS, name, ns))


def reasons(ctl, name):
    return [e["reason"] for e in ctl.kube.of(r.EVENTS) if e["involvedObject"]["name"] == name]


@pytest.fixture
def ctl():
    c = make_controller()
    drain(c)
    return c


def test_a_pod_gets_its_decision_and_changes_apply_then_removal_unlimits(ctl):
    ctl.kube.add(r.PODS, pod_body("web", {IN: "10", OUT: "20"}), "default")
    drain(ctl)
    q = qos(ctl, "web")
    assert (q.ingress_kbps, q.egress_kbps) == (10_000, 20_000)
    assert q.uid == r.get(ctl.kube, r.PODS, "web", "default")["metadata"]["uid"]
    r.patch_merge(ctl.kube, r.PODS, "web", {"metadata": {"annotations": {IN: "50"}}}, "default")
    drain(ctl)
    assert qos(ctl, "web").ingress_kbps == 50_000
    r.patch_merge(ctl.kube, r.PODS, "web", {"metadata": {"annotations": {IN: None, OUT: None}}},
                  "default")
    drain(ctl)
    assert names.ANN_QOS not in ann(ctl, "web")


def test_a_bad_value_keeps_the_previous_limit_with_an_event_and_error(ctl):
    ctl.kube.add(r.PODS, pod_body("web", {IN: "10"}), "default")
    drain(ctl)
    r.patch_merge(ctl.kube, r.PODS, "web", {"metadata": {"annotations": {IN: "-3"}}}, "default")
    drain(ctl)
    assert qos(ctl, "web").ingress_kbps == 10_000
    assert "'-3'" in ann(ctl, "web")[names.ANN_QOS_ERROR]
    assert "InvalidBandwidth" in reasons(ctl, "web")
    r.patch_merge(ctl.kube, r.PODS, "web", {"metadata": {"annotations": {IN: "30"}}}, "default")
    drain(ctl)
    assert qos(ctl, "web").ingress_kbps == 30_000
    assert names.ANN_QOS_ERROR not in ann(ctl, "web")


def test_a_namespace_default_reaches_its_running_pods(ctl):
    ctl.kube.add(r.PODS, pod_body("a"), "default")
    ctl.kube.add(r.PODS, pod_body("b", {OUT: "1"}), "default")
    drain(ctl)
    assert qos(ctl, "a") is None
    r.patch_merge(ctl.kube, r.NAMESPACES, "default",
                  {"metadata": {"annotations": {OUT: "8", K_IN: "2M"}}})
    drain(ctl)
    assert (qos(ctl, "a").ingress_kbps, qos(ctl, "a").egress_kbps) == (2000, 8000)
    assert (qos(ctl, "b").ingress_kbps, qos(ctl, "b").egress_kbps) == (2000, 1000)


def test_both_kinds_set_gives_an_event(ctl):
    ctl.kube.add(r.PODS, pod_body("both", {IN: "5", K_IN: "10M"}), "default")
    drain(ctl)
    assert qos(ctl, "both").ingress_kbps == 5000
    assert "BandwidthAnnotationOverridden" in reasons(ctl, "both")


def test_a_copied_decision_is_not_the_pods_own(ctl):
    ctl.kube.add(r.PODS, pod_body("fast", {IN: "900"}), "default")
    drain(ctl)
    stolen = ann(ctl, "fast")[names.ANN_QOS]
    ctl.kube.add(r.PODS, pod_body("copy", {names.ANN_QOS: stolen}), "default")
    drain(ctl)
    assert names.ANN_QOS not in ann(ctl, "copy")    # no request: no limit, the copy removed
