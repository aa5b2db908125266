#!/usr/bin/python3 -IS
"""`pacific`: the CNI plugin executable (CNI spec 1.1.0; answers 0.3.1 to 1.1.0).

Standard library only: this file is copied as-is into a CNI bin directory and
run by the container runtime with the system Python, so it must not import
anything from Pacific or its virtualenv.  It parses the runtime's request
(environment + network configuration on stdin), forwards it as JSON over HTTP
on the node daemon's root-only unix socket (`server_socket` in the network
configuration) and prints the daemon's answer converted to the configuration's
cniVersion.

Output contract (what libcni expects): the result or the error JSON on stdout,
exit code 0 on success and 1 on error, logs on stderr only.

The node daemon imports this module for the protocol helpers (error codes,
CNI_ARGS parsing, result conversion), so both sides share one definition.

Start-up cost is the plugin's whole budget (a pod ADD is ~10 ms of daemon
work), so: `-I -S` (no site, no environment, no user site: ~3 ms), no `json`
or `socket` package (importing them costs ~10 ms, mostly compiling json's
regular expressions and socket's enums) but their C halves `_json` and
`_socket`, which are what `json` and `socket` run on anyway, with a fallback to
the packages where those are missing, and a 30-line HTTP/1.0 client instead of
`http.client` (another ~30 ms).
"""
import os
import sys

try:
    import _socket
except ImportError:  # pragma: no cover - every CPython has it
    import socket as _socket

try:
    from _json import encode_basestring_ascii as _json_str
    from _json import make_encoder as _json_encoder
    from _json import make_scanner as _json_scanner
except ImportError:  # pragma: no cover - non-CPython: the json package
    _json_str = _json_encoder = _json_scanner = None

# --- protocol constants (shared with pacific.node.cniserver) -------------------
SPEC_VERSION = "1.1.0"
SUPPORTED_VERSIONS = ("0.3.1", "0.4.0", "1.0.0", "1.1.0")
COMMANDS = ("ADD", "DEL", "CHECK", "STATUS", "GC", "VERSION")
# Same value as pacific.names.CNI_SOCKET (a unit test keeps them equal).
DEFAULT_SOCKET = "/run/pacific/cni.sock"
# Seconds the plugin waits for the daemon.  The daemon bounds its own waits
# (allocation, ovn-installed) well below this and answers 11 when they expire.
DEFAULT_TIMEOUT = 180.0
# HTTP paths of the node daemon's CNI server.
PATH_CNI = "/cni"
PATH_STATUS = "/status"
# The `pacific` shim's path (pacific/cni/shim.c): the whole call, run in the daemon.
# Request: the CNI_* environment as NUL-terminated KEY=VALUE entries, an empty
# entry, then the stdin bytes; the socket the shim chose in EXEC_SOCKET_HEADER.
# Answer: 200 with the exit code in EXEC_EXIT_HEADER, a log line in EXEC_LOG_HEADER
# and stdout as the body; any other status means nothing ran (the shim then runs
# this plugin itself), 409 that the configuration names another socket.
PATH_EXEC = "/exec"
EXEC_SOCKET_HEADER = "X-Pacific-Socket"
EXEC_EXIT_HEADER = "X-CNI-Exit"
EXEC_LOG_HEADER = "X-CNI-Log"

# Error codes.  1-99 are the spec's, 100+ are Pacific's own.
ERR_INCOMPATIBLE_VERSION = 1
ERR_UNSUPPORTED_FIELD = 2
ERR_UNKNOWN_CONTAINER = 3
ERR_INVALID_ENV = 4
ERR_IO = 5
ERR_DECODE = 6
ERR_INVALID_CONFIG = 7
ERR_TRY_AGAIN = 11
ERR_NOT_AVAILABLE = 50
ERR_LIMITED_CONNECTIVITY = 51
ERR_INTERNAL = 100            # unexpected failure inside the node daemon
ERR_ALLOCATION_REFUSED = 101  # the controller refused the pod's allocation
ERR_PLUMBING = 102            # netlink / veth / namespace failure
ERR_OVS = 103                 # the node's OVS database refused a change
ERR_CHECK_FAILED = 104        # CHECK found a difference
ERR_PROTOCOL = 105            # malformed request or answer between plugin and daemon

# Environment variables each command needs (CNI_PATH is not needed: Pacific
# delegates to no other plugin).  DEL accepts an empty CNI_NETNS.
REQUIRED_ENV = {
    "ADD": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    "CHECK": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME"),
    "DEL": ("CNI_CONTAINERID", "CNI_IFNAME"),
    "STATUS": (),
    "GC": (),
    "VERSION": (),
}
# GC's list of attachments still in use: the spec's key, and the key of the first
# 1.1.0 text (libcni sends both, other runtimes may send either).
GC_ATTACHMENT_KEYS = ("cni.dev/valid-attachments", "cni.dev/attachments")
# cniVersion a command first appeared in.
MIN_VERSION = {"CHECK": "0.4.0", "STATUS": "1.1.0", "GC": "1.1.0"}


