"""The `pacific` shim (pacific/cni/shim.c, decision 0044): its wire contract with
the daemon's POST /exec, and every case where it must run the Python plugin
instead, without the call running twice."""
import json
import os
import socket
import subprocess
import threading

import pytest

from cni_fixtures import RESULT, conf, install_plugin, run_plugin, start_server
from pacific import names
from pacific.cni import plugin as proto
from pacific.node import bootstrap
from pacific.node.cnirequest import MAX_BODY, parse_exec


class RawDaemon:
    """A unix socket that records one request and answers it with `answer`."""

    def __init__(self, path, answer: bytes):
        self.answer = answer
        self.requests: list[bytes] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, body = data.partition(b"\r\n\r\n")
                length = int([h.split(b":")[1] for h in head.split(b"\r\n")
                              if h.lower().startswith(b"content-length")][0])
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests.append(head + b"\r\n\r\n" + body)
                conn.sendall(self.answer)

    def close(self):
        self.sock.close()


def through_shim(tmp_path, answer: bytes, stdin: bytes, env: dict):
    """Run the installed shim against a RawDaemon at tmp_path/d.sock that answers
    `answer`; (the finished process, the requests the daemon got)."""
    daemon = RawDaemon(str(tmp_path / "d.sock"), answer)
    try:
        p = subprocess.run([install_plugin(tmp_path, "shim")], input=stdin, capture_output=True,
                           env=env, timeout=10)
    finally:
        daemon.close()
    return p, daemon.requests


