"""API emulator fidelity, pure logic: structural schemas (pruning, defaulting,
validation, ratcheting), CRD schema checks, ObjectMeta rules, pod immutability,
Event namespaces, list options, with Pacific's own CRDs where it matters."""
import glob
import os

import pytest
import yaml

from pacific.sandbox.apiserver import reqctx, schema
from pacific.sandbox.apiserver.errors import ApiError
from pacific.sandbox.apiserver.metavalidation import is_qualified_name, name_errors, validate_object_meta
from pacific.sandbox.apiserver.rest import list_options
from pacific.sandbox.apiserver.store import Store

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def store():
    s = Store()
    s.ensure_default_namespaces()
    crd_rt = s.registry.by_key(("apiextensions.k8s.io", "customresourcedefinitions"))
    for f in sorted(glob.glob(os.path.join(REPO, "deploy", "crds", "*.yaml"))):
        with open(f) as fh:
            s.create(crd_rt, "", yaml.safe_load(fh))
    reqctx.begin(None)
    yield s
    reqctx.take_warnings()


def rt_of(store, group, plural, version="v1"):
    return store.registry.get(group, version, plural)


def subnet(name="s1", **spec):
    return {"apiVersion": "pacific.io/v1", "kind": "Subnet", "metadata": {"name": name},
            "spec": spec}


def refused(fn, *a, **kw) -> ApiError:
    with pytest.raises(ApiError) as e:
        fn(*a, **kw)
    return e.value


# ---------------------------------------------------------------- schema on Pacific's CRDs
def test_subnet_without_cidr_is_422_with_the_real_servers_message(store):
    e = refused(store.create, rt_of(store, "pacific.io", "subnets"), "", subnet("x"))
    assert e.code == 422 and e.reason == "Invalid"
    assert e.message == 'Subnet.pacific.io "x" is invalid: spec.cidrBlock: Required value'
    assert e.details["causes"] == [{"reason": "FieldValueRequired", "message": "Required value",
                                    "field": "spec.cidrBlock"}]
    assert e.details["kind"] == "Subnet" and e.details["group"] == "pacific.io"


def test_subnet_type_and_enum_errors_are_aggregated(store):
    e = refused(store.create, rt_of(store, "pacific.io", "subnets"), "",
                subnet(cidrBlock=10, gatewayType="anycast", excludeIps=["10.0.0.1", 7], natOutgoing="yes"))
    fields = {c["field"]: c for c in e.details["causes"]}
    assert fields["spec.cidrBlock"]["reason"] == "FieldValueTypeInvalid"
    assert fields["spec.cidrBlock"]["message"] == \
        'Invalid value: "integer": spec.cidrBlock in body must be of type string: "integer"'
    assert fields["spec.gatewayType"]["message"] == \
        'Unsupported value: "anycast": supported values: "distributed", "centralized"'
    assert "spec.excludeIps[1]" in fields and "spec.natOutgoing" in fields
    assert e.message.startswith('Subnet.pacific.io "s1" is invalid: [') and e.message.endswith("]")


def test_unknown_fields_are_pruned_and_reported_per_field_validation(store):
    rt = rt_of(store, "pacific.io", "subnets")
    e = store.create(rt, "", dict(subnet(cidrBlock="10.1.0.0/24", cidrblock="typo"),
                                  metadata={"name": "s1", "bogus": 1}))
    assert e.obj["spec"] == {"cidrBlock": "10.1.0.0/24", "gatewayType": "distributed"}, "pruned + defaulted"
    assert "bogus" not in e.obj["metadata"]
    assert reqctx.take_warnings() == ['unknown field "metadata.bogus"', 'unknown field "spec.cidrblock"']
    reqctx.begin("Strict")
    e = refused(store.create, rt, "", subnet("s2", cidrBlock="10.2.0.0/24", extra=True))
    assert e.code == 400 and 'strict decoding error: unknown field "spec.extra"' in e.message
    reqctx.begin("Ignore")
    store.create(rt, "", subnet("s3", cidrBlock="10.3.0.0/24", extra=True))
    assert reqctx.take_warnings() == []
    with pytest.raises(ApiError) as bad:
        reqctx.begin("Loose")
    assert bad.value.code == 400


