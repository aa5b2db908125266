"""Pure logic of the API emulator: selectors, patches, store semantics, watch
translation (no sockets)."""
import pytest

from pacific.sandbox.apiserver.errors import ApiError
from pacific.sandbox.apiserver.patch import json_patch, merge_patch, strategic_merge, apply_patch, \
    STRATEGIC_PATCH
from pacific.sandbox.apiserver.selectors import FieldSelector, LabelSelector
from pacific.sandbox.apiserver.store import Store
from pacific.sandbox.apiserver.watch import Watcher


# ---------------------------------------------------------------- selectors
@pytest.mark.parametrize("sel,labels,want", [
    ("app=web", {"app": "web"}, True),
    ("app==web", {"app": "db"}, False),
    ("app!=web", {}, True),
    ("app!=web", {"app": "web"}, False),
    ("tier in (front, back)", {"tier": "back"}, True),
    ("tier in (front,back)", {"tier": "mid"}, False),
    ("tier notin (front)", {}, True),
    ("tier notin (front)", {"tier": "front"}, False),
    ("app", {"app": ""}, True),
    ("!app", {"app": "x"}, False),
    ("!app", {}, True),
    ("app=web,tier in (a,b),!canary", {"app": "web", "tier": "a"}, True),
    ("app=web,tier in (a,b),!canary", {"app": "web", "tier": "a", "canary": "1"}, False),
    ("example.com/role=gw", {"example.com/role": "gw"}, True),
    ("rank>3", {"rank": "4"}, True),
    ("rank<3", {"rank": "4"}, False),
    ("", {"anything": "x"}, True),
])
def test_label_selector(sel, labels, want):
    assert LabelSelector(sel).matches(labels) is want


@pytest.mark.parametrize("bad", ["=web", "app in (a", "a b c", "app=we b", "rank>x", ","])
def test_label_selector_rejects_garbage_with_400(bad):
    with pytest.raises(ApiError) as e:
        LabelSelector(bad)
    assert e.value.code == 400 and e.value.reason == "BadRequest"


def test_label_selector_empty_value_is_legal():
    assert LabelSelector("app=").matches({"app": ""})
    assert not LabelSelector("app=").matches({"app": "x"})


