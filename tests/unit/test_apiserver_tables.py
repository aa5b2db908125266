"""Server-side tables of the API emulator: JSONPath with filters, CRD cell types,
ages as kubectl prints them, built-in printers (pods, nodes, services, events)."""
import datetime

import pytest

from pacific.sandbox.apiserver import jsonpath, tables
from pacific.sandbox.apiserver.printers import PRINTERS, age, human_duration
from pacific.sandbox.apiserver.resources import Registry, from_crd

NOW = datetime.datetime(2024, 5, 10, 12, 0, 0, tzinfo=datetime.timezone.utc)


def ts(seconds_ago: float) -> str:
    return (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=seconds_ago)) \
        .strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("seconds,want", [
    (-5, "<invalid>"), (-1, "0s"), (0, "0s"), (5, "5s"), (119, "119s"), (120, "2m"), (150, "2m30s"),
    (600, "10m"), (179 * 60, "179m"), (3 * 3600, "3h"), (3 * 3600 + 120, "3h2m"), (8 * 3600, "8h"),
    (47 * 3600, "47h"), (48 * 3600, "2d"), (52 * 3600, "2d4h"), (8 * 86400, "8d"), (400 * 86400, "400d"),
    (730 * 86400, "2y"), (735 * 86400, "2y5d"), (9 * 365 * 86400, "9y"),
])
def test_human_duration_matches_apimachinery(seconds, want):
    assert human_duration(seconds) == want


def test_age_of_timestamps():
    assert age("2024-05-10T11:57:00Z", NOW) == "3m"
    assert age(None) == "<unknown>" and age("garbage") == "<invalid>"


@pytest.mark.parametrize("expr,want", [
    ('.status.conditions[?(@.type=="Ready")].status', ["True"]),
    ("{.status.conditions[?(@.type!='Ready')].type}", ["Scheduled"]),
    (".status.conditions[*].type", ["Scheduled", "Ready"]),
    (".status.conditions[-1].reason", ["Up"]),
    (".spec.ports[0:1].port", [80]),
    (".spec['ports'][1].port", [443]),
    (".spec.ports[?(@.port>100)].name", ["https"]),
    (".spec.ports[?(@.name)].port", [443]),
    ("..port", [80, 443]),
    (".spec.missing", []),
])
def test_jsonpath(expr, want):
    obj = {"spec": {"ports": [{"port": 80}, {"port": 443, "name": "https"}]},
           "status": {"conditions": [{"type": "Scheduled", "status": "True"},
                                     {"type": "Ready", "status": "True", "reason": "Up"}]}}
    assert jsonpath.find(expr, obj) == want


def test_jsonpath_rejects_garbage():
    with pytest.raises(jsonpath.JSONPathError):
        jsonpath.parse(".a[?(@.x==)")


