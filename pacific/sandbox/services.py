"""The one hook for starting services at the end of `Sandbox.up()`.

`Sandbox.up(services=None)` runs, in order, every callable in DEFAULT_SERVICES once
the network is ready (chassis registered, tunnels warm).  Each callable receives
the sandbox and should start its daemon with `sandbox.spawn(tag, argv, netns=...)`
(so `down()` stops it) and wait until it answers.  To add a component to the
sandbox (API emulator, controller, node daemons), append its starter here:

    def start_apiserver(sb):
        sb.spawn("apiserver", [sys.executable, "-m", "pacific.sandbox.apiserver", ...],
                 netns=sb.central_netns)

    DEFAULT_SERVICES.append(start_apiserver)

Tests that want the bare network pass `services=()`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox

DEFAULT_SERVICES: list[Callable[["Sandbox"], None]] = []
