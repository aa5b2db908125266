"""ClusterNetworkPolicy → OVN (model, precedence and validation:
pacific/clusterpolicy.py; guide: docs/networkpolicy.md).

Per policy (key: its name), in ONE transaction:
- port group `cnp_<hash>`: the subject's pods' ports (a new pod's port joins
  in the transaction that creates it: port_builders);
- per rule with pod, namespace or node peers, address set
  `cnp_<hash>_<i|e><index>` of their addresses (networks go into the match
  as they are);
- the rules' ACLs on the group, in OVN tier 0 (Admin) or 2 (Baseline), one
  priority per (policy priority, rule index): Accept `allow-related`, Deny
  `drop`, Pass `pass`.
Pods and namespace labels come from the NetworkPolicy feature's view of the
cluster (`policies.world()`: addresses, labels, named ports), nodes from the
Node objects (addresses and their ovn0 join address), domain names from DNS
(A records, asked again at their TTL; `--dns-servers`), each rule's in its set.

Status conditions: `Accepted` (the spec is valid and OVN has ACL tiers, or
why not) and `Enforced`: True once every chassis applied the write
(controller/enforced.py: the nb_cfg/hv_cfg barrier), with how long that took.
"""
from __future__ import annotations

import datetime
import hashlib
import ipaddress
import logging
import threading

from ovsdbapp.backend.ovs_idl import idlutils

from pacific import clusterpolicy as cp
from pacific import audit, contract, exposure, names, selectors
from pacific.controller import informers, model
from pacific.controller.dnsnames import DnsUsers
from pacific.controller.enforced import EnforcedTracker
from pacific.controller.feature import Feature
from pacific.controller.policy_model import rule_suffix
from pacific.names import family_set_name
from pacific.kube import resources as r
from pacific.ovn import acl, ensure

LOG = logging.getLogger(__name__)


def group_name(policy: str) -> str:
    return names.CNP_GROUP_PREFIX + hashlib.sha256(policy.encode()).hexdigest()[:16]


def set_name(policy: str, direction: str, index: int) -> str:
    return f"{group_name(policy)}_{direction[0]}{index}"


def cnp_ids(policy: str, **extra) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_CLUSTER_POLICY, names.EXT_OWNER: policy,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, **extra}


def node_addresses(node: dict, family: int = 4) -> set[str]:
    """A Node's addresses of IP `family` as peers see them: its status
    addresses and its ovn0 join address (what node -> pod traffic comes
    from; IPv6: ovn0's IPv6 on a dual-stack join network)."""
    out = exposure.node_addresses([node])
    try:
        rec = contract.NodeRecord.of(node)
    except contract.ContractError:
        rec = None
    if rec is not None:
        out.add(rec.address(family))
    return {a for a in out if a and _family(a) == family}


def _family(cidr: str) -> int:
    try:
        return ipaddress.ip_network(cidr, strict=False).version
    except ValueError:
        return 0


