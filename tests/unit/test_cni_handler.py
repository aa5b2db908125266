"""CniHandler's concurrency rules, with a recording plumber and pod cache in
place of netlink/OVS (the plumbing itself is covered by the e2e tests)."""
import threading
import time

import pytest

from pacific import names
from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError
from pacific.contract import PodRecord
from pacific.node.cnihandler import CniHandler
from pacific.node.cnirequest import CniRequest


def record(uid="u1", ns="default", name="p1", ip="10.16.0.5") -> PodRecord:
    return PodRecord(uid=uid, port=names.pod_lsp_name(ns, name), ip=ip,
                     mac="0a:58:0a:10:00:05", cidr="10.16.0.0/16", gateway="10.16.0.1",
                     subnet="ovn-default")


def pod(uid="u1", name="p1", rec=None, **extra) -> dict:
    ann = {names.ANN_ALLOCATION: (rec or record()).to_json(), **extra}
    return {"metadata": {"uid": uid, "namespace": "default", "name": name, "annotations": ann}}


ALLOCATED = pod()


class Pods:
    """Informer stand-in: wait_for blocks `delay` seconds, then answers."""

    def __init__(self, delay=0.0, pod=ALLOCATED):
        self.delay, self.pod = delay, pod

    def wait_for(self, key, predicate, timeout, uid=None):
        time.sleep(self.delay)
        return self.pod if self.pod is not None and predicate(self.pod) else None

    def get(self, key):
        return self.pod


class Plumber:
    def __init__(self, delay):
        self.delay = delay
        self.mu = threading.Lock()
        self.active: list[str] = []
        self.overlaps: list[tuple] = []

    def _run(self, what):
        with self.mu:
            if self.active:
                self.overlaps.append((what, tuple(self.active)))
            self.active.append(what)
        time.sleep(self.delay)
        with self.mu:
            self.active.remove(what)

    def add(self, att):
        self._run("add")
        return {}

    def delete(self, cid, ifname):
        self._run("del")
        return True

    def gc(self, valid):
        self._run("gc")
        return []


def req(command, cid="c1"):
    return CniRequest(command=command, container_id=cid, netns="/run/netns/x",
                      ifname="eth0", pod_namespace="default", pod_name="p1")


def run_all(calls, stagger=0.05):
    threads = []
    for fn in calls:
        threads.append(threading.Thread(target=fn))
        threads[-1].start()
        time.sleep(stagger)
    for t in threads:
        t.join(10)


def test_gc_never_plumbs_alongside_add_or_del():
    plumber = Plumber(delay=0.2)
    h = CniHandler(plumber, Pods(), 1400, lambda: None)
    run_all([lambda: h.add(req("ADD", "c1")), lambda: h.gc(req("GC", "")),
             lambda: h.delete(req("DEL", "c2")), lambda: h.add(req("ADD", "c3"))])
    assert all("gc" not in (what,) + others for what, others in plumber.overlaps), \
        plumber.overlaps
    assert plumber.overlaps  # ADD and DEL of different containers still overlap


def test_add_waiting_for_its_allocation_does_not_hold_gc():
    plumber = Plumber(delay=0.0)
    h = CniHandler(plumber, Pods(delay=1.0), 1400, lambda: None)
    add = threading.Thread(target=h.add, args=(req("ADD"),))
    add.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    h.gc(req("GC", ""))
    assert time.monotonic() - t0 < 0.5
    add.join(5)


class RecordingPlumber(Plumber):
    def __init__(self):
        super().__init__(0)
        self.added = []

    def add(self, att):
        self.added.append(att)
        return {}


def test_add_plumbs_the_record_made_for_this_pod():
    plumber = RecordingPlumber()
    CniHandler(plumber, Pods(), 1400, lambda: None).add(req("ADD"))
    att = plumber.added[0]
    assert (att.lsp, att.ip_cidr, att.mac) == ("pod:default/p1", "10.16.0.5/16", "0a:58:0a:10:00:05")


