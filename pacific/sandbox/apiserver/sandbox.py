"""Start the API emulator for a `pacific.sandbox.cluster.Sandbox`.

    info = start_for_sandbox(sb)
    info.kubeconfig            # <sb.dir>/kubeconfig: https://127.0.0.1:<port> (root netns)
    info.kubeconfig_underlay   # <sb.dir>/kubeconfig-underlay: https://<central_ip>:6443,
                               # for processes in node namespaces
"""
import dataclasses
import json
import os
import ssl
import sys
import time
import urllib.request

from pacific import names
from pacific.sandbox.apiserver.kubeconfig import write_kubeconfig

_REPO_CRDS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "deploy", "crds")


@dataclasses.dataclass
class ApiServerInfo:
    pid: int
    url: str                 # root namespace URL
    underlay_url: str        # URL reachable from node namespaces
    kubeconfig: str
    kubeconfig_underlay: str
    token: str
    ca_file: str
    state_file: str | None


def apiserver_dir(sandbox) -> str:
    return os.path.join(sandbox.dir, "apiserver")


def kubeconfig_path(sandbox) -> str:
    return os.path.join(sandbox.dir, names.SANDBOX_KUBECONFIG)


def start_for_sandbox(sandbox, persist: bool = True, crd_dirs: list[str] | None = None,
                      timeout: float = 15.0, extra_args: list[str] | None = None) -> ApiServerInfo:
    """Spawn the emulator (tag names.SANDBOX_APISERVER_TAG) through `sandbox.spawn`,
    listening on 127.0.0.1:<free port> in the root namespace and on
    central_ip:KUBE_API_PORT inside the central namespace; write both kubeconfigs;
    return once it answers an authenticated request.  With persist (default) the
    objects live in <dir>/apiserver/state.json and survive a restart of the
    emulator (stop the tag, call this again).  crd_dirs defaults to the repo's
    deploy/crds when present."""
    d = apiserver_dir(sandbox)
    os.makedirs(d, mode=0o700, exist_ok=True)
    ready = os.path.join(d, "ready.json")
    if os.path.exists(ready):
        os.remove(ready)
    token_file = os.path.join(d, "token")
    state = os.path.join(d, "state.json") if persist else None
    if crd_dirs is None:
        crd_dirs = [p for p in [os.path.abspath(_REPO_CRDS)] if os.path.isdir(p)]
    argv = [sys.executable, "-m", "pacific.sandbox.apiserver",
            "--listen", "127.0.0.1:0",
            "--listen", f"{sandbox.central_ip}:{names.KUBE_API_PORT}@{sandbox.central_netns}",
            "--token-file", token_file, "--tls-dir", os.path.join(d, "tls"), "--ready-file", ready]
    if state:
        argv += ["--state-file", state]
    for c in crd_dirs:
        argv += ["--crd-dir", c]
    argv += list(extra_args or [])
    pid = sandbox.spawn(names.SANDBOX_APISERVER_TAG, argv)
    log = os.path.join(sandbox.dir, "services", f"{names.SANDBOX_APISERVER_TAG}.log")
    deadline = time.monotonic() + timeout
    while not os.path.exists(ready):
        if sandbox.daemon_pid(names.SANDBOX_APISERVER_TAG) is None:
            from pacific.sandbox.cluster import _tail
            raise RuntimeError(f"API emulator (pid {pid}) exited during start-up: "
                               f"{_tail(log)!r}; log {log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"API emulator (pid {pid}) did not start within {timeout:.0f} s; "
                               f"see {log}")
        time.sleep(0.05)
    with open(ready) as f:
        addrs = json.load(f)["addresses"]
    with open(token_file) as f:
        token = f.read().strip()
    ca = os.path.join(d, "tls", "ca.crt")
    url = f"https://127.0.0.1:{addrs[0]['port']}"
    underlay = f"https://{sandbox.central_ip}:{names.KUBE_API_PORT}"
    kc = write_kubeconfig(kubeconfig_path(sandbox), url, token, ca,
                          extra={"pacific-sandbox-underlay": underlay})
    kcu = write_kubeconfig(os.path.join(sandbox.dir, names.SANDBOX_KUBECONFIG_UNDERLAY), underlay, token, ca)
    wait_ready(url, token, ca, deadline - time.monotonic())
    return ApiServerInfo(pid, url, underlay, kc, kcu, token, ca, state)


def wait_ready(url: str, token: str, ca_file: str | None, timeout: float) -> None:
    """Poll GET /api until it answers 200 (raises RuntimeError after timeout)."""
    ctx = ssl.create_default_context(cafile=ca_file) if url.startswith("https") else None
    deadline = time.monotonic() + max(timeout, 0.5)
    last = None
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(url + "/api", headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=2, context=ctx) as r:
                if r.status == 200:
                    return
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise RuntimeError(f"API emulator at {url} does not answer: {last}")