# --- JSON through the C accelerator (what json.dumps/json.loads run) ----------
_JSON_WS = " \t\n\r"


class _ScanContext:
    """What json.scanner.make_scanner reads from a JSONDecoder: json.loads'
    defaults (strict strings, NaN/Infinity accepted, int and float numbers)."""
    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                      "NaN": float("nan")}.__getitem__


def _not_serializable(o):
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def json_dumps(obj) -> str:
    """json.dumps(obj, separators=(",", ":")): same encoder, without importing json."""
    if _json_encoder is None:
        import json
        return json.dumps(obj, separators=(",", ":"))
    # A fresh encoder per call (as json does): its circular-reference markers
    # are per call, so concurrent callers in the daemon never share them.
    enc = _json_encoder({}, _not_serializable, _json_str, None, ":", ",",
                        False, False, True)
    return "".join(enc(obj, 0))


def json_loads(data):
    """json.loads(data) for str or UTF-8 bytes; raises ValueError
    (json.JSONDecodeError) on malformed input, as json.loads does."""
    if isinstance(data, (bytes, bytearray)):
        data = data.decode("utf-8")
    if _json_scanner is not None:
        idx = len(data) - len(data.lstrip(_JSON_WS))
        try:
            obj, end = _json_scanner(_ScanContext)(data, idx)
        except (StopIteration, ValueError, SystemError):
            # Malformed.  The C scanner raises json.decoder.JSONDecodeError, which
            # Python 3.11 finds only once json is imported (else SystemError):
            # let json itself parse it again and raise the proper error.
            pass
        else:
            if not data[end:].lstrip(_JSON_WS):
                return obj
    import json  # error path (or no C accelerator)
    return json.loads(data)


class CniError(Exception):
    """A CNI error: printed as {"cniVersion", "code", "msg", "details"}."""

    def __init__(self, code: int, msg: str, details: str = ""):
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_dict(self, cni_version: str = SPEC_VERSION) -> dict:
        out = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out


def version_tuple(v: str) -> tuple:
    try:
        return tuple(int(x) for x in v.split("."))
    except (AttributeError, ValueError):
        return (0,)


def parse_cni_args(raw: str) -> dict:
    """Parse CNI_ARGS "K1=V1;K2=V2" (any order; unknown keys are kept, callers
    ignore what they do not know).  Raises CniError(4) on a malformed pair."""
    out = {}
    if not raw:
        return out
    for part in raw.split(";"):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise CniError(ERR_INVALID_ENV, f"CNI_ARGS: malformed pair {part!r}",
                           "expected KEY=VALUE pairs separated by ';'")
        out[key] = value
    return out


def parse_config(data: bytes) -> dict:
    """Decode and validate the network configuration from stdin."""
    try:
        conf = json_loads(data)
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise CniError(ERR_DECODE, "cannot decode the network configuration on stdin",
                       str(e)) from None
    if not isinstance(conf, dict):
        raise CniError(ERR_DECODE, "the network configuration on stdin is not a JSON object")
    return conf


def check_version(conf: dict) -> str:
    version = conf.get("cniVersion")
    if not isinstance(version, str) or not version:
        raise CniError(ERR_INVALID_CONFIG, "network configuration lacks cniVersion")
    if version not in SUPPORTED_VERSIONS:
        raise CniError(ERR_INCOMPATIBLE_VERSION,
                       f"unsupported cniVersion {version!r}",
                       "supported: " + ", ".join(SUPPORTED_VERSIONS))
    return version


def validate_config(conf: dict, command: str) -> None:
    for key in ("name", "type"):
        if not isinstance(conf.get(key), str) or not conf.get(key):
            raise CniError(ERR_INVALID_CONFIG, f"network configuration field {key!r} "
                           "is missing or not a non-empty string")
    sock = conf.get("server_socket", DEFAULT_SOCKET)
    if not isinstance(sock, str) or not sock.startswith("/"):
        raise CniError(ERR_INVALID_CONFIG, "network configuration field 'server_socket' "
                       f"must be an absolute path, got {sock!r}")
    timeout = conf.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise CniError(ERR_INVALID_CONFIG, "network configuration field 'timeout' "
                       f"must be a positive number of seconds, got {timeout!r}")
    if command == "GC":
        present = [k for k in GC_ATTACHMENT_KEYS if k in conf]
        if not present:
            # Without the list every attachment would look stale.
            raise CniError(ERR_INVALID_CONFIG, f"GC without '{GC_ATTACHMENT_KEYS[0]}': "
                           "refusing to remove every attachment")
        for key in present:
            if not isinstance(conf[key], list):
                raise CniError(ERR_INVALID_CONFIG, f"'{key}' must be a list")


