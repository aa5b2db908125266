"""The API emulator driven by the official `kubernetes` client (a real process, HTTPS)."""
import json
import time

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from kubernetes.informer import SharedInformer

from apiserver_fixtures import REPO, new_emulator

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def emu():
    e, d = new_emulator(history=1000, extra=["--crd-dir", str(REPO / "deploy" / "crds")])
    yield e
    e.stop()
    d.cleanup()


@pytest.fixture(scope="module")
def core(emu):
    with emu.api_client() as api:
        yield client.CoreV1Api(api)


def pod(name, labels=None, node=None, annotations=None):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}], **({"nodeName": node} if node else {})}}


@pytest.fixture
def ns(core):
    name = f"t{int(time.time() * 1000) % 10**9}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)


def test_create_list_with_selectors(core, ns):
    core.create_namespaced_pod(ns, pod("a", {"app": "web", "tier": "front"}, "node1"))
    core.create_namespaced_pod(ns, pod("b", {"app": "web", "tier": "back"}, "node2"))
    core.create_namespaced_pod(ns, pod("c", {"app": "db"}, "node1"))

    def names(**kw):
        return sorted(p.metadata.name for p in core.list_namespaced_pod(ns, **kw).items)
    assert names() == ["a", "b", "c"]
    assert names(label_selector="app=web") == ["a", "b"]
    assert names(label_selector="app=web,tier!=front") == ["b"]
    assert names(label_selector="tier in (front,back)") == ["a", "b"]
    assert names(label_selector="tier notin (front)") == ["b", "c"]
    assert names(label_selector="!tier") == ["c"]
    assert names(label_selector="tier") == ["a", "b"]
    assert names(field_selector="spec.nodeName=node1") == ["a", "c"]
    assert names(field_selector="metadata.name=b,status.phase=Pending") == ["b"]
    assert names(field_selector="spec.nodeName!=node1", label_selector="app") == ["b"]
    all_pods = core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace={ns}")
    assert len(all_pods.items) == 3 and int(all_pods.metadata.resource_version) > 0
    page = core.list_namespaced_pod(ns, limit=2)
    assert len(page.items) == 2 and page.metadata._continue
    rest = core.list_namespaced_pod(ns, limit=2, _continue=page.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["c"] and not rest.metadata._continue
    with pytest.raises(ApiException) as e:
        core.list_namespaced_pod(ns, field_selector="spec.hostname=x")
    assert e.value.status == 400


def test_patch_kinds_and_conflicts(core, ns):
    p = core.create_namespaced_pod(ns, pod("p", {"a": "1"}))
    uid, rv0 = p.metadata.uid, p.metadata.resource_version
    # strategic merge (the client's default for dict bodies)
    p = core.patch_namespaced_pod("p", ns, {"metadata": {"annotations": {"pacific.io/x": "1"},
                                                         "labels": {"b": "2"}}})
    assert p.metadata.labels == {"a": "1", "b": "2"} and p.metadata.annotations == {"pacific.io/x": "1"}
    assert p.metadata.uid == uid and int(p.metadata.resource_version) > int(rv0)
    # JSON patch (list body)
    p = core.patch_namespaced_pod("p", ns, [{"op": "remove", "path": "/metadata/labels/a"}])
    assert p.metadata.labels == {"b": "2"}
    # status subresource
    p = core.patch_namespaced_pod_status("p", ns, {"status": {"phase": "Running", "podIP": "10.16.0.5",
                                                              "conditions": [{"type": "Ready", "status": "True"}]}})
    assert p.status.phase == "Running" and p.status.pod_ip == "10.16.0.5"
    assert core.list_namespaced_pod(ns, field_selector="status.podIP=10.16.0.5").items[0].metadata.name == "p"
    # stale update -> 409 Conflict, fresh one works
    stale = core.read_namespaced_pod("p", ns)
    core.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"c": "3"}}})
    stale.metadata.labels["d"] = "4"
    with pytest.raises(ApiException) as e:
        core.replace_namespaced_pod("p", ns, stale)
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "Conflict"
    fresh = core.read_namespaced_pod("p", ns)
    fresh.metadata.labels["d"] = "4"
    assert core.replace_namespaced_pod("p", ns, fresh).metadata.labels == {"b": "2", "c": "3", "d": "4"}
    with pytest.raises(ApiException) as e:
        core.create_namespaced_pod(ns, pod("p"))
    assert e.value.status == 409 and json.loads(e.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as e:
        core.read_namespaced_pod("nope", ns)
    body = json.loads(e.value.body)
    assert e.value.status == 404 and body["reason"] == "NotFound" and body["message"] == 'pods "nope" not found'


def test_watch_resume_and_bookmarks(core, ns):
    core.create_namespaced_pod(ns, pod("w1"))
    rv = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod(ns, pod("w2"))
    core.patch_namespaced_pod("w2", ns, {"metadata": {"labels": {"x": "y"}}})
    core.delete_namespaced_pod("w2", ns)
    w = watch.Watch()
    seen = []
    for ev in w.stream(core.list_namespaced_pod, ns, resource_version=rv, timeout_seconds=3,
                       allow_watch_bookmarks=True):
        seen.append((ev["type"], ev["raw_object"]["metadata"].get("name")))
        if ev["type"] == "BOOKMARK":
            w.stop()
    assert seen[:3] == [("ADDED", "w2"), ("MODIFIED", "w2"), ("DELETED", "w2")]
    assert seen[-1][0] == "BOOKMARK", "an idle watch with allowWatchBookmarks gets bookmarks"
    # timeoutSeconds ends the stream
    t0 = time.monotonic()
    list(watch.Watch().stream(core.list_namespaced_pod, ns, resource_version=core.list_namespaced_pod(ns)
                              .metadata.resource_version, timeout_seconds=1))
    assert time.monotonic() - t0 < 3


def test_finalizers_and_deletion_events(core, ns):
    core.create_namespaced_config_map(ns, {"metadata": {"name": "f", "finalizers": ["pacific.io/test"]}})
    rv = core.list_namespaced_config_map(ns).metadata.resource_version
    core.delete_namespaced_config_map("f", ns)
    cm = core.read_namespaced_config_map("f", ns)
    assert cm.metadata.deletion_timestamp is not None
    core.patch_namespaced_config_map("f", ns, [{"op": "remove", "path": "/metadata/finalizers"}])
    with pytest.raises(ApiException) as e:
        core.read_namespaced_config_map("f", ns)
    assert e.value.status == 404
    types = [ev["type"] for ev in watch.Watch().stream(core.list_namespaced_config_map, ns,
                                                       resource_version=rv, timeout_seconds=1)]
    assert types == ["MODIFIED", "DELETED"]


def test_custom_resources_from_crd_dir_and_api(emu, ns):
    with emu.api_client() as api:
        ext, co = client.ApiextensionsV1Api(api), client.CustomObjectsApi(api)
        served = {c.metadata.name for c in ext.list_custom_resource_definition().items}
        assert {"subnets.pacific.io", "ips.pacific.io"} <= served, "deploy/crds preloaded"
        crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "gadgets.test.pacific.io"},
               "spec": {"group": "test.pacific.io", "scope": "Namespaced",
                        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                        "versions": [{"name": "v1", "served": True, "storage": True,
                                      "subresources": {"status": {}},
                                      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                          "spec": {"type": "object", "properties": {
                                              "size": {"type": "integer", "minimum": 1}}},
                                          "status": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields": True}}}}}]}}
        ext.create_custom_resource_definition(crd)
        est = ext.read_custom_resource_definition("gadgets.test.pacific.io")
        assert any(c.type == "Established" and c.status == "True" for c in est.status.conditions)
        g = co.create_namespaced_custom_object("test.pacific.io", "v1", ns, "gadgets", {
            "apiVersion": "test.pacific.io/v1", "kind": "Gadget", "metadata": {"name": "g1"},
            "spec": {"size": 1, "undeclared": "pruned"}, "status": {"ignored": True}})
        assert "status" not in g and g["metadata"]["generation"] == 1 and g["spec"] == {"size": 1}
        g = co.patch_namespaced_custom_object("test.pacific.io", "v1", ns, "gadgets", "g1",
                                              {"spec": {"size": 2}, "status": {"ignored": True}})
        assert g["spec"]["size"] == 2 and g["metadata"]["generation"] == 2 and "status" not in g
        g = co.patch_namespaced_custom_object_status("test.pacific.io", "v1", ns, "gadgets", "g1",
                                                     {"status": {"ok": True}})
        assert g["status"] == {"ok": True} and g["metadata"]["generation"] == 2
        # cluster-scoped Pacific CRD with status
        s = co.create_cluster_custom_object("pacific.io", "v1", "subnets", {
            "apiVersion": "pacific.io/v1", "kind": "Subnet", "metadata": {"name": f"s-{ns}"},
            "spec": {"cidrBlock": "10.99.0.0/24"}})
        assert "namespace" not in s["metadata"]
        co.patch_cluster_custom_object_status("pacific.io", "v1", "subnets", f"s-{ns}",
                                              {"status": {"availableIPs": 250}})
        assert co.get_cluster_custom_object("pacific.io", "v1", "subnets", f"s-{ns}")["status"][
            "availableIPs"] == 250
        co.delete_cluster_custom_object("pacific.io", "v1", "subnets", f"s-{ns}")
        # deleting the CRD stops serving its resources
        ext.delete_custom_resource_definition("gadgets.test.pacific.io")
        with pytest.raises(ApiException) as e:
            co.list_namespaced_custom_object("test.pacific.io", "v1", ns, "gadgets")
        assert e.value.status == 404


def test_bad_input_gets_real_server_answers(emu, ns):
    code, body = emu.request("POST", f"/api/v1/namespaces/{ns}/pods", raw=b'{"metadata": {')
    assert code == 400 and body["kind"] == "Status" and body["reason"] == "BadRequest"
    code, body = emu.request("POST", f"/api/v1/namespaces/{ns}/pods", {"apiVersion": "v1", "kind": "Pod",
                                                                         "metadata": {}, "spec": {}})
    assert code == 422 and body["reason"] == "Invalid"
    assert {"field": "metadata.name", "reason": "FieldValueRequired",
            "message": "Required value: name or generateName is required"} in body["details"]["causes"]
    code, body = emu.request("POST", f"/api/v1/namespaces/{ns}/pods",
                             {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}})
    assert code == 400 and body["reason"] == "BadRequest"
    code, body = emu.request("POST", f"/api/v1/namespaces/{ns}/services",
                             {"apiVersion": "apps/v1", "kind": "Service", "metadata": {"name": "x"}})
    assert code == 400
    code, body = emu.request("GET", f"/api/v1/namespaces/{ns}/frobnicators")
    assert code == 404 and body["reason"] == "NotFound"
    code, body = emu.request("GET", "/apis/nope.example.com/v1/things")
    assert code == 404
    code, body = emu.request("GET", "/api/v1/pods", token=None)
    assert code == 401 and body["reason"] == "Unauthorized"
    code, body = emu.request("GET", "/api/v1/pods", token="wrong")
    assert code == 401
    code, _ = emu.request("PATCH", f"/api/v1/namespaces/{ns}/pods/x", {"a": 1}, content_type="text/plain")
    assert code in (404, 415)
    code, body = emu.request("GET", "/version")
    assert code == 200 and body["major"] == "1"


def test_official_informer_relists_after_410():
    """An official SharedInformer whose resourceVersion expired while the API
    server was away (history window of 20 events) gets 410 and re-lists."""
    emu, d = new_emulator(history=20)
    try:
        with emu.api_client() as api:
            core = client.CoreV1Api(api)
            core.create_namespaced_pod("default", pod("before"))
            inf = SharedInformer(core.list_namespaced_pod, namespace="default")
            inf.start()
            try:
                deadline = time.monotonic() + 10
                while inf.cache.get_by_key("default/before") is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert inf.cache.get_by_key("default/before") is not None
                port = emu.port
                emu.stop()
                # meanwhile, another emulator run on the same state writes 30 events
                emu.start(port=0)
                with emu.api_client() as api2:
                    c2 = client.CoreV1Api(api2)
                    for i in range(30):
                        c2.create_namespaced_pod("default", pod(f"later{i}"))
                emu.stop()
                emu.start(port=port)
                deadline = time.monotonic() + 30
                while inf.cache.get_by_key("default/later29") is None and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert inf.cache.get_by_key("default/later29") is not None, emu.log_text()[-3000:]
            finally:
                # the official informer's stop() joins a thread blocked reading an idle
                # watch (no bookmarks asked): end the stream first
                emu.stop()
                inf.stop()
    finally:
        emu.stop()
        d.cleanup()


def test_state_survives_restart_with_resource_versions():
    emu, d = new_emulator()
    try:
        with emu.api_client() as api:
            core = client.CoreV1Api(api)
            p = core.create_namespaced_pod("default", pod("keep", {"k": "v"}))
            rv = core.list_namespaced_pod("default").metadata.resource_version
        emu.stop()
        emu.start()
        with emu.api_client() as api:
            core = client.CoreV1Api(api)
            again = core.read_namespaced_pod("keep", "default")
            assert again.metadata.uid == p.metadata.uid
            assert again.metadata.resource_version == p.metadata.resource_version
            assert core.list_namespaced_pod("default").metadata.resource_version == rv
            q = core.create_namespaced_pod("default", pod("new"))
            assert int(q.metadata.resource_version) > int(rv)
    finally:
        emu.stop()
        d.cleanup()
