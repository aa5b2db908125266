"""What a node's mirror0 shows: tcpdump on it, for the mirroring tests."""
from __future__ import annotations

import subprocess
import threading
import time

from pacific import names
from waiting import wait_until


class Capture:
    """tcpdump -i mirror0 on a node (`expr`: its filter, "ip6" for IPv6),
    lines of what it saw."""

    def __init__(self, sb, node, expr: str = "ip"):
        self.p = subprocess.Popen(["ip", "netns", "exec", sb.node(node).netns, "tcpdump", "-nli",
                                   names.MIRROR_PORT, "-U", expr], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        lines = [self.p.stderr.readline() for _ in range(2)]   # "listening on ..." once it captures
        if not any("listening on" in line for line in lines):
            self.p.kill()
            raise AssertionError(f"tcpdump on {names.MIRROR_PORT} did not start: {lines}")
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.lines.append(line)

    def seen(self) -> str:
        return "".join(self.lines)

    def wait_for(self, *texts: str, timeout: float = 10.0) -> str:
        """What it saw, once it holds every one of `texts`."""
        return wait_until(lambda: all(t in self.seen() for t in texts) and self.seen(), timeout,
                          interval=0.05, what=f"{', '.join(texts)} on {names.MIRROR_PORT}")

    def stop(self) -> str:
        time.sleep(0.2)   # what is in flight reaches the capture
        self.p.terminate()
        self.p.wait(10)
        self._reader.join(10)
        return self.seen()
