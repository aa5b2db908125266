"""Regression tests from the control-plane review: behaviours a release must keep
(each one failed before its fix).  Real NB ovsdb-server, API emulator and
pacific-controller process, as test_controller_api.py."""
from __future__ import annotations

import time

import pytest

from controller_fixtures import wait_until
from pacific import names
from pacific.kube import resources as r
from test_controller_api import allocated, ann, cp, events_for, lsp, make_pod  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_running_pod_keeps_its_address_when_its_annotations_are_edited(cp):
    """The pod's network is already plumbed with its address: a later edit of
    the ip/mac/switch annotations must not move the port under it (the port
    security would silently drop the pod's traffic).  It is reported, and the
    annotations are put back to the address in use."""
    make_pod(cp, "run")
    a = allocated(cp, "run")
    ip, mac = a[names.ANN_IP_ADDRESS], a[names.ANN_MAC_ADDRESS]
    want = f"{mac} {ip}"
    other = ip.rsplit(".", 1)[0] + ".200"
    r.patch_merge(cp.kube, r.PODS, "run", {"metadata": {"annotations": {
        names.ANN_IP_ADDRESS: other, names.ANN_MAC_ADDRESS: "0a:00:00:00:02:00"}}}, "default")
    wait_until(lambda: any(e.startswith("AddressImmutable") and ip in e for e in events_for(cp, "run")), 20,
               what="event about the refused change")
    wait_until(lambda: ann(cp, "run").get(names.ANN_IP_ADDRESS) == ip, 20,
               what="annotations restored to the address in use")
    time.sleep(0.5)
    assert lsp(cp, "run.default").addresses == [want]
    assert lsp(cp, "run.default").port_security == [want]
    assert r.get(cp.kube, r.IPS, "run.default")["spec"]["ipAddress"] == ip
    assert ann(cp, "run")[names.ANN_MAC_ADDRESS] == mac
    assert ann(cp, "run")[names.ANN_ALLOCATED] == "true"
