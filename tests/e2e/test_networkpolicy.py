"""NetworkPolicy in the sandbox with real packets, in the style of Kubernetes'
own NetworkPolicy e2e suite: namespaces x, y, z (one tenant, so isolation does
not hide policy semantics), pods a, b, c in each over two nodes, TCP on ports
80 and 81 and UDP on 80.  Each case applies policies, then checks EVERY ordered
pair and port against the expectation computed by a small model of the case
(allowed(src, dst, proto, port)); the whole stack (controllers, node daemons)."""
from __future__ import annotations

import pytest

from np_fixtures import FIRST, cluster, np_env, run_case  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.mark.parametrize("case", FIRST)
def test_reachability(cluster, case):
    run_case(cluster, case)