class ClusterPolicyFeature(Feature):
    name = "cluster-policy"
    informers = {"cnps": informers.CLUSTER_NETWORK_POLICIES, "pods": informers.PODS,
                 "namespaces": informers.NAMESPACES, "nodes": informers.NODES}
    uses = {"policies": "policy",     # its view of pods (labels, addresses, named ports)
            "audit": "audit"}         # the dry-run observers' switches

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self._parsed: dict[str, cp.Policy] = {}           # applied policies
        self.enforced = EnforcedTracker(self, self._report_enforced)
        # domainNames of Accept rules, resolved like the egress firewall's (its own resolver)
        self.dns = DnsUsers(self.queue_keys, servers=list(ctl.cfg.dns_servers) or None,
                            ipv6=6 in ctl.cfg.families)

    # -- events ------------------------------------------------------------------------
    def handlers(self):
        return {"cnps": self._on_cnp, "pods": self._on_pod, "namespaces": self._on_namespace,
                "nodes": self._on_node}

    def _on_cnp(self, old, new):
        if old is not None and new is not None and old.get("spec") == new.get("spec") and \
                model.meta(old).get("generation") == model.meta(new).get("generation") and \
                audit.of(old) == audit.of(new):
            return ()       # our own status write
        return (model.meta(new or old)["name"],)

    def _all(self) -> list[str]:
        return [model.meta(o)["name"] for o in self.ctl.informer("cnps").list()]

    def _on_pod(self, old, new):
        """A pod's address or labels changed: the policies whose subject or pod
        peers it enters or leaves, or selects with a new address (and those not
        parsed yet)."""
        rec_old = contract.own_record(old) if old is not None else None
        rec_new = contract.own_record(new) if new is not None else None
        if rec_old == rec_new and (old is None or new is None or
                                   model.labels_of(old) == model.labels_of(new)):
            return ()       # no address before or after, or nothing policies read changed
        ns_obj = self.ctl.informer("namespaces").get(model.meta(new or old).get("namespace"))
        ns_labels = model.labels_of(ns_obj) if ns_obj else {}
        before = model.labels_of(old) if rec_old is not None else None
        after = model.labels_of(new) if rec_new is not None else None
        with self._lock:
            parsed = dict(self._parsed)
        keys = []
        for name, pol in parsed.items():
            sels = [pol.subject, *(p.selection for rule in pol.rules for p in rule.peers
                                   if p.kind in ("namespaces", "pods"))]
            was = [before is not None and cp.selects_pod(s, ns_labels, before) for s in sels]
            now = [after is not None and cp.selects_pod(s, ns_labels, after) for s in sels]
            if was != now or (rec_old != rec_new and any(was + now)):
                keys.append(name)
        return keys + [n for n in self._all() if n not in parsed]

    def _on_namespace(self, old, new):
        if old is not None and new is not None and model.labels_of(old) == model.labels_of(new):
            return ()
        return self._all()

    def _on_node(self, old, new):
        if old is not None and new is not None and model.labels_of(old) == model.labels_of(new) \
                and all(node_addresses(old, f) == node_addresses(new, f) for f in (4, 6)):
            return ()
        with self._lock:
            return [n for n, p in self._parsed.items()
                    if any(peer.kind == "nodes" for rule in p.rules for peer in rule.peers)]

    def resync_keys(self):
        keys = set(self._all())
        keys |= {row.external_ids.get(names.EXT_OWNER) for row in
                 self.ctl.nb.rows_owned(ensure.PG, names.OWNER_KIND_CLUSTER_POLICY)}
        return sorted(k for k in keys if k)

    # -- a new pod's port joins the subjects selecting it ----------------------------------
    def port_builders(self, pod: dict, lsp: str) -> list:
        m = model.meta(pod)
        ns_obj = self.ctl.informer("namespaces").get(m.get("namespace"))
        ns_labels = model.labels_of(ns_obj) if ns_obj else {}
        out = []
        with self._lock:
            parsed = list(self._parsed.items())
        for name, pol in parsed:
            if cp.selects_pod(pol.subject, ns_labels, model.labels_of(pod)):
                pg = group_name(name)
                out += [lambda api, pg=pg, n=name: ensure.EnsurePortGroup(api, pg, cnp_ids(n)),
                        lambda api, pg=pg: ensure.PortGroupAddPorts(api, pg, [lsp])]
        return out

    # -- reconcile -------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        if self.enforced.handles(key):
            self.enforced.check(key)
            return
        obj = self.ctl.informer("cnps").get(key)
        if obj is None:
            self._remove(key)
            return
        if not self.ctl.acl_tiers():
            self._status(obj, (False, "ACLTiersUnavailable", "this OVN has no ACL tiers "
                               "(OVN 23.09 or later has): nothing is enforced"), None)
            return
        try:
            pol = cp.parse(obj)
        except cp.PolicyError as e:
            with self._lock:
                kept = key in self._parsed
            self._status(obj, (False, "InvalidSpec", str(e) + (
                "; the rules applied before stay" if kept else "; nothing is enforced")), None)
            return
        specs, sets, notes, subject = self._compile(key, pol)
        mode, problems = audit.of(obj)
        if mode.dry_run:      # observed on every Subnet switch, enforced nowhere
            notes = [*notes, f"dry-run: {len(specs)} ACLs observe, none enforces"]
        specs = self.audit.enforcing(f"cnp:{key}", specs, mode)
        notes += problems
        changed = self._write(key, pol, specs, sets, {p.port for p in subject})
        with self._lock:
            self._parsed[key] = pol
        message = "valid; " + (", ".join(notes) if notes else
                                f"{len(specs)} ACLs in OVN tier {cp.OVN_TIER[pol.tier]}")
        generation = model.meta(obj).get("generation") or 0
        enforced = self._condition(obj, "Enforced")
        if not changed and enforced and (self.enforced.pending(key) is not None or (
                enforced.get("status") == "True" and
                enforced.get("observedGeneration") == generation)):
            self._status(obj, (True, "Valid", message), enforced)   # as it is, or on its way
            return
        self._status(obj, (True, "Valid", message),
                     ("False", "Pending", "waiting until every chassis applied it"))
        self.enforced.written(key, generation)

    def _compile(self, key: str, pol: cp.Policy):
        world = self.policies.world()
        nsl = world.namespace_labels
        subject = [p for p in world.pods
                   if cp.selects_pod(pol.subject, nsl.get(p.namespace, {}), p.labels)]
        pg = group_name(key)
        specs, sets, notes, names_used = [], {}, [], set()
        for family in world.families:
            for rule in pol.rules:
                specs += self._compile_rule(key, pol, rule, family, world, subject, pg, sets,
                                            notes, names_used)
        self.dns.use(key, names_used)
        return specs, sets, notes, subject

    def _compile_rule(self, key: str, pol: cp.Policy, rule: cp.Rule, family: int, world,
                      subject: list, pg: str, sets: dict, notes: list, names_used: set) -> list:
        """One rule's ACLs in one family (IPv6: pod peers' IPv6 addresses and
        IPv6 networks, nodes' IPv6 addresses, domain names' AAAA records); [] if it matches
        no traffic now.  Its peers' set goes into `sets`."""
        nsl, ip, out = world.namespace_labels, f"ip{family}", []
        ingress = rule.direction == "ingress"
        addrs, cidrs, peer_pods = set(), [], []
        for peer in rule.peers:
            if peer.kind in ("namespaces", "pods"):
                found = [p for p in world.pods if cp.selects_pod(
                    peer.selection, nsl.get(p.namespace, {}), p.labels)]
                peer_pods += found
                addrs |= {a for p in found if (a := p.address(family))}
            elif peer.kind == "nodes":
                addrs |= {a for n in self.ctl.informer("nodes").list()
                          if selectors.matches(peer.selection.pod_selector or {},
                                               model.labels_of(n))
                          for a in node_addresses(n, family)}
            elif peer.kind == "networks":
                cidrs += [c for c in peer.values if _family(c) == family]
            else:     # domainNames (Accept only): their A (AAAA) records, kept resolved
                for dn in peer.values:
                    once = notes if family == 4 else []    # a note per rule, not per family
                    if dn.startswith("*."):
                        once.append(f"{rule.direction}[{rule.index}]: {dn} matches nothing "
                                    "(a wildcard cannot be resolved)")
                        continue
                    names_used.add(dn)
                    answer = self.dns.answer(dn)
                    if answer is None:
                        once.append(f"{rule.direction}[{rule.index}]: {dn} not resolved yet")
                    elif answer[1]:
                        once.append(f"{rule.direction}[{rule.index}]: {answer[1]}")
                    addrs |= {a for a in answer[0] if _family(a) == family} if answer else set()
        dests = subject if ingress else peer_pods
        clauses = cp.port_clauses(rule.ports, {a: p.named_ports for p in dests
                                               if (a := p.address(family))}, f"{ip}.dst")
        field = f"{ip}.src" if ingress else f"{ip}.dst"
        terms = []
        if addrs:
            name = family_set_name(set_name(key, rule.direction, rule.index), family)
            sets[name] = addrs
            terms.append(f"{field} == ${name}")
        if cidrs:
            terms.append(f"{field} == {{{', '.join(cidrs)}}}")
        if not terms or clauses == []:
            return []        # matches no traffic now (no peer, no port resolved)
        match = (f"{'outport' if ingress else 'inport'} == @{pg} && {ip} && "
                 f"({' || '.join(terms)})")
        if clauses:
            match += " && (" + " || ".join(f"({c})" for c in clauses) + ")"
        rid = f"{rule.direction}/{rule.index}{rule_suffix(family)}"
        out.append(acl.AclSpec(
            "to-lport" if ingress else "from-lport", pol.acl_priority(rule), match,
            cp.ACTIONS[rule.action], name=f"cnp:{key}:{rid}"[:63],
            external_ids=cnp_ids(key, **{names.EXT_RULE: rid}), tier=cp.OVN_TIER[pol.tier]))
        if addrs and rule.action != "Deny" and family == 4:
            out.append(self._neighbours(key, pol, rule, pg))
        return out

    @staticmethod
    def _neighbours(key: str, pol: cp.Policy, rule: cp.Rule, pg: str) -> acl.AclSpec:
        """ARP between the subject's pods and the rule's pod peers, both ways: an
        Accept (or Pass) between tenants is of no use while tenant isolation
        drops the ARP that finds the peer on a shared Subnet (OVN's group
        `<pg>_ip4` holds the subject's addresses)."""
        peers = f"${set_name(key, rule.direction, rule.index)}"
        match = (f"arp && ((arp.spa == ${pg}_ip4 && arp.tpa == {peers}) || "
                 f"(arp.spa == {peers} && arp.tpa == ${pg}_ip4))")
        rid = f"{rule.direction}/{rule.index}/arp"
        return acl.AclSpec("to-lport", pol.acl_priority(rule), match, "allow",
                           name=f"cnp:{key}:{rid}"[:63],
                           external_ids=cnp_ids(key, **{names.EXT_RULE: rid}),
                           tier=cp.OVN_TIER[pol.tier])

    def _write(self, key: str, pol: cp.Policy, specs: list, sets: dict, ports: set) -> bool:
        """Make NB hold exactly this (the subject's `ports`); True if anything
        was written."""
        nb, pg = self.ctl.nb, group_name(key)
        have = self._members(pg)
        want = {p for p in ports if nb.row_uuid(ensure.LSP, p) is not None}   # ports NB has
        changes = []
        if want - (have or set()):
            changes.append(lambda api, a=sorted(want - (have or set())):
                           ensure.PortGroupAddPorts(api, pg, a))
        if have and have - want:
            changes.append(lambda api, a=sorted(have - want): ensure.PortGroupRemovePorts(api, pg, a))
        for name, addrs in sorted(sets.items()):
            now = ensure.address_set_addresses(nb, name)
            if now != addrs:
                changes += ensure.address_set_rows(name, cnp_ids(key), addrs, now)
        stale = [row.name for row in nb.rows_owned(ensure.AS, names.OWNER_KIND_CLUSTER_POLICY, key)
                 if row.name not in sets]
        if not changes and have is not None and not stale and acl.acls_are(nb, pg, specs):
            self.audit.named(f"cnp:{key}", specs)
            return False
        self.ctl.writer.run([lambda api: ensure.EnsurePortGroup(api, pg, cnp_ids(key)), *changes,
                             *self.audit.meter_builders(specs),
                             lambda api: acl.EnsurePortGroupACLs(api, pg, specs),
                             *[lambda api, n=n: ensure.DeleteAddressSet(api, n) for n in stale]],
                            what=f"ClusterNetworkPolicy {key}")
        self.audit.named(f"cnp:{key}", specs)
        LOG.info("ClusterNetworkPolicy %s (%s, priority %d): %d pods, %d ACLs", key, pol.tier,
                 pol.priority, len(want), len(specs))
        return True

    def _members(self, pg: str) -> set[str] | None:
        """The group's ports in the replica; None: no such group."""
        nb = self.ctl.nb
        with nb.ovsdb_connection.lock:
            try:
                row = nb.lookup(ensure.PG, pg)
            except idlutils.RowNotFound:
                return None
            return nb.ref_names(row, "ports")

    def _remove(self, key: str) -> None:
        self.dns.use(key, [])
        self.audit.publish(f"cnp:{key}", [])
        self.enforced.forget(key)
        with self._lock:
            self._parsed.pop(key, None)
        nb = self.ctl.nb
        rows = [(ensure.PG, row.name) for row in
                nb.rows_owned(ensure.PG, names.OWNER_KIND_CLUSTER_POLICY, key)]
        rows += [(ensure.AS, row.name) for row in
                 nb.rows_owned(ensure.AS, names.OWNER_KIND_CLUSTER_POLICY, key)]
        if rows:
            # the group (and its ACLs) first: a set its ACLs name cannot go before
            self.ctl.writer.run(
                [lambda api, n=n: ensure.DeletePortGroup(api, n) for t, n in rows if t == ensure.PG] +
                [lambda api, n=n: ensure.DeleteAddressSet(api, n) for t, n in rows if t == ensure.AS],
                what=f"ClusterNetworkPolicy {key} removed")
            LOG.info("ClusterNetworkPolicy %s removed: %d rows", key, len(rows))
        self.audit.named(f"cnp:{key}", ())

    # -- status ----------------------------------------------------------------------------
    def _report_enforced(self, key: str, ok, message: str, generation) -> None:
        obj = self.ctl.informer("cnps").get(key)
        if obj is None:
            return
        status, reason = {True: ("True", "Enforced"), False: ("False", "ChassisBehind"),
                          None: ("Unknown", "NoBarrier")}[ok]
        self._status(obj, None, (status, reason, message), generation)

    @staticmethod
    def _condition(obj: dict, type_: str) -> dict | None:
        return next((c for c in (obj.get("status") or {}).get("conditions") or []
                     if c.get("type") == type_), None)

    def _status(self, obj: dict, accepted, enforced, generation: int | None = None) -> None:
        """Conditions Accepted ((ok, reason, message) or None: keep) and Enforced
        ((status, reason, message), a condition dict to keep, or None: Unknown)."""
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        gen = generation if generation is not None else model.meta(obj).get("generation") or 0
        conds = []
        for type_, value in (("Accepted", accepted), ("Enforced", enforced)):
            old = self._condition(obj, type_)
            if value is None and type_ == "Accepted" and old is not None:
                conds.append(old)
                continue
            if isinstance(value, dict):
                conds.append(value)
                continue
            if value is None:
                value = ("Unknown", "NotApplied", "nothing was applied")
            status, reason, message = value
            status = {True: "True", False: "False"}.get(status, status)
            same = old is not None and old.get("status") == status
            conds.append({"type": type_, "status": status, "reason": reason, "message": message,
                          "observedGeneration": gen,
                          "lastTransitionTime": old.get("lastTransitionTime") if same else now})
        r.patch_status(self.ctl.kube, r.CLUSTERNETWORKPOLICIES, obj, {"conditions": conds})
