"""How long this chassis' BFD sessions with the other chassis have been up, from
the node's own Open_vSwitch database (the tunnel Interfaces ovn-controller
enables BFD on), kept current by the IDL's connection thread.

Why: OVN's claim race (decision 0040).  A gateway chassis coming back (its
link, or its ovs-vswitchd) brings its BFD sessions up one by one; while the
session with a compute chassis is up and the one with the chassis that took
over is not yet, its ovn-controller sees itself as the best live member of
every HA group it belongs to and claims them all, for the ~0.1-1 s until the
other session comes up.  Southbound then names it as holder of addresses it
must not take, and the real holder would give them up.  pacific-node acts on
the claim only where it is not that race:

    bfd.settled()          # some session up SETTLE s: this node is not just coming back
    bfd.peer_settled(ch)   # the session with chassis `ch` up SETTLE s (or none to it)
    bfd.settles_in()       # s until settled() can turn True, None: no session up

A chassis without any BFD session (no HA group has two members) is settled:
there is no race without a second claimant.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from ovs.db import idl as ovs_idl

SETTLE = 2.0        # s a session must be up before its end counts as back (0.1-1 s race)
TUNNEL_PREFIX = "ovn-"
CHASSIS_ID = "ovn-chassis-id"     # on a tunnel Port: "<chassis>@<remote ip>%<local ip>"


class BfdSessions:
    def __init__(self, on_change: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._lock = threading.Lock()
        self._up: dict[str, float | None] = {}     # tunnel -> monotonic time it came up, None: down
        self._chassis: dict[str, str] = {}         # tunnel -> the chassis at its far end
        self._on_change, self._clock = on_change, clock
        self._initial = False      # replaying the rows there before the watch

    def watch(self, ovs) -> "BfdSessions":
        """Follow `ovs` (pacific.ovn.ovs.OvsAPI): Port rows say which chassis a
        tunnel leads to, Interface rows its BFD state.  Sessions already up when
        the watch starts count as up long ago (a restarted pacific-node)."""
        self._initial = True
        try:
            ovs.watch_rows("Port", self._port)
            ovs.watch_rows("Interface", self._interface)
        finally:
            self._initial = False
        return self

    def unwatch(self, ovs) -> None:
        ovs.idl.remove_row_watcher("Port", self._port)
        ovs.idl.remove_row_watcher("Interface", self._interface)

    # -- the IDL's connection thread ---------------------------------------------
    def _port(self, event, row, updates) -> None:
        if not row.name.startswith(TUNNEL_PREFIX):
            return
        with self._lock:
            if event == ovs_idl.ROW_DELETE:
                self._chassis.pop(row.name, None)
            else:
                chassis = (row.external_ids or {}).get(CHASSIS_ID, "").split("@", 1)[0]
                if chassis:
                    self._chassis[row.name] = chassis

    def _interface(self, event, row, updates) -> None:
        if not row.name.startswith(TUNNEL_PREFIX):
            return
        if event == ovs_idl.ROW_UPDATE and updates is not None and not (
                "bfd_status" in updates._data or "bfd" in updates._data):
            return
        enabled = event != ovs_idl.ROW_DELETE and (row.bfd or {}).get("enable") == "true"
        up = enabled and (row.bfd_status or {}).get("forwarding") == "true"
        with self._lock:
            was = self._up.get(row.name, "absent")
            if not enabled:
                self._up.pop(row.name, None)
            elif not up:
                self._up[row.name] = None
            elif was is None or was == "absent":
                self._up[row.name] = float("-inf") if self._initial else self._clock()
            changed = self._up.get(row.name, "absent") != was
        if changed and not self._initial and self._on_change is not None:
            self._on_change()

    # -- readers ------------------------------------------------------------------
    def settled(self) -> bool:
        with self._lock:
            ups = list(self._up.values())
        return self._any_settled(ups)

    def peer_settled(self, chassis: str) -> bool:
        with self._lock:
            ups = [t for name, t in self._up.items() if self._chassis.get(name) == chassis]
        return self._any_settled(ups)

    def _any_settled(self, ups: list[float | None]) -> bool:
        """No session at all (nothing to race with), or one up SETTLE s."""
        now = self._clock()
        return not ups or any(t is not None and now - t >= SETTLE for t in ups)

    def settles_in(self) -> float | None:
        now = self._clock()
        with self._lock:
            ups = [t for t in self._up.values() if t is not None]
        return max(0.0, min(t + SETTLE - now for t in ups)) if ups else None
