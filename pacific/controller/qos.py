"""Pod bandwidth: requests -> the controller's decision (contract.QosRecord).

Requests, per direction (ingress: into the pod, egress: out of it), first found
wins:

1. the pod's `pacific.io/ingress_rate` / `egress_rate` (Mbit/s, decimals allowed);
2. the pod's `kubernetes.io/ingress-bandwidth` / `egress-bandwidth` (a quantity
   in bit/s: "10M", "1Gi", "500k");
3. the same two keys on the pod's namespace (the default of its pods).

When an object carries both kinds for one direction, Pacific's wins and a
Warning Event says so.  A value that is not a positive number, or above
names.QOS_MAX_MBPS, is refused: the pod keeps the limit it had for that
direction, and an Event plus `pacific.io/qos_error` name the value and why.
The decision is written as ONE controller-owned annotation naming the pod's UID
(`pacific.io/qos`); the node daemon applies only that (node/qos.py).
"""
from __future__ import annotations

import logging
import re
from decimal import Decimal, InvalidOperation

from pacific import contract, names
from pacific.controller import informers, model
from pacific.controller.feature import Feature
from pacific.controller.reports import Reports
from pacific.kube import errors as kerr
from pacific.kube import resources as r

LOG = logging.getLogger(__name__)

DIRECTIONS = {  # direction -> (Pacific's key in Mbit/s, Kubernetes' key as a quantity)
    "ingress": (names.ANN_INGRESS_RATE, names.ANN_K8S_INGRESS_BANDWIDTH),
    "egress": (names.ANN_EGRESS_RATE, names.ANN_K8S_EGRESS_BANDWIDTH),
}
REQUEST_KEYS = tuple(k for pair in DIRECTIONS.values() for k in pair)
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_SUFFIX = {None: 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
           "Pi": 2**50, "Ei": 2**60}


class QosValueError(ValueError):
    """A requested rate that cannot be applied; str() names the key, value and why."""


def _kbps(mbps: Decimal, key: str, value: str) -> int:
    if mbps <= 0:
        raise QosValueError(f"{key}={value!r}: a rate must be a positive number")
    if mbps > names.QOS_MAX_MBPS:
        raise QosValueError(f"{key}={value!r}: {mbps} Mbit/s is above the most Pacific can "
                            f"apply ({names.QOS_MAX_MBPS} Mbit/s)")
    return max(1, int(mbps * 1000))


def parse_rate(key: str, value) -> int:
    """kbit/s from a request annotation (Pacific's: Mbit/s; Kubernetes': a quantity)."""
    text = value.strip() if isinstance(value, str) else ""
    if key in (names.ANN_INGRESS_RATE, names.ANN_EGRESS_RATE):
        try:
            mbps = Decimal(text)
        except InvalidOperation:
            mbps = None
        if mbps is None or not mbps.is_finite():
            raise QosValueError(f"{key}={value!r}: not a number of Mbit/s")
        return _kbps(mbps, key, value)
    m = _QUANTITY.match(text)
    if not m:
        raise QosValueError(f"{key}={value!r}: not a Kubernetes quantity of bit/s (e.g. 10M)")
    bits = Decimal(m.group(1)) * _SUFFIX[m.group(2)]
    return _kbps(bits / 10**6, key, value)


def decide(pod_ann: dict, ns_ann: dict) -> tuple[dict, list[str], list[str]]:
    """({direction: kbit/s or None}, notes, errors).  A direction whose winning
    request is invalid is missing from the result (keep what was applied)."""
    out, notes, errs = {}, [], []
    for direction, (ours, theirs) in DIRECTIONS.items():
        for where, ann in (("pod", pod_ann), ("namespace", ns_ann)):
            have = [k for k in (ours, theirs) if ann.get(k) not in (None, "")]
            if not have:
                continue
            if len(have) == 2:
                notes.append(f"{where} sets both {ours}={ann[ours]!r} and {theirs}="
                             f"{ann[theirs]!r}; {ours} is applied")
            try:
                out[direction] = parse_rate(have[0], ann[have[0]])
            except QosValueError as exc:
                errs.append(f"{where} annotation {exc}")
            break
        else:
            out[direction] = None
    return out, notes, errs


class QosFeature(Feature):
    name = "qos"
    informers = {"pods": informers.PODS, "namespaces": informers.NAMESPACES}

    def __init__(self, ctl):
        super().__init__(ctl)
        self.reports = Reports()   # pod key -> the message its last Event carried

    def handlers(self):
        return {"pods": self._on_pod, "namespaces": self._on_namespace}

    @staticmethod
    def _relevant(obj: dict | None) -> tuple:
        ann = model.annotations(obj or {})
        return tuple(ann.get(k) for k in (*REQUEST_KEYS, names.ANN_QOS, names.ANN_QOS_ERROR))

    def _on_pod(self, old, new):
        if new is None:
            self.reports.forget(model.object_key(model.meta(old)["namespace"],
                                                 model.meta(old)["name"]))
            return ()
        if old is not None and self._relevant(old) == self._relevant(new):
            return ()
        m = model.meta(new)
        return (model.object_key(m.get("namespace"), m.get("name")),)

    def _on_namespace(self, old, new):
        if old is None or new is None or self._relevant(old) == self._relevant(new):
            return ()   # a new namespace has no pods yet; a deleted one loses them
        ns = model.meta(new).get("name")
        return [model.object_key(ns, model.meta(p)["name"]) for p in self.ctl.informer("pods").list()
                if model.meta(p).get("namespace") == ns]

    def resync_keys(self):
        return [model.object_key(model.meta(p).get("namespace"), model.meta(p)["name"])
                for p in self.ctl.informer("pods").list()]

    def reconcile(self, key: str) -> None:
        pod = self.ctl.informer("pods").get(key)
        if pod is None or not model.needs_network(pod):
            return
        ns, name = key.split("/", 1)
        ns_obj = self.ctl.informer("namespaces").get(ns) or {}
        want, notes, errs = decide(model.annotations(pod), model.annotations(ns_obj))
        prev = contract.own_qos(pod)
        for direction in DIRECTIONS:
            if direction not in want:   # refused: keep what was applied
                want[direction] = getattr(prev, f"{direction}_kbps") if prev else None
        rec = contract.QosRecord(uid=model.meta(pod).get("uid"), ingress_kbps=want["ingress"],
                                 egress_kbps=want["egress"])
        error = "; ".join(errs) + ("; the previous limit stays" if errs else "")
        self._report(pod, key, notes, error)
        ann = model.annotations(pod)
        patch = {names.ANN_QOS: rec.to_json() if rec.limited else None,
                 names.ANN_QOS_ERROR: error or None}
        if all(ann.get(k) == v for k, v in patch.items()):
            return
        try:
            r.patch_merge(self.ctl.kube, r.PODS, name, {"metadata": {"annotations": patch}}, ns)
        except kerr.NotFound:
            return
        LOG.info("pod %s: bandwidth ingress %s, egress %s (kbit/s)%s", key,
                 rec.ingress_kbps or "unlimited", rec.egress_kbps or "unlimited",
                 f"; refused: {error}" if error else "")

    def _report(self, pod: dict, key: str, notes: list[str], error: str) -> None:
        message = "; ".join([*notes, error] if error else notes)
        if not self.reports.due(key, pod, message):
            return
        if error:
            LOG.warning("pod %s: bandwidth request refused: %s", key, error)
            self.ctl.event(pod, "InvalidBandwidth", error)
        for note in notes:
            self.ctl.event(pod, "BandwidthAnnotationOverridden", note)
