"""Multicast senders and receivers in pod network namespaces, for
tests/e2e/test_multicast.py, test_attacks.py and bench/bench_multicast.py.

    rx = Receiver(sb, netns, GROUP, PORT)          # joined (IGMPv3); --igmp 2: igmp=2
    tag = deliver(sb, sender_netns, GROUP, PORT, [rx, ...])   # warm, then 20 counted
    rx.wire(tag)   # sequence numbers of `tag` that reached the pod's eth0 at all
    rx.got(tag)    # ... that its joined socket received
    rx.leave(); rx.join(); rx.close()

`wire` is what the network delivered (a packet socket sees every frame, joined
or not); `got` what an application would read.
"""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time

from controller_fixtures import wait_until

MCASTCHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcastcheck.py")
_tags = itertools.count()


def new_tag(prefix: str = "t") -> str:
    return f"{prefix}{os.getpid()}x{next(_tags)}"


class Receiver:
    def __init__(self, sb, netns: str, group: str, port: int, igmp: int = 3, join: bool = True,
                 name: str = ""):
        self.name = name or netns
        argv = ["ip", "netns", "exec", netns, sys.executable, MCASTCHECK, "recv", group, str(port),
                "--igmp", str(igmp)] + ([] if join else ["--no-join"])
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self._lock = threading.Lock()
        self._lines: list[tuple] = []     # (kind, src, seq, tag, monotonic time read)
        self._states: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_until(lambda: self._states or self.proc.poll() is not None, 15,
                   what=f"receiver {self.name} started")
        if self.proc.poll() is not None:
            raise RuntimeError(f"receiver {self.name}: {self.proc.stderr.read()}")

    def _read(self):
        for line in self.proc.stdout:
            parts = line.split()
            with self._lock:
                if len(parts) == 4 and parts[0] in ("wire", "got"):
                    self._lines.append((*parts, time.monotonic()))
                elif parts:
                    self._states.append(parts[0])

    def _seqs(self, kind: str, tag: str, src: str | None = None) -> set[int]:
        with self._lock:
            return {int(seq) for k, s, seq, t, _ in self._lines
                    if k == kind and t == tag and (src is None or s == src)}

    def wire(self, tag: str, src: str | None = None) -> set[int]:
        return self._seqs("wire", tag, src)

    def got(self, tag: str, src: str | None = None) -> set[int]:
        return self._seqs("got", tag, src)

    def any_wire(self, prefix: str) -> bool:
        with self._lock:
            return any(k == "wire" and t.startswith(prefix) for k, _, _, t, _ in self._lines)

    def last_wire(self, tag: str) -> float | None:
        """When the last datagram of `tag` reached eth0 (monotonic), None: none did."""
        with self._lock:
            return max((at for k, _, _, t, at in self._lines if k == "wire" and t == tag),
                       default=None)

    def _say(self, cmd: str, state: str) -> None:
        with self._lock:
            n = self._states.count(state)
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        wait_until(lambda: self._states.count(state) > n, 10, what=f"{self.name} {cmd}")

    def leave(self) -> None:
        self._say("leave", "left")

    def join(self) -> None:
        self._say("join", "joined")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def send(sb, netns: str, group: str, port: int, count: int, tag: str, interval: float = 0.01,
         ttl: int = 8, size: int = 0) -> None:
    sb.exec(netns, [sys.executable, MCASTCHECK, "send", group, str(port), str(count),
                    str(interval), str(ttl), str(size), tag], timeout=60 + count * interval)


def none_reach(sb, netns: str, group: str, port: int, receivers: list, count: int = 3,
               control=None) -> bool:
    """Send `count` datagrams; True if none reached any receiver's eth0 by the
    time the trailer of `control` ((sender netns, receivers that must get it))
    arrived, or, with no control possible (every receiver must get nothing),
    0.3 s after the last."""
    tag = new_tag()
    send(sb, netns, group, port, count, tag, interval=0.02)
    _trailer(sb, control, group, port, 0.3)
    return not any(rx.wire(tag) for rx in receivers)


def _trailer(sb, control, group: str, port: int, window: float) -> None:
    """The end of a window for what must not arrive: datagrams from
    control's sender (netns, receivers) until each of its receivers saw one;
    with no control possible (no receiver may get anything), `window` s."""
    if control:
        warm(sb, control[0], group, port, control[1])
    else:
        time.sleep(window)    # no receiver may get anything here: no control to wait on


def warm(sb, netns: str, group: str, port: int, receivers: list, timeout: float = 20.0) -> None:
    """One datagram every 0.2 s until each receiver saw one on its wire: their
    joins reached every chassis on the way."""
    prefix = new_tag("warm")
    n = itertools.count()

    def all_there():
        if all(rx.any_wire(prefix) for rx in receivers):
            return True
        send(sb, netns, group, port, 1, f"{prefix}-{next(n)}", interval=0)
        return False
    wait_until(all_there, timeout, interval=0.2,
               what="warm-up datagrams reached " + ", ".join(rx.name for rx in receivers))


def deliver(sb, netns: str, group: str, port: int, expect: list, count: int = 20,
            control=None) -> str:
    """Warm the path to `expect`, send `count` datagrams with a new tag, wait
    until each receiver of `expect` saw at least all but one of them on its wire
    (the userspace datapath may lose one).  Then, for what must not arrive, a
    trailer: datagrams of another tag, sent after them the same way until each
    receiver of `expect` saw one (with nothing expected: from `control`'s
    sender to its receivers, (netns, receivers)): by then the first tag's
    datagrams went wherever the network delivers them.  With neither, 1 s.
    Returns the tag."""
    if expect:
        warm(sb, netns, group, port, expect)
    tag = new_tag()
    send(sb, netns, group, port, count, tag)
    if expect:
        wait_until(lambda: all(len(rx.wire(tag)) >= count - 1 for rx in expect), 10,
                   what=f"{count} datagrams {tag} at " + ", ".join(rx.name for rx in expect))
    _trailer(sb, (netns, expect) if expect else control, group, port, 1.0)
    return tag
