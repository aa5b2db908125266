"""/metrics, /healthz and /readyz of the real daemons in a full 1-node sandbox
(kube-apiserver, two controllers, pacific-node): scraped before and after a pod
is added, refused and deleted, and checked to move by exactly that much."""
import os
import time

import probes
import pytest

from pacific import metrics as m
from pacific import names
from pacific.sandbox import cnipods as sandboxpods
from pacific.sandbox import controllers as controller_launch
from pacific.kube import client
from pacific.kube import resources as r

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
NS = "metrics"


@pytest.fixture(scope="module")
def stack(sandbox_factory):
    sb = sandbox_factory(nodes=1, services=None)
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    holder = controller_launch.wait_for_leader(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    urls = {i: controller_launch.metrics_url(sb, i) for i in (1, 2)}
    assert all(urls.values()), urls
    leader = next(i for i in urls if holder == f"{sb.name}-{controller_launch.controller_tag(i)}")
    standby = 3 - leader
    return sb, api, urls[leader], urls[standby]


def eventually(fn, timeout: float = 10.0):
    """fn() until it returns without AssertionError (counters of another process
    are bumped a moment after the API write a test waits for)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_health_says_who_leads(stack):
    sb, _, leader, standby = stack
    status, body = m.get(leader + m.PATH_READYZ)
    assert status == 200 and "leader" in body and "informers synced" in body, body
    status, body = m.get(standby + m.PATH_READYZ)
    assert status == 200 and "standby" in body, body
    for url in (leader, standby):
        assert m.get(url + m.PATH_HEALTHZ)[0] == 200
    assert m.value(m.scrape(leader), "pacific_controller_is_leader") == 1
    assert m.value(m.scrape(standby), "pacific_controller_is_leader") == 0
    # only the leader has queues and IPAM
    assert m.total(m.scrape(standby), "pacific_ipam_used_addresses") == 0
    assert m.value(m.scrape(leader), "pacific_ipam_used_addresses",
                   subnet=names.JOIN_SWITCH) == 2          # node1's ovn0 and service source

    status, body = probes.node_get(sb, m.PATH_READYZ)
    assert status == 200 and "ovn-controller connected" in body, body
    assert probes.node_get(sb, m.PATH_HEALTHZ)[0] == 200
    # ovn0 converges once the controller annotated the Node, which may come a
    # moment after the daemon is ready: the gauge follows within seconds
    deadline = time.monotonic() + 20
    while m.value(probes.node_metrics(sb), "pacific_node_mgmt_port_ready") != 1:
        assert time.monotonic() < deadline, "ovn0 never reported ready"
        time.sleep(0.1)


def test_the_leader_times_nb_changes_to_northd_and_every_chassis(stack):
    """The sandbox's controllers probe every 2 s (--lag-probe-interval)."""
    _, _, leader, standby = stack

    def probed():
        c = m.scrape(leader)
        assert m.value(c, "pacific_ovn_nb_to_chassis_seconds_count") >= 2
        return c
    c = eventually(probed, 15)
    assert m.value(c, "pacific_ovn_nb_to_sb_seconds_count") >= 2
    # a chassis applies a change within a second here (nothing else to do)
    assert m.value(c, "pacific_ovn_nb_to_chassis_seconds_bucket", le="1.0") >= 1
    assert m.value(c, "pacific_ovn_lag_probe_timeouts_total", stage="chassis") == 0
    assert m.value(m.scrape(standby), "pacific_ovn_nb_to_chassis_seconds_count") == 0


def test_a_pod_moves_every_counter_by_one(stack):
    sb, api, leader, _ = stack
    sub = names.DEFAULT_SUBNET
    c0, n0 = m.scrape(leader), probes.node_metrics(sb)
    sandboxpods.add_pod(sb, NS, "p1", "node1", api=api)

    n1 = probes.node_metrics(sb)
    assert m.value(n1, "pacific_cni_requests_total", command="ADD", result="0") == \
        m.value(n0, "pacific_cni_requests_total", command="ADD", result="0") + 1
    assert m.value(n1, "pacific_cni_request_duration_seconds_count", command="ADD") == \
        m.value(n0, "pacific_cni_request_duration_seconds_count", command="ADD") + 1
    assert m.value(n1, "pacific_node_ovn_installed_wait_seconds_count", result="installed") == \
        m.value(n0, "pacific_node_ovn_installed_wait_seconds_count", result="installed") + 1
    assert m.value(n1, "pacific_node_pods_attached") == \
        m.value(n0, "pacific_node_pods_attached") + 1

    def controller_moved():
        c1 = m.scrape(leader)
        assert m.value(c1, "pacific_ipam_used_addresses", subnet=sub) == \
            m.value(c0, "pacific_ipam_used_addresses", subnet=sub) + 1
        assert m.value(c1, "pacific_ipam_available_addresses", subnet=sub) == \
            m.value(c0, "pacific_ipam_available_addresses", subnet=sub) - 1
        assert m.value(c1, "pacific_controller_pods_allocated_total", subnet=sub) == \
            m.value(c0, "pacific_controller_pods_allocated_total", subnet=sub) + 1
        assert m.value(c1, "pacific_controller_reconciles_total", kind="pod") > \
            m.value(c0, "pacific_controller_reconciles_total", kind="pod")
        assert m.value(c1, "pacific_controller_reconcile_errors_total", kind="pod") == \
            m.value(c0, "pacific_controller_reconcile_errors_total", kind="pod")
        assert m.value(c1, "pacific_controller_nb_transactions_total") > \
            m.value(c0, "pacific_controller_nb_transactions_total")
        assert m.value(c1, "pacific_controller_nb_batch_size_count") == \
            m.value(c1, "pacific_controller_nb_transactions_total")
        return c1
    c1 = eventually(controller_moved)

    assert sandboxpods.delete_pod(sb, NS, "p1", api=api)
    n2 = probes.node_metrics(sb)
    assert m.value(n2, "pacific_cni_requests_total", command="DEL", result="0") >= \
        m.value(n1, "pacific_cni_requests_total", command="DEL", result="0") + 1
    assert m.value(n2, "pacific_node_pods_attached") == m.value(n0, "pacific_node_pods_attached")
    eventually(lambda: _assert_equal(
        m.value(m.scrape(leader), "pacific_ipam_used_addresses", subnet=sub),
        m.value(c1, "pacific_ipam_used_addresses", subnet=sub) - 1))


def _assert_equal(a, b):
    assert a == b, (a, b)


def test_a_refused_pod_is_counted_once_by_reason(stack):
    sb, api, leader, _ = stack
    before = m.total(m.scrape(leader), "pacific_controller_allocation_refusals_total")
    r.create(api, r.PODS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "outside", "namespace": NS,
                     "annotations": {names.ANN_IP_ADDRESS: "192.0.2.9"}},
        "spec": {"nodeName": "node1", "containers": [{"name": "app", "image": "pause"}]}},
        namespace=NS)
    try:
        def refused():
            samples = m.scrape(leader)
            assert m.total(samples, "pacific_controller_allocation_refusals_total") == before + 1
            return {dict(k[1])["reason"] for k, v in samples.items()
                    if k[0] == "pacific_controller_allocation_refusals_total" and v}
        reasons = eventually(refused)
        assert "AddressOutOfRange" in reasons, reasons
    finally:
        r.delete(api, r.PODS, "outside", NS)


def test_the_standby_reports_leading_after_a_failover(stack):
    """Last in this module: it stops the leader.  SIGTERM releases the Lease, the
    standby's next term makes it report leader, with IPAM and queues."""
    sb, _, leader, standby = stack
    tag = next(controller_launch.controller_tag(i) for i in (1, 2)
               if controller_launch.metrics_url(sb, i) == leader)
    sb.stop(tag)

    def took_over():
        status, body = m.get(standby + m.PATH_READYZ)
        assert status == 200 and "leader, OVN Northbound connected" in body, body
        samples = m.scrape(standby)
        assert m.value(samples, "pacific_controller_is_leader") == 1
        assert m.value(samples, "pacific_ipam_used_addresses",     # ovn0, service source
                       subnet=names.JOIN_SWITCH) == 2
    eventually(took_over, timeout=20)
