"""The node daemon's CNI server: request validation, fuzzing, socket access,
per-container serialization."""
import json
import os
import pwd
import random
import socket
import stat
import threading
import time

import pytest

from cni_fixtures import conf, start_server
from pacific.cni import plugin as proto
from pacific.node.cniserver import CniServer, KeyedLocks

GOOD = {"command": "ADD", "containerID": "abc123", "netns": "/run/netns/x", "ifname": "eth0",
        "args": {"K8S_POD_NAMESPACE": "default", "K8S_POD_NAME": "p1"},
        "config": conf("/run/pacific/cni.sock")}


def raw_exchange(path, data: bytes, timeout=10.0) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    finally:
        s.close()


def post(path, body: bytes, extra_headers=b"") -> tuple[int, dict]:
    req = (b"POST /cni HTTP/1.1\r\nHost: x\r\nContent-Length: " + str(len(body)).encode()
           + b"\r\n" + extra_headers + b"\r\n" + body)
    return parse(raw_exchange(path, req))


def parse(resp: bytes) -> tuple[int, dict]:
    head, _, body = resp.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


@pytest.fixture
def server(tmp_path):
    srv, backend = start_server(tmp_path)
    yield srv, backend
    srv.stop()


def test_valid_request_roundtrip(server):
    srv, backend = server
    status, body = post(srv.path, json.dumps(GOOD).encode())
    assert status == 200 and body["result"]["ips"][0]["address"] == "10.16.0.5/16"
    assert backend.calls[0].pod_key == "default/p1"


@pytest.mark.parametrize("mutate,code,words", [
    (lambda b: b.pop("command"), 4, "'command'"),
    (lambda b: b.update(command="VERSION"), 4, "'command'"),
    (lambda b: b.update(config="x"), 7, "'config'"),
    (lambda b: b["config"].pop("cniVersion"), 7, "cniVersion"),
    (lambda b: b["config"].update(cniVersion="9.9.9"), 1, "cniVersion"),
    (lambda b: b.update(containerID=7), proto.ERR_PROTOCOL, "'containerID'"),
    (lambda b: b.update(containerID="-x"), 4, "CNI_CONTAINERID"),
    (lambda b: b.update(ifname="x" * 16), 4, "CNI_IFNAME"),
    (lambda b: b.update(ifname=".."), 4, "CNI_IFNAME"),
    (lambda b: b.update(ifname="\u00e9" * 8), 4, "CNI_IFNAME"),  # 8 characters, 16 bytes
    (lambda b: b.update(ifname="eth\0"), 4, "CNI_IFNAME"),
    (lambda b: b.update(ifname="eth%d"), 4, "CNI_IFNAME"),     # the kernel would pick a name
    (lambda b: b.update(netns="x"), 4, "CNI_NETNS"),
    (lambda b: b.update(args=[1]), proto.ERR_PROTOCOL, "'args'"),
    (lambda b: b.update(args={"K8S_POD_NAME": 1}), proto.ERR_PROTOCOL, "'args'"),
    (lambda b: b["args"].pop("K8S_POD_NAMESPACE"), 4, "no K8S_POD_NAMESPACE for ADD: Pacific "
     "networks Kubernetes pods"),
    # podman: K8S_POD_NAME only; named exactly, not "namespace and name"
    (lambda b: b.update(args={"IgnoreUnknown": "1", "K8S_POD_NAME": "web"}), 4,
     "CNI_ARGS has no K8S_POD_NAMESPACE for ADD"),
    (lambda b: b.update(args={}), 4, "no K8S_POD_NAMESPACE and no K8S_POD_NAME"),
    (lambda b: b["args"].update(K8S_POD_NAME="UPPER"), 4, "K8S_POD_NAME"),
    (lambda b: b["config"].update(prevResult=[]), 7, "prevResult"),
])
def test_validation_names_the_field(server, mutate, code, words):
    srv, backend = server
    body = json.loads(json.dumps(GOOD))
    mutate(body)
    status, answer = post(srv.path, json.dumps(body).encode())
    assert status == 400
    assert answer["code"] == code and words in answer["msg"], answer
    assert backend.calls == []


def test_http_level_errors_are_cni_json(server):
    srv, _ = server
    cases = [
        b"GET /nope HTTP/1.1\r\n\r\n",
        b"DELETE /cni HTTP/1.1\r\n\r\n",
        b"POST /cni HTTP/1.1\r\n\r\n",                                  # no length
        b"POST /cni HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
        b"POST /cni HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n",
        b"POST /cni HTTP/1.1\r\nContent-Length: 50\r\n\r\n{}",         # truncated
        b"garbage\r\n\r\n",
        b"POST /cni HTTP/9.9\r\n\r\n",
    ]
    for data in cases:
        status, body = parse(raw_exchange(srv.path, data))
        assert status >= 400 and isinstance(body["code"], int) and body["msg"], (data, body)


