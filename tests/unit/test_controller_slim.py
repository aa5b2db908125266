"""Trimmed informer caches (model.slim_pod / slim_ip): every decision the
controller takes gives the same answer on the trimmed object as on the whole
one, and what is dropped is really not read."""
from __future__ import annotations

import copy
import itertools

from pacific import contract, names
from pacific.controller import model


def full_pod(name="web-0", ns="default", node="node1", ann=None, owner=None, host=False, phase="Running"):
    p = {"kind": "Pod", "apiVersion": "v1",
         "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "17",
                      "labels": {"app": "web"}, "creationTimestamp": "2024-01-01T00:00:00Z",
                      "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}" * 50,
                                      **(ann or {})},
                      "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
         "spec": {"nodeName": node, "hostNetwork": host, "containers": [
             {"name": "c", "image": "nginx", "env": [{"name": "X", "value": "y" * 100}]}],
             "volumes": [{"name": "v", "emptyDir": {}}]},
         "status": {"phase": phase, "podIP": "10.16.0.5", "conditions": [{"type": "Ready"}]}}
    if owner:
        p["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "u", "controller": True},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "v"}]
    return p


ALLOCATED = contract.PodRecord(uid="uid-web-0", port=names.pod_lsp_name("default", "web-0"),
                               ip="10.16.0.5", mac="0a:58:0a:10:00:05", cidr="10.16.0.0/16",
                               gateway="10.16.0.1", subnet="ovn-default").annotations()
VARIANTS = list(itertools.product(
    (None, "node2"), (False, True), ("Running", "Succeeded", None),
    (None, ("StatefulSet", "web"), ("ReplicaSet", "web-abc")),
    ({}, {names.ANN_LOGICAL_SWITCH: "blue", names.ANN_IP_ADDRESS: "10.17.0.9"},
     {names.ANN_K8S_INGRESS_BANDWIDTH: "10M", names.ANN_EGRESS_RATE: "5"},
     {k: v for k, v in ALLOCATED.items() if v is not None})))


def test_decisions_are_the_same_on_trimmed_pods():
    ns_obj = {"metadata": {"name": "default", "annotations": {names.ANN_LOGICAL_SWITCH: "green"}}}
    for node, host, phase, owner, ann in VARIANTS:
        full = full_pod(node=node, host=host, phase=phase, owner=owner, ann=ann)
        before = copy.deepcopy(full)
        slim = model.slim_pod(full)
        assert full == before, "the transform must not change its input"
        assert model.needs_network(slim) == model.needs_network(full)
        assert model.statefulset_of(slim) == model.statefulset_of(full)
        for ns in (None, ns_obj):
            assert model.choose_subnet(slim, ns, {"default": "red"}, "ovn-default") == \
                model.choose_subnet(full, ns, {"default": "red"}, "ovn-default")
        assert contract.own_record(slim) == contract.own_record(full)
        assert contract.foreign_record_keys(slim, None) == contract.foreign_record_keys(full, None)
        assert model.labels_of(slim) == model.labels_of(full)
        assert model.annotations(slim) == {k: v for k, v in model.annotations(full).items()
                                           if k.startswith(names.ANN_PREFIX)
                                           or k.startswith("kubernetes.io/")}
        # what an Event's involvedObject needs
        for k in ("name", "namespace", "uid", "resourceVersion"):
            assert model.meta(slim)[k] == model.meta(full)[k]
        assert (slim["kind"], slim["apiVersion"]) == ("Pod", "v1")
        assert (slim.get("spec") or {}).get("nodeName") == full["spec"]["nodeName"]


def test_trimmed_pod_drops_the_bulk_and_shares_repeated_strings():
    full_a = full_pod("a", ns="".join(["team", "-x"]), ann={k: v for k, v in ALLOCATED.items() if v})
    a = model.slim_pod(full_a)
    b = model.slim_pod(full_pod("b", ns="".join(["team", "-x"]), ann={k: v for k, v in ALLOCATED.items() if v}))
    assert "containers" not in a["spec"] and a["metadata"]["labels"] == {"app": "web"}
    assert next(iter(a["metadata"]["labels"].values())) is next(iter(b["metadata"]["labels"].values()))
    assert "managedFields" not in a["metadata"] and "conditions" not in a.get("status", {})
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["spec"]["nodeName"] is b["spec"]["nodeName"]
    assert len(repr(a)) < len(repr(full_a)) / 2


def test_trimmed_ip_keeps_spec_and_identity():
    ip = model.ip_object("default", "web-0", "ovn-default", "10.16.0.5", "0a:58:0a:10:00:05", "node1", "web")
    ip["metadata"].update(uid="u1", resourceVersion="9", managedFields=[{"manager": "x"}])
    slim = model.slim_ip(ip)
    assert slim["spec"] == ip["spec"]
    assert slim["metadata"] == {"name": "web-0.default", "uid": "u1", "resourceVersion": "9"}


def test_same_for_allocation_ignores_labels_but_the_cache_keeps_them():
    a = model.slim_pod(full_pod())
    b = model.slim_pod({**full_pod(), "metadata": {**full_pod()["metadata"], "resourceVersion": "18",
                                                    "labels": {"app": "changed"}}})
    assert model.same_for_allocation(a, b)        # the pod reconciler does not read labels
    assert not model.same_but_version(a, b)       # a feature selecting on labels sees the change
    assert model.same_but_version(a, {**a, "metadata": {**a["metadata"], "resourceVersion": "18"}})
    c = model.slim_pod(full_pod(phase="Succeeded"))
    assert not model.same_for_allocation(a, c)
    d = model.slim_pod(full_pod(ann={names.ANN_IP_ADDRESS: "10.16.0.9"}))
    assert not model.same_for_allocation(a, d)


def test_cache_entries_answer_as_dicts_and_cannot_be_changed_through_a_reader():
    full = full_pod(owner=("StatefulSet", "web"), ann={k: v for k, v in ALLOCATED.items() if v})
    full["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": 80}]
    slim = model.slim_pod(full)
    as_dict = {"kind": "Pod", "apiVersion": "v1",
               "metadata": {"name": "web-0", "namespace": "default", "uid": "uid-web-0",
                            "resourceVersion": "17", "labels": {"app": "web"},
                            "annotations": {k: v for k, v in ALLOCATED.items() if v},
                            "ownerReferences": [{"kind": "StatefulSet", "name": "web", "controller": True}]},
               "spec": {"nodeName": "node1", "containers": [{"ports": [
                   {"name": "http", "containerPort": 80, "protocol": "TCP"}]}]},
               "status": {"phase": "Running"}}
    assert slim == as_dict and as_dict == slim and dict(slim) == as_dict
    assert {**slim, "x": 1} == {**as_dict, "x": 1}
    assert copy.deepcopy(slim) == slim and copy.copy(slim) == slim
    assert eval(repr(slim)) == as_dict       # noqa: S307 (a dict literal)
    slim["metadata"]["annotations"].clear()   # a reader's change stays in its own copy
    slim["spec"]["nodeName"] = "other"
    assert slim == as_dict
    assert model.slim_pod(full) == slim and model.slim_pod(full_pod()) != slim
    assert "status" not in model.slim_pod(full_pod(phase=None))

    ip = model.ip_object("default", "web-0", "ovn-default", "10.16.0.5", "0a:58:0a:10:00:05", "node1")
    ip["metadata"].update(uid="u1", resourceVersion="9")
    a, b = model.slim_ip(ip), model.slim_ip(copy.deepcopy(ip))
    assert a == b and a["spec"] == ip["spec"] and a.spec_get("ipAddress") == "10.16.0.5"
    assert a.skeys is b.skeys                           # one key tuple per shape
    assert a.spec_get("pod") is model.slim_pod(full)["metadata"]["name"]   # one copy of the name
    a["spec"]["ipAddress"] = "10.16.0.6"
    assert a == b and a.get("status") is None and a.get("kind") == "IP"


