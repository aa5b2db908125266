"""Pods -> address, MAC, logical switch port, IP object, pod annotations.

Per pod key "namespace/name", level-triggered (the pod, its IP object or its
StatefulSet may each be missing; the reconciler converges from whatever it
finds):

* pod needs a network (scheduled, not host-network, not finished):
  subnet = pod annotation, else namespace annotation, else a Subnet listing
  the namespace, else the default; address from IPAM (owner key = pod key,
  honouring ANN_IP_ADDRESS / ANN_MAC_ADDRESS requests); then, in this order,
  the IP object (the durable record IPAM is rebuilt from), the switch port
  ``pod:<namespace>/<name>`` with addresses and port security (through the
  batched NB writer), and the controller's record on the pod
  (contract.PodRecord: pod UID, port, address...), replacing with a Warning
  Event any record it did not write.  A request that cannot be
  honoured (unknown subnet, address outside / excluded / taken, bad MAC) gets
  a Warning Event and ANN_ALLOCATION_ERROR, and no address; it is retried
  when subnets change or addresses are released, and one refused for a
  quarantined address (ipam/quarantine.py: released by another pod moments
  ago) when the quarantine ends.
* pod gone or finished: the port is deleted; the address and IP object are
  released, unless the pod belongs to a StatefulSet that still has its
  ordinal: then both are kept, so the re-created pod (on any node) gets the
  same address.

Every release and every new allocation is told to the other features
(Controller.holders_changed) once IPAM changed, so what they decided on the
address's old holder (a Service's hand-written endpoints) is decided again.
"""
from __future__ import annotations

import logging
import threading
import time

from pacific import contract, names
from pacific.controller import informers, metrics, model, rebuild
from pacific.controller.feature import Feature
from pacific.ipam import addr as ipam_addr
from pacific.ipam import errors as ipam_errors
from pacific.kube import errors as kerr
from pacific.kube import resources as r
from pacific.ovn import ensure

LOG = logging.getLogger(__name__)


def pod_ids(namespace: str, name: str, subnet: str) -> dict:
    """external_ids of a pod's port: its owner (namespace/name) says everything
    else (the subnet is the port's switch); 100,000 ports are held in the
    controller's NB replica, so every key costs (~0.2 KB a port each)."""
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_POD, names.EXT_OWNER: model.object_key(namespace, name),
            names.EXT_CREATED_BY: names.CONTROLLER_NAME}


def _may_be_plumbed(ann: dict) -> bool:
    """Has the controller recorded an allocation on this pod (any record, also a
    legacy one)?  Then a node may have plumbed it, and its address never moves."""
    return names.ANN_ALLOCATION in ann or any(k in ann for k in names.ANN_LEGACY_RECORD)


RELEASE_HELPS = frozenset({"AddressInUse", "MACInUse", "SubnetFull"})   # refusals a release may end
RETRY_SLACK = 0.5      # s after a quarantine's end before a refused pod tries again


class Refused(Exception):
    """The pod's request cannot be honoured; reason is an Event reason;
    retry_at: when (the IPAM's clock) it may be honoured, e.g. a quarantine's end."""

    def __init__(self, reason: str, message: str, retry_at: float | None = None):
        super().__init__(message)
        self.reason, self.retry_at = reason, retry_at


class SubnetPending(RuntimeError):
    """The pod's subnet exists but its switch is not ready yet: retry later."""


