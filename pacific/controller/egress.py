"""Distributed egress: a pod leaves the cluster through its own node's ovn0.

Rows on the cluster router (owned per node, so a node's pods coming and going
touch only that node's rows):

* address set ``pacific_egress_<hash of node>`` (external_ids owner = the
  node): the addresses of the pods on that node and the node's service source
  (contract.NodeRecord), changed by mutation;
* policy PRIO_POLICY_DISTRIBUTED_EGRESS ``ip4.src == $<that set>`` ->
  reroute to the node's join address (its ovn0);
* once, owned by the cluster: policy PRIO_POLICY_NODE_LOCAL
  ``ip4.dst == {every Subnet CIDR, the join CIDR}`` -> allow (traffic inside
  the cluster is routed as before, never sent to a node), the same for
  ``ip4.mcast`` (groups are relayed between Subnets, never sent out), and a default route
  0.0.0.0/0 via the join gateway, so a packet to the outside reaches the
  policy stage at all (without it the router drops it as "no route").

On the node the packet leaves ovn0 into the host, which forwards it by its
own routes (and masquerades it for natOutgoing Subnets: the node's host
firewall).  Keys: ``node/<name>`` and ``cluster``.
"""
from __future__ import annotations

import hashlib
import logging
import threading

from pacific import contract, multicast, names
from pacific.controller import informers, model
from pacific.controller.feature import Feature
from pacific.kube.resources import object_key
from pacific.ovn import ensure

LOG = logging.getLogger(__name__)
CLUSTER_KEY = "cluster"


def node_set_name(node: str) -> str:
    return "pacific_egress_" + hashlib.sha1(node.encode()).hexdigest()[:16]


def node_ids(node: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_NODE, names.EXT_OWNER: node,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, names.EXT_RULE: "egress"}


def cluster_ids() -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_CLUSTER, names.EXT_OWNER: names.CLUSTER_ROUTER,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, names.EXT_RULE: "egress"}


def _pod_node_ip(pod: dict | None) -> tuple[str | None, str | None]:
    if not pod or (pod.get("spec") or {}).get("hostNetwork"):
        return None, None
    rec = contract.own_record(pod)
    return ((pod.get("spec") or {}).get("nodeName"), rec.ip) if rec else (None, None)


class EgressFeature(Feature):
    name = "egress"
    informers = {"pods": informers.PODS, "nodes": informers.NODES,
                 "subnets": informers.SUBNETS}

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self._by_node: dict[str, dict[str, str]] = {}    # node -> pod key -> address

    def handlers(self):
        return {"pods": self._on_pod, "nodes": self._on_node, "subnets": self._on_subnet}

    def _on_pod(self, old, new):
        """Keeps the index of addresses by node (a node's reconcile reads it,
        never the whole pod cache), and queues the nodes whose set changes."""
        before, after = _pod_node_ip(old), _pod_node_ip(new)
        if before == after:
            return []
        key = object_key(new or old)
        with self._lock:
            if before[0]:
                self._by_node.get(before[0], {}).pop(key, None)
            if after[0] and after[1]:
                self._by_node.setdefault(after[0], {})[key] = after[1]
        return [f"node/{n}" for n in {before[0], after[0]} if n]

    def prepare(self) -> None:
        with self._lock:
            self._by_node.clear()
            for p in self.ctl.informer("pods").list():
                node, ip = _pod_node_ip(p)
                if node and ip:
                    self._by_node.setdefault(node, {})[object_key(p)] = ip

    @staticmethod
    def _on_node(old, new):
        obj = new or old
        return [f"node/{model.meta(obj)['name']}"]

    @staticmethod
    def _on_subnet(old, new):
        return [CLUSTER_KEY]

    def resync_keys(self):
        self.prepare()          # the index, rebuilt from the cache every resync
        yield CLUSTER_KEY
        for n in self.ctl.informer("nodes").list():
            yield f"node/{model.meta(n)['name']}"
        for row in self.ctl.nb.rows_owned(ensure.AS, names.OWNER_KIND_NODE):
            if row.external_ids.get(names.EXT_RULE) == "egress":
                yield f"node/{row.external_ids.get(names.EXT_OWNER)}"

    def reconcile(self, key: str) -> None:
        if key == CLUSTER_KEY:
            self._cluster()
        else:
            self._node(key.split("/", 1)[1])

    def _cluster(self) -> None:
        cfg = self.ctl.cfg
        cidrs = sorted({obj_cidr for s in self.ctl.informer("subnets").list()
                        if (obj_cidr := contract.subnet_cidr_in_effect(s))}   # IPv4's
                       | {cfg.join_cidr_of(4)})
        specs = [(names.PRIO_POLICY_NODE_LOCAL, f"ip4.dst == {{{', '.join(cidrs)}}}",
                  "allow", []),
                 # groups stay on the router, which relays them between Subnets
                 (names.PRIO_POLICY_NODE_LOCAL, multicast.ROUTER_POLICY_MATCH, "allow", [])]
        ids = cluster_ids()
        if ensure.router_policies_are(self.ctl.nb, names.CLUSTER_ROUTER, ids, specs):
            return
        self.ctl.writer.run([
            lambda api: ensure.EnsureRouterRoutes(api, names.CLUSTER_ROUTER, ids,
                                                  {"0.0.0.0/0": cfg.join_gateway}),
            lambda api: ensure.EnsureRouterPolicies(api, names.CLUSTER_ROUTER, ids, specs),
        ], what="egress: cluster-internal destinations and the default route")
        LOG.info("egress: destinations inside the cluster %s; default route via %s",
                 ", ".join(cidrs), cfg.join_gateway)

    def _node(self, node: str) -> None:
        ids, as_name = node_ids(node), node_set_name(node)
        obj = self.ctl.informer("nodes").get(node)
        try:
            rec = contract.NodeRecord.of(obj) if obj else None
        except contract.ContractError:
            rec = None          # no join address yet: node.py writes it, and we hear of it
        if rec is None:
            self.ctl.writer.run([
                lambda api: ensure.EnsureRouterPolicies(api, names.CLUSTER_ROUTER, ids, []),
                lambda api: ensure.DeleteAddressSet(api, as_name),
            ], what=f"egress of node {node}: removed")
            return
        with self._lock:
            want = set(self._by_node.get(node, {}).values())
        if rec.service_source:     # the node's own connections to Services that OVN sends out
            want.add(rec.service_source)
        have = ensure.address_set_addresses(self.ctl.nb, as_name) or set()
        specs = [(names.PRIO_POLICY_DISTRIBUTED_EGRESS, f"ip4.src == ${as_name}", "reroute",
                  [rec.ip])]
        if want == have and ensure.router_policies_are(self.ctl.nb, names.CLUSTER_ROUTER, ids,
                                                       specs):
            return
        self.ctl.writer.run([
            *ensure.address_set_rows(as_name, ids, want, have),
            lambda api: ensure.EnsureRouterPolicies(api, names.CLUSTER_ROUTER, ids, specs),
        ], what=f"egress of node {node}")
        LOG.info("egress: %d pods of node %s leave through %s", len(want), node, rec.ip)
