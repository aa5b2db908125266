"""Pods -> address, MAC, logical switch port, IP object, pod annotations.

Per pod key "namespace/name", level-triggered (the pod, its IP object or its
StatefulSet may each be missing; the reconciler converges from whatever it
finds):

* pod needs a network (scheduled, not host-network, not finished):
  subnet = pod annotation, else namespace annotation, else a Subnet listing
  the namespace, else the default; address from IPAM (owner key = pod key,
  honouring ANN_IP_ADDRESS / ANN_MAC_ADDRESS requests); then, in this order,
  the IP object (the durable record IPAM is rebuilt from), the switch port
  with addresses and port security (through the batched NB writer), and the
  pod annotations ending with ANN_ALLOCATED="true".  A request that cannot be
  honoured (unknown subnet, address outside / excluded / taken, bad MAC) gets
  a Warning Event and ANN_ALLOCATION_ERROR, and no address; it is retried
  when subnets change or addresses are released.
* pod gone or finished: the port is deleted; the address and IP object are
  released, unless the pod belongs to a StatefulSet that still has its
  ordinal: then both are kept, so the re-created pod (on any node) gets the
  same address.
"""
from __future__ import annotations

import logging
import threading

from pacific import names
from pacific.controller import metrics, model
from pacific.ipam import errors as ipam_errors
from pacific.kube import errors as kerr
from pacific.kube import resources as r
from pacific.ovn import ensure

LOG = logging.getLogger(__name__)


def pod_ids(namespace: str, name: str, subnet: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_POD, names.EXT_OWNER: model.pod_key(namespace, name),
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, names.EXT_POD_NAMESPACE: namespace,
            names.EXT_POD_NAME: name, names.EXT_SUBNET: subnet}


class Refused(Exception):
    """The pod's request cannot be honoured; reason is an Event reason."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


class SubnetPending(RuntimeError):
    """The pod's subnet exists but its switch is not ready yet: retry later."""


