"""Compact, read-only cache entries for the controller's two big informer caches.

The controller caches every Pod and IP object of the cluster (100,000 of each
at scale).  A trimmed object kept as nested dicts still cost ~1.4 KB (a Pod:
five dicts) and ~1.6 KB (an IP object: three dicts, eight strings) each, the
dicts most of it.  `SlimPod` and `SlimIP` hold the same fields in one object
with slots and answer as the trimmed dict did: a read-only Mapping whose
``["metadata"]``, ``["spec"]``... are built on access (plain dicts, fresh
each time, so a reader that changes one changes nothing cached).  Every
reader of the dicts (``model.meta``, ``contract.own_record``, label
selectors, ``{**obj, ...}``, equality) works unchanged.

The uid and resourceVersion, unique to each object, are kept as integers when
they are a canonical UUID and a plain decimal (as Kubernetes writes them):
44 and 28 bytes instead of 85 and ~57 as text, written back as the same text.

Built by `model.slim_pod` / `model.slim_ip` (which decide what is kept and
intern the repeated strings); nothing else constructs them.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping

_NO_STATUS = ("kind", "apiVersion", "metadata", "spec")
_WITH_STATUS = _NO_STATUS + ("status",)
_IP_KEYS = _NO_STATUS


class _Slim(Mapping):
    """Mapping plumbing shared by the entries: equality on the fields when
    both sides are entries of one type, else as a dict; dict-like repr."""

    __slots__ = ()

    def _fields(self) -> tuple:
        return tuple(getattr(self, s) for s in self.__slots__)

    def __eq__(self, other):
        if type(other) is type(self):
            return self._fields() == other._fields()
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    __hash__ = None     # a Mapping, as the dict it stands for

    def __repr__(self) -> str:
        return repr(dict(self.items()))

    def __reduce__(self):     # copy / deepcopy / pickle: the same fields
        return (_restore, (type(self), self._fields()))


def _pack_uid(text):
    """A canonical UUID as its integer; anything else as it is."""
    if isinstance(text, str) and len(text) == 36:
        try:
            u = uuid.UUID(text)
        except ValueError:
            return text
        if str(u) == text:
            return u.int
    return text


def _uid_text(v):
    return str(uuid.UUID(int=v)) if isinstance(v, int) else v


def _pack_rv(text):
    """A resourceVersion that is a plain decimal (no sign, no leading zero) as
    its integer; anything else (an opaque version) as it is."""
    if isinstance(text, str) and text.isdigit() and text.isascii() and text[0] != "0":
        return int(text)
    return text


def _rv_text(v):
    return str(v) if isinstance(v, int) else v


def _restore(cls, fields):
    obj = cls.__new__(cls)
    for s, v in zip(cls.__slots__, fields):
        setattr(obj, s, v)
    return obj


class SlimPod(_Slim):
    """The part of a Pod the controller reads (see `model.slim_pod`)."""

    __slots__ = ("kind", "api_version", "name", "namespace", "uid", "rv", "deleted",
                 "labels", "ann", "refs", "node", "host", "ports", "phase")

    def __init__(self, kind, api_version, name, namespace, uid, rv, deleted=None,
                 labels=None, ann=None, refs=None, node=None, host=False, ports=None,
                 phase=None):
        self.kind, self.api_version = kind, api_version
        self.name, self.namespace = name, namespace
        self.uid, self.rv = _pack_uid(uid), _pack_rv(rv)
        self.deleted = deleted     # metadata.deletionTimestamp or None
        self.labels = labels       # dict (interned strings) or None
        self.ann = ann             # annotations kept, flat (k1, v1, k2, v2...) or None
        self.refs = refs           # StatefulSet ownerReferences: ((name, controller), ...)
        self.node = node
        self.host = host
        self.ports = ports         # named container ports: ((name, port, protocol), ...)
        self.phase = phase

    def __getitem__(self, key):
        if key == "metadata":
            return self._metadata()
        if key == "spec":
            return self._spec()
        if key == "kind":
            return self.kind
        if key == "apiVersion":
            return self.api_version
        if key == "status" and self.phase is not None:
            return {"phase": self.phase}
        raise KeyError(key)

    def __iter__(self):
        return iter(_NO_STATUS if self.phase is None else _WITH_STATUS)

    def __len__(self) -> int:
        return 4 if self.phase is None else 5

    def __contains__(self, key) -> bool:
        return key in _NO_STATUS or (key == "status" and self.phase is not None)

    def _metadata(self) -> dict:
        m = {"name": self.name, "uid": _uid_text(self.uid), "resourceVersion": _rv_text(self.rv)}
        if self.namespace is not None:
            m["namespace"] = self.namespace
        if self.deleted:
            m["deletionTimestamp"] = self.deleted
        if self.labels:
            m["labels"] = self.labels
        if self.ann:
            a = self.ann
            m["annotations"] = {a[i]: a[i + 1] for i in range(0, len(a), 2)}
        if self.refs:
            m["ownerReferences"] = [{"kind": "StatefulSet", "name": n, "controller": c}
                                    for n, c in self.refs]
        return m

    def _spec(self) -> dict:
        s = {}
        if self.node:
            s["nodeName"] = self.node
        if self.host:
            s["hostNetwork"] = True
        if self.ports:
            s["containers"] = [{"ports": [{"name": n, "containerPort": p, "protocol": proto}
                                          for n, p, proto in self.ports]}]
        return s


class SlimIP(_Slim):
    """The part of an IP object the controller reads: name, version and the
    whole spec (see `model.slim_ip`).  The spec's keys are a tuple shared by
    every object of the same shape, its values one tuple."""

    __slots__ = ("kind", "api_version", "name", "uid", "rv", "deleted", "skeys", "svals")

    def __init__(self, kind, api_version, name, uid, rv, deleted, skeys: tuple, svals: tuple):
        self.kind, self.api_version = kind, api_version
        self.name, self.deleted = name, deleted
        self.uid, self.rv = _pack_uid(uid), _pack_rv(rv)
        self.skeys, self.svals = skeys, svals

    def __getitem__(self, key):
        if key == "spec":
            return dict(zip(self.skeys, self.svals))
        if key == "metadata":
            m = {"name": self.name, "uid": _uid_text(self.uid),
                 "resourceVersion": _rv_text(self.rv)}
            if self.deleted:
                m["deletionTimestamp"] = self.deleted
            return m
        if key == "kind":
            return self.kind
        if key == "apiVersion":
            return self.api_version
        raise KeyError(key)

    def __iter__(self):
        return iter(_IP_KEYS)

    def __len__(self) -> int:
        return 4

    def __contains__(self, key) -> bool:
        return key in _IP_KEYS

    def spec_get(self, key, default=None):
        """spec[key] without building the spec dict."""
        try:
            return self.svals[self.skeys.index(key)]
        except ValueError:
            return default
