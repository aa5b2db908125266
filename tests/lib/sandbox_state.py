"""What a shared sandbox holds that a test could leave behind (pods and
Services outside the system namespaces, Subnets, ClusterNetworkPolicies,
EgressIPs, node labels), and the
difference two snapshots make: the check that every test and module leaves a
shared sandbox as it found it (tests/conftest.py `leaves_shared_sandboxes_clean`).

    before = snapshot(sb)
    ...                                  # the test
    assert not leftovers(before, snapshot(sb))

Objects being deleted (a namespace terminating, a Subnet behind its
finalizer) count as gone: the test asked for their deletion, and what
follows waits where it needs them gone.
"""
from __future__ import annotations

import functools
import os

SYSTEM_NAMESPACES = ("kube-", "pacific-", "default")


@functools.lru_cache(maxsize=None)
def _api(kubeconfig: str):
    from pacific.kube import client
    return client.load(kubeconfig)


def snapshot(sb, namespaced: bool = True) -> dict[str, frozenset]:
    """The sandbox's objects by kind; without `namespaced`, the cluster-wide
    kinds only (CLUSTER_WIDE: four lists instead of seven, for every test)."""
    from pacific import names
    from pacific.kube import resources as r
    api = _api(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    out: dict[str, frozenset] = {}
    terminating = set()
    for res in ((r.NAMESPACES,) if namespaced else ()) + (
            r.SUBNETS, r.CLUSTERNETWORKPOLICIES, r.EGRESSIPS):
        items, _ = r.list_(api, res)
        live = {i["metadata"]["name"] for i in items if not i["metadata"].get("deletionTimestamp")}
        if res is r.NAMESPACES:
            terminating = {i["metadata"]["name"] for i in items} - live
        out[res.kind] = frozenset(live)
    out.pop("Namespace", None)   # an empty namespace is harmless; what is in one is not
    for res in (r.PODS, r.SERVICES) if namespaced else ():
        items, _ = r.list_(api, res)
        out[res.kind] = frozenset(
            f"{i['metadata']['namespace']}/{i['metadata']['name']}" for i in items
            if not i["metadata"].get("deletionTimestamp")
            and i["metadata"]["namespace"] not in terminating
            and not i["metadata"]["namespace"].startswith(SYSTEM_NAMESPACES))
    nodes, _ = r.list_(api, r.NODES)
    out["Node label"] = frozenset(f"{n['metadata']['name']}: {k}={v}" for n in nodes
                                  for k, v in (n["metadata"].get("labels") or {}).items())
    return out


CLUSTER_WIDE = ("Subnet", "ClusterNetworkPolicy", "EgressIP", "Node label")


def leftovers(before: dict, after: dict, kinds=None) -> list[str]:
    """What `after` holds that `before` did not, and what it lost: one line a
    kind (of `kinds` only, if given)."""
    out = []
    for kind in sorted((set(before) | set(after)) & set(kinds or (set(before) | set(after)))):
        added = sorted(after.get(kind, frozenset()) - before.get(kind, frozenset()))
        lost = sorted(before.get(kind, frozenset()) - after.get(kind, frozenset()))
        if added:
            out.append(f"{kind} left behind: {', '.join(added)}")
        if lost and kind == "Node label":
            out.append(f"{kind} removed: {', '.join(lost)}")
    return out