class PodFeature(Feature):
    name = "pod"
    informers = {"pods": informers.PODS, "ips": informers.IPS, "namespaces": informers.NAMESPACES,
                 "statefulsets": informers.STATEFULSETS, "subnets": informers.SUBNETS}
    uses = {"subnets": "subnet"}       # a pod's Subnet: its spec, binding, usage

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self._refused: dict[str, tuple[str, str]] = {}    # pod key -> (message, reason)
        # (namespace, statefulset) -> its pods' names, from the IP objects, so a
        # StatefulSet event finds its pods without scanning every IP object
        self._sts_pods: dict[tuple[str, str], set[str]] = {}
        self._legacy_ports: dict[str, list[str]] = {}   # pod key -> ports named before
        # the reconciler's own writes, until their watch events come back: an event
        # that brings exactly what it wrote needs no reconcile (it would find all
        # in place).  Recorded before the write: the event can arrive first.
        self._own_records: dict[str, dict] = {}     # pod key -> annotations patched
        self._own_ips: dict[str, dict] = {}         # IP object name -> spec written

    def workers(self, cfg) -> int:
        return cfg.workers

    def refused_keys(self) -> list[str]:
        with self._lock:
            return list(self._refused)

    def requeue_refused(self, released: bool = False) -> None:
        """Pods refused earlier (unknown subnet, address taken) get another try;
        after an address was released (`released`), only those a release can
        help (address or MAC taken, subnet full): 1,000 pods of one tenant
        refused for an address outside their Subnet are not retried each time
        another tenant's pod goes (bench_fairness)."""
        with self._lock:
            keys = [k for k, (_, reason) in self._refused.items()
                    if not released or reason in RELEASE_HELPS]
        self.queue_keys(keys)

    # -- feature wiring (informer threads: keys only) ------------------------------
    def handlers(self):
        return {"pods": self._on_pod, "ips": self._on_ip, "statefulsets": self._on_sts,
                "namespaces": self._on_namespace}

    def _on_pod(self, old, new):
        # an update of nothing the allocation reads (labels, status, other
        # annotations...) needs no reconcile; features that select on labels
        # subscribe to the same informer with their own filter
        m = model.meta(new or old)
        key = model.object_key(m.get("namespace", "default"), m.get("name", ""))
        if old is not None and new is not None:
            with self._lock:
                wrote = self._own_records.get(key)
            if wrote is not None and model.same_for_allocation(
                    model.with_annotations(old, wrote), new):
                with self._lock:        # the record this reconciler just wrote
                    self._own_records.pop(key, None)
                return ()
            if model.same_for_allocation(old, new):
                return ()
        if new is None:
            with self._lock:
                self._own_records.pop(key, None)
        return (key,)

    def _on_ip(self, old, new):
        keys = []
        name = model.meta(new or old).get("name")
        own = None      # the pod of an object this reconciler just wrote: not woken
        with self._lock:
            if new is None:
                self._own_ips.pop(name, None)
            elif name in self._own_ips and self._own_ips[name] == new.get("spec"):
                del self._own_ips[name]
                own = model.object_key(new["spec"].get("namespace"), new["spec"].get("pod"))
        for obj, present in ((old, False), (new, True)):
            spec = (obj or {}).get("spec") or {}
            if not (spec.get("namespace") and spec.get("pod")):
                continue
            key = model.object_key(spec["namespace"], spec["pod"])
            # its own write is woken only when the pod went meanwhile: the release
            # ran before the informer held the object, and would not find it
            if key != own or self.ctl.informer("pods").get(key) is None:
                keys.append(key)
            if spec.get("ownerKind") == names.OWNER_KIND_STATEFULSET and spec.get("ownerName"):
                idx = (spec["namespace"], spec["ownerName"])
                with self._lock:
                    if present:
                        self._sts_pods.setdefault(idx, set()).add(spec["pod"])
                    elif new is None or ((new.get("spec") or {}).get("pod") != spec["pod"]):
                        self._sts_pods.get(idx, set()).discard(spec["pod"])
        return set(keys)

    def _on_sts(self, old, new):
        m = model.meta(new or old)
        with self._lock:
            pods = list(self._sts_pods.get((m.get("namespace"), m.get("name")), ()))
        return [model.object_key(m.get("namespace"), p) for p in pods]

    def _on_namespace(self, old, new):
        """A namespace's subnet annotation changed: its refused pods try again
        (running pods keep their address)."""
        if old is not None and new is not None and \
                model.annotations(old).get(names.ANN_LOGICAL_SWITCH) == \
                model.annotations(new).get(names.ANN_LOGICAL_SWITCH):
            return ()
        ns = model.meta(new or old).get("name")
        return [k for k in self.refused_keys() if k.split("/", 1)[0] == ns]

    def prepare(self) -> None:
        rebuild.restore_pod_addresses(self.ctl)
        legacy: dict[str, list[str]] = {}
        for row in self.ctl.nb.rows_owned(ensure.LSP, names.OWNER_KIND_POD):
            key = row.external_ids.get(names.EXT_OWNER) or ""
            ns, _, name = key.partition("/")
            if row.name != names.pod_lsp_name(ns, name):
                legacy.setdefault(key, []).append(row.name)
        with self._lock:
            self._legacy_ports = legacy

    def before_workers(self, stop: threading.Event, timeout: float = 30.0) -> None:
        """Let every Subnet get its switch (or its refusal) before pods are
        reconciled, so a big restart does not park thousands of pods in retry."""
        subnets = self.subnets
        deadline = time.monotonic() + timeout
        while not stop.is_set() and time.monotonic() < deadline:
            names_ = [model.meta(s).get("name") for s in self.ctl.informer("subnets").list()]
            if all(subnets.spec(n) or subnets.is_refused(n) for n in names_):
                return
            time.sleep(0.05)
        LOG.warning("subnets not all settled after %.0fs; starting pod workers anyway", timeout)

    def resync_keys(self):
        keys = {model.object_key(model.meta(p).get("namespace"), model.meta(p)["name"])
                for p in self.ctl.informer("pods").list()}
        for ip in self.ctl.informer("ips").list():
            spec = ip.get("spec") or {}
            keys.add(model.object_key(spec.get("namespace"), spec.get("pod")))
        for row in self.ctl.nb.rows_owned(ensure.LSP, names.OWNER_KIND_POD):
            keys.add(row.external_ids.get(names.EXT_OWNER))
        return [k for k in keys if k and "/" in k and not k.startswith("None/")]

    # -- entry point -------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        ns, name = key.split("/", 1)
        pod = self.ctl.informer("pods").get(key)
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
            if exc.retry_at is not None:
                wait = max(0.1, exc.retry_at - self.ctl.ipam.clock())
                self.queue.add_after(key, wait + RETRY_SLACK)

    # -- allocation path ------------------------------------------------------------
    def _ensure(self, ns: str, name: str, pod: dict) -> None:
        ctl = self.ctl
        key = model.object_key(ns, name)
        ann = model.annotations(pod)
        subnets = self.subnets
        ns_obj = ctl.informer("namespaces").get(ns)
        subnet, why = model.choose_subnet(pod, ns_obj, subnets.namespace_binding(),
                                          subnets.default_name())
        if ann.get(names.ANN_LOGICAL_SWITCH):
            mine = model.subnets_of_namespace(ns, ns_obj, ctl.informer("subnets").list(),
                                              subnets.default_name())
            if subnet not in mine:
                raise Refused("SubnetNotAllowed", (
                    f"subnet {subnet!r} (pod annotation {names.ANN_LOGICAL_SWITCH}) is not bound "
                    f"to namespace {ns}; its pods may use {', '.join(sorted(mine))}"))
        spec = subnets.spec(subnet)
        if spec is None and ctl.informer("subnets").get(subnet) is not None \
                and not subnets.is_refused(subnet):
            raise SubnetPending(f"subnet {subnet} of pod {key} is not programmed yet; retrying")
        if spec is None:
            raise Refused("SubnetNotFound", f"{subnets.why_not(subnet)} (chosen by {why})")
        want_ip = ann.get(names.ANN_IP_ADDRESS) or None
        want_mac = ann.get(names.ANN_MAC_ADDRESS) or None
        ignored = None
        with ctl.ipam_lock:
            alloc = ctl.ipam.lookup(key)
            if alloc is not None and not model.allocation_fits(alloc, subnet, want_ip, want_mac):
                if _may_be_plumbed(ann):
                    # the pod may be plumbed with this address: it never changes
                    # under the pod; a new request is refused with an Event
                    ignored = (f"pod {key} runs with {alloc.ip} ({alloc.mac}) in subnet "
                               f"{alloc.subnet}; the request for {want_ip or 'any address'}"
                               + (f" with MAC {want_mac}" if want_mac else "")
                               + f" in {subnet} is ignored: delete and re-create the pod "
                               "to change its address")
                else:
                    LOG.info("pod %s: held %s in %s, now asks for %s in %s; re-allocating", key,
                             alloc.ip, alloc.subnet, want_ip or "any address", subnet)
                    ctl.ipam.release(key)
                    ctl.holders_changed(alloc.ips, ns)
                    subnets.mark_dirty(alloc.subnet)
                    alloc = None
            if alloc is None:
                if subnets.is_terminating(subnet):
                    raise Refused("SubnetTerminating", f"subnet {subnet} is being deleted: no new "
                                  f"address for pod {key}")
                try:
                    if want_mac is not None:   # never an infrastructure port's MAC
                        want_mac = ipam_addr.check_requested_mac(
                            want_mac, (*ctl.cfg.join_cidrs, names.EGRESS_TRANSIT_CIDR))
                    alloc = ctl.ipam.allocate(subnet, key, ip=want_ip, mac=want_mac)
                except ipam_errors.IPAMError as exc:
                    if getattr(exc, "holder", None):      # for the administrator's log only
                        LOG.info("pod %s: %s (held by %s)", key, exc, exc.holder)
                    raise Refused(exc.reason, f"cannot allocate an address in subnet {subnet} "
                                  f"for pod {key}: {exc}",
                                  getattr(exc, "free_at", None)) from None
                subnets.mark_dirty(subnet)
                ctl.holders_changed(alloc.ips)
        if ignored is not None:
            LOG.warning("%s", ignored)
            metrics.refused("AddressImmutable")
            ctl.event(pod, "AddressImmutable", ignored)
        lsp = names.pod_lsp_name(ns, name)
        node = pod["spec"]["nodeName"]
        sts = model.statefulset_of(pod)
        addr = " ".join((alloc.mac, *alloc.ips))
        ids = pod_ids(ns, name, alloc.subnet)
        # only the pod's node may bind the port (system-id = node name): the old
        # node of a re-created pod of the same name (a StatefulSet pod deleted
        # with grace 0, a failed node) may still hold an OVS port with this
        # iface-id until its CNI DEL, and must not claim it back
        opts = {names.LSP_OPT_REQUESTED_CHASSIS: node}
        with self._lock:
            legacy = self._legacy_ports.pop(key, [])
        port = None
        if legacy or not ensure.port_is(ctl.nb, alloc.subnet, lsp, [addr], [addr], ids,
                                          options=opts):
            # a port named by an older scheme goes in the same transaction
            # the port joins the groups other features keep (tenant, policies) in
            # the transaction that creates it: no packet before they apply
            joins = [b for f in ctl.features for b in f.port_builders(pod, lsp)]
            port = ctl.writer.submit(
                [*(lambda api, p=p: ensure.DeletePort(api, p, None) for p in legacy),
                 lambda api: ensure.EnsurePort(api, alloc.subnet, lsp, [addr], [addr], ids,
                                               options=opts),
                 *joins], what=f"pod port {lsp}")
        # the IP object while NB commits the port (two round trips at once, not
        # one after the other: bench_fairness), and both before the record that
        # lets the pod's CNI ADD go on: every address a pod may use has its IP
        # object, from which a new leader rebuilds IPAM (rebuild.py)
        self._ensure_ip_object(ns, name, alloc, node, sts[0] if sts else None)
        if port is not None:
            ctl.writer.wait(port, f"pod port {lsp}")
        self._write_record(pod, contract.PodRecord(
            uid=model.meta(pod).get("uid"), port=lsp, ip=alloc.ip, mac=alloc.mac, cidr=alloc.cidr,
            gateway=alloc.gateway, subnet=alloc.subnet,
            **({"ips": alloc.ips, "cidrs": alloc.cidrs, "gateways": alloc.gateways}
               if alloc.more else {})), node)
        with self._lock:
            self._refused.pop(key, None)

    def _write_record(self, pod: dict, rec: contract.PodRecord, node: str) -> None:
        """The controller's record on the pod, replacing (with a Warning Event) any
        record it did not write: a copy from another pod, an edit, legacy keys."""
        m = model.meta(pod)
        key = model.object_key(m["namespace"], m["name"])
        ann = model.annotations(pod)
        foreign = contract.foreign_record_keys(pod, rec)
        if not foreign and names.ANN_ALLOCATION in ann and names.ANN_ALLOCATION_ERROR not in ann:
            return
        legacy_only = set(foreign) <= set(names.ANN_LEGACY_RECORD)
        if names.ANN_ALLOCATION in foreign:
            try:
                have = contract.PodRecord.of(pod)
                why = have.why_not_for(pod) or "it differs from the controller's allocation"
            except contract.ContractError as exc:
                why = str(exc)
            msg = (f"pod {key}: the {names.ANN_ALLOCATION} annotation was not written by "
                   f"{names.CONTROLLER_NAME} for this pod ({why}); replaced by its record "
                   f"({rec.ip} on {rec.subnet})")
            LOG.warning("%s", msg)
            metrics.refused("ForeignAllocationRecord")
            self.ctl.event(pod, "ForeignAllocationRecord", msg)
        if not self._patch_own(key, rec.annotations()):
            return  # deleted meanwhile: the delete event brings us back
        if not foreign or legacy_only:
            LOG.info("pod %s: %s mac %s on %s (node %s)", key, rec.ip, rec.mac, rec.subnet, node)

    def _patch_own(self, key: str, annotations: dict) -> bool:
        """Merge-patch the pod's annotations (the record or the refusal), noted as
        this reconciler's own write first (see _on_pod); False if the pod is gone."""
        ns, name = key.split("/", 1)
        with self._lock:
            self._own_records[key] = annotations
        try:
            r.patch_merge(self.ctl.kube, r.PODS, name, {"metadata": {"annotations": annotations}},
                          ns)
            return True
        except Exception as exc:
            with self._lock:
                self._own_records.pop(key, None)
            if isinstance(exc, kerr.NotFound):
                return False
            raise

    def _ensure_ip_object(self, ns: str, name: str, alloc, node: str, sts: str | None) -> None:
        ctl = self.ctl
        body = model.ip_object(ns, name, alloc.subnet, alloc.ip, alloc.mac, node, sts, alloc.ips)
        obj_name = body["metadata"]["name"]
        cur = ctl.informer("ips").get(obj_name)
        if cur is None:
            try:
                self._write_own_ip(obj_name, body["spec"], lambda: r.create(ctl.kube, r.IPS, body))
                return
            except kerr.AlreadyExists:
                cur = r.get(ctl.kube, r.IPS, obj_name)
                if cur is None:
                    raise
        if (cur.get("spec") or {}) != body["spec"]:
            patch = {"spec": body["spec"], "metadata": {"labels": body["metadata"]["labels"]}}
            self._write_own_ip(obj_name, body["spec"],
                               lambda: r.patch_merge(ctl.kube, r.IPS, obj_name, patch))

    def _write_own_ip(self, obj_name: str, spec: dict, write) -> None:
        """write() an IP object whose spec becomes `spec`, noted as this reconciler's
        own write first (see _on_ip)."""
        with self._lock:
            self._own_ips[obj_name] = spec
        try:
            write()
        except Exception:
            with self._lock:
                self._own_ips.pop(obj_name, None)
            raise

    def _refuse(self, key: str, pod: dict, reason: str, message: str) -> None:
        ns, name = key.split("/", 1)
        with self._lock:
            first = (self._refused.get(key) or ("",))[0] != message
            self._refused[key] = (message, reason)
        ann = model.annotations(pod)
        want = contract.refusal_annotations(message)
        if all(ann.get(k) == v for k, v in want.items()):
            return
        if first:
            LOG.warning("pod %s refused: %s", key, message)
            metrics.refused(reason)
            self.ctl.event(pod, reason, message)
        with self.ctl.ipam_lock:
            held = self.ctl.ipam.lookup(key)
        if held is not None and _may_be_plumbed(ann):
            return  # a running pod keeps its network; the Event says what is wrong
        self._patch_own(key, want)

    # -- release path -------------------------------------------------------------------
    def _keeps_address(self, ns: str, name: str, pod: dict | None) -> bool:
        """StatefulSet pods keep their address while the set has their ordinal."""
        ref = model.statefulset_of(pod) if pod is not None else None
        if ref is None and pod is None:
            ipobj = self.ctl.informer("ips").get(model.ip_object_name(ns, name)) or {}
            spec = ipobj.get("spec") or {}
            if spec.get("ownerKind") == names.OWNER_KIND_STATEFULSET and spec.get("ownerName"):
                sts = spec["ownerName"]
                suffix = name[len(sts) + 1:] if name.startswith(sts + "-") else ""
                if suffix.isdigit():
                    ref = (sts, int(suffix))
        if ref is None:
            return False
        return model.statefulset_keeps(self.ctl.informer("statefulsets").get(model.object_key(ns, ref[0])), ref[1])

    def _release(self, ns: str, name: str, pod: dict | None) -> None:
        ctl = self.ctl
        key = model.object_key(ns, name)
        with self._lock:
            self._refused.pop(key, None)
        lsp = names.pod_lsp_name(ns, name)
        with ctl.ipam_lock:
            alloc = ctl.ipam.lookup(key)
        if alloc is not None or ensure.row_exists(ctl.nb, ensure.LSP, lsp):
            # (a pod refused from the start never had a port: a tenant deleting
            # a thousand of them costs no NB transaction)
            ctl.writer.run([lambda api: ensure.DeletePort(api, lsp, alloc.subnet if alloc else None)],
                           what=f"delete pod port {lsp}")
        if self._keeps_address(ns, name, pod):
            if alloc is not None:
                LOG.info("pod %s gone; StatefulSet keeps %s for its re-creation", key, alloc.ip)
            return
        obj_name = model.ip_object_name(ns, name)
        ipobj = ctl.informer("ips").get(obj_name)
        if ipobj is not None:
            spec = ipobj.get("spec") or {}
            if spec.get("namespace") == ns and spec.get("pod") == name:
                r.delete(ctl.kube, r.IPS, obj_name)
        with ctl.ipam_lock:
            alloc = ctl.ipam.lookup(key)
            if alloc is not None:
                ctl.ipam.release(key)
        if alloc is not None:
            ctl.holders_changed(alloc.ips, ns)
            self.subnets.mark_dirty(alloc.subnet)
            LOG.info("pod %s gone: released %s in %s", key, alloc.ip, alloc.subnet)
            self.requeue_refused(released=True)
