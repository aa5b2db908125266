"""Chaos under pod churn, small enough for every CI run (bench/bench_chaos.py
runs it with 500 pods and every fault twice): each of the NB leader, the SB
leader, the controller leader, a pacific-node and an ovn-controller is killed
once at a random moment while 24 pods are made and every third deleted; then
no address is held twice, nothing is left over, every live pod talks."""
from __future__ import annotations

import os

import pytest

import chaos
from pacific import names
from pacific.kube import client

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_churn_survives_every_fault(sandbox_factory):
    sb = sandbox_factory(nodes=2, services=None, ha=True)
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    report = chaos.run(sb, api, pods=24, rounds=1, heal=2.0, seed=7)
    assert sorted(n for _, n in report["injected"]) == sorted(
        ["NB leader", "SB leader", "controller leader", "pacific-node", "ovn-controller"])
    result = chaos.check(sb, api, peers=3)
    # every pod was made in the end, through the faults (a refusal is retried
    # as the kubelet would): the churn's own count of attempts proves nothing
    assert report["gave_up"] == 0, report["failed_attempts"]
    assert result["live"] == report["live_expected"]      # every third deleted
    sb.down()
