"""Traffic mirroring: a copy of mirrored pods' traffic on the node's `mirror0`.

`mirror0` is an OVS internal port on br-int, so it is an interface of the
node's host namespace: `tcpdump -i mirror0` shows what the mirrored pods send
and receive.  One OVS Mirror row (`pacific-mirror`) on br-int selects the
mirrored pods' ports as source and destination and outputs to mirror0.

Modes (pacific-node --mirror-mode, one cluster setting in deploy/config.yaml):
`annotated` (default: pods annotated `pacific.io/mirror: "true"`), `all` (every
pod of the node), `off` (no mirror0, no Mirror row).  The pod loop applies it
per pod.  Every change rewrites the row's whole selection (source and
destination alike: exactly the pod ports that want mirroring, nothing else it
finds), one change at a time, and then has ovs-vswitchd rebuild its datapath
flows, which OVS 3.1 does not do by itself on a Mirror change: connections
already open are mirrored too, and no flow built for an earlier selection keeps
copying to mirror0.  The Mirror row exists only while it selects a port (a
leftover, e.g. after the last mirrored pod was deleted, goes at the next
reconcile), and everything is removed when the mode is `off`.
"""
from __future__ import annotations

import logging
import threading

from pyroute2 import IPRoute

from pacific import names
from pacific.node import unixctl
from pacific.node.unixctl import vswitchd_ctl
from pacific.node.attachment import PodAttachment
from pacific.node.portsetting import PortSetting

log = logging.getLogger(__name__)
MIRROR_IDS = {names.EXT_CREATED_BY: "pacific-node", names.EXT_OWNER_KIND: "Mirror"}


class MirrorSetting(PortSetting):
    name = "mirror"
    fresh = False            # a new port is in no Mirror row's selection

    def __init__(self, ovs, mode: str, bridge: str = names.INTEGRATION_BRIDGE,
                 ovs_rundir: str = "/var/run/openvswitch"):
        if mode not in names.MIRROR_MODES:
            raise ValueError(f"mirror mode {mode!r} is not one of {', '.join(names.MIRROR_MODES)}")
        self.ovs, self.mode, self.bridge, self.ovs_rundir = ovs, mode, bridge, ovs_rundir
        self._apply_lock = threading.Lock()

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
            for mirror in self._mirrors():
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
        # one change at a time: CNI ADD (PodLoop.apply_now) and the loop's worker
        # both call this, and two read-modify-writes of the Mirror row at once
        # made two rows or undid each other's change
        with self._apply_lock:
            self._apply(att, wanted)

    def _apply(self, att: PodAttachment, wanted: bool) -> None:
        port, out = self._port(att.host_ifname), self._port(names.MIRROR_PORT)
        if port is None or out is None:
            raise OSError(f"port {att.host_ifname if port is None else names.MIRROR_PORT} "
                          f"is not on {self.bridge}")
        if wanted:   # a restarted ovs-vswitchd re-creates mirror0 down
            _link_up(names.MIRROR_PORT)
        rows = self._mirrors()
        # what the row(s) select now, as source OR destination (a port in either
        # column is mirrored); the wanted selection keeps the pod ports selected
        # in both, as this method selects them (each is checked again when its
        # own pod is reconciled, at least every resync), and adds or drops this
        # pod's port; anything else found is dropped
        with self.ovs.ovsdb_connection.lock:
            src = {p.uuid for m in rows for p in m.select_src_port}
            dst = {p.uuid for m in rows for p in m.select_dst_port}
            want = {p.uuid for m in rows for p in m.select_src_port
                    if p.uuid in dst and _is_pod_port(p)} - {port.uuid}
            if wanted:
                want.add(port.uuid)
            exact = (len(rows) == 1 and src == dst == want and not rows[0].select_all
                     and _uuids(rows[0].output_port) == {out.uuid})
        if (exact and want) or (not rows and not want):
            return
        with self.ovs.transaction() as txn:
            for m in rows[1:] if want else rows:   # one row, and none that selects nothing
                txn.add(self.ovs.db_remove("Bridge", self.bridge, "mirrors", m.uuid))
            if want and rows:
                txn.add(self.ovs.db_set(
                    "Mirror", rows[0].uuid, ("select_all", False),
                    ("select_src_port", sorted(want)), ("select_dst_port", sorted(want)),
                    ("output_port", out.uuid)))
            elif want:
                m = txn.add(self.ovs.db_create(
                    "Mirror", name=names.MIRROR_NAME, select_src_port=sorted(want),
                    select_dst_port=sorted(want), output_port=out.uuid,
                    external_ids=MIRROR_IDS))
                txn.add(self.ovs.db_add("Bridge", self.bridge, "mirrors", m))
        # ovs-vswitchd 3.1 does not revalidate its datapath flows when a Mirror
        # changes (fixed in 3.1.6, "ofproto-dpif-mirror: Always revalidate on mirror
        # update"): flows translated before keep the
        # old selection.  Rebuild them all now: mirrored connections already
        # open get mirrored, and nothing translated for an earlier selection
        # keeps sending copies to mirror0
        revalidate(self.ovs_rundir)
        log.info("pod %s: %s mirrored to %s (%d ports)", att.pod,
                 "now" if wanted else "no longer", names.MIRROR_PORT, len(want))

    # -- reads (under the IDL lock) -------------------------------------------------------
    def _mirrors(self) -> list:
        """Pacific's Mirror rows on the bridge (one, unless an older version raced)."""
        with self.ovs.ovsdb_connection.lock:
            return sorted((m for m in self.ovs.tables["Mirror"].rows.values()
                           if m.name == names.MIRROR_NAME), key=lambda m: str(m.uuid))

    def _port(self, name: str):
        with self.ovs.ovsdb_connection.lock:
            return next((p for p in self.ovs.tables["Port"].rows.values() if p.name == name), None)


def revalidate(rundir: str) -> None:
    """`ovs-appctl revalidator/purge`, spoken over the unixctl socket."""
    path = vswitchd_ctl(rundir)
    if path is None:
        raise OSError(f"no ovs-vswitchd control socket in {rundir} (--ovs-rundir)")
    unixctl.call(path, "revalidator/purge")


def _is_pod_port(port) -> bool:
    """Whether an OVS Port is a pod's (its interface names the pod, names.OVS_POD):
    nothing else on br-int is ever mirrored."""
    return any(names.OVS_POD in (i.external_ids or {}) for i in port.interfaces)


def _uuids(ref) -> set:
    """The uuids of an IDL reference column's value (a row, a list of rows, a uuid)."""
    refs = ref if isinstance(ref, (list, tuple, set)) else [ref]
    return {getattr(r, "uuid", r) for r in refs if r is not None}


def _link_up(name: str) -> None:
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=name)
        if not idx:
            raise OSError(f"{name} does not exist (ovs-vswitchd has not created it yet)")
        if not ipr.link("get", index=idx[0])[0]["flags"] & 1:   # IFF_UP
            ipr.link("set", index=idx[0], state="up")
