"""Who leads, on the pods: each pacific-central pod carries
`pacific.io/ovn-nb-leader` and `pacific.io/ovn-sb-leader`, "true" while its
member leads that database, so Services `ovn-nb-leader` / `ovn-sb-leader`
(deploy/central.yaml) give clients that want one address the leader's.
Pacific's own clients take every member and follow the leader themselves.

    labels = LeaderLabels(api, "pacific-system", "pacific-central-x7k2p", members)
    labels.tick()        # every second: patch the pod when a role changed
    labels.clear()       # stopping: "false" for both

A failed patch is logged and retried at the next tick.  A member killed while
it led keeps "true" until it is back (the label says what it last knew); its
pod is not Ready meanwhile, so no Service sends clients to it.
"""
from __future__ import annotations

import logging

from pacific import names
from pacific.kube import errors as kerr
from pacific.kube import resources as r

LOG = logging.getLogger(__name__)


class LeaderLabels:
    def __init__(self, api, namespace: str, pod: str, members: list):
        self.api, self.namespace, self.pod, self.members = api, namespace, pod, members
        self._written: dict[str, str] = {}

    def tick(self) -> None:
        want = {}
        for m in self.members:
            st, _ = m.status()
            want[m.spec.db] = "true" if st is not None and st.is_leader else "false"
        self._write(want)

    def clear(self) -> None:
        self._write({m.spec.db: "false" for m in self.members})

    def _write(self, want: dict[str, str]) -> None:
        changed = {names.CENTRAL_LEADER_LABELS[db]: v for db, v in want.items()
                   if self._written.get(db) != v}
        if not changed:
            return
        try:
            r.patch_merge(self.api, r.PODS, self.pod, {"metadata": {"labels": changed}},
                          self.namespace)
        except (kerr.ApiError, OSError) as exc:
            LOG.warning("cannot label pod %s/%s %s: %s", self.namespace, self.pod, changed, exc)
            return
        self._written.update(want)
        LOG.info("pod %s/%s labelled %s", self.namespace, self.pod,
                 ", ".join(f"{k}={v}" for k, v in sorted(changed.items())))
