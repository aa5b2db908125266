"""Which Services' EndpointSlices name an address: the index that lets a change
of an address's holder re-decide only those Services (issue 51).

A Service's backends are the endpoint addresses its namespace's pods hold
(exposure.confine, asking IPAM who holds each), decided when the Service or
its slices change.  A hand-written EndpointSlice (or Endpoints object,
mirrored into one) keeps naming an address after its pod is gone; when IPAM
releases the address or hands it to another pod, every decision made on the
old holder must be made again, before the new holder's port carries traffic:

    index = EndpointAddresses()
    index.update(old_slice, new_slice)          # the EndpointSlice handler
    index.services(["10.16.0.5"])               # {"web/api"}: to queue

Cost: one entry per (address, slice) the slices name; an update touches only
the slice's own addresses, a lookup only the addresses asked about, never
every Service.  Thread-safe (informer threads update, reconcilers look up).
"""
from __future__ import annotations

import threading
from typing import Iterable

from pacific import exposure
from pacific.kube import resources as r


def _service_of(s: dict) -> str | None:
    m = s.get("metadata") or {}
    svc = (m.get("labels") or {}).get(exposure.SERVICE_NAME_LABEL)
    return f"{m.get('namespace')}/{svc}" if svc else None


def slice_addresses(s: dict) -> frozenset[str]:
    """Every endpoint address a slice names (ready or not: readiness may
    change without a holder change), in canonical spelling."""
    return frozenset(exposure.canonical(a) or a for ep in s.get("endpoints") or []
                     for a in ep.get("addresses") or [])


class EndpointAddresses:
    def __init__(self):
        self._lock = threading.Lock()
        self._slices: dict[str, tuple[str, frozenset[str]]] = {}   # slice -> (service, addrs)
        self._by_address: dict[str, dict[str, int]] = {}   # address -> service -> slices

    def update(self, old: dict | None, new: dict | None) -> None:
        """An EndpointSlice event: (None, new) add, (old, new) update, (old, None) delete."""
        key = r.object_key(new or old)
        svc = _service_of(new) if new is not None else None
        addrs = slice_addresses(new) if new is not None and svc else frozenset()
        with self._lock:
            before = self._slices.pop(key, None)
            if before is not None:
                self._drop(*before)
            if svc and addrs:
                self._slices[key] = (svc, addrs)
                for a in addrs:
                    by = self._by_address.setdefault(a, {})
                    by[svc] = by.get(svc, 0) + 1

    def _drop(self, svc: str, addrs: frozenset[str]) -> None:
        for a in addrs:
            by = self._by_address.get(a)
            if by is None or svc not in by:
                continue
            by[svc] -= 1
            if not by[svc]:
                del by[svc]
            if not by:
                del self._by_address[a]

    def services(self, ips: Iterable[str]) -> set[str]:
        """The Services ("ns/name") whose slices name any of `ips`."""
        with self._lock:
            return {svc for ip in ips
                    for svc in self._by_address.get(exposure.canonical(ip) or ip, ())}

    def named_by(self, service: str, ips: Iterable[str]) -> set[str]:
        """Those of `ips` that `service`'s slices name."""
        with self._lock:
            return {ip for ip in ips
                    if service in self._by_address.get(exposure.canonical(ip) or ip, ())}

    def all(self) -> list[str]:
        """Every address some slice names."""
        with self._lock:
            return list(self._by_address)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_address)
