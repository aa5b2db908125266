"""Execute CNI plugins the way a container runtime (libcni) does.

Used by the sandbox pod commands and by the benchmark (which runs Debian's
reference `bridge` + `host-local` through the very same code): a conflist's
plugins run in order for ADD (each gets the previous result as prevResult) and
in reverse for DEL, each as a child process with the CNI_* environment, its
configuration on stdin, the result or error JSON read from stdout.
"""
from __future__ import annotations

import ctypes
import json
import os
import random
import subprocess
import time
from dataclasses import dataclass, field


class CniCallError(RuntimeError):
    def __init__(self, plugin: str, command: str, rc: int, error: dict | None, stderr: str):
        self.plugin, self.command, self.rc, self.error, self.stderr = (
            plugin, command, rc, error or {}, stderr)
        msg = self.error.get("msg") or stderr.strip()[-300:] or f"exit status {rc}"
        code = self.error.get("code", "?")
        details = f" ({self.error['details']})" if self.error.get("details") else ""
        super().__init__(f"CNI {command} by plugin {plugin!r} failed: code {code}: {msg}{details}")

    @property
    def code(self) -> int | None:
        return self.error.get("code")


@dataclass
class Attachment:
    container_id: str
    netns: str
    ifname: str = "eth0"
    args: dict = field(default_factory=dict)   # CNI_ARGS keys (K8S_POD_NAMESPACE, ...)


def k8s_args(namespace: str, name: str, uid: str, container_id: str) -> dict:
    """CNI_ARGS as containerd's CRI plugin sends them."""
    return {"IgnoreUnknown": "1", "K8S_POD_NAMESPACE": namespace, "K8S_POD_NAME": name,
            "K8S_POD_INFRA_CONTAINER_ID": container_id, "K8S_POD_UID": uid}


def new_container_id() -> str:
    return os.urandom(32).hex()


def _cni_args(args: dict) -> str:
    items = list(args.items())
    random.shuffle(items)  # containerd's order is not stable; the plugin must not care
    return ";".join(f"{k}={v}" for k, v in items)


_setns = ctypes.CDLL(None, use_errno=True).setns  # resolved before any fork


def _enter_netns(path: str):
    """preexec_fn: move the child (after fork, before exec) into network namespace
    `path`.  Only async-signal-safe calls, no Python locks: safe with threads."""
    def enter():
        fd = os.open(path, os.O_RDONLY)
        if _setns(fd, 0x40000000) != 0:
            os._exit(121)
        os.close(fd)
    return enter


def exec_plugin(bin_dirs: list[str], plugin_type: str, command: str, conf: dict,
                att: Attachment | None, timeout: float = 240.0,
                run_in_netns: str | None = None) -> dict | None:
    """Run one plugin binary; returns its parsed stdout (None if empty).
    run_in_netns: path of the network namespace the plugin itself runs in (the
    runtime's "host" namespace; default: the caller's).
    Raises CniCallError on a non-zero exit."""
    path = next((os.path.join(d, plugin_type) for d in bin_dirs
                 if os.access(os.path.join(d, plugin_type), os.X_OK)), None)
    if path is None:
        raise CniCallError(plugin_type, command, -1, {"msg": f"plugin {plugin_type!r} not "
                           f"found in {':'.join(bin_dirs)}"}, "")
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
           "CNI_COMMAND": command, "CNI_PATH": ":".join(bin_dirs)}
    if att is not None:
        env.update(CNI_CONTAINERID=att.container_id, CNI_NETNS=att.netns,
                   CNI_IFNAME=att.ifname, CNI_ARGS=_cni_args(att.args))
    p = subprocess.run([path], input=json.dumps(conf).encode(), env=env,
                       capture_output=True, timeout=timeout,
                       preexec_fn=_enter_netns(run_in_netns) if run_in_netns else None)
    out = None
    if p.stdout.strip():
        try:
            out = json.loads(p.stdout)
        except ValueError:
            out = {"msg": f"unparseable output: {p.stdout[:200]!r}"}
    if p.returncode != 0:
        raise CniCallError(plugin_type, command, p.returncode, out, p.stderr.decode(
            errors="replace"))
    return out


def load_conflist(path: str) -> dict:
    with open(path) as f:
        conf = json.load(f)
    if not isinstance(conf.get("plugins"), list) or not conf["plugins"]:
        raise ValueError(f"{path}: not a conflist (no 'plugins')")
    return conf


def _plugin_conf(conflist: dict, plugin: dict, prev: dict | None) -> dict:
    conf = dict(plugin)
    conf["cniVersion"] = conflist["cniVersion"]
    conf["name"] = conflist["name"]
    if prev is not None:
        conf["prevResult"] = prev
    return conf


def add(conflist: dict, bin_dirs: list[str], att: Attachment, timeout: float = 240.0,
        run_in_netns: str | None = None) -> dict:
    """ADD through every plugin of the conflist; returns the last result."""
    result = None
    for plugin in conflist["plugins"]:
        result = exec_plugin(bin_dirs, plugin["type"], "ADD",
                             _plugin_conf(conflist, plugin, result), att, timeout,
                             run_in_netns)
    return result or {}


def delete(conflist: dict, bin_dirs: list[str], att: Attachment, timeout: float = 240.0,
           run_in_netns: str | None = None) -> None:
    """DEL through every plugin in reverse order."""
    for plugin in reversed(conflist["plugins"]):
        exec_plugin(bin_dirs, plugin["type"], "DEL", _plugin_conf(conflist, plugin, None),
                    att, timeout, run_in_netns)


def timed(fn, *args, **kw) -> tuple[float, object]:
    t0 = time.perf_counter()
    r = fn(*args, **kw)
    return time.perf_counter() - t0, r
