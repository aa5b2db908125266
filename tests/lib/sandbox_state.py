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


def _live(items) -> list[dict]:
    return [i for i in items if not i["metadata"].get("deletionTimestamp")]


def snapshot(sb, namespaced: bool = True) -> dict[str, frozenset]:
    """The sandbox's objects by kind: the cluster-wide ones (Subnets,
    ClusterNetworkPolicies, EgressIPs, node labels) and, with `namespaced`,
    the pods and Services too (what every test is checked for is the first:
    four lists instead of seven)."""
    from pacific import names
    from pacific.kube import resources as r
    api = _api(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    out = {res.kind: frozenset(i["metadata"]["name"] for i in _live(r.list_(api, res)[0]))
           for res in (r.SUBNETS, r.CLUSTERNETWORKPOLICIES, r.EGRESSIPS)}
    if namespaced:     # an empty namespace is harmless; what is in one is not
        namespaces, _ = r.list_(api, r.NAMESPACES)
        terminating = ({i["metadata"]["name"] for i in namespaces}
                       - {i["metadata"]["name"] for i in _live(namespaces)})
        for res in (r.PODS, r.SERVICES):
            out[res.kind] = frozenset(
                f"{i['metadata']['namespace']}/{i['metadata']['name']}"
                for i in _live(r.list_(api, res)[0])
                if i["metadata"]["namespace"] not in terminating
                and not i["metadata"]["namespace"].startswith(SYSTEM_NAMESPACES))
    nodes, _ = r.list_(api, r.NODES)
    out["Node label"] = frozenset(f"{n['metadata']['name']}: {k}={v}" for n in nodes
                                  for k, v in (n["metadata"].get("labels") or {}).items())
    return out


def leftovers(before: dict, after: dict) -> list[str]:
    """What `after` holds that `before` did not (and the node labels it
    lost): one line a kind."""
    out = []
    for kind in sorted(set(before) | set(after)):
        added = sorted(after.get(kind, frozenset()) - before.get(kind, frozenset()))
        lost = sorted(before.get(kind, frozenset()) - after.get(kind, frozenset()))
        if added:
            out.append(f"{kind} left behind: {', '.join(added)}")
        if lost and kind == "Node label":
            out.append(f"{kind} removed: {', '.join(lost)}")
    return out
