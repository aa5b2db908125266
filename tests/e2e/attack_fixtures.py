"""The attacker of tests/e2e/test_attacks.py: an ordinary tenant of a shared
cluster, a ServiceAccount bound to the `edit` ClusterRole in its own namespace
only, acting through the API server with impersonation (what
`kubectl --as=system:serviceaccount:NS:tenant` does).

    admin = client.load(k8s.kubeconfig_path(sb))
    atk = tenant(sb, admin, "atk")            # namespace + ServiceAccount + RoleBinding
    pod = tenant_pod(sb, atk, admin, "atk", "p1", "node1")       # created by the tenant
    err = refused_pod(sb, atk, admin, "atk", "p2", "node1", annotations={...})
    serve(sb, "vic", "v1", PORT); reach(sb, pod.netns, "tcp", ip, PORT)
"""
from __future__ import annotations

import concurrent.futures
import os
import sys

from controller_fixtures import wait_until
from probes import ask, reach  # noqa: F401 (the attack modules use them as af.ask, af.reach)

from pacific import contract
from pacific.kube import client
from pacific.kube import errors as kerr
from pacific.kube import resources as r
from pacific.sandbox import cnipods
from pacific.sandbox.k8s import sandbox as k8s

NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
SA = "tenant"


def admin_api(sb):
    return client.load(k8s.kubeconfig_path(sb))


def tenant(sb, admin, ns: str):
    """An API client acting as ServiceAccount `tenant` of `ns`, which holds
    `edit` there and nothing anywhere else (the namespace, the account and the
    binding are the administrator's)."""
    for res, body, where in (
            (r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
             None),
            (r.SERVICEACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount",
                                 "metadata": {"name": SA, "namespace": ns}}, ns),
            (r.ROLEBINDINGS, {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "tenant-edit", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "edit"},
                "subjects": [{"kind": "ServiceAccount", "name": SA, "namespace": ns}]}, ns)):
        try:
            r.create(admin, res, body, namespace=where)
        except kerr.AlreadyExists:
            pass
    # pods need the namespace's default ServiceAccount (ServiceAccount admission)
    wait_until(lambda: r.get(admin, r.SERVICEACCOUNTS, "default", ns) is not None, 60,
               what=f"ServiceAccount {ns}/default")
    api = client.load(k8s.kubeconfig_path(sb))
    api.set_default_header("Impersonate-User", f"system:serviceaccount:{ns}:{SA}")
    return api


def pod_body(ns: str, name: str, node: str | None, annotations=None, labels=None) -> dict:
    spec = {"containers": [{"name": "app", "image": "localhost/busybox:latest",
                            "imagePullPolicy": "IfNotPresent"}],
            "terminationGracePeriodSeconds": 0, "automountServiceAccountToken": False}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": dict(labels or {}),
                         "annotations": dict(annotations or {})},
            "spec": spec}


def tenant_pod(sb, api, admin, ns, name, node=None, annotations=None, labels=None,
               timeout: float = 120.0):
    """A pod the tenant creates (its own api), once Running and Ready."""
    node = sb.node(node).name if node else None
    pod = r.create(api, r.PODS, pod_body(ns, name, node, annotations, labels), namespace=ns)
    return cnipods.wait_running(sb, admin, ns, name, pod["metadata"]["uid"], timeout)


def allocation_refused(admin, ns: str, name: str, timeout: float = 60.0) -> str:
    """The controller's refusal of a pod's request (its allocation error), once written."""
    def refused():
        pod = r.get(admin, r.PODS, name, ns)
        return pod is not None and contract.allocation_error(pod)
    return wait_until(refused, timeout, what=f"allocation error on pod {ns}/{name}")


def events_of(admin, ns: str, name: str) -> list[dict]:
    return [e for e in r.list_(admin, r.EVENTS, ns)[0]
            if (e.get("involvedObject") or {}).get("name") == name]


def serve(sb, ns: str, name: str, port: int) -> None:
    """netcheck's TCP+UDP echo in the pod, answering "<name> <client ip>"."""
    cnipods.detach_pod(sb, ns, name, [sys.executable, NETCHECK, "serve", str(port), name])


def pinged(sb, netns: str, ip: str) -> bool:
    return sb.exec(netns, ["ping", "-c1", "-W1", ip], check=False).returncode == 0


# --- probes of the control plane and the underlay (sections 5, 7, underlay spoofing) ---
_OVSDB_LIST_DBS = r'''
import json, socket, sys
ip, port, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
try:
    s = socket.create_connection((ip, port), timeout=timeout)
    s.sendall(json.dumps({"method": "list_dbs", "params": [], "id": 0}).encode())
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
        try:
            print(json.dumps(json.loads(buf)["result"]))
            sys.exit(0)
        except ValueError:
            continue
    sys.exit(1)
except OSError as e:
    print(f"no answer: {e}")
    sys.exit(1)
'''


def ovsdb_dbs(sb, netns: str, ip: str, port: int, timeout: float = 3.0) -> list | None:
    """The databases an OVSDB server at ip:port lists to a client in `netns`
    (plain TCP: the JSON-RPC `list_dbs`), None if it cannot be talked to."""
    import json
    p = sb.exec(netns, [sys.executable, "-c", _OVSDB_LIST_DBS, ip, str(port), str(timeout)],
                check=False, timeout=timeout + 10)
    return json.loads(p.stdout) if p.returncode == 0 else None


