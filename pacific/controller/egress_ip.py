"""EgressIP: the pods an administrator's EgressIP selects leave the cluster with
one of its addresses (pacific.egressip decides; docs/egress.md).

Per granted address (key "<name>/<ip>"), the same rows as a Service's egress
SNAT (controller/egress_snat.py), named `egw:eip:<name>/<ip>` and owned by
kind EgressIP, owner the key:

* a transit switch with a localnet port and a distributed gateway port bound
  by an HA chassis group of the nodes labelled `pacific.io/egress-assignable`
  (sorted by name and rotated by the address's place, so the addresses of one
  EgressIP start on different nodes; the holder ranked first once settled, so
  a node that comes back takes nothing back); BFD moves it in under a second;
* an address set of the pods that leave with this address (the EgressIP's
  pods spread over its addresses), changed by mutation;
* a router policy PRIO_POLICY_EGRESS_IP: `ip4.src == $<set>` reroute to the
  transit host address, above a Service's and a Subnet's gateway.  An IPv6
  address's gateway port has an IPv6 transit network too (gateway.reroutes:
  with a dual-stack join network only), its set
  holds the pods' IPv6 addresses and its policy is `ip6.src == $<set>`
  rerouted to the IPv6 transit host address.

The node holding the port (node/egresssnat.py) reads the address from the
port's name and the members from the address set in SB: it holds the address
on its underlay interface, announces it, and SNATs the members to it.  The
controller and the API server are not on the failover path; `status.items`
says who holds each address once SB says so.
"""
from __future__ import annotations

import logging
import threading
import time

from pacific import contract, egressip, names, selectors
from pacific.controller import enforced, gateway, informers, model
from pacific.controller.enforced import EnforcedTracker
from pacific.controller.feature import Feature
from pacific.controller.reports import Reports
from pacific.controller.service import cluster_cidrs, infrastructure_ips
from pacific.kube import resources as r
from pacific.ovn import ensure

LOG = logging.getLogger(__name__)
RULE = "egress-ip"


def eip_ids(key: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_EGRESS_IP, names.EXT_OWNER: key,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, names.EXT_RULE: RULE}


def assignable_nodes(nodes: list[dict]) -> list[str]:
    return sorted(model.meta(n)["name"] for n in nodes
                  if names.LABEL_EGRESS_ASSIGNABLE in model.labels_of(n))


def rotated(nodes: list[str], index: int) -> list[str]:
    if not nodes:
        return []
    i = index % len(nodes)
    return nodes[i:] + nodes[:i]


def _pod_entry(pod: dict | None):
    """(namespace, labels, IPv4 address, IPv6 address) of an allocated pod
    (None for a family it lacks), else None.  Kept apart: every set fed from
    them holds one family."""
    if not pod or not model.needs_network(pod):
        return None
    rec = contract.own_record(pod)
    if rec is None:
        return None
    m = model.meta(pod)
    return m.get("namespace"), m.get("labels") or {}, rec.address(4), rec.address(6)


