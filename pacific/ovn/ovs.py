"""A node's local Open_vSwitch database, for Pacific, on ovsdbapp.

``OvsAPI`` *is* an ovsdbapp ``OvsdbIdl`` (``add_br``, ``del_port``,
``iface_set_external_id``, ``db_set``, ``db_find`` ...), with its own IDL
connection, Pacific's error model (:mod:`pacific.ovn.errors`), helpers for
what the node daemon does, and waiting on a row condition through IDL events
(no polling, no subprocess).

Usage::

    from pacific import names
    from pacific.ovn.ovs import OvsAPI

    ovs = OvsAPI("unix:/run/pacific-sandbox/default/node1/db.sock")

    # ovn-controller bootstrap (Open_vSwitch table external_ids)
    ovs.commit(ovs.set_ovs_external_ids({
        "system-id": "node1", "ovn-remote": "tcp:172.31.0.1:6642",
        "ovn-encap-type": "geneve", "ovn-encap-ip": "172.31.0.11",
        "ovn-bridge-datapath-type": "netdev"}))

    # a pod's veth as an OVS port bound to its logical switch port
    ovs.commit(ovs.add_interface_port(
        names.INTEGRATION_BRIDGE, "veth1a2b3c", external_ids={
            names.OVS_IFACE_ID: "web-0.default",
            names.OVS_POD: "default/web-0",
            names.OVS_CONTAINER_ID: "1a2b3c..."}))

    # block until ovn-controller has installed its flows
    if not ovs.wait_ovn_installed("veth1a2b3c", timeout=10):
        raise RuntimeError("port not ready")

    ovs.find_interfaces({names.OVS_POD: "default/web-0"})
    ovs.commit(ovs.del_port("veth1a2b3c"))
    ovs.close()

Writes wait, like ``ovs-vsctl``, until ovs-vswitchd has applied them
(``next_cfg``/``cur_cfg``); pass ``wait_vswitchd=False`` (constructor or
``transaction()``) when ovs-vswitchd is not running (bootstrap, tests).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterable, Iterator, NamedTuple

from ovs.db import idl as ovs_idl
from ovsdbapp.backend.ovs_idl import command as ovsdbapp_cmd
from ovsdbapp.backend.ovs_idl import idlutils
from ovsdbapp.backend.ovs_idl import rowview
from ovsdbapp.backend.ovs_idl import transaction as ovsdbapp_txn
from ovsdbapp.schema.open_vswitch import impl_idl

from pacific import names
from pacific.ovn.base import DEFAULT_TIMEOUT, ApiBase, PacificTransaction
from pacific.ovn.errors import (OvnConnectionError, OvnError, OvnTimeoutError,
                                OvnTransactionError)

__all__ = ["OvsAPI", "OvnError", "OvnConnectionError", "OvnTransactionError",
           "OvnTimeoutError", "OVS_TABLES"]

_UNSET = object()

OVS_TABLES = ("Open_vSwitch", "Bridge", "Port", "Interface", "QoS", "Queue",
              "Mirror", "Controller", "Manager", "SSL")


class OvsTransaction(PacificTransaction, impl_idl.OvsVsctlTransaction):
    """Pacific transaction that optionally waits for ovs-vswitchd."""

    def __init__(self, *args, wait_vswitchd: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.wait_vswitchd = wait_vswitchd

    def pre_commit(self, txn):
        if self.wait_vswitchd:
            super().pre_commit(txn)
        else:
            txn.expected_ifaces = set()  # ovsdbapp's add_port records here

    def post_commit(self, txn):
        if self.wait_vswitchd:
            super().post_commit(txn)
        else:
            ovsdbapp_txn.Transaction.post_commit(self, txn)


class _SetSSL(ovsdbapp_cmd.BaseCommand):
    def __init__(self, api, private_key: str, certificate: str, ca_cert: str):
        super().__init__(api)
        self.cols = {"private_key": private_key, "certificate": certificate,
                     "ca_cert": ca_cert}

    def run_idl(self, txn):
        root = next(iter(self.api.tables["Open_vSwitch"].rows.values()))
        ssl = root.ssl[0] if root.ssl else None
        if ssl is None:     # a new row's columns cannot be read before they are set
            ssl = txn.insert(self.api.tables["SSL"])
            root.ssl = [ssl]
            for k, v in self.cols.items():
                setattr(ssl, k, v)
            return
        for k, v in self.cols.items():
            if getattr(ssl, k) != v:
                setattr(ssl, k, v)


class _EnsureInterfacePort(ovsdbapp_cmd.BaseCommand):
    """Port `name` with one Interface `name` on `bridge`, created if missing;
    interface columns set and external_ids merged either way."""

    def __init__(self, api, bridge: str, name: str,
                 external_ids: dict[str, str], iface_columns: dict[str, Any],
                 port_external_ids: dict[str, str]):
        super().__init__(api)
        self.bridge = bridge
        self.name = name
        self.external_ids = external_ids
        self.iface_columns = iface_columns
        self.port_external_ids = port_external_ids

    def __str__(self):
        return (f"add-port {self.bridge} {self.name} "
                f"external_ids={self.external_ids} {self.iface_columns}")

    def run_idl(self, txn):
        br = idlutils.row_by_value(self.api.idl, "Bridge", "name",
                                   self.bridge, None)
        if br is None:
            raise RuntimeError(f"bridge {self.bridge} does not exist")
        port = idlutils.row_by_value(self.api.idl, "Port", "name",
                                     self.name, None)
        if port is not None and port not in br.ports:
            raise RuntimeError(f"port {self.name} exists on another bridge")
        if port is None:
            port = txn.insert(self.api.tables["Port"])
            port.name = self.name
            iface = txn.insert(self.api.tables["Interface"])
            iface.name = self.name
            if hasattr(txn, "expected_ifaces"):
                txn.expected_ifaces.add(iface.uuid)
            port.interfaces = [iface]
            br.addvalue("ports", port)
        else:
            iface = port.interfaces[0]
        for col, val in self.iface_columns.items():
            if getattr(iface, col, _UNSET) != val:
                setattr(iface, col, val)
        for row, ids in ((iface, self.external_ids),
                         (port, self.port_external_ids)):
            merged = dict(getattr(row, "external_ids", {}))
            merged.update(ids)
            if merged != getattr(row, "external_ids", None):
                row.external_ids = merged
        self.result = port.uuid

    def post_commit(self, txn):
        real = txn.get_insert_uuid(self.result) or self.result
        self.result = rowview.RowView(self.api.tables["Port"].rows[real])


class IfaceRecord(NamedTuple):
    """An Interface as the interface index holds it: its name and a copy of its
    external_ids, read without the IDL's lock."""

    name: str
    external_ids: dict[str, str]


