"""The `pacific` plugin executable against the real CniServer: every operation,
every error code, every supported cniVersion.  The plugin is installed as the
node daemon installs it and run as a container runtime runs it, in both its
flavours: the shim that hands the call to the daemon (pacific/cni/shim.c) and
the Python plugin alone."""
import json

import pytest

from cni_fixtures import FLAVOURS, RESULT, conf, install_plugin, run_plugin, start_server
from pacific import names
from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError


@pytest.fixture(scope="module", params=FLAVOURS)
def flavour(request):
    return request.param


@pytest.fixture(scope="module")
def _server(tmp_path_factory, flavour):
    tmp = tmp_path_factory.mktemp("cni")
    server, backend = start_server(tmp)
    yield install_plugin(tmp, flavour), server.path, backend
    server.stop()


@pytest.fixture
def env(_server):
    plugin, path, backend = _server
    backend.__init__()  # fresh recording for each test
    return plugin, path, backend


def test_default_socket_matches_names():
    assert proto.DEFAULT_SOCKET == names.CNI_SOCKET


@pytest.mark.parametrize("version", proto.SUPPORTED_VERSIONS)
def test_version_answers_in_asked_version(tmp_path, flavour, version):
    plugin = install_plugin(tmp_path, flavour)
    rc, out, _ = run_plugin(plugin, "VERSION", {"cniVersion": version})
    assert rc == 0
    assert out == {"cniVersion": version, "supportedVersions": list(proto.SUPPORTED_VERSIONS)}


def test_version_with_empty_stdin_as_podman_may_send(tmp_path, flavour):
    plugin = install_plugin(tmp_path, flavour)
    rc, out, _ = run_plugin(plugin, "VERSION", None, stdin=b"",
                            env_override={"CNI_NETNS": "dummy", "CNI_IFNAME": "dummy"})
    assert rc == 0 and out["cniVersion"] == proto.SPEC_VERSION


@pytest.mark.parametrize("version", proto.SUPPORTED_VERSIONS)
def test_add_result_in_config_version(env, version):
    plugin, sock, backend = env
    rc, out, err = run_plugin(plugin, "ADD", conf(sock, version))
    assert rc == 0, err
    assert out["cniVersion"] == version
    assert out["interfaces"][0]["mac"] == "0a:58:0a:10:00:05"
    assert out["interfaces"][0]["sandbox"] == "/run/netns/x"
    assert out["ips"][0]["address"] == "10.16.0.5/16"
    assert out["ips"][0]["interface"] == 0
    assert out["routes"] == RESULT["routes"]
    if version.startswith("0."):
        assert out["ips"][0]["version"] == "4"
    else:
        assert "version" not in out["ips"][0]
    assert ("mtu" in out["interfaces"][0]) == (version == "1.1.0")
    req = backend.calls[-1]
    assert (req.command, req.container_id, req.ifname, req.netns) == \
        ("ADD", "c0ffee01", "eth0", "/run/netns/x")
    assert (req.pod_namespace, req.pod_name, req.pod_uid) == ("default", "p1", "u1")


def test_cni_args_any_order_unknown_ignored(env):
    plugin, sock, backend = env
    rc, _, err = run_plugin(plugin, "ADD", conf(sock), args="K8S_POD_UID=u9;FOO=bar;"
                            "K8S_POD_NAME=web-0;IgnoreUnknown=1;K8S_POD_NAMESPACE=ns-a")
    assert rc == 0, err
    assert backend.calls[-1].pod_key == "ns-a/web-0"


@pytest.mark.parametrize("netns", ["/run/netns/x", ""])
def test_del_succeeds_with_or_without_netns(env, netns):
    plugin, sock, backend = env
    rc, out, err = run_plugin(plugin, "DEL", conf(sock), netns=netns)
    assert rc == 0 and out is None, err
    assert backend.calls[-1].command == "DEL" and backend.calls[-1].netns == netns


