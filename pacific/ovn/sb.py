"""A narrow, long-lived replica of OVN Southbound, one per process, shared by
the features that read it (which chassis holds each centralized gateway port,
the transit address of a Service's gateway, the members the controller
admitted to a Service's egress SNAT).

    watch = SouthboundWatch(remote, address_sets="pacific_snat_").start()
    watch.subscribe(loop.kick)          # called after every change: must not block
    view = watch.view()                 # None until the first copy arrived
    view.holders["cr-lrp:egw:default"]  # -> "node2" (or None: nobody holds it)
    view.held_under("cr-lrp:egw:")      # -> {"default": "node2", ...}

One IDL connection (pacific.ovn.base) replicates only the chassisredirect and
patch Port_Bindings (an OVSDB condition: never the pods' ports), the Chassis
names and, when asked, IGMP snooping's groups (per switch: how many, and
their member ports, counted, for the controller's metrics) and the Address_Sets (the view keeps only those whose name
starts with the prefix asked for: every pod's address is in some set, and the
view is rebuilt on every change).  The ovs IDL reconnects by itself and
re-reads; the view is rebuilt in the connection thread after each change, so a
reader never sees a half-applied update.  Replaces polling SB with one-shot
queries (pacific.ovn.query stays for the command-line tools).
"""
from __future__ import annotations

import dataclasses
import ipaddress
import logging
import threading
from typing import Callable

from ovsdbapp.schema.ovn_southbound import impl_idl

from pacific.ovn.base import DEFAULT_TIMEOUT, ApiBase
from pacific.ovn.errors import OvnError

LOG = logging.getLogger(__name__)
RETRY = 1.0        # s between connection attempts while SB is not there


@dataclasses.dataclass(frozen=True)
class SbView:
    holders: dict[str, str | None]      # chassisredirect port -> chassis name holding it
    transits: dict[str, str]            # patch port -> its router address (mac column)
    address_sets: dict[str, frozenset]  # name -> addresses (those the watch was asked for)
    # patch port -> its IPv6 router address, for a port that has one (an IPv6 EgressIP's)
    transits6: dict[str, str] = dataclasses.field(default_factory=dict)
    # switch -> (multicast groups joined on it, member ports over every chassis):
    # IGMP snooping's table (OVN's own "mrouters" rows left out)
    multicast: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)

    def held_under(self, prefix: str) -> dict[str, str | None]:
        """The rest of each chassisredirect port's name after `prefix` -> its holder."""
        return _under(self.holders, prefix)

    def transits_under(self, prefix: str, version: int = 4) -> dict[str, str]:
        """The rest of each patch port's name after `prefix` -> its router
        address (IPv4; `version` 6: its IPv6 one, ports that have one)."""
        return _under(self.transits if version == 4 else self.transits6, prefix)


def _under(by_name: dict, prefix: str) -> dict:
    return {name[len(prefix):]: v for name, v in by_name.items() if name.startswith(prefix)}


class _SouthboundAPI(ApiBase, impl_idl.OvnSbApiIdlImpl):
    pass


def build_view(tables, address_sets: str | None) -> SbView:
    """The view of the replica's `tables` (ovs IDL tables: .rows of Row objects);
    the Address_Sets whose name starts with `address_sets` (None: none)."""
    chassis = {uuid: row.name for uuid, row in tables["Chassis"].rows.items()}
    holders, transits, transits6 = {}, {}, {}
    for row in tables["Port_Binding"].rows.values():
        if row.type == "chassisredirect":
            holders[row.logical_port] = chassis.get(row.chassis[0].uuid) if row.chassis else None
        elif row.type == "patch":
            for mac in row.mac:
                for part in mac.split()[1:]:
                    ip = ipaddress.ip_interface(part).ip
                    (transits if ip.version == 4 else transits6).setdefault(row.logical_port,
                                                                            str(ip))
    sets = ({} if address_sets is None else
            {row.name: frozenset(row.addresses) for row in tables["Address_Set"].rows.values()
             if row.name.startswith(address_sets)})
    return SbView(holders, transits, sets, transits6=transits6, multicast=_multicast(tables))


def _multicast(tables) -> dict[str, tuple[int, int]]:
    if "IGMP_Group" not in tables:
        return {}
    switch_of = {uuid: row.external_ids.get("name", str(uuid))
             for uuid, row in tables["Datapath_Binding"].rows.items()}
    groups: dict[str, set] = {}
    members: dict[str, int] = {}
    for row in tables["IGMP_Group"].rows.values():
        if row.address == "mrouters" or not row.datapath:
            continue
        sw = switch_of.get(row.datapath[0].uuid, "?")
        groups.setdefault(sw, set()).add(row.address)
        # the raw datum: its Port_Bindings (pods) are not in this replica, so
        # row.ports, which keeps only the rows it holds, is empty
        members[sw] = members.get(sw, 0) + len(row._data["ports"].values)
    return {sw: (len(g), members[sw]) for sw, g in groups.items()}


class SouthboundWatch:
    def __init__(self, remote: str, address_sets: str | None = None, multicast: bool = False,
                 timeout: float = DEFAULT_TIMEOUT):
        self.remote, self.address_sets, self.timeout = remote, address_sets, timeout
        self.multicast = multicast
        self._view: SbView | None = None
        self._subscribers: list[Callable[[], None]] = []
        self._api: _SouthboundAPI | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def subscribe(self, fn: Callable[[], None]) -> None:
        """`fn()` after every change of the view (in the connection thread)."""
        self._subscribers.append(fn)

    def view(self) -> SbView | None:
        return self._view

    def start(self) -> "SouthboundWatch":
        self._thread = threading.Thread(target=self._connect, name="sb-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 5)
        if self._api is not None:
            self._api.close()
            self._api = None

    def _connect(self) -> None:
        monitor = {"Port_Binding": ["logical_port", "type", "chassis", "mac"],
                   "Chassis": ["name"]}
        if self.multicast:
            # groups per Subnet, for the controller's metrics; with the columns of
            # each table's schema index (ovsdbapp indexes them: a column left out
            # breaks the IDL at the first deleted row)
            monitor["IGMP_Group"] = ["address", "datapath", "chassis", "ports"]
            monitor["Datapath_Binding"] = ["external_ids", "tunnel_key"]
        if self.address_sets is not None:
            monitor["Address_Set"] = ["name", "addresses"]
        conditions = {"Port_Binding": [["type", "==", "chassisredirect"],
                                       ["type", "==", "patch"]]}
        while not self._stop.is_set():
            try:
                api = _SouthboundAPI(self.remote, timeout=self.timeout, monitor=monitor,
                                     conditions=conditions, after_change=self._changed)
            except OvnError as e:
                LOG.warning("OVN Southbound %s not reachable (retrying): %s", self.remote, e)
                self._stop.wait(RETRY)
                continue
            if self._stop.is_set():
                api.close()
            else:
                self._api = api
            return

    def _changed(self, idl) -> None:
        self._view = build_view(idl.tables, self.address_sets)
        for fn in self._subscribers:
            try:
                fn()
            except Exception:     # a subscriber's bug must not stop the replica
                LOG.exception("southbound subscriber %r failed", fn)
