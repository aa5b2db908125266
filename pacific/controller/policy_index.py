"""What the policy feature knows of the cluster's NetworkPolicies, kept from
their events, so that a pod event finds the few groups and peer sets it can
move without looking at every policy (policy.py; decision 0031).  No I/O.

    index = PolicyIndex()
    before, after = index.update("ns/p", new_policy)    # its old and new group keys
    index.candidates("ns")        # [(policy key, group key, names a port?)]
    index.sets()                  # [(set name, pods' namespace or "", peer)]
    index.keys_of("np_as_...")    # a set's queue keys, one per namespace naming it

Each group is `namespace/np_<hash>` of one podSelector of one namespace.  A
peer's address set may be named by policies of several namespaces (a
namespaceSelector peer: its pods do not depend on the policy's namespace); it
is queued once per namespace that names it (`namespace/$np_as_<hash>`), so
each tenant's sets are reconciled in its own turn of the fair work queue,
never behind another tenant's.
"""
from __future__ import annotations

import threading

from pacific.controller.policy_model import has_named_ports, pod_peers, set_namespace


def set_key(name: str, namespace: str) -> str:
    """The queue key of a peer's address set for the policies of `namespace`
    (`$` is not allowed in object names: never a policy's or a group's key)."""
    return f"{namespace}/${name}"


def _ns(key: str) -> str:
    return key.split("/", 1)[0]


class PolicyIndex:
    def __init__(self, group_key):
        """group_key(policy) -> the key of the group the policy belongs to."""
        self._group_key = group_key
        self._lock = threading.Lock()
        self._group_of: dict[str, str] = {}          # policy key -> group key
        self._members_of: dict[str, set[str]] = {}   # group key -> policy keys
        self._selector_of: dict[str, dict] = {}      # group key -> its podSelector
        self._in_ns: dict[str, set[str]] = {}        # namespace -> its policy keys
        self._named: set[str] = set()                # policies naming a port
        self._set_def: dict[str, tuple[str, dict]] = {}  # set -> (pods' namespace, "": any; peer)
        self._set_users: dict[str, set[str]] = {}    # set -> the policy keys naming it
        self._sets_of: dict[str, set[str]] = {}      # policy key -> the sets it names

    def update(self, key: str, policy: dict | None) -> tuple[str | None, str | None]:
        """Policy `key` is now `policy` (None: deleted); (its old group, its new group)."""
        after = self._group_key(policy) if policy is not None else None
        with self._lock:
            before = self._group_of.pop(key, None)
            if before is not None:
                self._discard(self._members_of, before, key)
                if before not in self._members_of:
                    self._selector_of.pop(before, None)
            self._discard(self._in_ns, _ns(key), key)
            self._named.discard(key)
            for name in self._sets_of.pop(key, ()):
                self._discard(self._set_users, name, key)
                if name not in self._set_users:
                    del self._set_def[name]          # its rows go at the next collection
            if policy is None:
                return before, None
            self._group_of[key] = after
            self._members_of.setdefault(after, set()).add(key)
            self._selector_of[after] = (policy.get("spec") or {}).get("podSelector") or {}
            self._in_ns.setdefault(_ns(key), set()).add(key)
            if has_named_ports(policy):
                self._named.add(key)
            peers = pod_peers(policy)
            self._sets_of[key] = set(peers)
            for name, (pns, peer) in peers.items():
                self._set_def[name] = (set_namespace(pns, peer), peer)
                self._set_users.setdefault(name, set()).add(key)
            return before, after

    @staticmethod
    def _discard(index: dict[str, set[str]], at: str, key: str) -> None:
        left = index.get(at)
        if left is not None:
            left.discard(key)
            if not left:
                del index[at]

    # -- reads ------------------------------------------------------------------------
    def policies_of(self, gkey: str) -> list[str]:
        with self._lock:
            return sorted(self._members_of.get(gkey, ()))

    def groups_in(self, ns: str) -> list[tuple[str, dict]]:
        """(group key, podSelector) of the groups of namespace `ns`."""
        with self._lock:
            gkeys = {self._group_of[k] for k in self._in_ns.get(ns, ())}
            return [(g, self._selector_of[g]) for g in sorted(gkeys)]

    def candidates(self, ns: str) -> list[tuple[str, str, bool]]:
        """(policy key, group key, names a port?) of the policies whose group a
        pod of `ns` can move: those of `ns`, and those naming a port (resolved
        on pods of any namespace)."""
        with self._lock:
            keys = self._in_ns.get(ns, set()) | self._named
            return [(k, self._group_of[k], k in self._named) for k in keys]

    def sets(self) -> list[tuple[str, str, dict]]:
        """(set name, its pods' namespace or "", peer) of every set."""
        with self._lock:
            return [(name, pns, peer) for name, (pns, peer) in self._set_def.items()]

    def keys_of(self, name: str) -> list[str]:
        """The queue keys of set `name`: one per namespace whose policies name it."""
        with self._lock:
            return self._keys_of(name)

    def set_def(self, name: str) -> tuple[str, dict] | None:
        with self._lock:
            return self._set_def.get(name)

    def set_names(self) -> set[str]:
        with self._lock:
            return set(self._set_def)

    def set_keys(self) -> list[str]:
        with self._lock:
            return sorted(k for name in self._set_def for k in self._keys_of(name))

    def _keys_of(self, name: str) -> list[str]:
        return sorted({set_key(name, _ns(k)) for k in self._set_users.get(name, ())})
