"""Which nodes are OVN central's members: those labelled
`pacific.io/role=central`, each at its InternalIP.

    d = Discovery(api, "node-a")
    d.members()          # addresses of every labelled node, in numeric order
    d.own_address()      # node-a's, or None while it is not labelled
    d.labelled()         # True / False, or None when the API does not answer

An administrator adds a member by labelling a node (its pacific-central pod
starts and joins) and removes one by taking the label off: the pod is stopped,
sees its node unlabelled, and leaves the clusters (main.py) instead of merely
stopping, so the others do not wait for it.  A stop while the node is still
labelled (a restart, an upgrade, a drain) is only a stop.
"""
from __future__ import annotations

import logging

from pacific import exposure, names
from pacific.central.member import address_key
from pacific.kube import errors as kerr
from pacific.kube import resources as r

LOG = logging.getLogger(__name__)


def is_central(node: dict | None) -> bool:
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    return labels.get(names.CENTRAL_ROLE_LABEL) == names.CENTRAL_ROLE


def node_address(node: dict) -> str | None:
    """A node's first InternalIP in numeric order (one address per member)."""
    ips = sorted(exposure.internal_ips(node), key=address_key)
    return ips[0] if ips else None


def member_addresses(nodes: list[dict]) -> list[str]:
    return sorted({a for n in nodes if is_central(n) and (a := node_address(n))},
                  key=address_key)


class Discovery:
    def __init__(self, api, node_name: str):
        self.api, self.node_name = api, node_name

    def members(self) -> list[str]:
        items, _ = r.list_(self.api, r.NODES,
                           label_selector=f"{names.CENTRAL_ROLE_LABEL}={names.CENTRAL_ROLE}")
        return member_addresses(items)

    def own_address(self) -> str | None:
        node = r.get(self.api, r.NODES, self.node_name)
        return node_address(node) if is_central(node) else None

    def labelled(self) -> bool | None:
        try:
            return is_central(r.get(self.api, r.NODES, self.node_name, timeout=5))
        except (kerr.ApiError, OSError) as exc:
            LOG.warning("cannot read node %s (%s): not leaving the clusters", self.node_name, exc)
            return None
