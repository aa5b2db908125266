"""EgressFirewall: which outside destinations a namespace's pods may reach
(pacific.egressfirewall parses and compiles; docs/egress.md).

Where: every port where traffic leaves the cluster is in port group
`pacific_exits` (the join switch's node ports, which distributed egress
leaves by, and every gateway's localnet port: centralized Subnets, Service
egress SNAT, EgressIPs; node_join.py and gateway.py add them, and the
cluster key here repairs the membership).  A firewall is to-lport ACLs on
that group, owned by its namespace:

    outport == @pacific_exits && ip4.src == $pacific_efw_src_<ns>
        && ip4.dst == <cidr or $pacific_efw_dns_<name>> && ip4.dst != $pacific_efw_cluster
        [&& tcp.dst == {...}]                     -> allow | drop, priority 10000 - i

(an IPv6 CIDR's rule matches ip6 against the `_6` twins of the sets; in a
cluster with IPv6, a firewall naming no IPv6 CIDR ends in an implicit IPv6
deny, rule "ipv6-default": its pods' IPv6 does not leave unfiltered)

so the first matching rule decides and what matches none passes; the exits
are not the pods' switches, so NetworkPolicy still decides there, and both
must let a packet out.  The namespace's pods (address set, from the EgressIP
feature's index of allocated pods) and each DNS name's A records (address
set, kept by controller/dnsnames.py, changed by mutation when the answer
changes) feed the matches.  An invalid firewall is refused in its status and
the rules already programmed stay.
"""
from __future__ import annotations

import logging

from pacific import audit, contract, egressfirewall as efw, exposure, names
from pacific.controller import enforced, informers, model
from pacific.controller.dnsnames import DnsUsers
from pacific.controller.enforced import EnforcedTracker
from pacific.controller.feature import Feature
from pacific.controller.service import cluster_cidrs
from pacific.kube import resources as r
from pacific.ovn import acl, ensure

LOG = logging.getLogger(__name__)
CLUSTER_KEY = "__cluster__"       # the excluded set, the exits, unused DNS sets
RULE = "egress-firewall"


def efw_ids(ns: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_EGRESS_FIREWALL, names.EXT_OWNER: ns,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, names.EXT_RULE: RULE}


def cluster_ids() -> dict:
    return efw_ids("")


def _pod_ips(pod: dict | None) -> tuple:
    if not pod or not model.needs_network(pod):
        return ()
    rec = contract.own_record(pod)
    return rec.addresses if rec else ()


def by_family(addresses) -> dict[int, set[str]]:
    """{4: ..., 6: ...}: one address set per family (a set of both fails to
    parse in OVN, and the ACLs using it are dropped: no rule would hold)."""
    out: dict[int, set[str]] = {4: set(), 6: set()}
    for a in addresses:
        out[6 if ":" in a else 4].add(a)
    return out