class PodReconciler:
    def __init__(self, ctl):
        self.ctl = ctl
        self._lock = threading.Lock()
        self._refused: dict[str, str] = {}    # pod key -> message

    def refused_keys(self) -> list[str]:
        with self._lock:
            return list(self._refused)

    # -- entry point -------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        ns, name = key.split("/", 1)
        pod = self.ctl.inf_pods.get(key)
        if pod is None or not model.needs_network(pod):
            if pod is not None and not (pod.get("spec") or {}).get("nodeName") \
                    and not (pod.get("spec") or {}).get("hostNetwork"):
                return  # not scheduled yet: nothing to do, nothing to release
            self._release(ns, name, pod)
            return
        try:
            self._ensure(ns, name, pod)
        except Refused as exc:
            self._refuse(key, pod, exc.reason, str(exc))

    # -- allocation path ------------------------------------------------------------
    def _ensure(self, ns: str, name: str, pod: dict) -> None:
        ctl = self.ctl
        key = model.pod_key(ns, name)
        ann = model.annotations(pod)
        ns_obj = ctl.inf_namespaces.get(ns)
        subnet, why = model.choose_subnet(pod, ns_obj, ctl.subnets.namespace_binding(),
                                          ctl.subnets.default_name())
        spec = ctl.subnets.spec(subnet)
        if spec is None and ctl.inf_subnets.get(subnet) is not None and not ctl.subnets.is_refused(subnet):
            raise SubnetPending(f"subnet {subnet} of pod {key} is not programmed yet; retrying")
        if spec is None:
            raise Refused("SubnetNotFound", f"{ctl.subnets.why_not(subnet)} (chosen by {why})")
        want_ip = ann.get(names.ANN_IP_ADDRESS) or None
        want_mac = ann.get(names.ANN_MAC_ADDRESS) or None
        ignored = None
        with ctl.ipam_lock:
            alloc = ctl.ipam.lookup(key)
            if alloc is not None and not model.allocation_fits(alloc, subnet, want_ip, want_mac):
                if ann.get(names.ANN_ALLOCATED) == "true":
                    # the pod's network is plumbed with this address: it never
                    # changes under the pod (the annotations are both request and
                    # record, so an edit of them is a request, refused here and
                    # undone below by restoring the annotations)
                    ignored = (f"pod {key} runs with {alloc.ip} ({alloc.mac}) in subnet "
                               f"{alloc.subnet}; the request for {want_ip or 'any address'}"
                               + (f" with MAC {want_mac}" if want_mac else "")
                               + f" in {subnet} is ignored: delete and re-create the pod "
                               "to change its address")
                else:
                    LOG.info("pod %s: held %s in %s, now asks for %s in %s; re-allocating", key,
                             alloc.ip, alloc.subnet, want_ip or "any address", subnet)
                    ctl.ipam.release(key)
                    ctl.subnets.mark_dirty(alloc.subnet)
                    alloc = None
            if alloc is None:
                if ctl.subnets.is_terminating(subnet):
                    raise Refused("SubnetTerminating", f"subnet {subnet} is being deleted: no new "
                                  f"address for pod {key}")
                try:
                    alloc = ctl.ipam.allocate(subnet, key, ip=want_ip, mac=want_mac)
                except ipam_errors.IPAMError as exc:
                    raise Refused(exc.reason, f"cannot allocate an address in subnet {subnet} "
                                  f"for pod {key}: {exc}") from None
                ctl.subnets.mark_dirty(subnet)
        if ignored is not None:
            LOG.warning("%s", ignored)
            metrics.refused("AddressImmutable")
            ctl.event(pod, "AddressImmutable", ignored)
        lsp = names.pod_lsp_name(ns, name)
        node = pod["spec"]["nodeName"]
        sts = model.statefulset_of(pod)
        self._ensure_ip_object(ns, name, alloc, node, sts[0] if sts else None)
        addr = f"{alloc.mac} {alloc.ip}"
        ids = pod_ids(ns, name, alloc.subnet)
        if not ensure.port_is(ctl.nb, alloc.subnet, lsp, [addr], [addr], ids):
            ctl.writer.run([lambda api: ensure.EnsurePort(api, alloc.subnet, lsp, [addr], [addr], ids)],
                           what=f"pod port {lsp}")
        want = model.pod_annotations(alloc.ip, alloc.mac, alloc.cidr, alloc.gateway, alloc.subnet, lsp)
        if any(ann.get(k) != v for k, v in want.items()):
            try:
                r.patch_merge(ctl.kube, r.PODS, name, {"metadata": {"annotations": want}}, ns)
            except kerr.NotFound:
                return  # deleted meanwhile: the delete event brings us back
            LOG.info("pod %s: %s mac %s on %s (node %s)", key, alloc.ip, alloc.mac, alloc.subnet, node)
        with self._lock:
            self._refused.pop(key, None)

    def _ensure_ip_object(self, ns: str, name: str, alloc, node: str, sts: str | None) -> None:
        ctl = self.ctl
        body = model.ip_object(ns, name, alloc.subnet, alloc.ip, alloc.mac, node, sts)
        obj_name = body["metadata"]["name"]
        cur = ctl.inf_ips.get(obj_name)
        if cur is None:
            try:
                r.create(ctl.kube, r.IPS, body)
                return
            except kerr.AlreadyExists:
                cur = r.get(ctl.kube, r.IPS, obj_name)
                if cur is None:
                    raise
        if (cur.get("spec") or {}) != body["spec"]:
            r.patch_merge(ctl.kube, r.IPS, obj_name, {"spec": body["spec"],
                                                      "metadata": {"labels": body["metadata"]["labels"]}})

    def _refuse(self, key: str, pod: dict, reason: str, message: str) -> None:
        ns, name = key.split("/", 1)
        with self._lock:
            first = self._refused.get(key) != message
            self._refused[key] = message
        ann = model.annotations(pod)
        if ann.get(names.ANN_ALLOCATION_ERROR) == message and ann.get(names.ANN_ALLOCATED) != "true":
            return
        if first:
            LOG.warning("pod %s refused: %s", key, message)
            metrics.refused(reason)
            self.ctl.event(pod, reason, message)
        if ann.get(names.ANN_ALLOCATED) == "true":
            return  # a running pod keeps its network; the Event says what is wrong
        try:
            r.patch_merge(self.ctl.kube, r.PODS, name,
                          {"metadata": {"annotations": {names.ANN_ALLOCATION_ERROR: message,
                                                        names.ANN_ALLOCATED: None}}}, ns)
        except kerr.NotFound:
            pass

    # -- release path -------------------------------------------------------------------
    def _keeps_address(self, ns: str, name: str, pod: dict | None) -> bool:
        """StatefulSet pods keep their address while the set has their ordinal."""
        ref = model.statefulset_of(pod) if pod is not None else None
        if ref is None and pod is None:
            ipobj = self.ctl.inf_ips.get(model.ip_object_name(ns, name)) or {}
            spec = ipobj.get("spec") or {}
            if spec.get("ownerKind") == names.OWNER_KIND_STATEFULSET and spec.get("ownerName"):
                sts = spec["ownerName"]
                suffix = name[len(sts) + 1:] if name.startswith(sts + "-") else ""
                if suffix.isdigit():
                    ref = (sts, int(suffix))
        if ref is None:
            return False
        return model.statefulset_keeps(self.ctl.inf_sts.get(model.pod_key(ns, ref[0])), ref[1])

    def _release(self, ns: str, name: str, pod: dict | None) -> None:
        ctl = self.ctl
        key = model.pod_key(ns, name)
        with self._lock:
            self._refused.pop(key, None)
        lsp = names.pod_lsp_name(ns, name)
        with ctl.ipam_lock:
            alloc = ctl.ipam.lookup(key)
        ctl.writer.run([lambda api: ensure.DeletePort(api, lsp, alloc.subnet if alloc else None)],
                       what=f"delete pod port {lsp}")
        if self._keeps_address(ns, name, pod):
            if alloc is not None:
                LOG.info("pod %s gone; StatefulSet keeps %s for its re-creation", key, alloc.ip)
            return
        obj_name = model.ip_object_name(ns, name)
        ipobj = ctl.inf_ips.get(obj_name)
        if ipobj is not None:
            spec = ipobj.get("spec") or {}
            if spec.get("namespace") == ns and spec.get("pod") == name:
                r.delete(ctl.kube, r.IPS, obj_name)
        with ctl.ipam_lock:
            alloc = ctl.ipam.lookup(key)
            if alloc is not None:
                ctl.ipam.release(key)
        if alloc is not None:
            ctl.subnets.mark_dirty(alloc.subnet)
            LOG.info("pod %s gone: released %s in %s", key, alloc.ip, alloc.subnet)
            ctl.requeue_waiting_pods()
