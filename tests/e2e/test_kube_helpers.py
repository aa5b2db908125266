"""pacific.kube against a real kube-apiserver: dict-level calls, CRDs,
informer (including a cut connection), leader election (take-over and release)."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import pytest
from waiting import wait_until

from pacific import names
from pacific.kube import client, errors, resources as r
from pacific.kube.crds import install_crds
from pacific.kube import informer as informer_mod
from pacific.kube.informer import Informer
from pacific.kube.leader import LeaderElector

from kube_fixtures import COMPACTION_INTERVAL, ApiServerProcess, CuttableProxy, api_client

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)


@pytest.fixture(scope="module")
def server():
    srv = ApiServerProcess()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def api(server):
    c = client.load(server.kubeconfig)      # the admin kubeconfig of the control plane
    yield c
    c.close()


@pytest.fixture
def proxy(server):
    p = CuttableProxy(server.port)
    yield p
    p.close()


def pod(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def uniq(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_dict_calls_and_error_mapping(api):
    name = uniq("p")
    created = r.create(api, r.PODS, pod(name, app="x"))
    assert created["metadata"]["name"] == name and created["kind"] == "Pod"
    with pytest.raises(errors.AlreadyExists):
        r.create(api, r.PODS, pod(name))
    assert r.get(api, r.PODS, name, "default")["metadata"]["uid"] == created["metadata"]["uid"]
    assert r.get(api, r.PODS, "no-such-pod", "default") is None

    items, rv = r.list_(api, r.PODS, "default", label_selector="app=x")
    assert rv and name in {i["metadata"]["name"] for i in items}
    assert all(i["kind"] == "Pod" and i["apiVersion"] == "v1" for i in items)

    patched = r.patch_merge(api, r.PODS, name,
                            {"metadata": {"annotations": {names.ANN_MIRROR: "true"}}},
                            "default")
    assert patched["metadata"]["annotations"][names.ANN_MIRROR] == "true"
    removed = r.patch_merge(api, r.PODS, name,
                            {"metadata": {"annotations": {names.ANN_MIRROR: None}}}, "default")
    assert names.ANN_MIRROR not in (removed["metadata"].get("annotations") or {})

    stale = created
    stale["metadata"]["labels"] = {"app": "y"}
    with pytest.raises(errors.Conflict):
        r.replace(api, r.PODS, stale)

    ev1 = r.create_event(api, patched, "AddressInUse", "10.16.0.5 is held by ns/other")
    ev2 = r.create_event(api, patched, "AddressInUse", "10.16.0.5 is held by ns/other")
    assert ev1 and ev2 and ev2["count"] == 2
    assert ev2["involvedObject"]["name"] == name

    assert r.delete(api, r.PODS, name, "default") is True
    assert r.delete(api, r.PODS, name, "default") is False


def test_unauthenticated_is_an_api_error(server):
    with pytest.raises(errors.ApiError) as e:
        r.get(api_client(server.url, token="not-a-token", ca=server.ca), r.PODS, "x", "default")
    assert e.value.status == 401


def test_connection_failure_is_unavailable():
    dead = api_client("https://127.0.0.1:1", None)
    with pytest.raises(errors.Unavailable):
        r.get(dead, r.PODS, "x", "default")


def test_crds_install_idempotent_and_usable(api):
    install_crds(api)
    install_crds(api)
    sname = uniq("blue")
    r.create(api, r.SUBNETS, {"metadata": {"name": sname},
                              "spec": {"cidrBlock": "10.77.0.0/16", "excludeIps": ["10.77.0.2"],
                                       "namespaces": ["blue"]}})
    st = r.patch_merge(api, r.SUBNETS, sname,
                       {"status": {"usedIPs": 1, "availableIPs": 65531,
                                   "conditions": [{"type": "Ready", "status": "True"}]}},
                       subresource="status")
    assert st["status"]["usedIPs"] == 1
    ipname = uniq("web-0.default")
    r.create(api, r.IPS, {"metadata": {"name": ipname},
                          "spec": {"pod": "web-0", "namespace": "default", "subnet": sname,
                                   "ipAddress": "10.77.0.3", "macAddress": "0a:58:0a:4d:00:03",
                                   "nodeName": "node1", "ownerKind": "Pod"}})
    items, _ = r.list_(api, r.IPS)
    assert any(i["metadata"]["name"] == ipname and i["spec"]["ipAddress"] == "10.77.0.3"
               for i in items)
    assert r.delete(api, r.IPS, ipname) and r.delete(api, r.SUBNETS, sname)


def test_informer_events_cache_and_wait_for(api):
    seen: list[tuple[str, str]] = []
    inf = Informer(api, r.PODS, namespace="default", label_selector="suite=informer",
                   on_add=lambda o: seen.append(("add", o["metadata"]["name"])),
                   on_update=lambda a, b: seen.append(("update", b["metadata"]["name"])),
                   on_delete=lambda o: seen.append(("delete", o["metadata"]["name"])))
    pre = uniq("pre")
    r.create(api, r.PODS, pod(pre, suite="informer"))
    inf.start()
    try:
        assert inf.wait_synced(10)
        assert inf.get(f"default/{pre}") is not None
        name = uniq("live")
        key = f"default/{name}"
        r.create(api, r.PODS, pod(name, suite="informer"))
        r.create(api, r.PODS, pod(uniq("other"), suite="not-me"))

        def annotate():
            time.sleep(0.2)
            r.patch_merge(api, r.PODS, name,
                          {"metadata": {"annotations": {names.ANN_MIRROR: "true"}}}, "default")
        threading.Thread(target=annotate).start()
        got = inf.wait_for(key, lambda p: (p["metadata"].get("annotations") or {})
                           .get(names.ANN_MIRROR) == "true", timeout=10)
        assert got is not None
        assert inf.wait_for(key, lambda p: False, timeout=0.2) is None
        r.delete(api, r.PODS, name, "default")
        assert inf.wait_for_absent(key, 10)
        assert {k for k in inf.keys()} == {f"default/{pre}"}
        assert ("add", pre) in seen and ("add", name) in seen
        assert ("update", name) in seen and ("delete", name) in seen
        assert not any(n.startswith("other") for _, n in seen)
    finally:
        inf.stop()
        r.delete(api, r.PODS, pre, "default")
    assert not inf._thread.is_alive()


@pytest.mark.parametrize("missed", [1, 50], ids=["re-watch", "410-relist"])
def test_informer_recovers_after_connection_loss(server, api, proxy, missed, monkeypatch):
    """Changes made while the informer is cut off all arrive: by re-watching from
    its resourceVersion, or (when more than the server's history happened) by
    re-listing and reporting the difference."""
    monkeypatch.setattr(informer_mod, "BACKOFF_MAX", 0.5)   # keep the test short
    via_proxy = api_client(proxy.url, server.token, server.ca)
    deleted: list[str] = []
    updated: list[str] = []
    inf = Informer(via_proxy, r.CONFIGMAPS, namespace="default",
                   label_selector="suite=cut",
                   on_update=lambda old, new: updated.append(new["data"]["k"]),
                   on_delete=lambda o: deleted.append(o["metadata"]["name"]))
    a, b, c = uniq("a"), uniq("b"), uniq("c")
    cm = lambda n: {"metadata": {"name": n, "labels": {"suite": "cut"}}, "data": {"k": "v"}}
    r.create(api, r.CONFIGMAPS, cm(a), "default")
    r.create(api, r.CONFIGMAPS, cm(b), "default")
    inf.start()
    try:
        assert inf.wait_synced(10)
        proxy.cut()
        # changes while the informer cannot see the server
        r.create(api, r.CONFIGMAPS, cm(c), "default")
        r.delete(api, r.CONFIGMAPS, b, "default")
        for n in range(missed):
            r.patch_merge(api, r.CONFIGMAPS, a, {"data": {"k": str(n)}}, "default")
        # long enough for etcd to be compacted past the informer's resourceVersion
        # in the 410 case (two compaction ticks)
        time.sleep(0.5 if missed == 1 else 2.5 * COMPACTION_INTERVAL)
        proxy.restore()
        assert inf.wait_for(f"default/{c}", lambda o: True, timeout=20) is not None
        last = str(missed - 1)
        assert inf.wait_for(f"default/{a}", lambda o: o["data"]["k"] == last, timeout=20)
        assert updated[-1] == last
        assert inf.wait_for_absent(f"default/{b}", 20)
        assert deleted == [b]
        assert sorted(inf.keys()) == sorted([f"default/{a}", f"default/{c}"])
    finally:
        inf.stop()
        via_proxy.close()
        for n in (a, c):
            r.delete(api, r.CONFIGMAPS, n, "default")


class Candidate:
    """One leader-election participant in a thread, recording when it led."""

    def __init__(self, api, lease: str, ident: str, **timing):
        self.ident = ident
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.led_from: float | None = None
        self.led_until: float | None = None
        self.elector = LeaderElector(api, lease, "default", ident, self._start, self._stop,
                                     **timing)
        self.thread = threading.Thread(target=self.elector.run, daemon=True)

    def _start(self):
        self.led_from = time.monotonic()
        self.started.set()

    def _stop(self):
        self.led_until = time.monotonic()
        self.stopped.set()


TIMING = dict(lease_duration=2.0, renew_deadline=1.5, retry_period=0.2)


@contextlib.contextmanager
def leader_and_standby(server, api, proxy, retries=0):
    """Candidate "a" leads through `proxy` (so a test can fault its network), "b"
    stands by on a direct connection; both are stopped and joined afterwards."""
    via_proxy = api_client(proxy.url, server.token, server.ca)
    via_proxy.configuration.retries = retries
    lease = uniq("lease")
    a = Candidate(via_proxy, lease, "a", **TIMING)
    b = Candidate(api, lease, "b", **TIMING)
    a.thread.start()
    try:
        assert a.started.wait(10)
        b.thread.start()
        # b has read a's Lease, then stands by for longer than a Lease lasts
        wait_until(lambda: b.elector.observed_holder == "a", 10, what="b reading a's Lease")
        time.sleep(TIMING["lease_duration"] + TIMING["retry_period"])
        assert not b.started.is_set(), "two leaders at once"
        assert r.get(api, r.LEASES, lease, "default")["spec"]["holderIdentity"] == "a"
        yield a, b, lease
    finally:
        a.elector.stop()
        b.elector.stop()
        proxy.close()                        # unblocks a request hung in the proxy
        a.thread.join(10)
        b.thread.join(10)
        via_proxy.close()
    assert not a.thread.is_alive() and not b.thread.is_alive()


def test_leader_takeover_when_leader_is_partitioned(server, api, proxy):
    with leader_and_standby(server, api, proxy) as (a, b, lease):
        cut_at = time.monotonic()
        proxy.cut()                          # a can no longer renew: like a crash
        assert a.stopped.wait(10), "partitioned leader did not step down"
        assert b.started.wait(10), "standby never took over"
        assert b.led_from - cut_at <= TIMING["lease_duration"] + 1.5
        assert a.led_until <= b.led_from, "leadership overlapped"
        spec = r.get(api, r.LEASES, lease, "default")["spec"]
        assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


def test_leader_releases_lease_on_stop(api):
    lease = uniq("lease")
    slow = dict(lease_duration=30.0, renew_deadline=20.0, retry_period=0.2)
    a = Candidate(api, lease, "a", **slow)
    b = Candidate(api, lease, "b", **slow)
    a.thread.start()
    try:
        assert a.started.wait(10)
        b.thread.start()
        wait_until(lambda: b.elector.observed_holder == "a", 10, what="b reading a's Lease")
        assert not b.started.is_set()
        t0 = time.monotonic()
        a.elector.stop()
        assert a.stopped.wait(5)
        assert b.started.wait(5), "standby waited for expiry despite the release"
        assert time.monotonic() - t0 < 5      # far less than the 30 s lease
    finally:
        a.elector.stop()
        b.elector.stop()
        a.thread.join(5)
        b.thread.join(5)


def test_leader_rejects_bad_timing(api):
    with pytest.raises(ValueError, match="lease_duration > renew_deadline"):
        LeaderElector(api, "x", "default", "me", lambda: None, lease_duration=5,
                      renew_deadline=10)


def test_leader_steps_down_in_time_when_the_api_server_stalls(server, api, proxy):
    """When the API server stops answering without closing the connection (a
    black-holed network, a wedged server) the leader steps down within its renew
    deadline, before a standby can take over, however long its HTTP client would
    wait for an answer."""
    # retries=None: the client's defaults, as deployed
    with leader_and_standby(server, api, proxy, retries=None) as (a, b, lease):
        stalled_at = time.monotonic()
        proxy.stall()                        # a's requests now hang
        assert b.started.wait(10), "standby never took over"
        assert a.stopped.wait(TIMING["renew_deadline"] + 1), \
            f"stalled leader still leads {time.monotonic() - stalled_at:.1f}s after the stall"
        assert a.led_until <= b.led_from, (
            f"leadership overlapped by {a.led_until - b.led_from:.1f}s")
        assert a.led_until - stalled_at <= TIMING["renew_deadline"] + 0.5
        assert r.get(api, r.LEASES, lease, "default")["spec"]["holderIdentity"] == "b"
