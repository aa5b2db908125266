"""Regression tests from the control-plane review: behaviours a release must keep
(each one failed before its fix).  Real NB ovsdb-server, kube-apiserver and
pacific-controller process, as test_controller_api.py."""
from __future__ import annotations

import pytest

from controller_fixtures import wait_until
from pacific import names
from pacific.kube import resources as r
from controller_fixtures import allocated, cp, events_for, lsp, make_pod, record  # noqa: F401 (fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)


def test_running_pod_keeps_its_address_when_its_annotations_are_edited(cp):
    """The pod's network is already plumbed with its address: a later edit of
    the ip/mac request annotations must not move the port under it (the port
    security would silently drop the pod's traffic).  It is reported, and the
    controller's record keeps naming the address in use."""
    make_pod(cp, "run")
    a = allocated(cp, "run")
    ip, mac = a.ip, a.mac
    want = f"{mac} {ip}"
    other = ip.rsplit(".", 1)[0] + ".200"
    r.patch_merge(cp.kube, r.PODS, "run", {"metadata": {"annotations": {
        names.ANN_IP_ADDRESS: other, names.ANN_MAC_ADDRESS: "0a:00:00:00:02:00"}}}, "default")
    wait_until(lambda: any(e.startswith("AddressImmutable") and ip in e for e in events_for(cp, "run")), 20,
               what="event about the refused change")
    port = names.pod_lsp_name("default", "run")
    assert lsp(cp, port).addresses == [want]
    assert lsp(cp, port).port_security == [want]
    assert r.get(cp.kube, r.IPS, "run.default")["spec"]["ipAddress"] == ip
    assert (record(cp, "run").ip, record(cp, "run").mac) == (ip, mac)
