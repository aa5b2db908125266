"""Malformed requests to the API emulator get a clear 4xx, never a hung
connection thread or a 500 (an in-process server on a loopback port)."""
import base64
import json
import socket

import pytest

from pacific.sandbox.apiserver.server import ApiServer

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server():
    srv = ApiServer(["127.0.0.1:0"])
    srv.load_state()
    srv.load_crds("deploy/crds")
    srv.start()
    yield srv
    srv.stop()


def raw_request(srv, head: str, body: bytes = b"", timeout: float = 3) -> tuple[int, dict]:
    """Send `head` (request line + headers, no blank line) and `body`; (status, JSON body)."""
    port = srv.addresses[0]["port"]
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head.encode() + b"\r\nConnection: close\r\n\r\n" + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    payload = data.split(b"\r\n\r\n", 1)[1]
    return status, json.loads(payload or b"{}")


def request(srv, method: str, path: str, body=None,
            content_type: str = "application/json") -> tuple[int, dict]:
    raw = b"" if body is None else json.dumps(body).encode()
    return raw_request(srv, f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {content_type}\r\n"
                            f"Content-Length: {len(raw)}", raw)


@pytest.mark.parametrize("length", ["-1", "abc"])
def test_bad_content_length_is_a_400(server, length):
    status, body = raw_request(server, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\n"
                                       f"Host: x\r\nContent-Length: {length}", b"{}")
    assert status == 400, body
    assert "Content-Length" in body["message"]


@pytest.mark.parametrize("chunks,code", [(b"zz\r\n{}\r\n0\r\n\r\n", 400),
                                         (b"%x\r\n" % (4 * 1024 * 1024), 413)])
def test_bad_or_huge_chunked_body(server, chunks, code):
    status, body = raw_request(server, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\n"
                                       "Host: x\r\nTransfer-Encoding: chunked", chunks)
    assert status == code, body


def _token(rv, start) -> str:
    return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": start}).encode()).decode()


@pytest.mark.parametrize("method,path,body", [
    ("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": 5}}),
    ("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"generateName": 5}}),
    ("PUT", "/api/v1/namespaces/default/configmaps/cm", {"metadata": {"name": "cm",
                                                                      "resourceVersion": 7}}),
    ("GET", "/api/v1/configmaps?limit=1&continue=" + _token("x", [1, 2]), None),
    ("GET", "/api/v1/configmaps?limit=1&continue=" + _token(1, 5), None),
    ("DELETE", "/api/v1/namespaces/default/configmaps/cm", {"preconditions": "x"}),
    ("DELETE", "/api/v1/namespaces/default/configmaps/cm", {"dryRun": ["Yes"]}),
    ("DELETE", "/api/v1/namespaces/default/configmaps/cm?dryRun=true", None),
    ("POST", "/api/v1/namespaces/default/pods/p/binding", {"target": "node1"}),
    ("POST", "/api/v1/namespaces/default/pods/p/binding", [1]),
])
def test_malformed_bodies_and_tokens_are_a_400(server, method, path, body):
    request(server, "POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "cm"}})
    request(server, "POST", "/api/v1/namespaces/default/pods",
            {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    status, answer = request(server, method, path, body)
    assert status == 400, answer
    # and the objects are untouched
    assert request(server, "GET", "/api/v1/namespaces/default/configmaps/cm")[0] == 200
    assert "nodeName" not in request(server, "GET", "/api/v1/namespaces/default/pods/p")[1]["spec"]


@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "abc"])
def test_watch_timeout_must_be_an_integer(server, value):
    """timeoutSeconds=nan made a deadline nothing compares below: the watch never
    ended and its thread spun (Condition.wait(nan) returns at once)."""
    status, body = raw_request(server, "GET /api/v1/configmaps?watch=1&timeoutSeconds="
                                       f"{value} HTTP/1.1\r\nHost: x")
    assert status == 400, body
    assert "timeoutSeconds" in body["message"]
