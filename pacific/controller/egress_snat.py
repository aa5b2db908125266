"""Egress SNAT to a Service's external IP: the ready endpoints of a Service
with externalIPs leave the cluster with its first external IP as their
source (pacific.servicesnat decides, on every node alike).

Per such Service (key "ns/name"), the same rows as a centralized Subnet's
gateway (controller/gateway.py), named `egw:svc:<ns>/<name>` and owned by the
Service: a transit switch with a localnet port, a distributed gateway port
bound by an HA chassis group of the nodes labelled
`pacific.io/egress-gateway: "true"` (sorted by name; the active one first
after a failover, so a node that comes back takes nothing back), and:

* an address set of the endpoints' addresses, changed by mutation: an
  endpoint coming or going changes only this set;
* a router policy PRIO_POLICY_SNAT_EGRESS: `ip4.src == $<set>` reroute to
  the transit host address, above the centralized and distributed ones;
* with an IPv6 external IP granted (and a dual-stack join network, without
  which IPv6 has no way out): the port's IPv6 transit network, the IPv6 twin
  of the set (the IPv6 endpoints) and `ip6.src == $<set>_6` rerouted to the
  IPv6 transit host.

The node whose chassis holds the port (pacific.node.egresssnat reads SB) holds
the external IP on its underlay interface (answers ARP, sends a gratuitous ARP
on takeover), SNATs the endpoints' traffic to it, and receives what comes to
the external IP (the host firewall's Service frontends): one node, both
directions.  A pod behind several such Services leaves with the oldest one's
address; the others get an Event.  Members are confined to the Service's
namespace's pods by who holds each address now: an address changing holder
re-queues the Services whose slices name it (the service feature's index,
endpoint_index.py).

The transit networks are shared with administrators' gateways, so what a
tenant's Services take is bounded (issue 51):

* Services of a namespace leaving by one address share one gateway, the
  oldest one's (pacific.servicesnat), and a grant without ready endpoints
  has none: one external IP on many ports costs one transit network;
* a namespace's Services hold at most `--transit-networks-per-namespace`
  gateways, its oldest carrying ones first, and a Service takes a new
  network only while more than `--transit-networks-reserved` are free
  (controller/transit.py), which centralized Subnets and EgressIPs may use;
* a refused Service gets an `EgressSNAT` Event that names only itself and
  the setting, and fails closed: its members' set stays, and the policy that
  would reroute them to the gateway drops their traffic to the outside
  instead (destinations in the cluster are kept by the node-local allow
  above it), as an unbound gateway port would.
"""
from __future__ import annotations

import logging
import threading
import time

from pacific import egressip, exposure, names, servicesnat
from pacific.controller import gateway, model
from pacific.controller.feature import Feature
from pacific.controller.reports import Reports
from pacific.controller.service import (cluster_cidrs, ignored_note, pod_namespace,
                                        service_informers, taken_ips)
from pacific.controller.transit import TransitRefused
from pacific.kube import resources as r
from pacific.ovn import ensure

LOG = logging.getLogger(__name__)
RULE = "egress-snat"


def snat_ids(key: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_SERVICE, names.EXT_OWNER: key,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, names.EXT_RULE: RULE}


set_name = servicesnat.set_name


def gateway_nodes(nodes: list[dict]) -> list[str]:
    return sorted(model.meta(n)["name"] for n in nodes
                  if model.labels_of(n).get(names.LABEL_EGRESS_GATEWAY) == "true")


