"""Kubernetes' own end-to-end tests in `make test`: the four [Conformance]
checks of "Networking Granular Checks: Pods" (pod to pod over HTTP and UDP on
one node and across nodes, node to pod) from v1.20.2's e2e.test, built offline
by hack/build-conformance.sh, against a sandbox of kubelet nodes with tenant
isolation off (Kubernetes' model).  The whole selection, 59 tests, is
`make conformance` (about an hour: docs/conformance.md)."""
from __future__ import annotations

import os
import shutil

import pytest

from pacific.sandbox import conformance
from pacific.sandbox.k8s import bins, kubelet

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
BESIDE_THE_DATAPATH = True     # a private sandbox; nothing here measures time
FOCUS = r"\[sig-network\] Networking Granular Checks: Pods .*\[Conformance\]"


def test_kubernetes_pod_network_conformance_checks_pass(sandbox_factory, tmp_path):
    for b in kubelet.NEEDED:
        if not shutil.which(b):
            pytest.skip(f"{b} missing (make setup installs containerd, runc)")
    if not os.access(os.path.join(conformance.CACHE, "e2e.test"), os.X_OK):
        pytest.skip("e2e.test not built: make test runs hack/build-conformance.sh")
    bins.path("kubelet")
    sb = sandbox_factory(nodes=3, services=None, kubelet=True)
    got = conformance.run_in(sb, str(tmp_path / "report"), focus=FOCUS)
    ran = [g for g in got if g[1] != "skipped"]
    assert len(ran) == 4 and all(s == "passed" for _, s, _ in ran), \
        conformance.table(got, FOCUS) + f"\n(e2e.log in {tmp_path / 'report'})"
