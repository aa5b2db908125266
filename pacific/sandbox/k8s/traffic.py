"""Traffic between two kubelet pods, watched across a disruption (a rolling
upgrade, a member killed): a ping and a TCP stream, the host's tools run in
the pods' network namespaces (found through their containers' pids).

    probe = Probe(sb, src_pod, dst_pod).start()
    ...                                  # the disruption
    res = probe.stop()                   # res.lost, res.stall, res.broken

The stream sends 100 bytes every 10 ms on one connection and "E" at its end;
its receiver records the longest time without data (`stall`, about 0.01 s when
nothing happened) and whether the connection broke before the end (`broken`:
why).
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pacific.sandbox.proc import SandboxError

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox

PORT = 9000
PING_INTERVAL = 0.02

RECEIVER = r"""
import json, signal, socket, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(1)
print("ready", flush=True)
s.settimeout(30)
c, _ = s.accept()
c.settimeout(0.1)
last = time.monotonic(); gap = 0.0; n = 0; err = None
while not stop:
    try:
        d = c.recv(65536)
    except socket.timeout:
        continue
    except OSError as e:
        err = str(e); break
    if not d:
        err = "closed by the sender before its end"; break
    now = time.monotonic(); gap = max(gap, now - last); last = now; n += len(d)
    if d.endswith(b"E"):       # the sender's end: a clean close
        break
if not err and stop:
    gap = max(gap, time.monotonic() - last)
print(json.dumps({"bytes": n, "stall": gap, "error": err}), flush=True)
"""

SENDER = r"""
import json, signal, socket, sys, time
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
c.settimeout(5)
n = 0; err = None
while not stop:
    try:
        c.sendall(b"x" * 100); n += 100
    except OSError as e:
        err = str(e); break
    time.sleep(0.01)
if not err:
    try:
        c.sendall(b"E")            # the end (the receiver takes the close as clean)
        c.shutdown(socket.SHUT_WR)
    except OSError as e:
        err = str(e)
print(json.dumps({"bytes": n, "error": err}), flush=True)
"""


@dataclass
class Result:
    sent: int            # pings, up to the last one answered
    received: int
    stall: float         # the stream's longest time without data, seconds
    broken: str | None   # why the stream's connection broke, None if it held
    stream_bytes: int

    @property
    def lost(self) -> int:
        return self.sent - self.received

    def __str__(self) -> str:
        return (f"ping {self.received}/{self.sent} received ({self.lost} lost), TCP stream "
                f"{'broken: ' + self.broken if self.broken else 'held'}, longest stall "
                f"{self.stall * 1000:.0f} ms")


def pod_pid(sb: "Sandbox", pod: dict) -> int:
    """The pid of a Running kubelet pod's first container (its network namespace
    is the pod's)."""
    from pacific.sandbox.k8s import kubelet
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    node = sb.node(pod["spec"]["nodeName"])
    for line in kubelet.ctr(sb, node, "task", "ls").splitlines()[1:]:
        f = line.split()
        if f and f[0] == cid:
            return int(f[1])
    raise SandboxError(f"no task of container {cid[:12]} on {node.name}")


def _in_pod(pid: int, argv: list[str]) -> list[str]:
    return ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv]


class Probe:
    def __init__(self, sb: "Sandbox", src: dict, dst: dict, port: int = PORT):
        self.src_pid, self.dst_pid = pod_pid(sb, src), pod_pid(sb, dst)
        self.dst_ip, self.port = dst["status"]["podIP"], port
        self.procs: dict[str, subprocess.Popen] = {}

    def _spawn(self, what: str, pid: int, argv: list[str]) -> subprocess.Popen:
        p = subprocess.Popen(_in_pod(pid, argv), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        self.procs[what] = p
        return p

    def start(self) -> "Probe":
        rx = self._spawn("receiver", self.dst_pid, [sys.executable, "-c", RECEIVER,
                                                    str(self.port)])
        if rx.stdout.readline().strip() != "ready":
            self._kill()
            raise SandboxError(f"the stream's receiver did not start: {rx.communicate()[0]!r}")
        self._spawn("sender", self.src_pid, [sys.executable, "-c", SENDER, self.dst_ip,
                                             str(self.port)])
        self._spawn("ping", self.src_pid, ["ping", "-n", "-i", str(PING_INTERVAL), self.dst_ip])
        return self

    def _kill(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)

    def stop(self) -> Result:
        try:
            self.procs["ping"].send_signal(signal.SIGINT)
            ping = self.procs["ping"].communicate(timeout=10)[0]
            self.procs["sender"].send_signal(signal.SIGTERM)
            tx = self.procs["sender"].communicate(timeout=10)[0]
            self.procs["receiver"].send_signal(signal.SIGTERM)
            rx_out = self.procs["receiver"].communicate(timeout=10)[0]
        finally:
            self._kill()
        # the replies by sequence number: a request still in flight when the
        # ping was stopped is not a loss (its statistics would count it)
        seqs = {int(x) for x in re.findall(r"icmp_seq=(\d+) ", ping)}
        if not seqs:
            raise SandboxError(f"no ping reply at all: {ping[-500:]!r}")
        try:
            rx = json.loads(rx_out.strip().splitlines()[-1])
            sent = json.loads(tx.strip().splitlines()[-1])
        except (ValueError, IndexError) as e:
            raise SandboxError(f"the stream said {rx_out!r} / {tx!r}") from e
        broken = rx["error"] or sent["error"]
        return Result(max(seqs), len(seqs), rx["stall"], broken, rx["bytes"])