class EgressSnatFeature(Feature):
    name = "egress-snat"
    uses = {"services": "service"}       # its index: which Services' slices name an address

    def __init__(self, ctl):
        super().__init__(ctl)
        self.informers = service_informers(ctl.cfg)       # the caches ServiceFeature has
        self._lock = threading.Lock()
        self._active: dict[str, str | None] = {}
        self._first = gateway.FirstRanked()       # re-rank a settled holder only
        self.reports = Reports()
        self._admitted: set[str] = set()          # Services last allowed a gateway
        self._starved: set[str] = set()           # ... refused by the reserve alone
        # Service -> the older Services of its addresses, whose grant (and gateway)
        # its endpoints may join (servicesnat): queued when it changes
        self._owners: dict[str, set[str]] = {}
        ctl.transit.on_release.append(self._on_release)

    def handlers(self):
        return {"services": self._on_service, "endpointslices": self._on_slice,
                "nodes": self._on_node, "egressips": self._on_egressip}

    def _on_egressip(self, old, new):
        if old is not None and new is not None and \
                egressip.spec_addresses(old) == egressip.spec_addresses(new):
            return ()
        return [r.object_key(s) for s in self.ctl.informer("services").list()
                if servicesnat.opted_in(s)]

    def holders_changed(self, ips, released_by):
        """Members are re-decided for the opted-in Services naming `ips` (and
        the owners of the grants they share)."""
        cache = self.ctl.informer("services")
        keys = {k for k in self.services.addresses.services(ips)
                if servicesnat.opted_in(cache.get(k) or {})}
        self.queue_keys(sorted(self._with_owners(keys)))

    def _with_owners(self, keys) -> set[str]:
        """`keys` and the owners of the grants those Services share."""
        return set(keys).union(*(self._owners.get(k, ()) for k in keys))

    def _on_service(self, old, new):
        return self._with_owners((r.object_key(new or old),))

    def _on_slice(self, old, new):
        keys = set()
        for obj in (old, new):
            m = model.meta(obj) if obj else {}
            svc = (m.get("labels") or {}).get(exposure.SERVICE_NAME_LABEL)
            if svc:
                keys.add(f"{m.get('namespace')}/{svc}")
        return self._with_owners(keys)

    def _on_release(self) -> None:
        """A transit network was freed: the Services the reserve refused try again."""
        with self._lock:
            keys, self._starved = self._starved, set()
        for key in keys:
            self.queue.add(key)

    def _on_node(self, old, new):
        if old is not None and new is not None and \
                model.labels_of(old).get(names.LABEL_EGRESS_GATEWAY) == \
                model.labels_of(new).get(names.LABEL_EGRESS_GATEWAY):
            return ()
        return [r.object_key(s) for s in self.ctl.informer("services").list()
                if servicesnat.opted_in(s)]

    def resync_keys(self):
        yield from (r.object_key(s) for s in self.ctl.informer("services").list()
                    if servicesnat.opted_in(s))
        # a gateway's switch; a refused one's members' set (it has no switch)
        for table in (ensure.LS, ensure.AS):
            for row in self.ctl.nb.rows_owned(table, names.OWNER_KIND_SERVICE):
                if row.external_ids.get(names.EXT_RULE) == RULE:
                    yield row.external_ids.get(names.EXT_OWNER)

    # -- reconcile -------------------------------------------------------------------
    def grants(self):
        cfg = self.ctl.cfg
        services = [s for s in self.ctl.informer("services").list() if servicesnat.opted_in(s)]
        keys = {r.object_key(s) for s in services}
        slices, ignored = [], {}
        for svc, mine in servicesnat.slices_by_service(
                self.ctl.informer("endpointslices").list()).items():
            if svc not in keys:
                continue
            # egress SNAT members are the Service's own namespace's pods, even
            # for a Service whose load-balancer endpoints are trusted
            kept, ignored[svc] = exposure.confine(mine, svc.split("/", 1)[0],
                                                  lambda ip: pod_namespace(self.ctl, ip))
            slices += kept
        allowed, _ = cfg.exposure_settings
        grants, notes = servicesnat.egress_ips(services, slices, cluster_cidrs(self.ctl),
                                               taken_ips(self.ctl), allowed,
                                               cfg.external_ips_per_namespace)
        for svc, left_out in ignored.items():
            if left_out:
                notes.setdefault(svc, []).extend(ignored_note(svc, left_out))
        owners = {g.ip: servicesnat.gateway_key(k) for k, g in grants.items()}
        found = {r.object_key(s): {owners[ip] for ip in map(exposure.canonical,
                                                            s["spec"]["externalIPs"])
                                   if ip in owners} - {r.object_key(s)} for s in services}
        with self._lock:
            self._owners = {k: v for k, v in found.items() if v}
        return grants, notes, self._admit(services, grants)

    def _admit(self, services: list[dict], grants: dict) -> set[str]:
        """The Services that may hold a gateway (and so a transit network): per
        namespace the oldest --transit-networks-per-namespace whose grant has
        ready endpoints in a family that leaves.  Those it lets in or out since
        the last reconcile are queued (the bound moves with the oldest)."""
        families = ("", servicesnat.V6) if self.ctl.cfg.join_cidr_of(6) else ("",)
        count, out, bound = {}, set(), self.ctl.cfg.transit_networks_per_namespace
        for svc in sorted(services, key=exposure._age):
            key = r.object_key(svc)
            if not any((g := grants.get(key + f)) and g.sources for f in families):
                continue
            ns = key.split("/", 1)[0]
            if count.get(ns, 0) < bound:
                count[ns] = count.get(ns, 0) + 1
                out.add(key)
        with self._lock:
            moved, self._admitted = out ^ self._admitted, out
        for key in moved:
            self.queue.add(key)
        return out

    def reconcile(self, key: str) -> None:
        grants, notes, admitted = self.grants()
        with self._lock:
            owners = self._owners.get(key, ())
        for owner in owners:     # its endpoints may be members of theirs
            self.queue.add(owner)
        by_family = {4: grants.get(key)}
        if self.ctl.cfg.join_cidr_of(6):     # else IPv6 has no way out of the cluster router
            by_family[6] = grants.get(key + servicesnat.V6)
        sw = names.egress_switch_name(names.SNAT_GATEWAY_PREFIX + key)
        lrp = names.router_port_name(sw)
        ids, as_name, as6 = snat_ids(key), set_name(key), set_name(key + servicesnat.V6)
        have = [row for row in self.ctl.nb.rows_owned(ensure.LRP, names.OWNER_KIND_SERVICE, key)
                if row.name == lrp]
        if not any(g and g.sources for g in by_family.values()):
            # no grant, or no ready endpoint to carry: no gateway, no transit network
            if have or self.ctl.transit.holds(lrp) or any(
                    ensure.address_set_addresses(self.ctl.nb, n) is not None
                    for n in (as_name, as6)):
                self._remove(key, sw, lrp, as_name)
            with self._lock:
                self._starved.discard(key)
            self._report(key, list(notes.get(key, [])))
            return
        nodes = gateway_nodes(self.ctl.informer("nodes").list())
        with self._lock:
            ranked = gateway.ranked(self._first.first(key), nodes)
        rows, matches = [], {}
        for version, name in ((4, as_name), (6, as6)):
            grant = by_family.get(version)
            cur = ensure.address_set_addresses(self.ctl.nb, name)
            if grant is None:
                if cur is not None:
                    rows.append(lambda api, name=name: ensure.DeleteAddressSet(api, name))
                continue
            rows += ensure.address_set_rows(name, ids, set(grant.sources), cur or set())
            matches[version] = f"ip{version}.src == ${name}"
        index, refused = self._network(key, lrp, admitted)
        if refused is not None:
            self._refuse(key, sw, lrp, rows, matches, bool(have))
            self._report(key, [*notes.get(key, []), refused + ": the endpoints' traffic to "
                               "the outside is dropped until one is free"])
            return
        networks, mac, policies = gateway.reroutes(
            self.ctl, index, names.PRIO_POLICY_SNAT_EGRESS, matches)
        self.ctl.writer.run([
            *rows,
            *gateway.gateway_rows(sw, lrp, names.egress_localnet_name(names.SNAT_GATEWAY_PREFIX
                                                                      + key),
                                  networks, mac, ids, ranked, policies),
        ], what=f"egress SNAT of service {key}")
        LOG.info("service %s: %s through %s", key, ", ".join(
            f"{len(g.sources)} endpoints leave as {g.ip}" for g in by_family.values() if g),
            ", ".join(ranked) or "no egress gateway node")
        problems = list(notes.get(key, []))
        if not nodes:
            problems.append(f"no node is labelled {names.LABEL_EGRESS_GATEWAY}=true: the "
                            f"endpoints' traffic to the outside is dropped")
        self._report(key, problems)

    def _network(self, key: str, lrp: str, admitted: set[str]) -> tuple[int | None, str | None]:
        """(the transit network of `key`'s gateway port `lrp`, None), or (None,
        why it may have none: the namespace's bound or the reserve)."""
        cfg = self.ctl.cfg
        if key in admitted:
            with self._lock:    # marked before asking: a release meanwhile queues it again
                self._starved.add(key)
        else:
            with self._lock:
                self._starved.discard(key)
            return None, (f"no egress gateway: this namespace's older Services leaving by an "
                          f"external IP hold the {cfg.transit_networks_per_namespace} transit "
                          f"networks it may have (the administrator's "
                          f"--transit-networks-per-namespace)")
        try:
            index = self.ctl.transit.index(self.ctl.nb, lrp, cfg.transit_networks_reserved)
        except TransitRefused:
            return None, ("no egress gateway: no transit network is free but those reserved "
                          "for the administrator's gateways (--transit-networks-reserved)")
        with self._lock:
            self._starved.discard(key)
        return index, None

    def _refuse(self, key: str, sw: str, lrp: str, rows: list, matches: dict[int, str],
                have: bool) -> None:
        """No gateway for `key`, failing closed: its members' sets (`rows`) are
        kept and the policy of each (`matches`) drops instead of rerouting;
        a gateway it had is removed and its transit network released."""
        drops = [(names.PRIO_POLICY_SNAT_EGRESS, m, "drop", []) for _, m in sorted(matches.items())]
        ids, what = snat_ids(key), f"egress SNAT of service {key}"
        self.ctl.writer.run([
            *rows, lambda api: ensure.EnsureRouterPolicies(api, names.CLUSTER_ROUTER, ids, drops),
        ], what=f"{what}: refused, dropped")
        if have or self.ctl.transit.holds(lrp):
            gateway.remove_gateway_rows(self.ctl, sw, lrp, ids, what, policies=drops)
            with self._lock:
                self._active.pop(key, None)
                self._first.forget(key)
        LOG.info("service %s: egress SNAT refused a transit network, its endpoints' traffic "
                 "to the outside dropped", key)

    def _remove(self, key: str, sw: str, lrp: str, as_name: str) -> None:
        gateway.remove_gateway_rows(self.ctl, sw, lrp, snat_ids(key),
                                    f"egress SNAT of service {key}", as_name,
                                    set_name(key + servicesnat.V6))
        with self._lock:
            self._active.pop(key, None)
            self._first.forget(key)
        LOG.info("service %s: no egress SNAT", key)

    def _report(self, key: str, problems: list[str]) -> None:
        svc, text = self.ctl.informer("services").get(key), "; ".join(problems)
        if self.reports.due(key, svc, text):
            self.ctl.event(svc, "EgressSNAT", text)

    def tick(self) -> None:
        view = self.ctl.southbound_view()
        if view is None:
            return
        holders = gateway.gateway_holders(view)
        changed, mono = [], time.monotonic()
        with self._lock:
            for name, chassis in holders.items():
                if not name.startswith(names.SNAT_GATEWAY_PREFIX):
                    continue
                key = name[len(names.SNAT_GATEWAY_PREFIX):]
                if chassis is not None and self._active.get(key) != chassis:
                    self._active[key] = chassis
                    LOG.info("egress SNAT of service %s: held by %s", key, chassis)
                if self._first.observe(key, chassis, mono):
                    changed.append(key)       # held SETTLE s: rank it first
        for key in changed:
            self.queue.add(key)