@pytest.mark.parametrize("forged", [
    record(uid="victim-uid", name="victim"),        # copied whole from another pod
    record(uid="u1", name="victim"),                # own uid, another pod's port
    record(uid="victim-uid"),                       # own port, another pod's uid
])
def test_a_record_made_for_another_pod_is_never_plumbed(forged):
    plumber = RecordingPlumber()
    h = CniHandler(plumber, Pods(pod=pod(rec=forged)), 1400, lambda: None, allocation_timeout=0.1)
    with pytest.raises(CniError) as e:
        h.add(req("ADD"))
    assert e.value.code == proto.ERR_TRY_AGAIN and "not plumbed" in e.value.msg, e.value.msg
    assert plumber.added == []


def test_a_malformed_record_is_named_and_not_plumbed():
    plumber = RecordingPlumber()
    bad = {"metadata": {"uid": "u1", "namespace": "default", "name": "p1",
                        "annotations": {names.ANN_ALLOCATION: '{"uid": "u1"'}}}
    h = CniHandler(plumber, Pods(pod=bad), 1400, lambda: None, allocation_timeout=0.1)
    with pytest.raises(CniError) as e:
        h.add(req("ADD"))
    assert names.ANN_ALLOCATION in e.value.msg and "not JSON" in e.value.msg
    assert plumber.added == []


def test_a_refused_pod_with_a_copied_record_is_refused():
    forged = pod(rec=record(uid="victim-uid", name="victim"),
                 **{names.ANN_ALLOCATION_ERROR: "address 10.16.0.5 is in use"})
    h = CniHandler(RecordingPlumber(), Pods(pod=forged), 1400, lambda: None, allocation_timeout=0.1)
    with pytest.raises(CniError) as e:
        h.add(req("ADD"))
    assert e.value.code == proto.ERR_ALLOCATION_REFUSED and "in use" in e.value.msg


def test_host_veth_names_differ_per_container_and_interface_and_fit_ifnamsiz():
    from pacific.node.attachment import host_ifname
    ids = ["cnitool-" + "ab" * 28, "cnitool-" + "ab" * 27 + "cd", "f" * 64]
    made = {host_ifname(cid, ifn) for cid in ids for ifn in ("eth0", "net1")}
    assert len(made) == 6
    assert all(len(n) <= 15 and n.endswith("_h") for n in made)
    assert host_ifname(ids[0], "eth0") == host_ifname(ids[0], "eth0")     # deterministic


def test_a_pod_deleted_while_its_add_waits_ends_the_add_at_once():
    """The real informer: the Pod deleted (grace 0) while ADD waits for its
    allocation ends the ADD with an error naming it, not after the timeout."""
    from pacific.kube import resources
    from pacific.kube.informer import Informer
    pods = Informer(None, resources.PODS)
    h = CniHandler(RecordingPlumber(), pods, 1400, lambda: None, allocation_timeout=30)
    unallocated = {"metadata": {"uid": "u1", "namespace": "default", "name": "p1",
                                "resourceVersion": "1"}}
    pods._event({"type": "ADDED", "object": unallocated})
    timer = threading.Timer(0.2, pods._event, [{"type": "DELETED", "object": unallocated}])
    t0 = time.monotonic()
    timer.start()
    with pytest.raises(CniError) as e:
        h.add(CniRequest(command="ADD", container_id="c1", netns="/run/netns/x", ifname="eth0",
                         pod_namespace="default", pod_name="p1", pod_uid="u1"))
    assert time.monotonic() - t0 < 5
    assert e.value.code == proto.ERR_UNKNOWN_CONTAINER
    assert "pod default/p1 (uid u1) was deleted while its ADD waited" in e.value.msg
    # another pod of the name (a new uid) is waited for as before
    assert pods.wait_for("default/p1", lambda p: True, 0.05, uid="u2") is None