def in_parallel(probes: dict) -> dict:
    """label -> what each zero-argument probe returned, all run at once: a
    blocked probe waits its whole timeout, so ten of them one after another
    would wait ten times."""
    with concurrent.futures.ThreadPoolExecutor(len(probes)) as pool:
        running = {label: pool.submit(probe) for label, probe in probes.items()}
        return {label: f.result() for label, f in running.items()}


def tcp_connects(sb, netns: str, ip: str, port: int, timeout: float = 3.0) -> bool:
    """A TCP handshake to ip:port from `netns` completes (whatever speaks there)."""
    script = ("import socket, sys\n"
              "try:\n"
              "    socket.create_connection((sys.argv[1], int(sys.argv[2])), "
              "timeout=float(sys.argv[3])).close()\n"
              "except OSError:\n"
              "    sys.exit(1)\n")
    return sb.exec(netns, [sys.executable, "-c", script, ip, str(port), str(timeout)],
                   check=False, timeout=timeout + 10).returncode == 0


def http_status(sb, netns: str, ip: str, port: int, path: str = "/healthz",
                timeout: float = 3.0) -> int | None:
    """The HTTP status of GET http://ip:port/path from `netns`, None if nothing answered."""
    script = ("import sys, urllib.request, urllib.error\n"
              "o = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
              "try:\n"
              "    print(o.open(sys.argv[1], timeout=float(sys.argv[2])).status)\n"
              "except urllib.error.HTTPError as e:\n"
              "    print(e.code)\n"
              "except OSError:\n"
              "    sys.exit(1)\n")
    p = sb.exec(netns, [sys.executable, "-c", script, f"http://{ip}:{port}{path}", str(timeout)],
                check=False, timeout=timeout + 10)
    return int(p.stdout.strip()) if p.returncode == 0 else None


_SPOOF = r'''
import socket, struct, sys
src, dst, port, payload = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].encode()
udp = struct.pack("!HHHH", 40000, port, 8 + len(payload), 0) + payload   # checksum 0: none
total = 20 + len(udp)
hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0x1234, 0, 64, 17, 0,
                  socket.inet_aton(src), socket.inet_aton(dst))
s = 0
for i in range(0, 20, 2):
    s += (hdr[i] << 8) + hdr[i + 1]
while s >> 16:
    s = (s & 0xFFFF) + (s >> 16)
hdr = hdr[:10] + struct.pack("!H", ~s & 0xFFFF) + hdr[12:]
with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as raw:
    raw.sendto(hdr + udp, (dst, 0))          # IPPROTO_RAW: our header, our source address
'''


def send_spoofed_udp(sb, netns: str, src: str, dst: str, port: int, payload: str) -> None:
    """One UDP datagram from `netns` to dst:port whose IP source is `src`
    (a raw socket writes the whole IPv4 header: any source address)."""
    sb.exec(netns, [sys.executable, "-c", _SPOOF, src, dst, str(port), payload], timeout=30)


class UdpSink:
    """A UDP listener in a netns that records every datagram it receives
    ("<payload> <source address>" per line), read back with `lines()`."""
    _SCRIPT = ("import socket, sys\n"
               "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
               "s.bind(('0.0.0.0', int(sys.argv[1])))\n"
               "print('ready', flush=True)\n"
               "while True:\n"
               "    data, peer = s.recvfrom(4096)\n"
               "    print(data.decode(errors='replace'), peer[0], flush=True)\n")

    def __init__(self, netns: str, port: int):
        import subprocess
        import threading
        self.port = port
        self.proc = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c",
                                      self._SCRIPT, str(port)], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"
        self._lines: list[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self._lock:
                self._lines.append(line.strip())

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def close(self):
        self.proc.kill()
        self.proc.wait()


# -- 8. mirror0 (test_attacks section 8) ----------------------------------------------------

class MirrorCapture:
    """tcpdump on a node's mirror0 (in its host network namespace), every frame
    with its Ethernet header, one line each; `saw(*parts)` asks whether one line
    holds all of `parts`; `stop()` ends it and returns the lines."""

    def __init__(self, sb, node: str):
        import subprocess
        import threading
        from pacific import names
        self.p = subprocess.Popen(["ip", "netns", "exec", sb.node(node).netns, "tcpdump", "-nnel",
                                   "-U", "-i", names.MIRROR_PORT], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._lock = threading.Lock()
        errs = []
        for line in self.p.stderr:             # "listening on mirror0 ..." once it captures
            errs.append(line)
            if "listening on" in line:
                break
        else:
            self.p.wait()
            raise AssertionError(f"tcpdump on {names.MIRROR_PORT} of {node} did not start: {errs}")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.p.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def saw(self, *parts: str) -> bool:
        with self._lock:
            return any(all(p in line for p in parts) for line in self.lines)

    def stop(self) -> list[str]:
        self.p.terminate()
        self.p.wait(30)
        self._reader.join(30)
        with self._lock:
            return list(self.lines)


def names_host(line: str, ip: str, mac: str) -> bool:
    """Whether a tcpdump -nne line names the address `ip` (also as ip.port) or `mac`."""
    import re
    return bool(re.search(rf"(?<![\d.]){re.escape(ip)}(?!\d)", line)) or mac.lower() in line.lower()


def pinged_sized(sb, netns: str, ip: str, size: int) -> bool:
    return sb.exec(netns, ["ping", "-c1", "-W1", "-s", str(size), ip], check=False).returncode == 0