def test_check_and_gc_and_status(env):
    plugin, sock, backend = env
    rc, out, err = run_plugin(plugin, "CHECK", conf(sock, "1.1.0", prevResult=RESULT))
    assert rc == 0 and out is None, err
    assert backend.calls[-1].prev_result == RESULT
    va = [{"containerID": "a1", "ifname": "eth0"}, {"containerID": "b2", "ifname": "net1"}]
    rc, out, err = run_plugin(plugin, "GC", conf(sock, "1.1.0", **{"cni.dev/valid-attachments": va}),
                              env_override={"CNI_CONTAINERID": None, "CNI_NETNS": None,
                                            "CNI_IFNAME": None})
    assert rc == 0 and out is None, err
    assert backend.calls[-1].valid_attachments == {("a1", "eth0"), ("b2", "net1")}
    # the key of the first 1.1.0 spec text (libcni sends both; other runtimes one)
    rc, out, err = run_plugin(plugin, "GC", conf(sock, "1.1.0", **{"cni.dev/attachments": va}),
                              env_override={"CNI_CONTAINERID": None, "CNI_NETNS": None,
                                            "CNI_IFNAME": None})
    assert rc == 0 and out is None, err
    assert backend.calls[-1].valid_attachments == {("a1", "eth0"), ("b2", "net1")}
    rc, out, err = run_plugin(plugin, "STATUS", conf(sock, "1.1.0"))
    assert rc == 0 and out is None, err


def test_status_not_ready_is_50(env):
    plugin, sock, backend = env
    backend.not_ready = True
    rc, out, _ = run_plugin(plugin, "STATUS", conf(sock, "1.1.0"))
    assert rc == 1 and out["code"] == proto.ERR_NOT_AVAILABLE
    assert "ovn-controller" in out["msg"]


def expect_error(result, code, words):
    rc, out, err = result
    assert rc == 1, (out, err)
    assert out["code"] == code, out
    assert words.lower() in (out["msg"] + out.get("details", "")).lower(), out
    assert "pacific-cni" in err  # logged on stderr, not stdout
    return out


@pytest.mark.parametrize("command,config_kw,env_kw,code,words", [
    # 4: environment
    ("ADD", {}, {"CNI_COMMAND": None}, 4, "CNI_COMMAND"),
    ("ADD", {}, {"CNI_COMMAND": "BOGUS"}, 4, "CNI_COMMAND"),
    ("ADD", {}, {"CNI_CONTAINERID": None}, 4, "CNI_CONTAINERID"),
    ("ADD", {}, {"CNI_NETNS": ""}, 4, "CNI_NETNS"),
    ("CHECK", {}, {"CNI_IFNAME": None}, 4, "CNI_IFNAME"),
    ("DEL", {}, {"CNI_CONTAINERID": ""}, 4, "CNI_CONTAINERID"),
    ("ADD", {}, {"CNI_ARGS": "K8S_POD_NAME"}, 4, "malformed pair"),
    ("ADD", {}, {"CNI_ARGS": "K8S_POD_NAME=p1"}, 4, "K8S_POD_NAMESPACE"),
    ("ADD", {}, {"CNI_ARGS": "K8S_POD_NAMESPACE=Bad_NS;K8S_POD_NAME=p"}, 4, "namespace"),
    ("ADD", {}, {"CNI_IFNAME": "a-very-long-interface-name"}, 4, "CNI_IFNAME"),
    ("ADD", {}, {"CNI_CONTAINERID": "../etc"}, 4, "CNI_CONTAINERID"),
    ("ADD", {}, {"CNI_NETNS": "relative/ns"}, 4, "CNI_NETNS"),
    # 7: configuration
    ("ADD", {"cniVersion": None}, {}, 7, "cniVersion"),
    ("ADD", {"name": None}, {}, 7, "'name'"),
    ("ADD", {"server_socket": "relative.sock"}, {}, 7, "server_socket"),
    ("ADD", {"timeout": -1}, {}, 7, "timeout"),
    ("GC", {"cniVersion": "1.1.0", "cni.dev/valid-attachments": {"x": 1}}, {}, 7,
     "valid-attachments"),
    ("GC", {"cniVersion": "1.1.0", "cni.dev/valid-attachments": [{"containerID": 1}]}, {}, 7,
     "valid-attachments"),
    # no list at all must not read as "nothing is valid": GC would remove every pod
    ("GC", {"cniVersion": "1.1.0"}, {}, 7, "valid-attachments"),
    ("GC", {"cniVersion": "1.1.0", "cni.dev/attachments": "x"}, {}, 7, "cni.dev/attachments"),
    # 1: versions
    ("ADD", {"cniVersion": "0.2.0"}, {}, 1, "unsupported cniVersion"),
    ("ADD", {"cniVersion": "2.0.0"}, {}, 1, "unsupported cniVersion"),
    ("CHECK", {"cniVersion": "0.3.1"}, {}, 1, "CHECK needs"),
    ("GC", {"cniVersion": "1.0.0"}, {}, 1, "GC needs"),
    ("STATUS", {"cniVersion": "0.4.0"}, {}, 1, "STATUS needs"),
])
def test_error_codes(env, command, config_kw, env_kw, code, words):
    plugin, sock, backend = env
    c = conf(sock)
    for k, v in config_kw.items():
        if v is None:
            c.pop(k)
        else:
            c[k] = v
    out = expect_error(run_plugin(plugin, command, c, env_override=env_kw), code, words)
    assert out["cniVersion"] in proto.SUPPORTED_VERSIONS


