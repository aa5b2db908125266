"""The node daemon's pod loop (pacific/node/podloop.py): which pod events reach
the port settings, which ports they are applied to, and that a running pod's
changed setting is applied without any CNI call."""
from __future__ import annotations

import threading

import pytest

from node_fakes import context
from pacific import contract, names
from pacific.node.attachment import PodAttachment
from pacific.node.podloop import PodLoop, PortSetting

UID = "uid-web"


def pod(rate=None, uid=UID, rec_uid=UID, phase="Running"):
    port = names.pod_lsp_name("default", "web")
    rec = contract.PodRecord(uid=rec_uid, port=port, ip="10.16.0.5", mac="0a:00:00:00:00:05",
                             cidr="10.16.0.0/16", gateway="10.16.0.1", subnet="ovn-default")
    ann = {names.ANN_ALLOCATION: rec.to_json()}
    if rate is not None:
        ann[names.ANN_INGRESS_RATE] = rate
    return {"metadata": {"name": "web", "namespace": "default", "uid": uid, "annotations": ann},
            "status": {"phase": phase}}


def att(lsp=None, ifname="eth0"):
    return PodAttachment(container_id="c1", ifname=ifname, netns="/run/netns/x", pod="default/web",
                         lsp=lsp or names.pod_lsp_name("default", "web"), mac="0a:00:00:00:00:05",
                         ip_cidr="10.16.0.5/16", gateway="10.16.0.1", mtu=1400)


class Pods:
    """The informer surface the loop reads: get and keys."""

    def __init__(self, *objs):
        self.objs = {f"{o['metadata']['namespace']}/{o['metadata']['name']}": o for o in objs}

    def get(self, key):
        return self.objs.get(key)

    def keys(self):
        return list(self.objs)


def make(pods, find_attachments, settings, *argv) -> PodLoop:
    """The pod loop feature on this node's pods `pods` (flags argv)."""
    return PodLoop(context(*argv, pods=pods), settings, find_attachments)


class Rate(PortSetting):
    name = "rate"

    def __init__(self, fail=False):
        self.applied: list[tuple[str, object]] = []
        self.fail = fail
        self.changed = threading.Event()

    def wanted(self, pod):
        return (pod["metadata"].get("annotations") or {}).get(names.ANN_INGRESS_RATE)

    def apply(self, a, wanted):
        if self.fail:
            raise OSError("ovs-vswitchd is gone")
        self.applied.append((a.host_ifname, wanted))
        self.changed.set()


def test_only_updates_that_change_a_setting_or_the_record_are_queued():
    s = Rate()
    loop = make(Pods(), lambda key: [], [s])
    loop.on_update(pod("10"), pod("10", phase="Succeeded"))   # status churn
    assert loop.queue.pending() == 0
    loop.on_update(pod("10"), pod("20"))
    assert loop.queue.pending() == 1
    loop.queue.done(loop.queue.get(0))
    loop.on_update(pod("10"), pod("10", rec_uid="other"))      # the record changed
    assert loop.queue.pending() == 1


def test_settings_go_to_the_pods_own_port_only():
    s = Rate()
    pods = Pods(pod("10"))
    loop = make(pods, lambda key: [att(), att(lsp="pod:default/other", ifname="net1")], [s])
    loop.reconcile("default/web")
    assert s.applied == [(att().host_ifname, "10")]


def test_a_pod_carrying_another_pods_record_gets_no_settings():
    s = Rate()
    loop = make(Pods(pod("10", rec_uid="victim-uid")), lambda key: [att()], [s])
    loop.reconcile("default/web")
    assert s.applied == []


def test_a_failing_setting_does_not_stop_the_others_and_is_retried():
    bad, good = Rate(fail=True), Rate()
    loop = make(Pods(pod("10")), lambda key: [att()], [bad, good])
    with pytest.raises(RuntimeError, match="rate on .*ovs-vswitchd is gone"):
        loop.reconcile("default/web")
    assert good.applied == [(att().host_ifname, "10")]
    loop.apply_now("default/web")            # at ADD: logged, left to the loop's retries
    assert loop.queue.pending() == 1


def test_a_running_pods_changed_setting_is_applied_by_the_loop():
    s = Rate()
    pods = Pods(pod("10"))
    loop = make(pods, lambda key: [att()], [s], "--pod-resync", "3600").start()
    try:
        old, new = pods.objs["default/web"], pod("25")
        pods.objs["default/web"] = new
        loop.handlers()["pods"](old, new)         # as the daemon's informer delivers it
        assert s.changed.wait(5)
        assert s.applied[-1] == (att().host_ifname, "25")
    finally:
        loop.stop()


def test_no_settings_no_worker():
    loop = make(Pods(pod("10")), lambda key: [att()], []).start()
    loop.on_pod(None, pod("10"))
    assert loop.queue.pending() == 0 and loop._threads == []
    loop.stop()


def test_add_applies_only_what_a_new_port_lacks():
    """CNI ADD (apply_now) skips a setting whose wanted() is what a new port
    already has (PortSetting.fresh): a pod without limits costs its ADD nothing."""
    s, found = Rate(), []

    def find(key):
        found.append(key)
        return [att()]
    loop = make(Pods(pod()), find, [s])
    loop.apply_now("default/web")
    assert s.applied == [] and found == [] and loop.queue.pending() == 0
    loop.reconcile("default/web")            # the loop itself applies every setting
    assert s.applied == [(att().host_ifname, None)]


def test_add_applies_the_settings_a_pod_wants_before_answering():
    plain, limited = Rate(), Rate()
    plain.wanted = lambda pod: None           # nothing wanted: skipped at ADD
    loop = make(Pods(pod("10")), lambda key: [att()], [plain, limited])
    loop.apply_now("default/web")
    assert limited.applied == [(att().host_ifname, "10")] and plain.applied == []
    loop.apply_now("default/gone")           # no such pod: nothing, no error
    assert loop.queue.pending() == 0


def test_qos_and_mirror_fresh_values_match_their_wanted_defaults():
    from pacific.node.mirror import MirrorSetting
    from pacific.node.qos import QosSetting
    bare = pod()
    assert QosSetting(None).wanted(bare) == QosSetting.fresh
    assert MirrorSetting(None, "annotated").wanted(bare) == MirrorSetting.fresh
    assert MirrorSetting(None, "off").wanted(bare) == MirrorSetting.fresh
    assert MirrorSetting(None, "all").wanted(bare) != MirrorSetting.fresh
