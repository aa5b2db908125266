"""CniHandler's concurrency rules, with a recording plumber and pod cache in
place of netlink/OVS (the plumbing itself is covered by the e2e tests)."""
import threading
import time

from pacific import names
from pacific.node.cnihandler import CniHandler
from pacific.node.cnirequest import CniRequest

ALLOCATED = {"metadata": {"uid": "u1", "annotations": {
    names.ANN_ALLOCATED: "true", names.ANN_IP_ADDRESS: "10.16.0.5",
    names.ANN_MAC_ADDRESS: "0a:58:0a:10:00:05", names.ANN_CIDR: "10.16.0.0/16",
    names.ANN_GATEWAY: "10.16.0.1", names.ANN_LSP: "default_p1"}}}


class Pods:
    """Informer stand-in: wait_for blocks `delay` seconds, then answers."""

    def __init__(self, delay=0.0, pod=ALLOCATED):
        self.delay, self.pod = delay, pod

    def wait_for(self, key, predicate, timeout):
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
