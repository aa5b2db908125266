"""A call to an OVS/OVN daemon's unixctl control socket (what `ovs-appctl -t
SOCKET COMMAND` does), from Python.

JSON-RPC 1.0 over the unix socket: {"method", "params", "id"} -> {"result",
"error", "id"}.  ovs.unixctl.client.UnixctlClient speaks the same but blocks
without a timeout; readiness must answer even when ovn-controller hangs, so
this uses a socket timeout instead (and avoids forking ovs-appctl per call).
"""
from __future__ import annotations

import json
import os
import socket


class UnixctlError(OSError):
    """The daemon did not answer, or answered an error; str() says which."""


def call(path: str, method: str, params: list[str] | tuple = (), timeout: float = 5.0) -> str:
    """The daemon's text answer to `method` (e.g. "connection-status")."""
    request = json.dumps({"method": method, "params": list(params), "id": 0}).encode()
    decoder = json.JSONDecoder()
    buf = ""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(path)
            s.sendall(request)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    raise UnixctlError(f"{path}: connection closed before an answer to {method}")
                buf += chunk.decode("utf-8", "replace")
                try:
                    reply, _ = decoder.raw_decode(buf.lstrip())
                    break
                except ValueError:
                    continue     # not complete yet
    except socket.timeout:
        raise UnixctlError(f"{path}: no answer to {method} within {timeout:g} s") from None
    except UnixctlError:
        raise
    except OSError as e:
        raise UnixctlError(f"{path}: {e.strerror or e}") from None
    if not isinstance(reply, dict):
        raise UnixctlError(f"{path}: malformed answer to {method}")
    if reply.get("error") is not None:
        raise UnixctlError(f"{path}: {method} failed: {str(reply['error']).strip()}")
    return str(reply.get("result") or "")


def vswitchd_ctl(rundir: str) -> str | None:
    """ovs-vswitchd's unixctl socket: <rundir>/ovs-vswitchd.ctl when it was
    started with --unixctl there, else ovs-vswitchd.<pid>.ctl from its pidfile."""
    fixed = os.path.join(rundir, "ovs-vswitchd.ctl")
    if os.path.exists(fixed):
        return fixed
    try:
        with open(os.path.join(rundir, "ovs-vswitchd.pid")) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    path = os.path.join(rundir, f"ovs-vswitchd.{pid}.ctl")
    return path if os.path.exists(path) else None