def test_status_subresource_is_validated_against_the_status_schema(store):
    rt = rt_of(store, "pacific.io", "subnets")
    store.create(rt, "", subnet(cidrBlock="10.1.0.0/24"))
    e = refused(store.update, rt, "", "s1", {"apiVersion": "pacific.io/v1", "kind": "Subnet",
                                            "metadata": {"name": "s1"},
                                            "status": {"usedIPs": "3", "conditions": [{"type": "Ready"}]}},
                "status")
    assert {c["field"] for c in e.details["causes"]} == {"status.usedIPs", "status.conditions[0].status"}
    ok, _ = store.update(rt, "", "s1", {"apiVersion": "pacific.io/v1", "kind": "Subnet", "metadata": {"name": "s1"},
                                        "status": {"usedIPs": 3, "junk": 1, "conditions": [
                                            {"type": "Ready", "status": "True",
                                             "lastTransitionTime": "2024-05-01T10:00:00Z"}]}}, "status")
    assert ok.obj["status"]["usedIPs"] == 3 and "junk" not in ok.obj["status"]
    e = refused(store.mutate, rt, "", "s1", lambda cur: {**cur, "status": {"conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": "yesterday"}]}}, "status")
    assert "must be of type date-time" in e.message


def test_patch_and_update_are_validated_too(store):
    rt = rt_of(store, "pacific.io", "subnets")
    store.create(rt, "", subnet(cidrBlock="10.1.0.0/24"))
    e = refused(store.mutate, rt, "", "s1", lambda cur: {**cur, "spec": {"gateway": "10.1.0.1"}})
    assert e.details["causes"][0]["field"] == "spec.cidrBlock"
    ip_rt = rt_of(store, "pacific.io", "ips")
    e = refused(store.create, ip_rt, "", {"apiVersion": "pacific.io/v1", "kind": "IP",
                                          "metadata": {"name": "p.ns"}, "spec": {"subnet": "s1"}})
    assert 'IP.pacific.io "p.ns" is invalid: spec.ipAddress: Required value' == e.message


def test_validation_keywords():
    s = {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "integer", "minimum": 1, "maximum": 10, "exclusiveMaximum": True},
        "b": {"type": "string", "minLength": 2, "maxLength": 3, "pattern": "^[a-z]+$"},
        "c": {"type": "array", "items": {"type": "number"}, "maxItems": 1, "minItems": 1},
        "d": {"type": "string", "nullable": True},
        "e": {"x-kubernetes-int-or-string": True},
        "f": {"type": "object", "additionalProperties": {"type": "boolean"}},
        "g": {"type": "string", "format": "ipv4"}}}
    causes = schema.validate({"a": 10, "b": "ABCD", "c": [], "d": None, "e": 1.5, "f": {"x": 1}, "g": "1.2.3"}, s)
    assert [m for _, f, m in causes if f == "b"] == [
        "Too long: may not be longer than 3", "Invalid value: \"ABCD\": b in body should match '^[a-z]+$'"]
    errs = {f: m for _, f, m in causes}
    assert errs["a"] == "Invalid value: 10: a in body should be less than 10"
    assert errs["c"] == "Invalid value: 0: c in body should have at least 1 items"
    assert "d" not in errs, "nullable"
    assert errs["e"].startswith('Invalid value: "number": e in body must be of type integer,string')
    assert errs["f.x"] == 'Invalid value: "integer": f.x in body must be of type boolean: "integer"'
    assert errs["g"] == 'Invalid value: "1.2.3": g in body must be of type ipv4: "1.2.3"'
    errs = {f: m for _, f, m in schema.validate({"b": "a", "c": [1, 2], "e": "x"}, s)}
    assert errs["a"] == "Required value"
    assert errs["b"] == 'Invalid value: "a": b in body should be at least 2 chars long'
    assert errs["c"] == "Too many: 2: must have at most 1 items"
    assert "e" not in errs
    assert schema.validate({"a": 0}, s) == [("FieldValueInvalid", "a",
                                             "Invalid value: 0: a in body should be greater than or equal to 1")]