class _IfaceIndex:
    """Interface name -> a copy of its external_ids, and the names under each
    value of the keys the node daemon looks up (pod, iface-id, container id),
    kept current by the IDL's connection thread as it applies each change
    (ApiBase.watch_rows).

    Read under its own small lock, never the connection's: ovsdbapp's
    connection thread holds that across each transaction's whole round trip,
    so in a burst of ADDs every reader of the IDL queued behind every other
    ADD's transaction."""

    KEYS = (names.OVS_POD, names.OVS_IFACE_ID, names.OVS_CONTAINER_ID)

    def __init__(self):
        self.lock = threading.Lock()
        self.ids: dict[str, dict[str, str]] = {}
        self.by: dict[tuple[str, str], set[str]] = {}

    def changed(self, event, row, updates) -> None:
        if event == ovs_idl.ROW_UPDATE and updates is not None and not (
                "external_ids" in updates._data or "name" in updates._data):
            return   # statistics, ofport, link state ...: the index is unchanged
        if event == ovs_idl.ROW_DELETE:
            self.apply(row.name, None)
            return
        if event == ovs_idl.ROW_UPDATE and updates is not None and "name" in updates._data:
            self.apply(updates.name, None)   # never renamed in practice
        self.apply(row.name, dict(row.external_ids or {}))

    def apply(self, ifname: str, ids: dict[str, str] | None) -> None:
        with self.lock:
            prev = self.ids.pop(ifname, None)
            for k in self.KEYS if prev else ():
                v = prev.get(k)
                held = self.by.get((k, v)) if v else None
                if held is not None:
                    held.discard(ifname)
                    if not held:
                        del self.by[(k, v)]
            if ids is not None:
                self.ids[ifname] = ids
                for k in self.KEYS:
                    v = ids.get(k)
                    if v:
                        self.by.setdefault((k, v), set()).add(ifname)

    def get(self, ifname: str) -> IfaceRecord | None:
        with self.lock:
            ids = self.ids.get(ifname)
            return IfaceRecord(ifname, dict(ids)) if ids is not None else None

    def find(self, key: str, value: str) -> list[IfaceRecord]:
        with self.lock:
            return [IfaceRecord(n, dict(self.ids[n]))
                    for n in sorted(self.by.get((key, value), ()))]


