"""Pod bandwidth on the node: the controller's decision (contract.QosRecord)
applied as Linux traffic shaping, by the pod loop (podloop.py).

- ingress (into the pod): a `tbf` qdisc on the host end of the pod's veth,
  whose egress is where OVS hands the pod its packets;
- egress (out of the pod): a `tbf` qdisc on the pod end (`eth0`), entered from
  the node daemon with setns: the pod's packets are shaped before they leave it.

Why not OVS's `ingress_policing_rate` or tc ingress on the host end: with the
userspace (netdev) datapath OVS reads the veth through AF_PACKET, which sees a
packet before tc ingress does, so ingress policing never limits it.  Shaping
(tbf queues) also gives TCP its full rate, where policing (drops) costs
throughput.  On the kernel datapath the same qdiscs work unchanged.

OVS deletes a qdisc it did not configure when ovs-vswitchd (re)configures a
port without QoS, so a limited port gets the shared QoS row of type
`linux-noop` ("leave tc alone"); without a limit the qdisc and the row go.
"""
from __future__ import annotations

import logging

from pyroute2 import IPRoute

from pacific import contract, names
from pacific.node.attachment import PodAttachment
from pacific.node.nsutil import Netns
from pacific.node.portsetting import PortSetting

log = logging.getLogger(__name__)
NOOP_QOS_IDS = {names.EXT_CREATED_BY: "pacific-node", names.EXT_OWNER_KIND: "QoS"}
LATENCY_US = 25_000            # how long a packet may wait in the tbf queue
MIN_BURST = 16 * 1024          # bytes; at least ~10 full frames


def tbf_params(kbps: int) -> dict:
    """tbf rate (bytes/s), burst (bytes) and latency (us) for `kbps`: a burst of
    ~4 ms at the rate keeps TCP at the rate without letting bursts through."""
    rate = kbps * 1000 // 8
    return {"rate": rate, "burst": max(MIN_BURST, rate // 250), "latency": LATENCY_US}


def shape(ipr: IPRoute, ifname: str, kbps: int | None) -> bool:
    """Make `ifname`'s root qdisc a tbf at `kbps`, or remove Pacific's tbf when
    None.  True if something changed."""
    found = ipr.link_lookup(ifname=ifname)
    if not found:
        raise OSError(f"interface {ifname} not found")
    idx = found[0]
    cur = [q for q in ipr.get_qdiscs(index=idx) if q["parent"] == 0xFFFFFFFF]
    kind = cur[0].get_attr("TCA_KIND") if cur else None
    if kbps is None:
        if kind != "tbf":
            return False
        ipr.tc("del", index=idx, root=True)
        return True
    want = tbf_params(kbps)
    if kind == "tbf" and _tbf_rate(cur[0]) == want["rate"]:
        return False
    ipr.tc("replace", "tbf", index=idx, handle="1:", **want)
    return True


def _tbf_rate(qdisc) -> int | None:
    opts = qdisc.get_attr("TCA_OPTIONS")
    parms = opts.get_attr("TCA_TBF_PARMS") if opts is not None else None
    return parms["rate"] if parms is not None else None


class QosSetting(PortSetting):
    name = "qos"
    fresh = (None, None)     # no tbf on either end, no QoS row on the port

    def __init__(self, ovs):
        self.ovs = ovs

    def wanted(self, pod: dict):
        q = contract.own_qos(pod)
        return (q.ingress_kbps, q.egress_kbps) if q is not None else (None, None)

    def apply(self, att: PodAttachment, wanted) -> None:
        ingress, egress = wanted
        if ingress is not None or egress is not None:
            self._ovs_leaves_tc_alone(att.host_ifname, True)
        with IPRoute() as ipr:
            changed = shape(ipr, att.host_ifname, ingress)
        with Netns(att.netns) as ns:
            ipr = ns.iproute()
            try:
                changed |= shape(ipr, att.ifname, egress)
            finally:
                ipr.close()
        if ingress is None and egress is None:
            self._ovs_leaves_tc_alone(att.host_ifname, False)
        if changed:
            log.info("pod %s: bandwidth ingress %s, egress %s (kbit/s) on %s", att.pod,
                     ingress or "unlimited", egress or "unlimited", att.host_ifname)

    # -- OVS -------------------------------------------------------------------------
    def _noop_qos(self):
        with self.ovs.ovsdb_connection.lock:
            for row in self.ovs.tables["QoS"].rows.values():
                if row.type == "linux-noop" and dict(row.external_ids) == NOOP_QOS_IDS:
                    return row.uuid
        return None

    def _ovs_leaves_tc_alone(self, port: str, on: bool) -> None:
        with self.ovs.ovsdb_connection.lock:
            row = next((p for p in self.ovs.tables["Port"].rows.values() if p.name == port), None)
            has = bool(row is not None and row.qos)
        if row is None or has == on:
            return
        if not on:
            with self.ovs.transaction() as txn:
                txn.add(self.ovs.db_clear("Port", port, "qos"))
            remove_unused_noop_qos(self.ovs)
            return
        with self.ovs.transaction() as txn:
            qos = self._noop_qos()
            if qos is None:
                qos = txn.add(self.ovs.db_create("QoS", type="linux-noop",
                                                 external_ids=NOOP_QOS_IDS))
            txn.add(self.ovs.db_set("Port", port, ("qos", qos)))


def remove_unused_noop_qos(ovs) -> None:
    """The shared linux-noop QoS row is a root row: drop it once no port uses it."""
    with ovs.ovsdb_connection.lock:
        used = {p.qos[0].uuid for p in ovs.tables["Port"].rows.values() if p.qos}
        idle = [q.uuid for q in ovs.tables["QoS"].rows.values()
                if dict(q.external_ids) == NOOP_QOS_IDS and q.uuid not in used]
    for uuid in idle:
        with ovs.transaction() as txn:
            txn.add(ovs.db_destroy("QoS", uuid))