def _fuzz_case(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:  # random bytes, maybe not even HTTP
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    if kind == 1:  # HTTP with random body
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
        return (b"POST /cni HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
    # structurally plausible JSON with one field broken
    body = json.loads(json.dumps(GOOD))
    choices = [None, 0, -1, 1.5, True, "", "x" * 5000, [], {}, "\u0000", "../../x", "é"]
    target = rng.choice(["command", "containerID", "netns", "ifname", "args", "config"])
    if kind == 2:
        body[target] = rng.choice(choices)
    elif kind == 3:
        body.pop(target)
    elif kind == 4:
        key = rng.choice(["cniVersion", "name", "type", "server_socket", "timeout",
                          "prevResult", "cni.dev/valid-attachments"])
        body["config"][key] = rng.choice(choices)
        body["command"] = rng.choice(["ADD", "DEL", "CHECK", "GC"])
        body["args"]["K8S_POD_NAME"] = rng.choice(["", "UP", "a" * 300])
    else:
        text = json.dumps(body)
        cut = rng.randrange(len(text))
        return (b"POST /cni HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % cut) + text[:cut].encode()
    data = json.dumps(body).encode()
    return (b"POST /cni HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(data)) + data


def test_fuzz_thousands_of_malformed_requests(server):
    srv, backend = server
    rng = random.Random(4)
    n = 3000
    answered = 0
    for _ in range(n):
        data = _fuzz_case(rng)
        resp = raw_exchange(srv.path, data)
        if not resp:
            # http.server closes silently only on an empty request line; nothing to answer
            assert not data.split(b"\n", 1)[0].strip(), data[:80]
            continue
        status, body = parse(resp)
        if status == 200:  # a mutation may keep the request valid (e.g. DEL without netns)
            continue
        assert status >= 400 and isinstance(body.get("code"), int) and body.get("msg")
        answered += 1
    assert answered > n * 0.9
    # still serving, and no lock left behind
    status, _ = post(srv.path, json.dumps(GOOD).encode())
    assert status == 200
    assert len(srv._server.locks) == 0


def test_socket_is_root_only(server):
    srv, _ = server
    st = os.stat(srv.path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0
    assert stat.S_IMODE(os.stat(os.path.dirname(srv.path)).st_mode) == 0o700
    nobody = pwd.getpwnam("nobody")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop to nobody and try to connect
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(srv.path)
                os.write(w, b"connected")
            except PermissionError:
                os.write(w, b"denied")
            except OSError as e:
                os.write(w, f"other {e}".encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    outcome = os.read(r, 100)
    os.close(r)
    assert outcome == b"denied"


def test_same_container_serialized_others_concurrent(server):
    srv, backend = server
    backend.delay = 0.2
    ids = ["same"] * 3 + ["other1", "other2", "other3"]
    results = []

    def one(cid):
        body = dict(GOOD, containerID=cid)
        results.append(post(srv.path, json.dumps(body).encode())[0])

    threads = [threading.Thread(target=one, args=(c,)) for c in ids]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    assert results == [200] * 6
    assert backend.max_active["same"] == 1
    assert backend.total_max >= 3  # the others ran alongside
    assert 0.6 <= elapsed < 1.2  # the three "same" requests run one after another
    assert len(srv._server.locks) == 0


def test_refuses_to_steal_a_live_socket_and_replaces_a_stale_one(tmp_path):
    srv, _ = start_server(tmp_path)
    try:
        with pytest.raises(RuntimeError, match="already running"):
            CniServer(srv.path, None).start()
    finally:
        srv.stop()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(srv.path)
    stale.close()
    srv2 = CniServer(srv.path, None)
    srv2.start()
    srv2.stop()
    assert not os.path.exists(srv.path)


def test_keyed_locks_drop_unused_keys():
    locks = KeyedLocks()
    locks.acquire("a")
    locks.acquire("b")
    assert len(locks) == 2
    locks.release("a")
    locks.release("b")
    assert len(locks) == 0


def test_existing_socket_directory_keeps_its_mode(tmp_path):
    # --cni-socket /run/pacific.sock: the parent is a shared directory (/run)
    # that the daemon must not make root-only; the socket itself is 0600.
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    srv = CniServer(str(shared / "cni.sock"), None)
    srv.start()
    try:
        assert stat.S_IMODE(os.stat(shared).st_mode) == 0o755
        assert stat.S_IMODE(os.stat(srv.path).st_mode) == 0o600
    finally:
        srv.stop()