def test_pruning_defaulting_and_nulls():
    s = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "mode": {"type": "string", "default": "a"},
            "opt": {"type": "string"},
            "keep": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "list": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}}}},
            "nested": {"type": "object", "default": {}, "properties": {"x": {"type": "integer", "default": 5}}},
        }}}}
    obj = {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "clusterName": "old"},
           "spec": {"mode": None, "opt": None, "keep": {"any": {"thing": 1}},
                    "list": [{"n": 1, "drop": 2}], "zap": 1}, "top": 1}
    unknown, errs = schema.admit(obj, s)
    assert errs == []
    assert sorted(unknown) == ["metadata.clusterName", "spec.list[0].drop", "spec.zap", "top"]
    assert obj["spec"] == {"mode": "a", "keep": {"any": {"thing": 1}}, "list": [{"n": 1}], "nested": {"x": 5}}
    assert obj["apiVersion"] == "x/v1" and obj["metadata"] == {"name": "a"}


def test_ratcheting_keeps_unchanged_invalid_values_acceptable():
    s = {"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "a": {"type": "string", "maxLength": 2}, "b": {"type": "integer"}}}}}
    old = {"spec": {"a": "toolong", "b": 1}}
    assert schema.validate({"spec": {"a": "toolong", "b": 2}}, s, old=old) == []
    assert [f for _, f, _ in schema.validate({"spec": {"a": "toolonger", "b": 2}}, s, old=old)] == ["spec.a"]


def test_crd_schemas_must_be_structural(store):
    crd_rt = store.registry.by_key(("apiextensions.k8s.io", "customresourcedefinitions"))

    def crd(sch):
        v = {"name": "v1", "served": True, "storage": True}
        if sch is not None:
            v["schema"] = {"openAPIV3Schema": sch}
        return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "things.example.com"},
                "spec": {"group": "example.com", "scope": "Cluster", "versions": [v],
                         "names": {"plural": "things", "kind": "Thing"}}}
    e = refused(store.create, crd_rt, "", crd(None))
    assert "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required" in e.message
    e = refused(store.create, crd_rt, "", crd({"type": "object", "properties": {
        "spec": {"properties": {"n": {"type": "integer", "default": "x"}}},
        "list": {"type": "array"}}}))
    fields = {c["field"] for c in e.details["causes"]}
    assert fields == {"spec.versions[0].schema.openAPIV3Schema.properties[spec].type",
                      "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[n].default",
                      "spec.versions[0].schema.openAPIV3Schema.properties[list].items"}
    # keywords of the wrong type would make every later write of the resource fail
    e = refused(store.create, crd_rt, "", crd({"type": "object", "required": "spec", "properties": {
        "n": {"type": "integer", "minimum": "x"}, "s": {"type": "string", "pattern": "(",
                                                          "maxLength": -1}}}))
    fields = {c["field"] for c in e.details["causes"]}
    root = "spec.versions[0].schema.openAPIV3Schema"
    assert fields == {f"{root}.required", f"{root}.properties[n].minimum",
                      f"{root}.properties[s].pattern", f"{root}.properties[s].maxLength"}
    e = refused(store.create, crd_rt, "", crd({"type": "object", "properties": "x"}))
    assert f"{root}.properties: Invalid value" in e.message
    store.create(crd_rt, "", crd({"type": "object", "x-kubernetes-preserve-unknown-fields": True}))


# ---------------------------------------------------------------- ObjectMeta
@pytest.mark.parametrize("kind,name,ok", [
    ("Pod", "web-1.ns", True), ("Pod", "Web", False), ("Pod", "a" * 254, False),
    ("Namespace", "a.b", False), ("Namespace", "team-1", True),
    ("Service", "1web", False), ("Service", "web-1", True),
    ("Subnet", "ovn-default", True), ("IP", "pod-0.default", True), ("IP", "node:n1", False),
])
def test_names_per_kind(kind, name, ok):
    assert (name_errors(kind, name) == []) is ok