def test_field_selector_fields_and_errors():
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "node1"},
           "status": {"phase": "Running"}}
    allowed = {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"}
    assert FieldSelector("spec.nodeName=node1,status.phase!=Pending", allowed).matches(pod)
    assert not FieldSelector("spec.nodeName==node2", allowed).matches(pod)
    assert FieldSelector("metadata.name=p", allowed).exact_name() == "p"
    assert FieldSelector("spec.nodeName=", allowed).matches({"metadata": {"name": "x"}})
    with pytest.raises(ApiError) as e:
        FieldSelector("spec.hostname=x", allowed)
    assert e.value.code == 400 and "spec.hostname" in e.value.message


# ---------------------------------------------------------------- patches
def test_merge_patch_rfc7386():
    target = {"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]}
    out = merge_patch(target, {"a": None, "b": {"c": 5}, "l": [3]})
    assert out == {"b": {"c": 5, "d": 3}, "l": [3]}
    assert target["b"]["c"] == 2, "target must not be modified"


def test_json_patch_ops_and_failures():
    doc = {"metadata": {"labels": {"a": "1"}}, "spec": {"list": [1, 2]}}
    out = json_patch(doc, [
        {"op": "add", "path": "/metadata/labels/b~1c", "value": "2"},
        {"op": "replace", "path": "/metadata/labels/a", "value": "x"},
        {"op": "add", "path": "/spec/list/-", "value": 3},
        {"op": "remove", "path": "/spec/list/0"},
        {"op": "copy", "from": "/spec/list", "path": "/spec/copy"},
        {"op": "move", "from": "/spec/copy", "path": "/spec/moved"},
        {"op": "test", "path": "/metadata/labels/a", "value": "x"},
    ])
    assert out == {"metadata": {"labels": {"a": "x", "b/c": "2"}}, "spec": {"list": [2, 3], "moved": [2, 3]}}
    assert doc["spec"]["list"] == [1, 2]
    for bad in ([{"op": "test", "path": "/metadata/labels/a", "value": "no"}],
                [{"op": "remove", "path": "/nope"}],
                [{"op": "replace", "path": "/spec/missing", "value": 1}],
                [{"op": "frobnicate", "path": "/x"}]):
        with pytest.raises(ApiError) as e:
            json_patch(doc, bad)
        assert e.value.code == 422


def test_strategic_merge_lists_by_key_and_directives():
    pod = {"metadata": {"finalizers": ["a"], "labels": {"x": "1"},
                        "ownerReferences": [{"uid": "u1", "name": "o1"}]},
           "spec": {"containers": [{"name": "c1", "image": "i1", "env": [{"name": "E", "value": "1"}]},
                                   {"name": "c2", "image": "i2"}],
                    "tolerations": [{"key": "k1"}]},
           "status": {"conditions": [{"type": "Ready", "status": "False"},
                                     {"type": "Scheduled", "status": "True"}]}}
    out = strategic_merge(pod, {
        "metadata": {"finalizers": ["b"], "labels": {"x": None, "y": "2"}},
        "spec": {"containers": [{"name": "c1", "image": "i1b"}, {"name": "c2", "$patch": "delete"},
                                {"name": "c3", "image": "i3"}],
                 "$setElementOrder/containers": [{"name": "c1"}, {"name": "c3"}],
                 "tolerations": [{"key": "k2"}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    })
    assert out["metadata"]["finalizers"] == ["a", "b"]
    assert out["metadata"]["labels"] == {"y": "2"}
    assert [c["name"] for c in out["spec"]["containers"]] == ["c1", "c3"]
    assert out["spec"]["containers"][0] == {"name": "c1", "image": "i1b", "env": [{"name": "E", "value": "1"}]}
    assert out["spec"]["tolerations"] == [{"key": "k2"}], "lists without merge key are replaced"
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "True"},
                                           {"type": "Scheduled", "status": "True"}]
    out = strategic_merge(pod, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
                                "spec": {"$patch": "replace", "containers": []}})
    assert out["metadata"]["finalizers"] == [] and out["spec"] == {"containers": []}


def test_strategic_merge_refused_for_custom_resources():
    with pytest.raises(ApiError) as e:
        apply_patch(STRATEGIC_PATCH, {}, {"spec": {}}, custom=True)
    assert e.value.code == 415
    with pytest.raises(ApiError) as e:
        apply_patch("text/plain", {}, {"spec": {}}, custom=False)
    assert e.value.code == 415


# ---------------------------------------------------------------- store
def _pod(name, labels=None, node=None):
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
         "spec": {"containers": [{"name": "c", "image": "img"}]}}
    if node:
        p["spec"]["nodeName"] = node
    return p


@pytest.fixture
def store():
    s = Store(history=5)
    s.ensure_default_namespaces()
    return s


def _rt(store, group, version, plural):
    return store.registry.get(group, version, plural)


def test_create_sets_metadata_and_rejects_duplicates_and_bad_names(store):
    pods = _rt(store, "", "v1", "pods")
    e = store.create(pods, "default", _pod("a"))
    m = e.obj["metadata"]
    assert m["uid"] and m["creationTimestamp"].endswith("Z") and m["generation"] == 1
    assert int(m["resourceVersion"]) == store.rv
    assert e.obj["status"]["phase"] == "Pending"
    with pytest.raises(ApiError) as err:
        store.create(pods, "default", _pod("a"))
    assert err.value.code == 409 and err.value.reason == "AlreadyExists"
    for bad in ("", "Upper", "-x"):
        with pytest.raises(ApiError) as err:
            store.create(pods, "default", _pod(bad))
        assert err.value.code == 422 and err.value.details["causes"][0]["field"] == "metadata.name"
    with pytest.raises(ApiError) as err:
        store.create(pods, "nope", _pod("b"))
    assert err.value.code == 404 and 'namespaces "nope" not found' in err.value.message
    gen = store.create(pods, "default", dict(_pod(""), metadata={"generateName": "web-"}))
    assert gen.obj["metadata"]["name"].startswith("web-") and len(gen.obj["metadata"]["name"]) == 9


