"""The CNI server's backend: turns validated requests into plumbing.

ADD waits for the controller's allocation by watching the pod through the
informer (a condition variable, no polling), validates it, and plumbs it.  DEL,
CHECK and GC work from the OVS record alone, so they behave the same after a
daemon restart.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from typing import Callable

from pacific import names
from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError
from pacific.node.attachment import PodAttachment
from pacific.node.cnirequest import CniRequest
from pacific.node.plumbing import Plumber

log = logging.getLogger(__name__)


def _annotations(pod: dict) -> dict:
    return (pod.get("metadata") or {}).get("annotations") or {}


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
                 allocation_timeout: float = 60.0):
        self.plumber = plumber
        self.pods = pods
        self.mtu = mtu
        self.status_check = status_check
        self.allocation_timeout = allocation_timeout
        # GC removes every attachment the runtime's list lacks, and one whose ADD
        # is half done (veth made, OVS port not yet) is in no list: GC runs only
        # while no ADD or DEL touches the node (waiting for an allocation does not).
        self._plumbing = SharedExclusive()

    def _wait_allocation(self, req: CniRequest) -> dict:
        def ready(pod: dict) -> bool:
            if req.pod_uid and pod["metadata"].get("uid") != req.pod_uid:
                return False
            ann = _annotations(pod)
            return ann.get(names.ANN_ALLOCATED) == "true" or names.ANN_ALLOCATION_ERROR in ann

        pod = self.pods.wait_for(req.pod_key, ready, self.allocation_timeout)
        if pod is None:
            seen = self.pods.get(req.pod_key)
            if seen is None:
                why = (f"pod {req.pod_key} is not known on this node (not created yet, or "
                       "spec.nodeName is another node)")
            elif req.pod_uid and seen["metadata"].get("uid") != req.pod_uid:
                why = (f"pod {req.pod_key} has uid {seen['metadata'].get('uid')}, the "
                       f"runtime asked for {req.pod_uid}")
            else:
                why = f"the controller has not allocated an address for pod {req.pod_key} yet"
            raise CniError(proto.ERR_TRY_AGAIN, f"{why} (waited "
                           f"{self.allocation_timeout:g} s)")
        err = _annotations(pod).get(names.ANN_ALLOCATION_ERROR)
        if err and _annotations(pod).get(names.ANN_ALLOCATED) != "true":
            raise CniError(proto.ERR_ALLOCATION_REFUSED,
                           f"the controller refused pod {req.pod_key}: {err}")
        return pod

    def add(self, req: CniRequest) -> dict:
        pod = self._wait_allocation(req)
        att = PodAttachment.from_annotations(
            _annotations(pod), container_id=req.container_id, ifname=req.ifname,
            netns=req.netns, pod=req.pod_key, mtu=self.mtu)
        with self._plumbing.shared():
            result = self.plumber.add(att)
        log.info("ADD %s %s: %s %s via %s on %s", req.pod_key, req.container_id[:12],
                 att.ip_cidr, att.mac, att.gateway, att.host_ifname)
        return result

    def delete(self, req: CniRequest) -> None:
        with self._plumbing.shared():
            removed = self.plumber.delete(req.container_id, req.ifname)
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
        if pod is not None:
            want = _annotations(pod).get(names.ANN_IP_ADDRESS)
            if want and want != att.ip:
                raise CniError(proto.ERR_CHECK_FAILED, f"CHECK: pod {req.pod_key} is "
                               f"annotated {want}, the interface has {att.ip}")
        self.plumber.check(att, req.prev_result)

    def gc(self, req: CniRequest) -> None:
        with self._plumbing.exclusive():
            self.plumber.gc(req.valid_attachments)

    def status(self) -> None:
        self.status_check()
