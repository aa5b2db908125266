"""Helpers shared by the CNI protocol tests: a recording backend behind the real
CniServer, and a runner that executes the plugin file exactly as a runtime does."""
import json
import os
import shutil
import subprocess
import threading
import time

from pacific.cni.plugin import CniError
from pacific.node.cniserver import CniServer

PLUGIN_SRC = os.path.join(os.path.dirname(__file__), "..", "..", "pacific", "cni", "plugin.py")

RESULT = {
    "interfaces": [{"name": "eth0", "mac": "0a:58:0a:10:00:05", "sandbox": "/run/netns/x",
                    "mtu": 1400}],
    "ips": [{"address": "10.16.0.5/16", "gateway": "10.16.0.1", "interface": 0,
             "version": "4"}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.16.0.1"}],
}


class RecordingBackend:
    """Answers like a healthy node daemon and records what it was asked."""

    def __init__(self):
        self.calls = []
        self.fail: CniError | Exception | None = None
        self.not_ready = False
        self.delay = 0.0
        self.active: dict[str, int] = {}
        self.max_active: dict[str, int] = {}
        self.total_max = 0
        self._mu = threading.Lock()

    def _enter(self, req):
        with self._mu:
            self.calls.append(req)
            n = self.active.get(req.container_id, 0) + 1
            self.active[req.container_id] = n
            self.max_active[req.container_id] = max(self.max_active.get(req.container_id, 0), n)
            self.total_max = max(self.total_max, sum(self.active.values()))
        if self.delay:
            time.sleep(self.delay)
        with self._mu:
            self.active[req.container_id] -= 1
        if self.fail is not None:
            raise self.fail

    def add(self, req):
        self._enter(req)
        return RESULT

    def delete(self, req):
        self._enter(req)

    def check(self, req):
        self._enter(req)

    def gc(self, req):
        self._enter(req)

    def status(self):
        if self.not_ready:
            raise CniError(50, "ovn-controller is not connected")


def start_server(tmp_path, backend=None):
    backend = backend or RecordingBackend()
    path = str(tmp_path / "run" / "cni.sock")
    server = CniServer(path, backend)
    server.start()
    return server, backend


FLAVOURS = ("shim", "python")   # the `pacific` executable: pacific/cni/shim.c or the launcher


def install_plugin(tmp_path, flavour: str = "shim") -> str:
    """Install the plugin into a bin dir exactly as the node daemon does: the
    shim (which `make setup` builds: missing, the test fails) or only Python."""
    from pacific.node import bootstrap
    if flavour == "shim":
        assert bootstrap.shim_binary(), f"{bootstrap.SHIM_BINARY} is not built: make setup"
    return bootstrap.install_plugin(str(tmp_path / "bin"), verify=False,
                                    shim=flavour == "shim")


def copy_plugin_file(tmp_path) -> str:
    """plugin.py copied alone as the executable (it also runs as a script)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    dst = str(bindir / "pacific")
    shutil.copy(PLUGIN_SRC, dst)
    os.chmod(dst, 0o755)
    return dst


def conf(sock, version="1.0.0", **extra):
    c = {"cniVersion": version, "name": "pacific", "type": "pacific", "server_socket": sock}
    c.update(extra)
    return c


def run_plugin(plugin, command, config, container="c0ffee01", netns="/run/netns/x",
               ifname="eth0", args="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;"
               "K8S_POD_NAME=p1;K8S_POD_UID=u1", stdin=None, env_override=None):
    env = {"PATH": "/usr/bin:/bin", "CNI_COMMAND": command, "CNI_CONTAINERID": container,
           "CNI_NETNS": netns, "CNI_IFNAME": ifname, "CNI_ARGS": args,
           "CNI_PATH": "/opt/cni/bin"}
    for k, v in (env_override or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    data = stdin if stdin is not None else json.dumps(config).encode()
    p = subprocess.run([plugin], input=data, env=env, capture_output=True, timeout=30)
    out = json.loads(p.stdout) if p.stdout.strip() else None
    return p.returncode, out, p.stderr.decode()
