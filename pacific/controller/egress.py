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

Each of these per family of the join network (the rows of a family it
lacks are not written).  IPv6 (a dual-stack or IPv6-only join network: the
nodes' ovn0 has IPv6): the same per node, ``ip6.src == $<set>_6`` -> reroute
to ovn0's IPv6, the cluster's IPv6 destinations allowed and ``::/0`` via the
join network's IPv6 gateway.  A
pod of a namespace an EgressIP or an IPv4-only egress feature decides for is
left out of its node's IPv6 set, and so has no way out over IPv6 through its
node (egress_v6.py: held).
"""
from __future__ import annotations

import hashlib
import logging
import threading

from pacific import contract, multicast, names, servicesnat
from pacific.controller import egress_v6, informers, model
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


def _pod_node_ip(pod: dict | None) -> tuple[str | None, tuple | None]:
    """(its node, (IPv4 address, IPv6 address, namespace, Subnet)) of an
    allocated pod, None for a family it lacks (each set holds one family: OVN
    drops a flow whose set mixes them); (None, None) for any other."""
    if not pod or (pod.get("spec") or {}).get("hostNetwork"):
        return None, None
    rec = contract.own_record(pod)
    if rec is None:
        return None, None
    return (pod.get("spec") or {}).get("nodeName"), (
        rec.address(4), rec.address(6), model.meta(pod).get("namespace"), rec.subnet)


# what decides which pods' IPv6 is held (egress_v6.py), read with IPv6 egress only
HOLD_INFORMERS = {"egressips": informers.EGRESSIPS, "namespaces": informers.NAMESPACES,
                  "services": informers.SERVICES}


DEFAULT_ROUTE = {4: "0.0.0.0/0", 6: "::/0"}


def v6_set_name(node: str) -> str:
    """The address set of a node's pods' IPv6 addresses that may leave through it."""
    return names.family_set_name(node_set_name(node), 6)


class EgressFeature(Feature):
    name = "egress"
    informers = {"pods": informers.PODS, "nodes": informers.NODES,
                 "subnets": informers.SUBNETS}

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self._by_node: dict[str, dict[str, tuple]] = {}    # node -> pod key -> _pod_node_ip()[1]
        self.v6 = bool(ctl.cfg.join_cidr_of(6))        # ovn0 has IPv6: pods' IPv6 may leave
        if self.v6:
            self.informers = {**self.informers, **HOLD_INFORMERS}
        self._held: egress_v6.Held | None = None       # None: recompute (an input changed)

    def handlers(self):
        out = {"pods": self._on_pod, "nodes": self._on_node, "subnets": self._on_subnet}
        if self.v6:
            out.update({"egressips": self._on_hold,
                        "namespaces": self._on_namespace, "services": self._on_service})
        return out

    def _all_nodes(self) -> list[str]:
        return [f"node/{model.meta(n)['name']}" for n in self.ctl.informer("nodes").list()]

    def _on_hold(self, old, new):
        """An input of the IPv6 hold changed: every node's IPv6 set again."""
        with self._lock:
            self._held = None
        return self._all_nodes()

    def _on_namespace(self, old, new):
        if old is not None and new is not None and \
                model.meta(old).get("labels") == model.meta(new).get("labels"):
            return []       # only labels matter (an EgressIP's namespaceSelector)
        return self._on_hold(old, new)

    def _on_service(self, old, new):
        if any(s is not None and servicesnat.opted_in(s) for s in (old, new)):
            return self._on_hold(old, new)
        return []

    def held(self) -> egress_v6.Held:
        with self._lock:
            if self._held is not None:
                return self._held
        inf = self.ctl.informer
        h = egress_v6.held(inf("egressips").list(),
                           inf("namespaces").list(), inf("services").list())
        with self._lock:
            self._held = h
        return h

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
            self._held = None
            for p in self.ctl.informer("pods").list():
                node, entry = _pod_node_ip(p)
                if node and entry:
                    self._by_node.setdefault(node, {})[object_key(p)] = entry

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
        """Per family of the join network: its destinations inside the cluster
        allowed, its groups kept on the router (which relays them between
        Subnets), its default route via the join gateway."""
        cfg, specs, routes = self.ctl.cfg, [], {}
        subnets = self.ctl.informer("subnets").list()
        for f in cfg.join_families:
            cidrs = sorted({c for s in subnets if (c := contract.subnet_cidr_in_effect(s, f))}
                           | {cfg.join_cidr_of(f)})
            specs += [(names.PRIO_POLICY_NODE_LOCAL, f"ip{f}.dst == {{{', '.join(cidrs)}}}",
                       "allow", []),
                      (names.PRIO_POLICY_NODE_LOCAL,
                       multicast.ROUTER_POLICY_MATCH if f == 4 else "ip6.mcast", "allow", [])]
            routes[DEFAULT_ROUTE[f]] = cfg.join_gateway_of(f)
        ids = cluster_ids()
        if ensure.router_policies_are(self.ctl.nb, names.CLUSTER_ROUTER, ids, specs):
            return
        self.ctl.writer.run([
            lambda api: ensure.EnsureRouterRoutes(api, names.CLUSTER_ROUTER, ids, routes),
            lambda api: ensure.EnsureRouterPolicies(api, names.CLUSTER_ROUTER, ids, specs),
        ], what="egress: cluster-internal destinations and the default route")
        LOG.info("egress: allowed inside the cluster %s; default routes %s",
                 "; ".join(m for _, m, _, _ in specs[::2]), routes)

    def _node(self, node: str) -> None:
        ids, as_name = node_ids(node), node_set_name(node)
        obj = self.ctl.informer("nodes").get(node)
        try:
            rec = contract.NodeRecord.of(obj) if obj else None
        except contract.ContractError:
            rec = None          # no join address yet: node.py writes it, and we hear of it
        as6 = v6_set_name(node)
        if rec is None:
            self.ctl.writer.run([
                lambda api: ensure.EnsureRouterPolicies(api, names.CLUSTER_ROUTER, ids, []),
                lambda api: ensure.DeleteAddressSet(api, as_name),
                lambda api: ensure.DeleteAddressSet(api, as6),
            ], what=f"egress of node {node}: removed")
            return
        with self._lock:
            pods = list(self._by_node.get(node, {}).values())
        held = self.held() if self.v6 else None
        specs, rows, said = [], [], []
        for f in self.ctl.cfg.join_families:
            via = rec.address(f)
            if not via:         # a record of a join network without that family
                continue
            set_name = names.family_set_name(as_name, f)
            want = {ip for ip, _, _, _ in pods if ip} if f == 4 else \
                {ip6 for _, ip6, ns, _ in pods if ip6 and not held.holds(ns)}
            if rec.source(f):     # the node's own connections to Services that OVN sends out
                want.add(rec.source(f))
            have = ensure.address_set_addresses(self.ctl.nb, set_name)
            if want != have:
                rows += ensure.address_set_rows(set_name, ids, want, have)
            specs.append((names.PRIO_POLICY_DISTRIBUTED_EGRESS, f"ip{f}.src == ${set_name}",
                          "reroute", [via]))
            said.append(f"{len(want)} in IPv{f} through {via}")
        if not rows and ensure.router_policies_are(self.ctl.nb, names.CLUSTER_ROUTER, ids, specs):
            return
        self.ctl.writer.run([
            *rows, lambda api: ensure.EnsureRouterPolicies(api, names.CLUSTER_ROUTER, ids, specs),
        ], what=f"egress of node {node}")
        LOG.info("egress: pods of node %s leave: %s", node, ", ".join(said) or "none (no join "
                 "address of a family)")