def crd_type():
    crd = {"metadata": {"name": "subnets.pacific.io"},
           "spec": {"group": "pacific.io", "scope": "Cluster", "names": {"plural": "subnets", "kind": "Subnet"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "additionalPrinterColumns": [
                        {"name": "CIDR", "type": "string", "jsonPath": ".spec.cidrBlock"},
                        {"name": "Used", "type": "integer", "jsonPath": ".status.usedIPs"},
                        {"name": "Default", "type": "boolean", "jsonPath": ".spec.default"},
                        {"name": "Namespaces", "type": "string", "jsonPath": ".spec.namespaces"},
                        {"name": "Ready", "type": "string",
                         "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}]}]}}
    return from_crd(crd)[0]


def test_crd_columns_and_cells():
    rt = crd_type()
    obj = {"metadata": {"name": "s1", "creationTimestamp": ts(150)},
           "spec": {"cidrBlock": "10.1.0.0/24", "default": "yes", "namespaces": ["a", "b"]},
           "status": {"usedIPs": 3, "conditions": [{"type": "Ready", "status": "False"}]}}
    t = tables.table(rt, [obj], "5", "")
    assert [c["name"] for c in t["columnDefinitions"]] == ["Name", "CIDR", "Used", "Default", "Namespaces",
                                                           "Ready", "Age"]
    assert t["columnDefinitions"][-1]["type"] == "date"
    cells = t["rows"][0]["cells"]
    assert cells[:6] == ["s1", "10.1.0.0/24", 3, None, '["a","b"]', "False"]
    assert cells[6] in ("2m30s", "2m31s")
    assert tables.cells(rt, {"metadata": {"name": "s2"}}) == ["s2", None, None, None, None, None, None]


def test_crd_without_columns_gets_only_age():
    rt = from_crd({"metadata": {"name": "ips.pacific.io"}, "spec": {
        "group": "pacific.io", "names": {"plural": "ips", "kind": "IP"},
        "versions": [{"name": "v1", "served": True, "storage": True}]}})[0]
    assert [c["name"] for c in tables.columns(rt)] == ["Name", "Age"]


def builtin(plural, group=""):
    return Registry().get(group, "v1", plural)


def test_pod_table():
    rt = builtin("pods")
    pod = {"metadata": {"name": "web", "creationTimestamp": ts(30)},
           "spec": {"nodeName": "node1", "containers": [{"name": "a"}, {"name": "b"}]},
           "status": {"phase": "Running", "podIP": "10.16.0.5", "containerStatuses": [
               {"name": "a", "ready": True, "restartCount": 2, "state": {"running": {}}},
               {"name": "b", "ready": False, "restartCount": 0,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}}
    names = [c["name"] for c in tables.columns(rt)]
    assert names == ["Name", "Ready", "Status", "Restarts", "Age", "IP", "Node", "Nominated Node",
                     "Readiness Gates"]
    cells = tables.cells(rt, pod)
    assert cells[:4] == ["web", "1/2", "CrashLoopBackOff", "2"] and cells[5:7] == ["10.16.0.5", "node1"]
    pending = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Pending"}}
    assert tables.cells(rt, pending)[1:3] == ["0/1", "Pending"]
    assert tables.cells(rt, pending)[5:7] == ["<none>", "<none>"]
    pending["metadata"]["deletionTimestamp"] = ts(1)
    assert tables.cells(rt, pending)[2] == "Terminating"


def test_node_table():
    rt = builtin("nodes")
    node = {"metadata": {"name": "node1", "creationTimestamp": ts(5),
                         "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "gw"}},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "192.168.77.11"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian"}}}
    cells = tables.cells(rt, node)
    assert cells[:3] == ["node1", "Ready,SchedulingDisabled", "control-plane,gw"]
    assert cells[4:7] == ["v1.32.0", "192.168.77.11", "<none>"] and cells[7] == "Debian"
    node["status"]["conditions"][0]["status"] = "Unknown"
    assert tables.cells(rt, {**node, "spec": {}})[1] == "NotReady"
    assert tables.cells(rt, {"metadata": {"name": "n"}})[1:3] == ["Unknown", "<none>"]


def test_service_event_and_deployment_tables():
    svc = {"metadata": {"name": "web"}, "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.10",
                                                 "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}],
                                                 "selector": {"app": "web"}}}
    assert tables.cells(builtin("services"), svc)[1:5] == ["LoadBalancer", "10.96.0.10", "<pending>",
                                                           "80:30080/TCP"]
    ev = {"metadata": {"name": "s1.17a"}, "involvedObject": {"kind": "Subnet", "name": "s1"},
          "reason": "Overlap", "message": "overlaps join ", "type": "Warning", "count": 3,
          "lastTimestamp": ts(10), "firstTimestamp": ts(100), "source": {"component": "pacific-controller"}}
    cols = [c["name"] for c in tables.columns(builtin("events"))]
    assert cols[0] == "Last Seen" and cols[-1] == "Name"
    cells = tables.cells(builtin("events"), ev)
    assert cells[1:4] == ["Warning", "Overlap", "subnet/s1"] and cells[6] == "overlaps join" and cells[8] == 3
    dep = {"metadata": {"name": "d"}, "spec": {"replicas": 3, "template": {"spec": {"containers": [
        {"name": "c", "image": "nginx"}]}}, "selector": {"matchLabels": {"app": "d"}}},
           "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}
    assert tables.cells(Registry().get("apps", "v1", "deployments"), dep)[:4] == ["d", "2/3", 3, 2]
    assert set(PRINTERS) >= {("", "pods"), ("", "nodes"), ("", "namespaces"), ("", "services")}