def test_uid_and_version_come_back_as_the_same_text():
    import sys
    uid, rv = "3f1c2a9e-5b7d-4c2e-9a1f-0123456789ab", "184467"
    pod = full_pod()
    pod["metadata"].update(uid=uid, resourceVersion=rv)
    slim = model.slim_pod(pod)
    assert (slim["metadata"]["uid"], slim["metadata"]["resourceVersion"]) == (uid, rv)
    assert sys.getsizeof(slim.uid) + sys.getsizeof(slim.rv) < sys.getsizeof(uid) + sys.getsizeof(rv) - 60
    ip = {"apiVersion": names.API_VERSION, "kind": "IP", "spec": {"pod": "web-0"},
          "metadata": {"name": "web-0.default", "uid": uid, "resourceVersion": rv}}
    assert model.slim_ip(ip)["metadata"] == ip["metadata"]
    # anything not canonical is kept as it came: an upper-case or braced UUID, a
    # version with a leading zero, sign or letters, none at all
    for odd_uid, odd_rv in ((uid.upper(), "0184467"), ("{" + uid + "}", "+5"), ("u1", "abc"),
                            (None, None), (uid, "")):
        pod["metadata"].update(uid=odd_uid, resourceVersion=odd_rv)
        m = model.slim_pod(pod)["metadata"]
        assert (m["uid"], m["resourceVersion"]) == (odd_uid, odd_rv)
    # two entries of one object are equal, and copies keep the packed fields
    assert model.slim_pod(full_pod()) == model.slim_pod(full_pod())
    assert copy.deepcopy(slim)["metadata"]["uid"] == uid