def convert_result(result: dict, version: str) -> dict:
    """Convert a result in Pacific's canonical form (1.1.0 plus an "ips[].version"
    hint) to the given cniVersion: 0.3.x/0.4.0 keep "version" in each ip and drop
    fields unknown there; 1.x drop "version"; only 1.1.0 keeps "interfaces[].mtu"."""
    legacy = version_tuple(version) < (1, 0, 0)
    out = {"cniVersion": version}
    ifaces = []
    for iface in result.get("interfaces", []):
        keep = ("name", "mac", "sandbox")
        if version_tuple(version) >= (1, 1, 0):
            keep += ("mtu",)
        ifaces.append({k: iface[k] for k in keep if k in iface})
    if ifaces:
        out["interfaces"] = ifaces
    ips = []
    for ip in result.get("ips", []):
        entry = {k: ip[k] for k in ("address", "gateway", "interface") if k in ip}
        if legacy:
            entry["version"] = ip.get("version") or ("6" if ":" in ip["address"] else "4")
        ips.append(entry)
    if ips:
        out["ips"] = ips
    routes = [{k: r[k] for k in ("dst", "gw") if k in r} for r in result.get("routes", [])]
    if routes:
        out["routes"] = routes
    out["dns"] = result.get("dns") or {}
    return out


def _http(sock_path: str, method: str, path: str, body: bytes, timeout: float) -> tuple[int, bytes]:
    """One HTTP/1.0 exchange over a unix socket; the daemon closes after answering.

    Deliberately not http.client: importing it (email parser, ssl) costs ~30 ms
    per plugin run, more than the daemon needs to plumb a pod."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(sock_path)
        head = (f"{method} {path} HTTP/1.0\r\nHost: pacific\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        try:
            sock.sendall(head.encode() + body)
        except (BrokenPipeError, ConnectionResetError):
            pass     # the daemon answered early (a body over its limit): read why
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        sock.close()
    data = b"".join(chunks)
    status_line, _, rest = data.partition(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP answer: {data[:80]!r}")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(parts[1]), payload


class DaemonDown(CniError):
    """pacific-node's socket is absent or refuses connections."""


def host_veth_name(container_id: str, ifname: str) -> str:
    """Host end of a pod's veth (and its OVS port): a hash of container id and
    interface name, 14 characters (IFNAMSIZ allows 15).  Defined here, for the
    plugin's own DEL when the daemon is down; the daemon uses it too."""
    import hashlib
    return "p" + hashlib.sha256(f"{container_id}/{ifname}".encode()).hexdigest()[:11] + "_h"