def test_labels_annotations_finalizers_owner_references():
    causes = validate_object_meta("Pod", {
        "name": "p", "labels": {"app": "web", "ns/pod": "x", "bad key": "v", "v": "default/p1"},
        "annotations": {"pacific.io/ip_address": "10.0.0.1", "a/b/c": "x"},
        "finalizers": ["pacific.io/subnet-protection", "no good"],
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1"}]})
    got = {(f, m.split(":")[1].strip()) for _, f, m in causes}
    assert got == {("metadata.labels", '"bad key"'), ("metadata.labels", '"default/p1"'),
                   ("metadata.annotations", '"a/b/c"'), ("metadata.finalizers", '"no good"'),
                   ("metadata.ownerReferences.uid", '""')}
    assert is_qualified_name("pacific.io/" + "x" * 64) == ["name part must be no more than 63 characters"]
    assert validate_object_meta("Pod", {"generateName": "web-"}) == [
        ("FieldValueRequired", "metadata.name", "Required value: name or generateName is required")]


def test_generate_name_is_truncated_and_validated(store):
    pods = store.registry.by_key(("", "pods"))
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "x" * 70},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    e = store.create(pods, "default", body)
    assert len(e.obj["metadata"]["name"]) == 63 and e.obj["metadata"]["generateName"] == "x" * 70
    body["metadata"] = {"generateName": "Web-"}
    e = refused(store.create, pods, "default", body)
    assert {c["field"] for c in e.details["causes"]} == {"metadata.generateName", "metadata.name"}


# ---------------------------------------------------------------- built-in kinds
def test_pod_spec_is_immutable_except_images(store):
    pods = store.registry.by_key(("", "pods"))
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}}
    store.create(pods, "default", body)
    e = refused(store.mutate, pods, "default", "p", lambda cur: {**cur, "spec": {**cur["spec"], "nodeName": "n1"}})
    assert e.code == 422 and "pod updates may not change fields" in e.message and "spec.nodeName" in e.message

    def new_image(cur):
        cur["spec"]["containers"][0]["image"] = "busybox:2"
        return cur
    assert store.mutate(pods, "default", "p", new_image).obj["spec"]["containers"][0]["image"] == "busybox:2"
    e = refused(store.create, pods, "default", {**body, "metadata": {"name": "q"}, "spec": {
        "containers": [{"name": "c", "image": "a"}, {"name": "c", "image": "b"}]}})
    assert e.details["causes"][0]["reason"] == "FieldValueDuplicate"


def test_event_namespace_must_match_the_involved_object(store):
    events = store.registry.by_key(("", "events"))

    def ev(ns, inv_ns, name):
        return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": ns},
                "involvedObject": {"kind": "Subnet", "name": "s1", **({"namespace": inv_ns} if inv_ns else {})},
                "reason": "Bad", "message": "m", "type": "Warning"}
    store.create(events, "default", ev("default", None, "e1"))      # cluster-scoped object: "default"
    e = refused(store.create, events, "kube-system", ev("kube-system", None, "e2"))
    assert e.message == 'Event "e2" is invalid: involvedObject.namespace: Invalid value: "": ' \
                        "does not match event.namespace"
    refused(store.create, events, "default", ev("default", "kube-system", "e3"))


def test_service_names_are_dns1035_and_ports_checked(store):
    svcs = store.registry.by_key(("", "services"))
    e = refused(store.create, svcs, "default", {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "9s"},
                                                "spec": {"ports": [{"port": 80, "protocol": "HTTP"}]}})
    assert {c["field"] for c in e.details["causes"]} == {"metadata.name", "spec.ports[0].protocol"}


def test_list_options(store):
    store_rv = store.rv
    assert list_options(store, {"resourceVersion": "0"}) == "0"
    assert list_options(store, {"resourceVersion": str(store_rv), "resourceVersionMatch": "Exact"})
    e = refused(list_options, store, {"resourceVersionMatch": "NotOlderThan"})
    assert e.code == 422 and "resourceVersionMatch is forbidden unless resourceVersion is provided" in e.message
    assert refused(list_options, store, {"resourceVersion": "1", "resourceVersionMatch": "Exact"}).code == 410
    assert refused(list_options, store, {"resourceVersion": "x"}).code == 400