@pytest.mark.parametrize("stdin", [b"", b"{not json", b"[1, 2]", b"\xff\xfe", b"null"])
def test_malformed_stdin_is_6(env, stdin):
    plugin, sock, _ = env
    expect_error(run_plugin(plugin, "ADD", None, stdin=stdin), 6, "configuration")


def test_daemon_not_running_is_11(tmp_path, flavour):
    plugin = install_plugin(tmp_path, flavour)
    missing = str(tmp_path / "nope" / "cni.sock")
    expect_error(run_plugin(plugin, "ADD", conf(missing)), 11, "not running")
    expect_error(run_plugin(plugin, "STATUS", conf(missing, "1.1.0")), 50, "not running")


def test_del_while_the_daemon_is_down_succeeds_and_says_so(tmp_path, flavour):
    """containerd's StopPodSandbox/RemovePodSandbox must not fail while
    pacific-node is away: DEL removes the host veth itself and succeeds."""
    plugin = install_plugin(tmp_path, flavour)
    missing = str(tmp_path / "nope" / "cni.sock")
    rc, out, err = run_plugin(plugin, "DEL", conf(missing), container="c0ffee01", ifname="eth0")
    assert rc == 0 and out is None, (out, err)
    assert "not running" in err and proto.host_veth_name("c0ffee01", "eth0") in err


def test_stale_socket_file_is_11(tmp_path, flavour):
    import socket
    path = str(tmp_path / "stale.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.close()  # file remains, nobody listens: ECONNREFUSED
    plugin = install_plugin(tmp_path, flavour)
    expect_error(run_plugin(plugin, "ADD", conf(path)), 11, "not running")


@pytest.mark.parametrize("fail,code,words", [
    (CniError(proto.ERR_ALLOCATION_REFUSED, "allocation refused: subnet full"), 101, "subnet full"),
    (CniError(proto.ERR_TRY_AGAIN, "allocation not there yet"), 11, "not there yet"),
    (RuntimeError("boom"), proto.ERR_INTERNAL, "boom"),
])
def test_daemon_errors_passed_through(env, fail, code, words):
    plugin, sock, backend = env
    backend.fail = fail
    out = expect_error(run_plugin(plugin, "ADD", conf(sock, "0.4.0")), code, words)
    assert out["cniVersion"] == "0.4.0"


def test_convert_result_pure():
    r = proto.convert_result({"ips": [{"address": "fd00::5/64", "interface": 0}]}, "0.3.1")
    assert r == {"cniVersion": "0.3.1", "ips": [{"address": "fd00::5/64", "interface": 0,
                                                   "version": "6"}], "dns": {}}
    assert json.dumps(proto.convert_result(RESULT, "1.0.0"))  # serialisable


def test_parse_cni_args_pure():
    assert proto.parse_cni_args("") == {}
    assert proto.parse_cni_args("A=1;;B=x=y") == {"A": "1", "B": "x=y"}
    with pytest.raises(CniError) as e:
        proto.parse_cni_args("A=1;=2")
    assert e.value.code == 4