class EgressFirewallFeature(Feature):
    name = "egress-firewall"
    informers = {"egressfirewalls": informers.EGRESSFIREWALLS, "pods": informers.PODS,
                 "nodes": informers.NODES, "subnets": informers.SUBNETS}
    # the namespace's pod addresses come from the EgressIP feature's index of
    # allocated pods (one per-pod index in the controller, not two)
    uses = {"pod_index": "egress-ip", "audit": "audit"}

    def __init__(self, ctl):
        super().__init__(ctl)
        # AAAA records too in a cluster with IPv6: a dnsName rule matches both families
        self.dns = DnsUsers(self.queue_keys, servers=list(ctl.cfg.dns_servers) or None,
                            ipv6=6 in ctl.cfg.families)
        # status.enforced: a new generation's rules in force on every chassis
        self.enforced = EnforcedTracker(self, self._report_enforced)

    # -- events -> keys ----------------------------------------------------------------
    def handlers(self):
        return {"egressfirewalls": self._on_firewall, "pods": self._on_pod,
                "nodes": self._on_cluster, "subnets": self._on_cluster}

    @staticmethod
    def _on_firewall(old, new):
        return [model.meta(new or old).get("namespace")]

    def _on_pod(self, old, new):
        ns = model.meta(new or old).get("namespace")
        if self._firewall(ns) is None or _pod_ips(old) == _pod_ips(new):
            return ()          # (the firewall's own reconcile reads the index then)
        return [ns]

    @staticmethod
    def _on_cluster(old, new):
        return () if model.same_status(old, new, "addresses", "cidrBlock") else [CLUSTER_KEY]

    def resync_keys(self):
        yield CLUSTER_KEY
        yield from sorted({model.meta(o).get("namespace")
                           for o in self.ctl.informer("egressfirewalls").list()})
        for row in self.ctl.nb.rows_owned(ensure.AS, names.OWNER_KIND_EGRESS_FIREWALL):
            if row.external_ids.get(names.EXT_OWNER):
                yield row.external_ids[names.EXT_OWNER]

    def _firewall(self, ns: str) -> dict | None:
        return self.ctl.informer("egressfirewalls").get(f"{ns}/{names.EGRESS_FIREWALL_NAME}")

    # -- reconcile ---------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        if self.enforced.handles(key):
            self.enforced.check(key)
        elif key == CLUSTER_KEY:
            self._cluster()
        else:
            self._namespace(key)

    def _cluster_rows(self, families: dict[int, bool]) -> list:
        """Builders making the cluster's destinations of each family (-> create
        the set if missing) what they are; [] for a family whose set holds them
        (or is missing and not to be created)."""
        want = by_family(set(cluster_cidrs(self.ctl)) | exposure.node_addresses(
            self.ctl.informer("nodes").list()))
        out = []
        for family, create in families.items():
            name = names.family_set_name(names.EFW_CLUSTER_SET, family)
            have = ensure.address_set_addresses(self.ctl.nb, name)
            if (have is not None or create) and have != want[family]:
                out += ensure.address_set_rows(name, cluster_ids(), want[family], have)
        return out

    def _cluster(self) -> None:
        exits = self._exits()
        # the IPv6 set exists in a cluster with IPv6, or once a firewall names it
        builders = self._cluster_rows({4: True, 6: 6 in self.ctl.cfg.families})
        if exits:
            builders.append(lambda api: ensure.PortGroupAddPorts(api, names.EFW_EXITS_GROUP,
                                                                 exits))
        used = {names.family_set_name(efw.dns_set(n), v) for n in self.dns.names() for v in (4, 6)}
        for row in self.ctl.nb.rows_owned(ensure.AS, names.OWNER_KIND_EGRESS_FIREWALL, ""):
            if row.name.startswith(names.EFW_DNS_SET_PREFIX) and row.name not in used:
                builders.append(lambda api, n=row.name: ensure.DeleteAddressSet(api, n))
        if builders:
            self.ctl.writer.run(builders, what="egress firewalls: cluster destinations, exits")

    def _exits(self) -> list[str]:
        """The exits not yet in the group (a port of a cluster upgraded from
        before the group existed)."""
        ports = [row.name for kind in (names.OWNER_KIND_NODE, names.OWNER_KIND_SUBNET,
                                       names.OWNER_KIND_SERVICE, names.OWNER_KIND_EGRESS_IP)
                 for row in self.ctl.nb.rows_owned(ensure.LSP, kind)
                 if row.name.startswith(("node:", "ln:egw:"))]
        if not ports:
            return []
        held = acl.groups_holding(self.ctl.nb, ports, [names.EFW_EXITS_GROUP])
        return sorted(p for p in ports if p in held and not held[p])

    def _namespace(self, ns: str) -> None:
        obj = self._firewall(ns)
        ids = efw_ids(ns)
        src = efw.source_set(ns)
        others = [o for o in self.ctl.informer("egressfirewalls").list()
                  if model.meta(o).get("namespace") == ns
                  and model.meta(o).get("name") != names.EGRESS_FIREWALL_NAME]
        for o in others:
            self._status(o, "refused", [f"only one EgressFirewall per namespace, named "
                                        f"{names.EGRESS_FIREWALL_NAME!r}, is programmed"])
        src6 = efw.source_set(ns, 6)
        if obj is None:
            self.dns.use(ns, [])
            self.enforced.forget(ns)
            if ensure.address_set_addresses(self.ctl.nb, src) is not None or \
                    ensure.address_set_addresses(self.ctl.nb, src6) is not None or \
                    not acl.acls_are(self.ctl.nb, names.EFW_EXITS_GROUP, [], scope=ids):
                self.ctl.writer.run([
                    lambda api: acl.EnsurePortGroupACLs(api, names.EFW_EXITS_GROUP, [],
                                                        scope=ids),
                    lambda api: ensure.DeleteAddressSet(api, src),
                    lambda api: ensure.DeleteAddressSet(api, src6),
                ], what=f"egress firewall of namespace {ns}: removed")
                LOG.info("namespace %s: no egress firewall", ns)
            self.audit.named(f"efw:{ns}", ())
            return
        try:
            fw = efw.parse(obj)
        except efw.FirewallError as e:
            self._status(obj, "refused", [f"{e}; the rules programmed before stay"])
            return
        self.dns.use(ns, fw.dns_names)
        pods = self.pod_index.addresses_in(ns)
        have = ensure.address_set_addresses(self.ctl.nb, src) or set()
        builders = [lambda api: ensure.EnsureAddressSet(api, names.EFW_CLUSTER_SET, cluster_ids()),
                    *ensure.address_set_rows(src, ids, pods, have)]
        have6 = ensure.address_set_addresses(self.ctl.nb, src6)
        ipv6 = 6 in self.ctl.cfg.families      # then a firewall decides IPv6 too
        if ipv6 or fw.decides_ipv6:    # the IPv6 ACLs' sets exist before the ACLs naming them
            builders += [*self._cluster_rows({6: True}),
                         *ensure.address_set_rows(src6, ids, self.pod_index.addresses_in(ns, 6),
                                                  have6)]
        elif have6 is not None:
            builders.append(lambda api: ensure.DeleteAddressSet(api, src6))
        messages = []
        for name in fw.dns_names:
            answer = self.dns.answer(name)
            addrs, err = answer if answer is not None else (frozenset(), f"{name}: resolving")
            if err:
                messages.append(err + " (the rule matches nothing)")
            for v in ((4, 6) if ipv6 else (4,)):      # one family per set
                set_name = names.family_set_name(efw.dns_set(name), v)
                cur = ensure.address_set_addresses(self.ctl.nb, set_name) or set()
                builders += ensure.address_set_rows(
                    set_name, cluster_ids(), {a for a in addrs if (":" in a) == (v == 6)}, cur)
        mode, problems = audit.of(obj, policy=False)
        messages += problems
        meter = audit.meter_name("efw", ns)     # the administrator's, not the namespace's
        specs = [audit.logged(acl.AclSpec("to-lport", prio, match, action,
                                          name=f"efw:{ns}:{rule}"[:63], external_ids=ids),
                              mode, meter)
                 for prio, match, action, rule in efw.matches(
                     fw, names.EFW_EXITS_GROUP, names.EFW_CLUSTER_SET, ipv6=ipv6)]
        builders += [*self.audit.meter_builders(specs),
                     lambda api: acl.EnsurePortGroupACLs(api, names.EFW_EXITS_GROUP, specs,
                                                         scope=ids)]
        self.ctl.writer.run(builders, what=f"egress firewall of namespace {ns}")
        self.audit.named(f"efw:{ns}", specs)
        LOG.info("namespace %s: egress firewall of %d rules over %d pods", ns, len(specs),
                 len(pods))
        self._status(obj, "programmed", messages)
        if self.enforced.new_version(ns, obj):
            r.patch_status(self.ctl.kube, r.EGRESSFIREWALLS, obj, enforced.PENDING)
            self.enforced.written(ns, enforced.version(obj))

    def _report_enforced(self, ns: str, ok, message: str, version) -> None:
        obj = self._firewall(ns)
        if obj is not None and enforced.version(obj) == version:   # else a newer one's own check
            r.patch_status(self.ctl.kube, r.EGRESSFIREWALLS, obj, enforced.status_fields(ok, message))

    def _status(self, obj: dict, state: str, messages: list[str]) -> None:
        want = {"status": state, "messages": messages or ["every rule programmed"]}
        if not r.patch_status(self.ctl.kube, r.EGRESSFIREWALLS, obj, want):
            return
        if state == "refused" or messages:
            self.ctl.event(obj, "EgressFirewallProblem", "; ".join(messages))
