"""Leader election when the API server stops answering without closing the
connection (a black-holed network, a wedged server): the leader must step down
within its renew deadline, before a standby can take over, however long its
HTTP client would wait for an answer."""
from __future__ import annotations

import time

import pytest

from kube_fixtures import ApiServerProcess, CuttableProxy, api_client
from pacific.kube import client, resources as r
from test_kube_helpers import TIMING, Candidate, uniq

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def server():
    srv = ApiServerProcess()
    try:
        yield srv
    finally:
        srv.stop()


def test_leader_steps_down_in_time_when_the_api_server_stalls(server):
    api = client.load(server.kubeconfig)
    proxy = CuttableProxy(server.port)
    via_proxy = api_client(proxy.url)
    via_proxy.configuration.retries = None      # the client's defaults, as deployed
    lease = uniq("lease")
    a = Candidate(via_proxy, lease, "a", **TIMING)
    b = Candidate(api, lease, "b", **TIMING)
    a.thread.start()
    try:
        assert a.started.wait(10)
        b.thread.start()
        time.sleep(1.0)
        assert not b.started.is_set(), "two leaders at once"
        stalled_at = time.monotonic()
        proxy.stall()                        # a's requests now hang
        assert b.started.wait(10), "standby never took over"
        assert a.stopped.wait(TIMING["renew_deadline"] + 1), \
            f"stalled leader still leads {time.monotonic() - stalled_at:.1f}s after the stall"
        assert a.led_until <= b.led_from, (
            f"leadership overlapped by {a.led_until - b.led_from:.1f}s")
        assert a.led_until - stalled_at <= TIMING["renew_deadline"] + 0.5
        assert r.get(api, r.LEASES, lease, "default")["spec"]["holderIdentity"] == "b"
    finally:
        a.elector.stop()
        b.elector.stop()
        proxy.close()                        # unblocks a's hung request
        a.thread.join(10)
        b.thread.join(10)
        via_proxy.close()
        api.close()
    assert not a.thread.is_alive() and not b.thread.is_alive()
