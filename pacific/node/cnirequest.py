"""Validation of the requests the CNI plugin sends to the node daemon.

Pure logic: turns the JSON body of a POST /cni into a `CniRequest`, or raises a
`CniError` whose message names the offending field.  Nothing here trusts the
body: the socket is root-only, but a malformed request must never crash the
daemon or reach the plumbing code.
"""
import json
import re
from dataclasses import dataclass, field

from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError

# CNI spec: container ids are alphanumeric plus "_", "." and "-", starting alphanumeric.
_CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,255}$")
# Linux interface names: 1-15 bytes, no "/", ":" or whitespace, not "." or "..";
# no "%" either (the kernel reads "eth%d" as a template and picks the name itself)
# and no NUL (the kernel would cut the name there).  Bytes are checked separately.
_IFNAME = re.compile(r"^[^/:%\s\0]{1,15}$")
# Kubernetes object names (DNS-1123 subdomain), namespaces (DNS-1123 label).
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_K8S_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
MAX_BODY = 1 << 20


@dataclass
class CniRequest:
    command: str
    container_id: str = ""
    netns: str = ""
    ifname: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    cni_version: str = proto.SPEC_VERSION
    config: dict = field(default_factory=dict)
    prev_result: dict | None = None
    # GC: {(containerID, ifname)} the runtime still uses
    valid_attachments: set = field(default_factory=set)

    @property
    def pod_key(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}"


def _str_field(body: dict, key: str, required: bool) -> str:
    value = body.get(key, "")
    if not isinstance(value, str):
        raise CniError(proto.ERR_PROTOCOL, f"request field {key!r} must be a string, "
                       f"got {type(value).__name__}")
    if required and not value:
        raise CniError(proto.ERR_INVALID_ENV, f"request field {key!r} is empty "
                       "(CNI environment incomplete)")
    return value


def parse_request(raw: bytes) -> CniRequest:
    if len(raw) > MAX_BODY:
        raise CniError(proto.ERR_PROTOCOL, f"request body larger than {MAX_BODY} bytes")
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError) as e:
        raise CniError(proto.ERR_DECODE, "request body is not valid JSON", str(e)) from None
    return request_from(body)


def request_from(body) -> CniRequest:
    """parse_request once the body is decoded (the shim's calls arrive decoded)."""
    if not isinstance(body, dict):
        raise CniError(proto.ERR_DECODE, "request body is not a JSON object")
    command = body.get("command")
    if command not in ("ADD", "DEL", "CHECK", "GC"):
        raise CniError(proto.ERR_INVALID_ENV, f"request field 'command' must be ADD, DEL, "
                       f"CHECK or GC, got {command!r}")
    conf = body.get("config")
    if not isinstance(conf, dict):
        raise CniError(proto.ERR_INVALID_CONFIG, "request field 'config' must be the "
                       "network configuration object")
    version = proto.check_version(conf)
    proto.validate_config(conf, command)
    req = CniRequest(command=command, config=conf, cni_version=version)
    if command == "GC":
        req.valid_attachments = _valid_attachments(conf)
        return req

    req.container_id = _str_field(body, "containerID", True)
    if not _CONTAINER_ID.match(req.container_id):
        raise CniError(proto.ERR_INVALID_ENV, "CNI_CONTAINERID must be alphanumeric "
                       f"plus '_.-' (at most 256 characters), got {req.container_id[:80]!r}")
    req.ifname = _str_field(body, "ifname", True)
    if not _IFNAME.match(req.ifname) or req.ifname in (".", "..") \
            or len(req.ifname.encode()) > 15:
        raise CniError(proto.ERR_INVALID_ENV, "CNI_IFNAME must be a valid interface name "
                       f"(1-15 bytes, no '/', ':', '%' or spaces), got {req.ifname[:40]!r}")
    req.netns = _str_field(body, "netns", command != "DEL")
    if req.netns and (not req.netns.startswith("/") or "\0" in req.netns
                      or len(req.netns) > 4096):
        raise CniError(proto.ERR_INVALID_ENV, "CNI_NETNS must be an absolute path, got "
                       f"{req.netns[:80]!r}")

    args = body.get("args", {})
    if not isinstance(args, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in args.items()):
        raise CniError(proto.ERR_PROTOCOL, "request field 'args' must map strings to strings")
    req.pod_namespace = args.get("K8S_POD_NAMESPACE", "")
    req.pod_name = args.get("K8S_POD_NAME", "")
    req.pod_uid = args.get("K8S_POD_UID", "")
    if command in ("ADD", "CHECK"):
        missing = [k for k, v in (("K8S_POD_NAMESPACE", req.pod_namespace),
                                  ("K8S_POD_NAME", req.pod_name)) if not v]
        if missing:
            raise CniError(proto.ERR_INVALID_ENV, f"CNI_ARGS has no {' and no '.join(missing)} "
                           f"for {command}: Pacific networks Kubernetes pods, whose runtime "
                           "(containerd, CRI-O) passes both; a runtime without Kubernetes "
                           "(podman passes only K8S_POD_NAME) is not served")
        if not _K8S_NAMESPACE.match(req.pod_namespace):
            raise CniError(proto.ERR_INVALID_ENV, "CNI_ARGS K8S_POD_NAMESPACE is not a "
                           f"valid namespace name: {req.pod_namespace[:80]!r}")
        if not _K8S_NAME.match(req.pod_name):
            raise CniError(proto.ERR_INVALID_ENV, "CNI_ARGS K8S_POD_NAME is not a valid "
                           f"pod name: {req.pod_name[:80]!r}")
    prev = conf.get("prevResult")
    if prev is not None and not isinstance(prev, dict):
        raise CniError(proto.ERR_INVALID_CONFIG, "'prevResult' must be an object")
    req.prev_result = prev
    return req


def parse_exec(raw: bytes) -> tuple[dict, bytes]:
    """The `pacific` shim's POST /exec body: (its CNI_* environment, its stdin).
    Entries are NUL-terminated KEY=VALUE, ended by an empty one (PATH_EXEC)."""
    if len(raw) > MAX_BODY:
        raise CniError(proto.ERR_PROTOCOL, f"request body larger than {MAX_BODY} bytes")
    env, i = {}, 0
    while True:
        j = raw.find(b"\0", i)
        if j < 0:
            raise CniError(proto.ERR_PROTOCOL, "exec request: the environment is not "
                           "terminated by an empty entry")
        if j == i:
            return env, raw[j + 1:]
        key, sep, value = raw[i:j].partition(b"=")
        if not sep or not key.startswith(b"CNI_"):
            raise CniError(proto.ERR_PROTOCOL, f"exec request: {raw[i:j][:40]!r} is not a "
                           "CNI_* variable")
        env[key.decode("ascii", "replace")] = value.decode("utf-8", "surrogateescape")
        i = j + 1


def _valid_attachments(conf: dict) -> set:
    """The union of the lists under either GC key (validate_config checked that
    at least one is there and that both are lists)."""
    out = set()
    for key in proto.GC_ATTACHMENT_KEYS:
        for i, item in enumerate(conf.get(key, [])):
            if not isinstance(item, dict) or not isinstance(item.get("containerID"), str) \
                    or not isinstance(item.get("ifname"), str):
                raise CniError(proto.ERR_INVALID_CONFIG, f"'{key}'[{i}] must be an object "
                               "with string 'containerID' and 'ifname'")
            out.add((item["containerID"], item["ifname"]))
    return out