class OvsAPI(ApiBase, impl_idl.OvsdbIdl):
    """A node's Open_vSwitch database; one IDL connection per instance.

    Args:
        remote: e.g. "unix:/run/.../db.sock".
        timeout: seconds to connect, and per transaction (incl. retries and
            the wait for ovs-vswitchd).
        wait_vswitchd: default for transactions: wait until ovs-vswitchd
            applied the change (needs the Open_vSwitch root row, i.e.
            ``ovs-vsctl --no-wait init``, and a running ovs-vswitchd).
        tables: extra tables to monitor beyond OVS_TABLES.
    """

    TABLES = OVS_TABLES

    def __init__(self, remote: str, timeout: float = DEFAULT_TIMEOUT,
                 wait_vswitchd: bool = True,
                 tables: Iterable[str] | None = None,
                 created_by: str | None = None):
        self.wait_vswitchd = wait_vswitchd
        self._iface_idx: _IfaceIndex | None = None
        self._iface_idx_lock = threading.Lock()
        super().__init__(remote, timeout=timeout, tables=tables,
                         created_by=created_by)

    def create_transaction(self, check_error=True, log_errors=True,
                           wait_vswitchd: bool | None = None, **kwargs):
        wait = self.wait_vswitchd if wait_vswitchd is None else wait_vswitchd
        if wait:
            with self.ovsdb_connection.lock:
                # nothing to count with until the root row exists
                wait = bool(self.tables["Open_vSwitch"].rows)
        return OvsTransaction(self, self.ovsdb_connection,
                              self.ovsdb_connection.timeout,
                              check_error=True, log_errors=log_errors,
                              wait_vswitchd=wait)

    @contextlib.contextmanager
    def transaction(self, check_error=True, log_errors=True, nested=True,
                    wait_vswitchd: bool | None = None,
                    **kwargs) -> Iterator[OvsTransaction]:
        with super().transaction(check_error, log_errors, nested,
                                 wait_vswitchd=wait_vswitchd, **kwargs) as t:
            yield t

    # --- Open_vSwitch root row ------------------------------------------------
    def init(self):
        """Command creating the Open_vSwitch root row if missing
        (``ovs-vsctl --no-wait init``)."""
        return _InitRoot(self)

    def set_ovs_external_ids(self, ids: dict[str, str]):
        """Command merging `ids` into Open_vSwitch external_ids (system-id,
        ovn-remote, ovn-encap-type, ovn-encap-ip, ...)."""
        return self.db_set("Open_vSwitch", ".", ("external_ids", dict(ids)),
                           if_exists=False)

    def set_ssl(self, private_key: str, certificate: str, ca_cert: str):
        """Command making the Open_vSwitch SSL row these files (``ovs-vsctl
        set-ssl``): ovn-controller takes its TLS configuration for an ssl:
        ovn-remote from it."""
        return _SetSSL(self, private_key, certificate, ca_cert)

    def get_ovs_external_ids(self) -> dict[str, str]:
        with self.ovsdb_connection.lock:
            rows = list(self.tables["Open_vSwitch"].rows.values())
            return dict(rows[0].external_ids) if rows else {}

    def bridge_external_ids(self, name: str) -> dict[str, str]:
        """A bridge's external_ids ({} without the bridge): ovn-controller
        keeps the conntrack zone of each port there (ct-zone-<port>)."""
        with self.ovsdb_connection.lock:
            row = next((b for b in self.tables["Bridge"].rows.values() if b.name == name), None)
            return dict(row.external_ids) if row is not None else {}

    # --- ports and interfaces ---------------------------------------------------
    def add_interface_port(self, bridge: str, name: str, *,
                           external_ids: dict[str, str] | None = None,
                           type: str | None = None,
                           options: dict[str, str] | None = None,
                           mtu_request: int | None = None,
                           owner=None):
        """Command creating (or updating) port+interface `name` on `bridge`.

        type: "" for a veth/tap, "internal" for ovn0; external_ids go on the
        Interface (iface-id, ...); owner (pacific.ovn.Owner) is stamped on
        the Port's external_ids."""
        cols: dict[str, Any] = {}
        if type is not None:
            cols["type"] = type
        if options is not None:
            cols["options"] = dict(options)
        if mtu_request is not None:
            cols["mtu_request"] = [mtu_request]
        port_ids = owner.external_ids() if owner is not None else {}
        if port_ids and self.created_by:
            port_ids[names.EXT_CREATED_BY] = self.created_by
        return _EnsureInterfacePort(self, bridge, name, dict(external_ids or {}),
                                    cols, port_ids)

    def get_interface(self, name: str):
        """Interface row (RowView) named `name`, or None."""
        with self.ovsdb_connection.lock:
            row = idlutils.row_by_value(self.idl, "Interface", "name", name,
                                        None)
            return rowview.RowView(row) if row is not None else None

    def find_interfaces(self, external_ids: dict[str, str]) -> list:
        """Interfaces whose external_ids contain all of `external_ids`."""
        want = external_ids.items()
        with self.ovsdb_connection.lock:
            return [rowview.RowView(r)
                    for r in self.tables["Interface"].rows.values()
                    if want <= r.external_ids.items()]

    def interfaces_of_pod(self, pod_key: str) -> list[IfaceRecord]:
        """Interfaces whose external_ids name the pod (`names.OVS_POD`)."""
        return self.interfaces_with(names.OVS_POD, pod_key)

    def interfaces_with(self, key: str, value: str) -> list[IfaceRecord]:
        """Interfaces whose external_ids have key=value, for key one of the pod,
        iface-id or container id (names.OVS_POD, OVS_IFACE_ID, OVS_CONTAINER_ID),
        sorted by name.  From an index the IDL keeps as it applies changes
        (watch_rows): O(1) per call and without the IDL's lock, where
        find_interfaces scans every Interface under it (at hundreds of pods per
        node, the pod loop's scan per pod event starved the IDL thread)."""
        if key not in _IfaceIndex.KEYS:
            raise ValueError(f"{key} is not indexed (one of {', '.join(_IfaceIndex.KEYS)})")
        return self._iface_index().find(key, value)

    def interface_record(self, name: str) -> IfaceRecord | None:
        """Interface `name` as the index holds it (name, external_ids), or None:
        get_interface without the IDL's lock."""
        return self._iface_index().get(name)

    def index_interfaces(self) -> None:
        """Build the interface index now (else the first lookup builds it: a scan
        of every Interface under the IDL's lock)."""
        self._iface_index()

    def _iface_index(self) -> "_IfaceIndex":
        idx = self._iface_idx
        if idx is not None:
            return idx
        with self._iface_idx_lock:
            if self._iface_idx is None:
                idx = _IfaceIndex()
                self.watch_rows("Interface", idx.changed)   # and what is there already
                self._iface_idx = idx
        return self._iface_idx

    def is_ovn_installed(self, name: str) -> bool:
        """True once ovn-controller set external_ids:ovn-installed=true."""
        iface = self.get_interface(name)
        return bool(iface is not None and iface.external_ids.get(
            names.OVS_OVN_INSTALLED) == "true")

    def wait_interface(self, name: str, predicate, timeout: float):
        """Wait (IDL events, no polling) until Interface `name` exists and
        predicate(row) holds; returns the row or None on timeout."""
        return self.wait_for_row(
            "Interface", lambda r: r.name == name and predicate(r), timeout)

    def wait_ovn_installed(self, name: str, timeout: float) -> bool:
        """Wait until ovn-controller marked Interface `name` ovn-installed."""
        return self.wait_interface(
            name, lambda r: r.external_ids.get(names.OVS_OVN_INSTALLED)
            == "true", timeout) is not None


class _InitRoot(ovsdbapp_cmd.BaseCommand):
    def __str__(self):
        return "init"

    def run_idl(self, txn):
        table = self.api.tables["Open_vSwitch"]
        if not table.rows:
            txn.insert(table)
