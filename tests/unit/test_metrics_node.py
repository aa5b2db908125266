"""pacific.node.metrics: the CNI server counts every answer by command and CNI
code; liveness follows the server thread (a recording backend, no daemons)."""
import json
import socket

import pytest
from prometheus_client import REGISTRY

from cni_fixtures import conf, start_server
from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError
from pacific.node import metrics as nm


def sample(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def request(command="ADD", cid="abc123") -> dict:
    return {"command": command, "containerID": cid, "netns": "/run/netns/x", "ifname": "eth0",
            "args": {"K8S_POD_NAMESPACE": "default", "K8S_POD_NAME": "p1"},
            "config": conf("/run/pacific/cni.sock")}


def post_raw(path: str, body: bytes) -> int:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    try:
        s.sendall(b"POST /cni HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
        return int(data.split(b" ", 2)[1])
    finally:
        s.close()


@pytest.fixture
def server(tmp_path):
    srv, backend = start_server(tmp_path)
    try:
        yield srv, backend
    finally:
        srv.stop()


def counts():
    keys = [("ADD", "0"), ("ADD", "11"), ("ADD", "100"), ("DEL", "0"), ("STATUS", "0"),
            ("STATUS", "50")]
    out = {k: sample("pacific_cni_requests_total", command=k[0], result=k[1]) for k in keys}
    out["invalid"] = sum(s.value for m in REGISTRY.collect() for s in m.samples
                         if s.name == "pacific_cni_requests_total"
                         and s.labels["command"] == nm.INVALID)
    return out


def test_every_answer_is_counted_by_command_and_code(server):
    srv, backend = server
    before = counts()
    add_seconds = sample("pacific_cni_request_duration_seconds_count", command="ADD")
    proto.call_daemon(srv.path, proto.PATH_CNI, request("ADD"), 10)
    proto.call_daemon(srv.path, proto.PATH_CNI, request("DEL"), 10)
    backend.fail = CniError(proto.ERR_TRY_AGAIN, "allocation not there yet")
    with pytest.raises(CniError):
        proto.call_daemon(srv.path, proto.PATH_CNI, request("ADD"), 10)
    backend.fail = RuntimeError("bug")
    with pytest.raises(CniError):
        proto.call_daemon(srv.path, proto.PATH_CNI, request("ADD"), 10)
    backend.fail = None
    proto.call_daemon(srv.path, proto.PATH_STATUS, None, 10)
    backend.not_ready = True
    with pytest.raises(CniError):
        proto.call_daemon(srv.path, proto.PATH_STATUS, None, 10)
    assert post_raw(srv.path, json.dumps({"command": "ADD"}).encode()) == 400

    after = counts()
    assert {k: after[k] - before[k] for k in after} == {
        ("ADD", "0"): 1, ("ADD", "11"): 1, ("ADD", "100"): 1, ("DEL", "0"): 1,
        ("STATUS", "0"): 1, ("STATUS", "50"): 1, "invalid": 1}
    assert sample("pacific_cni_request_duration_seconds_count", command="ADD") == add_seconds + 3


def test_liveness_follows_the_cni_server_thread(tmp_path):
    class Daemon:
        server = readiness = plumber = mgmt = None
    d = Daemon()
    health = nm.NodeHealth(d)
    assert health.liveness()[0] and "starting" in health.liveness()[1]
    ok, why = health.readiness()
    assert not ok and "starting" in why
    d.server, _ = start_server(tmp_path)
    try:
        assert health.liveness() == (True, f"CNI server on {d.server.path} running")
    finally:
        d.server.stop()
    ok, why = health.liveness()
    assert not ok and "not running" in why
