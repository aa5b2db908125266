"""What a node's mirror0 shows: tcpdump on it, for the mirroring tests."""
from __future__ import annotations

import subprocess
import time

from pacific import names


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

    def stop(self) -> str:
        time.sleep(0.2)   # what is in flight reaches the capture
        self.p.terminate()
        out, _ = self.p.communicate(10)
        return out