def test_update_conflict_generation_and_status_subresource(store):
    pods = _rt(store, "", "v1", "pods")
    e = store.create(pods, "default", _pod("a"))
    stale = e.obj["metadata"]["resourceVersion"]
    new = dict(_pod("a"), metadata={"name": "a", "resourceVersion": stale, "labels": {"x": "y"}})
    new["status"] = {"phase": "Running"}          # ignored on the main resource
    e2, _ = store.update(pods, "default", "a", new)
    assert e2.obj["metadata"]["labels"] == {"x": "y"} and e2.obj["status"]["phase"] == "Pending"
    assert e2.obj["metadata"]["generation"] == 1, "metadata-only change keeps generation"
    with pytest.raises(ApiError) as err:
        store.update(pods, "default", "a", dict(_pod("a"), metadata={"name": "a", "resourceVersion": stale}))
    assert err.value.code == 409 and err.value.reason == "Conflict"
    e3, _ = store.update(pods, "default", "a", {"metadata": {"name": "a", "labels": {"ignored": "1"}},
                                                "status": {"phase": "Running"}}, subresource="status")
    assert e3.obj["status"]["phase"] == "Running" and e3.obj["metadata"]["labels"] == {"x": "y"}
    deploys = _rt(store, "apps", "v1", "deployments")
    d = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1}}
    store.create(deploys, "default", d)
    d2 = store.mutate(deploys, "default", "d", lambda cur: merge_patch(cur, {"spec": {"replicas": 2}}))
    assert d2.obj["metadata"]["generation"] == 2
    before = store.rv
    same = store.mutate(deploys, "default", "d", lambda cur: cur)
    assert store.rv == before and same is d2, "a no-op patch writes nothing"


def test_finalizers_delay_deletion(store):
    cms = _rt(store, "", "v1", "configmaps")
    store.create(cms, "default", {"metadata": {"name": "c", "finalizers": ["x/y"]}})
    e, gone = store.delete(cms, "default", "c")
    assert not gone and e.obj["metadata"]["deletionTimestamp"]
    e, gone = store.delete(cms, "default", "c")
    assert not gone
    store.mutate(cms, "default", "c", lambda cur: json_patch(cur, [{"op": "remove",
                                                                  "path": "/metadata/finalizers"}]))
    with pytest.raises(ApiError) as err:
        store.get(cms, "default", "c")
    assert err.value.code == 404


def test_namespace_deletion_removes_content(store):
    nss, pods = _rt(store, "", "v1", "namespaces"), _rt(store, "", "v1", "pods")
    store.create(nss, "", {"metadata": {"name": "t"}})
    store.create(pods, "t", _pod("a"))
    store.create(pods, "t", dict(_pod("b"), metadata={"name": "b", "finalizers": ["f"]}))
    _, gone = store.delete(nss, "", "t")
    assert not gone
    assert store.get(nss, "", "t").obj["status"]["phase"] == "Terminating"
    with pytest.raises(ApiError) as err:
        store.create(pods, "t", _pod("c"))
    assert err.value.code == 403
    store.mutate(pods, "t", "b", lambda cur: merge_patch(cur, {"metadata": {"finalizers": None}}))
    with pytest.raises(ApiError):
        store.get(nss, "", "t")


def test_watch_history_window_gives_410(store):
    pods = _rt(store, "", "v1", "pods")
    start = store.rv
    for i in range(8):
        store.create(pods, "default", _pod(f"p{i}"))
    with pytest.raises(ApiError) as err:
        store.watch(pods, None, start, Watcher(None))
    assert err.value.code == 410
    w = Watcher(None)
    store.watch(pods, None, store.rv - 2, w)
    assert [ev.obj["metadata"]["name"] for ev in w.take(0)] == ["p6", "p7"]