def test_shim_hands_the_whole_call_over_and_prints_the_answer(tmp_path):
    path = str(tmp_path / "d.sock")
    stdin = json.dumps(conf(path, "1.1.0")).encode() + b" kept as is"
    p, requests = through_shim(
        tmp_path, b"HTTP/1.0 200 OK\r\nX-CNI-Exit: 0\r\nContent-Length: 5\r\n\r\nhello",
        stdin, {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "PATH": "/bin"})
    assert (p.returncode, p.stdout, p.stderr) == (0, b"hello", b"")
    head, _, body = requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST " + proto.PATH_EXEC.encode() + b" HTTP/1.0")
    assert f"{proto.EXEC_SOCKET_HEADER}: {path}".encode() in head
    env, got = parse_exec(body)
    assert got == stdin                    # not parsed by the shim: the daemon parses it
    assert env == {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1"}   # only CNI_* variables


def test_shim_exit_code_stdout_and_log_line(tmp_path):
    p, _ = through_shim(
        tmp_path, b"HTTP/1.0 200 OK\r\nx-cni-exit: 1\r\nX-CNI-Log: ADD c1: error 7\r\n"
                  b"Content-Length: 7\r\n\r\n{\"a\":1}",
        json.dumps(conf(str(tmp_path / "d.sock"))).encode(), {"CNI_COMMAND": "ADD"})
    assert (p.returncode, p.stdout) == (1, b'{"a":1}')
    assert p.stderr == b"pacific-cni: ADD c1: error 7\n"


@pytest.mark.parametrize("status", [b"404 Not Found", b"409 Conflict", b"400 Bad Request"])
def test_shim_runs_the_python_plugin_when_the_daemon_ran_nothing(tmp_path, status):
    """An older daemon (404), another socket (409), a refused body: the Python
    plugin then makes its own call, here to the same fake daemon, whose second
    answer it cannot parse: so the error proves the second call was made."""
    path = str(tmp_path / "d.sock")
    daemon = RawDaemon(path, b"HTTP/1.0 " + status + b"\r\nContent-Length: 2\r\n\r\n{}")
    try:
        plugin = install_plugin(tmp_path, "shim")
        rc, out, err = run_plugin(plugin, "ADD", conf(path))
    finally:
        daemon.close()
    paths = [r.split(b" ")[1] for r in daemon.requests]
    assert paths == [proto.PATH_EXEC.encode(), proto.PATH_CNI.encode()], paths
    assert rc == 1 and out["code"] == proto.ERR_PROTOCOL


def test_a_configuration_naming_another_socket_runs_nothing_here(tmp_path):
    """The shim's scan picks the first "server_socket" (here inside another
    object, naming the real daemon); the configuration's own names a missing
    socket: the daemon answers 409 and runs nothing, the Python plugin then
    reports that socket as not running."""
    server, backend = start_server(tmp_path)
    try:
        plugin = install_plugin(tmp_path, "shim")
        missing = str(tmp_path / "nope.sock")
        config = {"cniVersion": "1.0.0", "name": "pacific", "type": "pacific",
                  "x": {"server_socket": server.path}, "server_socket": missing}
        rc, out, err = run_plugin(plugin, "ADD", config)
        assert rc == 1 and out["code"] == proto.ERR_TRY_AGAIN and "not running" in out["msg"]
        assert backend.calls == []
    finally:
        server.stop()


@pytest.mark.parametrize("socket_json", ['"\\/run\\/x.sock"', '  "rel.sock"', "5"])
def test_socket_values_the_shim_does_not_read_go_to_the_python_plugin(tmp_path, socket_json):
    server, backend = start_server(tmp_path)
    try:
        plugin = install_plugin(tmp_path, "shim")
        text = json.dumps(conf(server.path)).replace(json.dumps(server.path), socket_json)
        rc, out, err = run_plugin(plugin, "ADD", None, stdin=text.encode())
        if socket_json.startswith('"\\/'):
            assert rc == 1 and out["code"] == proto.ERR_TRY_AGAIN   # /run/x.sock: not there
        else:
            assert rc == 1 and out["code"] == proto.ERR_INVALID_CONFIG
        assert backend.calls == []
    finally:
        server.stop()


def test_shim_serves_every_command_through_the_real_server(tmp_path):
    server, backend = start_server(tmp_path)
    try:
        plugin = install_plugin(tmp_path, "shim")
        rc, out, err = run_plugin(plugin, "ADD", conf(server.path, "0.4.0"))
        assert rc == 0 and out["ips"][0]["address"] == RESULT["ips"][0]["address"], err
        backend.fail = proto.CniError(proto.ERR_ALLOCATION_REFUSED, "refused: pool empty")
        rc, out, err = run_plugin(plugin, "ADD", conf(server.path))
        assert rc == 1 and out["code"] == 101 and "pool empty" in out["msg"]
        assert "pacific-cni: ADD c0ffee01: error 101" in err     # the daemon's log line
    finally:
        server.stop()


def test_help_through_the_shim(tmp_path):
    plugin = install_plugin(tmp_path, "shim")
    p = subprocess.run([plugin, "--help"], capture_output=True, timeout=10)
    assert p.returncode == 0 and b"CNI_COMMAND" in p.stdout


def test_install_falls_back_to_python_without_a_built_shim(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(bootstrap, "SHIM_BINARY", str(tmp_path / "not-built"))
    path = bootstrap.install_plugin(str(tmp_path / "bin"), verify=True)
    with open(path, "rb") as f:
        assert f.read(2) == b"#!"
    assert "was not built" in caplog.text
    assert os.access(os.path.join(tmp_path, "bin", names.CNI_PLUGIN_LIBDIR,
                                  names.CNI_PLUGIN_PY), os.X_OK)


@pytest.mark.parametrize("raw,words", [
    (b"CNI_COMMAND=ADD\0", "not terminated"),
    (b"PATH=/bin\0\0{}", "not a CNI_"),
    (b"CNI_COMMAND\0\0{}", "not a CNI_"),
])
def test_malformed_exec_bodies_are_refused(raw, words):
    with pytest.raises(proto.CniError) as e:
        parse_exec(raw)
    assert words in e.value.msg


def test_a_configuration_over_the_body_limit_gets_the_daemons_reason(tmp_path):
    """Read whole and handed to the Python plugin, whose request the daemon
    refuses naming the limit: the same answer as without the shim."""
    server, backend = start_server(tmp_path)
    try:
        plugin = install_plugin(tmp_path, "shim")
        rc, out, err = run_plugin(plugin, "ADD", conf(server.path, pad="x" * (2 << 20)))
        assert rc == 1 and out["code"] == proto.ERR_PROTOCOL and "limit" in out["msg"], out
        assert backend.calls == []
    finally:
        server.stop()


def test_the_shims_constants_are_the_python_sides():
    """shim.c cannot import them: its #defines name their Python twins, and
    this keeps the values equal."""
    import ast
    import re
    with open(bootstrap.SHIM_SOURCE) as f:
        text = f.read()
    value = {k: ast.literal_eval(v) for k, v in re.findall(r'^#define (\w+) (".*?")', text, re.M)}
    value.update({k: int(a) << int(b) for k, a, b in
                  re.findall(r"^#define (\w+) \((\d+) << (\d+)\)", text, re.M)})
    assert value["DEFAULT_SOCKET"] == names.CNI_SOCKET == proto.DEFAULT_SOCKET
    assert value["LIBDIR"] == names.CNI_PLUGIN_LIBDIR
    assert value["PY_PLUGIN"] == names.CNI_PLUGIN_PY
    assert value["MAX_BODY"] == MAX_BODY
    assert value["PATH_EXEC"] == proto.PATH_EXEC
    assert value["SOCKET_HEADER"] == proto.EXEC_SOCKET_HEADER
    assert value["EXIT_HEADER"] == proto.EXEC_EXIT_HEADER
    assert value["LOG_HEADER"] == proto.EXEC_LOG_HEADER
