"""Traffic mirroring: a copy of mirrored pods' traffic on the node's `mirror0`.

`mirror0` is an OVS internal port on br-int, so it is an interface of the
node's host namespace: `tcpdump -i mirror0` shows what the mirrored pods send
and receive.  One OVS Mirror row (`pacific-mirror`) on br-int selects the
mirrored pods' ports as source and destination and outputs to mirror0.

Modes (pacific-node --mirror-mode, one cluster setting in deploy/config.yaml):
`annotated` (default: pods annotated `pacific.io/mirror: "true"`), `all` (every
pod of the node), `off` (no mirror0, no Mirror row).  The pod loop applies it
per pod; OVS revalidates its datapath flows when the Mirror row changes, so
connections already open are mirrored too.  The Mirror row exists only while
it selects a port, and everything is removed when the mode is `off`.
"""
from __future__ import annotations

import logging
import os

from pyroute2 import IPRoute

from pacific import names
from pacific.node import unixctl
from pacific.node.attachment import PodAttachment
from pacific.node.podloop import PortSetting

log = logging.getLogger(__name__)
MIRROR_IDS = {names.EXT_CREATED_BY: "pacific-node", names.EXT_OWNER_KIND: "Mirror"}


class MirrorSetting(PortSetting):
    name = "mirror"

    def __init__(self, ovs, mode: str, bridge: str = names.INTEGRATION_BRIDGE,
                 ovs_rundir: str = "/var/run/openvswitch"):
        if mode not in names.MIRROR_MODES:
            raise ValueError(f"mirror mode {mode!r} is not one of {', '.join(names.MIRROR_MODES)}")
        self.ovs, self.mode, self.bridge, self.ovs_rundir = ovs, mode, bridge, ovs_rundir

    # -- node-wide -------------------------------------------------------------------
    def start(self) -> None:
        if self.mode == "off":
            self._remove_all()
            return
        # the commit waits for ovs-vswitchd, so the interface exists afterwards
        self.ovs.commit(self.ovs.add_interface_port(self.bridge, names.MIRROR_PORT,
                                                    type="internal", external_ids=dict(MIRROR_IDS)))
        _link_up(names.MIRROR_PORT)
        log.info("mirroring: mode %s, copies on %s", self.mode, names.MIRROR_PORT)

    def _remove_all(self) -> None:
        with self.ovs.transaction() as txn:
            mirror = self._mirror()
            if mirror is not None:
                txn.add(self.ovs.db_remove("Bridge", self.bridge, "mirrors", mirror.uuid))
            if self._port(names.MIRROR_PORT) is not None:
                txn.add(self.ovs.del_port(names.MIRROR_PORT, self.bridge, if_exists=True))
        log.info("mirroring off: no %s, no Mirror row", names.MIRROR_PORT)

    # -- per pod ----------------------------------------------------------------------
    def wanted(self, pod: dict) -> bool:
        if self.mode == "all":
            return True
        ann = (pod.get("metadata") or {}).get("annotations") or {}
        return self.mode == "annotated" and ann.get(names.ANN_MIRROR) == "true"

    def apply(self, att: PodAttachment, wanted: bool) -> None:
        if self.mode == "off":
            return
        port, mirror, out = self._port(att.host_ifname), self._mirror(), self._port(names.MIRROR_PORT)
        if port is None or out is None:
            raise OSError(f"port {att.host_ifname if port is None else names.MIRROR_PORT} "
                          f"is not on {self.bridge}")
        selected = mirror is not None and port.uuid in {p.uuid for p in mirror.select_src_port}
        if wanted:   # a restarted ovs-vswitchd re-creates mirror0 down
            _link_up(names.MIRROR_PORT)
        if selected == wanted:
            return
        with self.ovs.transaction() as txn:
            if wanted and mirror is None:
                m = txn.add(self.ovs.db_create(
                    "Mirror", name=names.MIRROR_NAME, select_src_port=[port.uuid],
                    select_dst_port=[port.uuid], output_port=out.uuid, external_ids=MIRROR_IDS))
                txn.add(self.ovs.db_add("Bridge", self.bridge, "mirrors", m))
            elif wanted:
                for col in ("select_src_port", "select_dst_port"):
                    txn.add(self.ovs.db_add("Mirror", mirror.uuid, col, port.uuid))
            elif len(mirror.select_src_port) <= 1:   # the last one: the row goes
                txn.add(self.ovs.db_remove("Bridge", self.bridge, "mirrors", mirror.uuid))
            else:
                for col in ("select_src_port", "select_dst_port"):
                    txn.add(self.ovs.db_remove("Mirror", mirror.uuid, col, port.uuid))
        # ovs-vswitchd (3.1, userspace datapath) keeps using the datapath flows of
        # connections already open: make it rebuild them with the mirror
        revalidate(self.ovs_rundir)
        log.info("pod %s: %s mirrored to %s", att.pod, "now" if wanted else "no longer",
                 names.MIRROR_PORT)

    # -- reads (under the IDL lock) -------------------------------------------------------
    def _mirror(self):
        with self.ovs.ovsdb_connection.lock:
            return next((m for m in self.ovs.tables["Mirror"].rows.values()
                         if m.name == names.MIRROR_NAME), None)

    def _port(self, name: str):
        with self.ovs.ovsdb_connection.lock:
            return next((p for p in self.ovs.tables["Port"].rows.values() if p.name == name), None)


def vswitchd_ctl(rundir: str) -> str | None:
    """ovs-vswitchd's unixctl socket: <rundir>/ovs-vswitchd.ctl when it was
    started with --unixctl there, else ovs-vswitchd.<pid>.ctl from its pidfile."""
    fixed = os.path.join(rundir, "ovs-vswitchd.ctl")
    if os.path.exists(fixed):
        return fixed
    try:
        with open(os.path.join(rundir, "ovs-vswitchd.pid")) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    path = os.path.join(rundir, f"ovs-vswitchd.{pid}.ctl")
    return path if os.path.exists(path) else None


def revalidate(rundir: str) -> None:
    """`ovs-appctl revalidator/purge`, spoken over the unixctl socket."""
    path = vswitchd_ctl(rundir)
    if path is None:
        raise OSError(f"no ovs-vswitchd control socket in {rundir} (--ovs-rundir)")
    unixctl.call(path, "revalidator/purge")


def _link_up(name: str) -> None:
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=name)
        if not idx:
            raise OSError(f"{name} does not exist (ovs-vswitchd has not created it yet)")
        if not ipr.link("get", index=idx[0])[0]["flags"] & 1:   # IFF_UP
            ipr.link("set", index=idx[0], state="up")
