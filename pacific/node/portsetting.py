"""What one node-side port setting is (bandwidth, mirroring, ...): the pod loop
(podloop.py) applies every setting of `settings.build()` to each running pod's
port.  A module of its own, so the settings (qos.py, mirror.py) and the pod
loop, which builds them, import it without importing each other."""
from __future__ import annotations

from typing import Hashable

from pacific.node.attachment import PodAttachment


class PortSetting:
    name = ""
    # what wanted() is for a port that has none of this setting, as CNI ADD
    # makes every port (new veth, new OVS port): ADD applies only the settings
    # whose wanted() differs from it (PodLoop.apply_now)
    fresh: Hashable = None

    def start(self) -> None:
        """Once, before the loop runs (node-wide set-up such as mirror0)."""

    def wanted(self, pod: dict) -> Hashable:
        raise NotImplementedError

    def apply(self, att: PodAttachment, wanted: Hashable) -> None:
        raise NotImplementedError
