"""The node daemon's port settings, in the order the pod loop applies them.

A setting that can change while a pod runs (bandwidth, mirroring, ...) is one
module with a `podloop.PortSetting` subclass and one line in `build()`.
"""
from __future__ import annotations

from pacific.node.mirror import MirrorSetting
from pacific.node.portsetting import PortSetting
from pacific.node.qos import QosSetting


def build(args, ovs) -> list[PortSetting]:
    """The settings this daemon applies (args: pacific-node's parsed options)."""
    return [QosSetting(ovs), MirrorSetting(ovs, args.mirror_mode, ovs_rundir=args.ovs_rundir)]