class EgressIPFeature(Feature):
    name = "egress-ip"
    informers = {"egressips": informers.EGRESSIPS, "pods": informers.PODS,
                 "namespaces": informers.NAMESPACES, "nodes": informers.NODES,
                 "subnets": informers.SUBNETS}

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self._gen = 0                       # bumped by every event that may change a decision
        # namespace -> pod key -> (labels, address) of allocated pods: the decision
        # reads it, never parses every pod's record; the egress firewall reads a
        # namespace's addresses from it too (one per-pod index for both)
        self._pods: dict[str, dict[str, tuple]] = {}
        self._decided: tuple[int, egressip.Decision] | None = None
        self._holders: dict[str, str | None] = {}        # key -> chassis holding it (SB)
        self._first = gateway.FirstRanked()
        self.reports = Reports()
        # status.enforced: a new generation's rows in force on every chassis
        self.enforced = EnforcedTracker(self, self._report_enforced)

    # -- events -> keys ----------------------------------------------------------------
    def handlers(self):
        return {"egressips": self._on_egressip, "pods": self._on_pod,
                "namespaces": self._on_other, "nodes": self._on_other,
                "subnets": self._on_other}

    def _all(self) -> list[str]:
        return [model.meta(o)["name"] for o in self.ctl.informer("egressips").list()]

    def _bump(self) -> None:
        with self._lock:
            self._gen += 1

    def _on_egressip(self, old, new):
        self._bump()
        return [model.meta(new or old)["name"], *self._all()]   # addresses move between them

    def prepare(self) -> None:
        pods: dict[str, dict[str, tuple]] = {}
        for p in self.ctl.informer("pods").list():
            entry = _pod_entry(p)
            if entry is not None:
                pods.setdefault(entry[0], {})[r.object_key(p)] = entry[1:]
        with self._lock:
            self._pods = pods
            self._gen += 1

    def addresses_in(self, namespace: str, family: int = 4) -> set[str]:
        """The addresses of one family of the namespace's allocated pods (from
        the index)."""
        with self._lock:
            entries = list(self._pods.get(namespace, {}).values())
        return {ip for ip in (e[1] if family == 4 else e[2] for e in entries) if ip}

    def _on_pod(self, old, new):
        """Keeps the index of allocated pods (a decision reads it, never parses
        every pod's record) and queues the EgressIPs selecting the namespace."""
        before, after = _pod_entry(old), _pod_entry(new)
        if before == after:
            return ()
        key = r.object_key(new or old)
        with self._lock:
            if before is not None:
                self._pods.get(before[0], {}).pop(key, None)
            if after is not None:
                self._pods.setdefault(after[0], {})[key] = after[1:]
        eips = self.ctl.informer("egressips").list()
        if not eips:
            return ()
        ns = (after or before)[0]
        ns_labels = model.labels_of(self.ctl.informer("namespaces").get(ns) or {})
        out = []
        for o in eips:
            try:
                if selectors.matches((o.get("spec") or {}).get("namespaceSelector"), ns_labels):
                    out.append(model.meta(o)["name"])
            except selectors.SelectorError:
                pass
        if out:
            self._bump()
        return out

    def _on_other(self, old, new):
        if model.same_status(old, new, "addresses", "cidrBlock") and \
                model.labels_of(old) == model.labels_of(new):
            return ()
        self._bump()
        return self._all()

    def resync_keys(self):
        self.prepare()          # the index, rebuilt from the cache every resync
        yield from self._all()
        for row in self.ctl.nb.rows_owned(ensure.LS, names.OWNER_KIND_EGRESS_IP):
            if row.external_ids.get(names.EXT_RULE) == RULE:
                yield row.external_ids.get(names.EXT_OWNER, "").rsplit("/", 1)[0]

    # -- the decision, once per change ------------------------------------------------
    def decision(self) -> egressip.Decision:
        with self._lock:
            gen = self._gen
            if self._decided is not None and self._decided[0] == gen:
                return self._decided[1]
            pods = [(ns, labels, ip) for ns, by_key in self._pods.items()
                    for labels, ip4, ip6 in by_key.values() for ip in (ip4, ip6) if ip]
        cfg = self.ctl.cfg
        namespaces = {model.meta(n)["name"]: model.labels_of(n)
                      for n in self.ctl.informer("namespaces").list()}
        d = egressip.decide(self.ctl.informer("egressips").list(), pods, namespaces,
                            cfg.egress_ip_networks, infrastructure_ips(self.ctl),
                            cluster_cidrs(self.ctl))
        with self._lock:
            self._decided = (gen, d)
        return d

    # -- reconcile ---------------------------------------------------------------------
    def reconcile(self, name: str) -> None:
        if self.enforced.handles(name):
            self.enforced.check(name)
            return
        d = self.decision()
        want = {k: g for k, g in d.grants.items() if g.name == name}
        have = {row.external_ids.get(names.EXT_OWNER)
                for row in self.ctl.nb.rows_owned(ensure.LS, names.OWNER_KIND_EGRESS_IP)
                if row.external_ids.get(names.EXT_OWNER, "").rsplit("/", 1)[0] == name}
        for key in sorted(have - set(want)):
            self._remove(key)
        nodes = assignable_nodes(self.ctl.informer("nodes").list())
        for key, g in sorted(want.items()):
            self._ensure(g, nodes)
        obj = self.ctl.informer("egressips").get(name)
        if obj is not None:
            self._status(obj, want, d, nodes)
        else:
            self.enforced.forget(name)

    def _ensure(self, g: egressip.Grant, nodes: list[str]) -> None:
        gname = egressip.gateway_name(g.key)
        sw = names.egress_switch_name(gname)
        lrp = names.router_port_name(sw)
        ids, as_name = eip_ids(g.key), egressip.address_set_name(g.key)
        networks, mac, policies = gateway.reroutes(
            self.ctl, self.ctl.transit.index(self.ctl.nb, lrp), names.PRIO_POLICY_EGRESS_IP,
            {g.version: f"ip{g.version}.src == ${as_name}"})
        with self._lock:
            ranked = gateway.ranked(self._first.first(g.key), rotated(nodes, g.index))
        want = set(g.sources)
        cur = ensure.address_set_addresses(self.ctl.nb, as_name) or set()
        self.ctl.writer.run([
            *ensure.address_set_rows(as_name, ids, want, cur),
            *gateway.gateway_rows(sw, lrp, names.egress_localnet_name(gname), networks, mac,
                                  ids, ranked, policies),
        ], what=f"EgressIP {g.key}")
        if want != cur:
            LOG.info("EgressIP %s: %d pods leave as %s through %s", g.name, len(want), g.ip,
                     ", ".join(ranked) or "no assignable node")

    def _report_enforced(self, name: str, ok, message: str, version) -> None:
        obj = self.ctl.informer("egressips").get(name)
        if obj is not None and enforced.version(obj) == version:   # else a newer one's own check
            r.patch_status(self.ctl.kube, r.EGRESSIPS, obj, enforced.status_fields(ok, message))

    def _remove(self, key: str) -> None:
        gname = egressip.gateway_name(key)
        sw = names.egress_switch_name(gname)
        lrp = names.router_port_name(sw)
        gateway.remove_gateway_rows(self.ctl, sw, lrp, eip_ids(key), f"EgressIP {key}",
                                    egressip.address_set_name(key))
        with self._lock:
            self._holders.pop(key, None)
            self._first.forget(key)
        LOG.info("EgressIP %s: removed", key)

    # -- status and Events -------------------------------------------------------------
    def _status(self, obj: dict, want: dict, d: egressip.Decision, nodes: list[str]) -> None:
        name = model.meta(obj)["name"]
        with self._lock:
            holders = dict(self._holders)
        items = []
        for key, g in sorted(want.items(), key=lambda kv: kv[1].index):
            item = {"egressIP": g.ip, "pods": len(g.sources)}
            if holders.get(key):
                item["node"] = holders[key]
            items.append(item)
        refused = [{"egressIP": ip, "reason": why}
                   for ip, why in sorted(d.refused.get(name, {}).items())]
        problems = [f"{x['egressIP']}: {x['reason']}" for x in refused] + d.notes.get(name, [])
        if want and not nodes:
            problems.append(f"no node is labelled {names.LABEL_EGRESS_ASSIGNABLE}: the selected "
                            "pods' traffic to the outside is dropped")
        # never an empty or null field: the 1.20 API server's merge patch keeps a
        # null for a key the object lacks, and its schema then refuses it
        status = {"items": items, "refused": refused,
                  "message": "; ".join(problems) or "every address granted"}
        r.patch_status(self.ctl.kube, r.EGRESSIPS, obj, status)
        if self.enforced.new_version(name, obj):
            r.patch_status(self.ctl.kube, r.EGRESSIPS, obj, enforced.PENDING)
            self.enforced.written(name, enforced.version(obj))
        text = "; ".join(problems)
        if self.reports.due(name, obj, text):
            self.ctl.event(obj, "EgressIPProblem", text)
            LOG.warning("EgressIP %s: %s", name, text)

    def tick(self) -> None:
        """Who holds each address (SB): the EgressIPs whose holder changed are
        queued (status), a holder settled SETTLE s is ranked first."""
        view = self.ctl.southbound_view()
        if view is None:
            return
        prefix = "cr-" + names.router_port_name(names.egress_switch_name(
            names.EIP_GATEWAY_PREFIX))
        holders = view.held_under(prefix)
        mono, changed = time.monotonic(), set()
        with self._lock:
            for key, chassis in holders.items():
                if self._holders.get(key) != chassis:
                    self._holders[key] = chassis
                    changed.add(key)
                    LOG.info("EgressIP %s: held by %s", key, chassis or "no node")
                if self._first.observe(key, chassis, mono):
                    changed.add(key)
        for key in changed:
            self.queue.add(key.rsplit("/", 1)[0])
