"""The CNI server's backend: turns validated requests into plumbing.

ADD waits for the controller's allocation by watching the pod through the
informer (a condition variable, no polling), validates it, and plumbs it.  DEL,
CHECK and GC work from the OVS record alone, so they behave the same after a
daemon restart.  DEL also flushes the connection tracking of the pod's
addresses (conntrack.py): nothing of it reaches the address's next holder.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import Callable

from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError
from pacific.contract import ContractError, PodRecord, allocation_error, own_record
from pacific.kube.informer import ObjectDeleted
from pacific.node import conntrack
from pacific.node.attachment import PodAttachment
from pacific.node.cnirequest import CniRequest
from pacific.node.plumbing import Plumber

log = logging.getLogger(__name__)


class SharedExclusive:
    """Any number of shared holders, or one exclusive holder (no preference:
    GC is rare and best effort, and must never stall a pod's ADD)."""

    def __init__(self):
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            while self._exclusive:
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        with self._cond:
            while self._exclusive or self._shared:
                self._cond.wait()
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class CniHandler:
    """Implements pacific.node.cniserver.Backend.

    pods: an Informer of this node's pods (get/wait_for); status_check: raises
    CniError(50) when the node is not ready."""

    def __init__(self, plumber: Plumber, pods, mtu: int,
                 status_check: Callable[[], None],
                 allocation_timeout: float = 60.0,
                 after_add: Callable[[str], None] | None = None,
                 vswitchd_ctl: Callable[[], str | None] | None = None):
        """after_add(pod key): called once a pod is plumbed, before ADD answers
        (the pod loop applies the port settings, so they hold from the first
        packet); vswitchd_ctl() -> ovs-vswitchd's control socket, where DEL
        flushes the pod's conntrack (None: no flush)."""
        self.plumber = plumber
        self.vswitchd_ctl = vswitchd_ctl
        self.after_add = after_add
        self.pods = pods
        self.mtu = mtu
        self.status_check = status_check
        self.allocation_timeout = allocation_timeout
        # GC removes every attachment the runtime's list lacks, and one whose ADD
        # is half done (veth made, OVS port not yet) is in no list: GC runs only
        # while no ADD or DEL touches the node (waiting for an allocation does not).
        self._plumbing = SharedExclusive()

    def _wait_allocation(self, req: CniRequest) -> tuple[dict, PodRecord]:
        """Wait (informer condition, no polling) until the controller has either
        recorded an allocation made for THIS pod (its UID, its port) or refused
        it.  A record that names another pod (copied with its annotations) is
        never plumbed: the controller replaces it, and meanwhile ADD waits."""
        def belongs(pod: dict) -> bool:
            return not req.pod_uid or pod["metadata"].get("uid") == req.pod_uid

        def ready(pod: dict) -> bool:
            return belongs(pod) and (own_record(pod) is not None
                                     or allocation_error(pod) is not None)

        try:
            pod = self.pods.wait_for(req.pod_key, ready, self.allocation_timeout,
                                     uid=req.pod_uid or None)
        except ObjectDeleted:
            # the runtime tears the sandbox down; waiting out the timeout only
            # held its pod worker (and the pod's network namespace) for nothing
            raise CniError(proto.ERR_UNKNOWN_CONTAINER,
                           f"pod {req.pod_key} (uid {req.pod_uid}) was deleted while its ADD "
                           "waited for an address") from None
        if pod is None:
            raise CniError(proto.ERR_TRY_AGAIN, f"{self._why_waiting(req)} (waited "
                           f"{self.allocation_timeout:g} s)")
        rec = own_record(pod)
        if rec is None:
            raise CniError(proto.ERR_ALLOCATION_REFUSED,
                           f"the controller refused pod {req.pod_key}: {allocation_error(pod)}")
        return pod, rec

    def _why_waiting(self, req: CniRequest) -> str:
        seen = self.pods.get(req.pod_key)
        if seen is None:
            return (f"pod {req.pod_key} is not known on this node (not created yet, or "
                    "spec.nodeName is another node)")
        if req.pod_uid and seen["metadata"].get("uid") != req.pod_uid:
            return (f"pod {req.pod_key} has uid {seen['metadata'].get('uid')}, the "
                    f"runtime asked for {req.pod_uid}")
        try:
            rec = PodRecord.of(seen)
        except ContractError as e:
            return f"pod {req.pod_key}: {e}; waiting for the controller to replace it"
        if rec is not None:
            return (f"pod {req.pod_key}: {rec.why_not_for(seen)}; not plumbed, waiting for the "
                    "controller to replace it")
        return f"the controller has not allocated an address for pod {req.pod_key} yet"

    def add(self, req: CniRequest) -> dict:
        _, rec = self._wait_allocation(req)
        att = PodAttachment.from_record(rec, container_id=req.container_id, ifname=req.ifname,
                                        netns=req.netns, pod=req.pod_key, mtu=self.mtu)
        with self._plumbing.shared():
            result = self.plumber.add(att)
        if self.after_add is not None:
            self.after_add(req.pod_key)
        log.info("ADD %s %s: %s %s via %s on %s", req.pod_key, req.container_id[:12],
                 att.ip_cidr, att.mac, att.gateway, att.host_ifname)
        return result

    def delete(self, req: CniRequest) -> None:
        # its addresses and conntrack zone, read before the port goes
        att = self.plumber.attachment(req.container_id, req.ifname, self.mtu) \
            if self.vswitchd_ctl is not None else None
        zone = self.plumber.conntrack_zone(att.lsp) if att is not None else None
        with self._plumbing.shared():
            removed = self.plumber.delete(req.container_id, req.ifname)
        if att is not None:
            conntrack.flush(self.vswitchd_ctl(), {a.split("/")[0] for a, _ in att.addresses()},
                            zone, f"DEL {req.pod_key or att.pod}")
        if removed:
            log.info("DEL %s %s: removed", req.pod_key or "?", req.container_id[:12])
        else:
            log.info("DEL %s %s: nothing to remove", req.pod_key or "?", req.container_id[:12])

    def check(self, req: CniRequest) -> None:
        att = self.plumber.attachments(self.mtu).get((req.container_id, req.ifname))
        if att is None:
            raise CniError(proto.ERR_UNKNOWN_CONTAINER, f"CHECK: no attachment of container "
                           f"{req.container_id[:12]} interface {req.ifname} on this node")
        if att.pod != req.pod_key:
            raise CniError(proto.ERR_CHECK_FAILED, f"CHECK: container {req.container_id[:12]} "
                           f"is attached for pod {att.pod}, not {req.pod_key}")
        if att.netns != req.netns:
            raise CniError(proto.ERR_CHECK_FAILED, f"CHECK: attachment is in {att.netns}, "
                           f"the runtime says {req.netns}")
        pod = self.pods.get(req.pod_key)
        rec = own_record(pod) if pod is not None else None
        if rec is not None and (rec.ip_cidr, rec.port) != (att.ip_cidr, att.lsp):
            raise CniError(proto.ERR_CHECK_FAILED, f"CHECK: the controller's record for pod "
                           f"{req.pod_key} is {rec.ip_cidr} on port {rec.port}, the "
                           f"attachment has {att.ip_cidr} on {att.lsp}")
        self.plumber.check(att, req.prev_result)

    def gc(self, req: CniRequest) -> None:
        with self._plumbing.exclusive():
            self.plumber.gc(req.valid_attachments)

    def status(self) -> None:
        self.status_check()