def test_watch_selector_transitions(store):
    pods = _rt(store, "", "v1", "pods")
    store.create(pods, "default", _pod("a", {"app": "x"}))
    w = Watcher("default", LabelSelector("app=y"))
    store.watch(pods, "default", store.rv, w)
    store.mutate(pods, "default", "a", lambda c: merge_patch(c, {"metadata": {"labels": {"app": "y"}}}))
    store.mutate(pods, "default", "a", lambda c: merge_patch(c, {"metadata": {"labels": {"v": "2"}}}))
    store.mutate(pods, "default", "a", lambda c: merge_patch(c, {"metadata": {"labels": {"app": "z"}}}))
    assert [w.translate(ev) for ev in w.take(0)] == ["ADDED", "MODIFIED", "DELETED"]


def test_service_cluster_ip_allocation(store):
    svcs = _rt(store, "", "v1", "services")
    a = store.create(svcs, "default", {"metadata": {"name": "a"}, "spec": {"ports": [{"port": 80}]}})
    b = store.create(svcs, "default", {"metadata": {"name": "b"}, "spec": {"type": "NodePort",
                                                                          "ports": [{"port": 80}]}})
    assert a.obj["spec"]["clusterIP"] != b.obj["spec"]["clusterIP"]
    assert a.obj["spec"]["ports"][0] == {"port": 80, "protocol": "TCP", "targetPort": 80}
    assert 30000 <= b.obj["spec"]["ports"][0]["nodePort"] <= 32767
    with pytest.raises(ApiError) as err:
        store.create(svcs, "default", {"metadata": {"name": "c"}, "spec": {
            "clusterIP": a.obj["spec"]["clusterIP"], "ports": [{"port": 1}]}})
    assert err.value.code == 422


def test_snapshot_roundtrip_keeps_resource_versions(store):
    pods = _rt(store, "", "v1", "pods")
    e = store.create(pods, "default", _pod("a"))
    snap = store.snapshot()
    s2 = Store()
    s2.load(snap)
    assert s2.rv == store.rv
    assert s2.get(pods, "default", "a").obj == e.obj
    with pytest.raises(ApiError) as err:
        s2.watch(pods, None, store.rv - 1, Watcher(None))
    assert err.value.code == 410, "history does not survive a restart: old rvs must re-list"


def test_paged_list_walks_each_namespace_in_order_without_gaps(store):
    pods = _rt(store, "", "v1", "pods")
    nss = _rt(store, "", "v1", "namespaces")
    for ns in ("a", "a-b", "b"):
        if ns != "default":
            store.create(nss, "", {"metadata": {"name": ns}})
        for i in range(7):
            store.create(pods, ns, {**_pod(f"p{i}"), "metadata": {"name": f"p{i}", "namespace": ns,
                                                                  "labels": {"odd": str(i % 2)}}})
    store.delete(pods, "a", "p3")

    def walk(ns, limit, label_sel=None):
        seen, after = [], None
        while True:
            _, page, more = store.list(pods, ns, label_sel, None, after=after, limit=limit)
            seen += [(e.obj["metadata"]["namespace"], e.obj["metadata"]["name"]) for e in page]
            if not more:
                return seen
            after = seen[-1]

    everything = [(ns, f"p{i}") for ns in ("a", "a-b", "b") for i in range(7) if (ns, i) != ("a", 3)]
    assert walk(None, 4) == everything
    assert walk("a", 2) == [k for k in everything if k[0] == "a"]
    assert walk("a-b", 100) == [k for k in everything if k[0] == "a-b"]
    odd = LabelSelector("odd=1")
    assert walk("b", 2, odd) == [("b", f"p{i}") for i in (1, 3, 5)]
    _, page, more = store.list(pods, "a", None, None, limit=2)
    assert len(page) == 2 and more == 4          # remainingItemCount without selectors