def local_del(env: dict) -> str:
    """DEL while pacific-node is down: remove the pod's host veth (its peer in
    the pod goes with it), so the runtime can tear the pod down.  The OVS port
    left without its device is removed by the daemon when it starts."""
    import subprocess
    host = host_veth_name(env.get("CNI_CONTAINERID", ""), env.get("CNI_IFNAME", ""))
    try:
        done = subprocess.run(["ip", "link", "del", host], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as e:
        return f"could not run `ip link del {host}`: {e}"
    if done.returncode == 0:
        return f"removed {host}"
    return f"{host} was not there"


def call_daemon(sock_path: str, path: str, body: dict | None, timeout: float,
                unavailable_code: int = ERR_TRY_AGAIN) -> dict:
    """POST (or GET if body is None) to the daemon; return the decoded result.
    Raises CniError with the daemon's code, or `unavailable_code` when the daemon
    cannot be reached."""
    try:
        status, raw = _http(sock_path, "GET" if body is None else "POST", path,
                            b"" if body is None else json_dumps(body).encode(), timeout)
    except (FileNotFoundError, ConnectionRefusedError) as e:
        raise DaemonDown(unavailable_code, f"pacific-node is not running: cannot connect "
                         f"to {sock_path}", str(e)) from None
    except PermissionError as e:
        raise CniError(ERR_IO, f"permission denied on {sock_path} (the socket is "
                       "root-only)", str(e)) from None
    except _socket.timeout:
        raise CniError(ERR_TRY_AGAIN, f"pacific-node at {sock_path} did not answer "
                       f"within {timeout:g} s") from None
    except OSError as e:
        raise CniError(unavailable_code, f"pacific-node at {sock_path} failed: {e}",
                       type(e).__name__) from None
    except ValueError as e:
        raise CniError(ERR_PROTOCOL, f"pacific-node at {sock_path} answered garbage",
                       str(e)) from None
    try:
        answer = json_loads(raw)
    except ValueError:
        raise CniError(ERR_PROTOCOL, f"pacific-node answered HTTP {status} with "
                       "a body that is not JSON", raw[:200].decode("utf-8", "replace")) from None
    if status != 200 or not isinstance(answer, dict):
        if isinstance(answer, dict) and isinstance(answer.get("code"), int):
            raise CniError(answer["code"], str(answer.get("msg", "")),
                           str(answer.get("details", "")))
        raise CniError(ERR_PROTOCOL, f"pacific-node answered HTTP {status}",
                       raw[:200].decode("utf-8", "replace"))
    return answer


def build_request(command: str, env: dict, conf: dict) -> dict:
    """The JSON body sent to the daemon for ADD/DEL/CHECK/GC."""
    for var in REQUIRED_ENV[command]:
        if not env.get(var):
            raise CniError(ERR_INVALID_ENV, f"environment variable {var} is missing or "
                           f"empty (required for {command})")
    return {
        "command": command,
        "containerID": env.get("CNI_CONTAINERID", ""),
        "netns": env.get("CNI_NETNS", ""),
        "ifname": env.get("CNI_IFNAME", ""),
        "args": parse_cni_args(env.get("CNI_ARGS", "")),
        "path": env.get("CNI_PATH", ""),
        "config": conf,
    }


def run(env: dict, stdin: bytes, call=None, say=None) -> tuple[int, dict | None]:
    """Execute one CNI call; returns (exit code, JSON to print or None).

    call: how to reach the daemon, call_daemon's signature (the daemon passes
    its own in-process dispatch when it runs a call the `pacific` shim handed it,
    pacific.node.cniserver); say: where log lines go (stderr)."""
    call = call or call_daemon
    say = say or log
    command = env.get("CNI_COMMAND", "")
    version = SPEC_VERSION
    try:
        if command not in COMMANDS:
            raise CniError(ERR_INVALID_ENV, f"CNI_COMMAND {command!r} is not one of "
                           + "/".join(COMMANDS))
        if command == "VERSION":
            # Answered without the daemon; runtimes send {"cniVersion": ...} or
            # nothing at all, so an undecodable stdin is not an error here.
            try:
                asked = parse_config(stdin).get("cniVersion")
            except CniError:
                asked = None
            return 0, {"cniVersion": asked if asked in SUPPORTED_VERSIONS else SPEC_VERSION,
                       "supportedVersions": list(SUPPORTED_VERSIONS)}
        conf = parse_config(stdin)
        version = check_version(conf)
        need = MIN_VERSION.get(command)
        if need and version_tuple(version) < version_tuple(need):
            raise CniError(ERR_INCOMPATIBLE_VERSION, f"{command} needs cniVersion {need} "
                           f"or later, the configuration says {version}")
        validate_config(conf, command)
        sock = conf.get("server_socket", DEFAULT_SOCKET)
        timeout = float(conf.get("timeout", DEFAULT_TIMEOUT))
        if command == "STATUS":
            call(sock, PATH_STATUS, None, timeout, unavailable_code=ERR_NOT_AVAILABLE)
            return 0, None
        request = build_request(command, env, conf)
        try:
            answer = call(sock, PATH_CNI, request, timeout)
        except DaemonDown as e:
            if command != "DEL":
                raise
            # the runtime must be able to tear pods down while the daemon is away
            say(f"DEL {env.get('CNI_CONTAINERID', '')}: {e.msg}; removed locally what "
                f"can be ({local_del(env)}); pacific-node cleans up the rest when it starts")
            return 0, None
        if command == "ADD":
            result = answer.get("result")
            if not isinstance(result, dict):
                raise CniError(ERR_PROTOCOL, "pacific-node answered ADD without a result")
            return 0, convert_result(result, version)
        return 0, None
    except CniError as e:
        say(f"{command or '?'} {env.get('CNI_CONTAINERID', '')}: error {e.code}: {e.msg}"
            + (f" ({e.details})" if e.details else ""))
        return 1, e.to_dict(version)


def log(msg: str) -> None:
    print(f"pacific-cni: {msg}", file=sys.stderr)


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip().split("\n\n")[0])
        print("\nRun by a container runtime: CNI_COMMAND (ADD, DEL, CHECK, STATUS, GC, "
              "VERSION), CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME, CNI_ARGS in the "
              "environment, the network configuration as JSON on stdin.")
        return 0
    try:
        data = sys.stdin.buffer.read()
    except OSError as e:
        data = b""
        log(f"cannot read stdin: {e}")
    code, out = run(dict(os.environ), data)
    if out is not None:
        try:
            sys.stdout.write(json_dumps(out))
            sys.stdout.flush()
        except OSError as e:
            log(f"cannot write the answer to stdout: {e}")
            return 1
    return code


def exit_now(code: int) -> None:
    """Exit without the interpreter's teardown (finalizing every module and
    object costs ~3 ms, a fifth of a plugin run).  Nothing is pending but the
    standard streams, which are flushed first."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # the runtime closed the pipe: nothing more to tell it
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
