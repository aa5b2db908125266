"""Kubernetes NetworkPolicy in OVN (semantics in policy_model.py).

Per podSelector of a namespace (key `namespace/np_<hash>`: the policies of a
namespace with the same podSelector select the same pods, so they share one
group; decision 0031), in ONE transaction:

* port group `np_<hash>` (external_ids: kind NetworkPolicyGroup, owner the
  key) with the ports of the pods the selector selects, changed by add/remove
  mutations: a pod relabelled changes one group, not one per policy;
* the ACLs of every policy of the group, exactly: for each type a policy
  isolates a drop at PRIO_ACL_NP_DENY (to-lport `outport == @pg && ip4`,
  from-lport `inport == @pg && ip4`, and the same for ip6), for an egress-isolated pod an
  allow-related just below it on to-lport that commits connections into the pod
  (so their replies pass the egress drop), for ingress an allow of the nodes
  (join CIDR: kubelet probes), and one allow-related ACL per rule at
  PRIO_ACL_NP_ALLOW.  Several policies selecting a pod add up: any allow (1001)
  beats every deny (1000); tenant isolation (3000) stays above all of them.
  ACL external_ids name the policy and the rule (`pacific.io/rule`:
  "ingress/0", "egress/deny", ...) so a trace can name what dropped a packet;
  an ACL two policies of the group share (their deny) names the first policy,
  and so does the one allow the rules with the same peers of the policies that
  log no allow become, with the union of their ports (policy_model.merged: a
  relabel then costs OVN one ACL, not one per policy);
* address sets `np_as_<hash>` of pod peers, shared by the policies of a
  namespace that name the same peer (their addresses changed by mutation).

A new pod joins the groups selecting it in the transaction that creates its
port (`port_builders`), so it never sends or receives a packet a policy
forbids.  A pod event wakes only the groups of its namespace whose selection
of it changes (and those of policies naming a port) and the peers' sets that
take or drop it, each set once per namespace naming it (policy_index.py); a
policy event wakes its old and new group.  Rows of groups gone, and the
per-policy groups of earlier versions, are collected at resync.
"""
from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import logging
import threading

from ovsdbapp.backend.ovs_idl import idlutils

from pacific import audit, clusterpolicy, contract, names
from pacific.controller import enforced, informers, model
from pacific.controller.enforced import EnforcedTracker
from pacific.controller.feature import Feature
from pacific.controller.policy_index import PolicyIndex
from pacific.controller.policy_model import (NO_LABELS, PodInfo, PolicyError, World,
                                             base_set_name, canonical, compile_policy,
                                             peer_addresses, peer_moved, merged, pod_matters,
                                             rule_suffix, selector_matches)
from pacific.names import family_set_name
from pacific.controller.reports import Reports
from pacific.kube import resources as r
from pacific.ovn import acl, ensure

LOG = logging.getLogger(__name__)
KIND_PEER = "NetworkPolicyPeer"
DRY_RUN_MESSAGE = (f"{names.ANN_ENFORCEMENT}=dry-run: observed (pacific flows), not enforced")


def group_name(namespace: str, selector: dict | None) -> str:
    """The port group of the pods `selector` (a podSelector) selects in `namespace`."""
    canon = f"{namespace}\n{canonical(selector)}"
    return "np_" + hashlib.sha256(canon.encode()).hexdigest()[:16]


def group_key(policy: dict) -> str:
    """The queue key of the group a policy belongs to: `namespace/np_<hash>`
    (never a policy's key: `_` is not allowed in object names)."""
    m, spec = model.meta(policy), policy.get("spec") or {}
    return model.object_key(m.get("namespace"), group_name(m.get("namespace"),
                                                           spec.get("podSelector")))


def policy_ids(key: str, **extra) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_POLICY, names.EXT_OWNER: key,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, **extra}


def _also(rule) -> dict:
    """external_ids naming the other policies' rules a merged allow stands for."""
    if not rule.also:
        return {}
    return {names.EXT_ALSO: ",".join(f"{k}:{rule.direction}/{i}" for k, i in rule.also)}


def _takes(selector: dict, labels: dict | None) -> bool:
    return labels is not None and selector_matches(selector, labels)


def _moves(test, *args) -> bool:
    """test(*args), True if a selector in it is invalid (PolicyError): the
    reconcile then says so, instead of the event being lost."""
    try:
        return test(*args)
    except PolicyError:
        return True


def group_ids(gkey: str, applied: list[str] | None = None) -> dict:
    """A group's external_ids; `applied`: the names of the policies in force on
    it (identical ACLs of two policies are one row, so the ACLs alone do not
    say which policies NB holds)."""
    ids = {names.EXT_OWNER_KIND: names.OWNER_KIND_POLICY_GROUP, names.EXT_OWNER: gkey,
           names.EXT_CREATED_BY: names.CONTROLLER_NAME}
    if applied is not None:
        ids[names.EXT_POLICIES] = ",".join(sorted(k.split("/", 1)[1] for k in applied))
    return ids


def programmed(nb, key: str) -> bool:
    """Is policy `key` in force in NB: listed by its group, which holds ACLs
    (benchmarks and tests wait on this)?"""
    ns, _, name = key.partition("/")
    with nb.ovsdb_connection.lock:
        return any(row.external_ids.get(names.EXT_OWNER_KIND) == names.OWNER_KIND_POLICY_GROUP
                   and row.external_ids.get(names.EXT_OWNER, "").startswith(ns + "/")
                   and name in row.external_ids.get(names.EXT_POLICIES, "").split(",")
                   and row.acls for row in nb.tables[ensure.PG].rows.values())


def programmed_group(nb, pg: str) -> bool:
    """Does port group `pg` exist in the replica with ACLs?"""
    with nb.ovsdb_connection.lock:
        try:
            return bool(nb.lookup(ensure.PG, pg).acls)
        except idlutils.RowNotFound:
            return False


def pod_info(pod: dict, rec=None) -> PodInfo | None:
    """What policies see of a pod (None without an address); `rec`: its record,
    if already parsed."""
    rec = rec if rec is not None else contract.own_record(pod)
    if rec is None:
        return None
    m = model.meta(pod)
    named = tuple((p.get("name"), p.get("containerPort"), p.get("protocol") or "TCP")
                  for c in (pod.get("spec") or {}).get("containers") or []
                  for p in c.get("ports") or [] if p.get("name"))
    ip4, ip6 = rec.address(4) or "", rec.address(6) or ""
    return PodInfo(m.get("namespace"), m.get("name"), m.get("labels") or NO_LABELS, ip4,
                   rec.port, named, ip6)


class PolicyFeature(Feature):
    name = "policy"
    uses = {"audit": "audit"}
    informers = {"policies": informers.NETWORK_POLICIES, "pods": informers.PODS,
                 "namespaces": informers.NAMESPACES}

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self.reports = Reports()
        self.enforced = EnforcedTracker(self, self._report_enforced)
        # the pods and namespace labels every policy is compiled against, kept
        # from the informers' events (namespace -> pod name -> PodInfo): a
        # change re-reads one pod, never all.  A snapshot (World) is taken after
        # a change (None: one is due), replacing only the changed namespaces' lists.
        self._pods: dict[str, dict[str, PodInfo]] = {}
        self._lists: dict[str, list[PodInfo]] = {}
        self._dirty: set[str] = set()
        self._ns_labels: dict[str, dict] = {}
        self._world_cache: World | None = None
        # the groups, namespaces and peer sets of the policies, kept from their
        # events: a pod event looks only at what it can move
        self.index = PolicyIndex(group_key)

    # -- wiring ----------------------------------------------------------------------
    def handlers(self):
        return {"policies": self._on_policy, "pods": self._on_pod, "namespaces": self._on_namespace}

    def _on_policy(self, old, new):
        m = model.meta(new or old)
        key = model.object_key(m.get("namespace"), m.get("name"))
        before, after = self.index.update(key, new)
        if new is None:
            self.enforced.forget(key)
            self.audit.publish(f"np:{key}", [])      # its observers, if it was a dry-run
        elif old is not None and old.get("spec") == new.get("spec") and \
                audit.of(old) == audit.of(new):
            return ()         # its labels, or the controller's own enforced annotations
        # a group left empty is kept until its reconcile removes its rows
        return sorted({g for g in (before, after) if g})

    def _all(self) -> list[str]:
        return sorted({group_key(p) for p in self.ctl.informer("policies").list()})

    def _on_pod(self, old, new):
        rec_old = contract.own_record(old) if old is not None else None
        rec_new = contract.own_record(new) if new is not None else None
        if rec_old is None and rec_new is None:
            return ()       # no address before or after (pending, refused): in no policy
        if rec_old == rec_new and model.labels_of(old) == model.labels_of(new):
            return ()
        m = model.meta(new or old)
        ns = m.get("namespace")
        info = pod_info(new, rec_new) if new is not None else None
        with self._lock:
            pods = self._pods.setdefault(ns, {})
            if info is None:
                pods.pop(m.get("name"), None)
            else:
                pods[m.get("name")] = info
            self._dirty.add(ns)
            self._world_cache = None
        # only the groups with a policy whose result the change can move: the
        # pod's selection as subject or peer (a relabel under `podSelector: {}`
        # moves nothing; a pod of a namespace no peer selects, nothing either)
        before = model.labels_of(old) if rec_old is not None else None
        after = model.labels_of(new) if rec_new is not None else None
        # a new address: out wherever it was selected, in wherever it is
        changes = [(before, None), (None, after)] if rec_old != rec_new else [(before, after)]
        cache = self.ctl.informer("policies")
        ns_obj = self.ctl.informer("namespaces").get(ns)
        ns_labels = model.labels_of(ns_obj) if ns_obj else {}

        def group_moved(pol: dict, named: bool) -> bool:
            if named:                 # its ACLs name ports resolved on pods
                return any(pod_matters(pol, ns, ns_labels, b, a) for b, a in changes)
            sel = (pol.get("spec") or {}).get("podSelector") or {}
            return any(_takes(sel, b) != _takes(sel, a) for b, a in changes)

        def set_moved(pns: str, peer: dict) -> bool:
            return any(peer_moved(peer, pns or ns, ns, ns_labels, b, a) for b, a in changes)
        groups = {g for k, g, named in self.index.candidates(ns)
                  if (pol := cache.get(k)) is None or _moves(group_moved, pol, named)}
        sets = {k for name, pns, peer in self.index.sets() if _moves(set_moved, pns, peer)
                for k in self.index.keys_of(name)}
        return sorted(groups) + sorted(sets)

    def _on_namespace(self, old, new):
        if old is not None and new is not None and model.labels_of(old) == model.labels_of(new):
            return ()
        name = model.meta(new or old)["name"]
        with self._lock:
            if new is None:
                self._ns_labels.pop(name, None)
            else:
                self._ns_labels[name] = model.labels_of(new)
            self._world_cache = None
        return self._all() + self.index.set_keys()

    def resync_keys(self):
        keys = set(self._all()) | set(self.index.set_keys())
        for row in self.ctl.nb.rows_owned(ensure.PG, names.OWNER_KIND_POLICY_GROUP):
            keys.add(row.external_ids.get(names.EXT_OWNER))
        keys.add("*")     # stale address sets, groups of earlier versions
        return [k for k in keys if k]

    def world(self) -> World:
        """The pods (labels, addresses, named ports) and namespace labels every
        policy is compiled against (also ClusterNetworkPolicy's)."""
        with self._lock:
            if self._world_cache is not None:
                return self._world_cache
            for ns in self._dirty:
                pods = self._pods.get(ns)
                if pods:
                    self._lists[ns] = list(pods.values())
                else:
                    self._lists.pop(ns, None)
                    self._pods.pop(ns, None)
            self._dirty.clear()
            self._world_cache = World.indexed(dict(self._lists), dict(self._ns_labels),
                                              self.ctl.cfg.families)
            return self._world_cache

    # -- a new pod's port joins the groups selecting it ----------------------------------
    def port_builders(self, pod: dict, lsp: str) -> list:
        m = model.meta(pod)
        labels, out = model.labels_of(pod), []
        for gkey, sel in self.index.groups_in(m.get("namespace")):
            if _moves(selector_matches, sel, labels):
                pg = gkey.split("/", 1)[1]
                out += [lambda api, pg=pg, g=gkey: ensure.EnsurePortGroup(api, pg, group_ids(g)),
                        lambda api, pg=pg: ensure.PortGroupAddPorts(api, pg, [lsp])]
        return out

    # -- reconcile -------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        if self.enforced.handles(key):
            self.enforced.check(key)
            return
        if key == "*":
            self._collect()
            return
        if "/$" in key:            # a peer's address set (policy_index.set_key)
            self._reconcile_set(key.split("/$", 1)[1])
            return
        pg = key.split("/", 1)[1]
        cache = self.ctl.informer("policies")
        # (a policy whose cached spec moved it to another group since the index
        # saw it is left to that group: its event queues both)
        policies = [(k, pol) for k in self.index.policies_of(key)
                    if (pol := cache.get(k)) is not None and group_key(pol) == key]
        if not policies:
            if self.ctl.nb.rows_owned(ensure.PG, names.OWNER_KIND_POLICY_GROUP, key):
                self.ctl.writer.run([lambda api: ensure.DeletePortGroup(api, pg)],
                                    what=f"NetworkPolicy group {key} removed")
                LOG.info("NetworkPolicy group %s: removed (no policy selects by it)", key)
            self.audit.named(f"np:{key}", ())
            return
        world = self.world()
        specs: dict[tuple, acl.AclSpec] = {}
        sets: dict[str, frozenset] = {}
        want, applied, fresh = None, [], []
        pooled = []      # (policy, allow rule) of the policies that log no allow: merged
        for pkey, pol in policies:
            mode, problems = audit.of(pol)
            try:
                types, rules, ports = compile_policy(pol, world)
            except PolicyError as exc:
                self._report(pol, pkey, str(exc))
                continue
            self._report(pol, pkey, "; ".join(problems) or None, "InvalidAudit")
            want = set(ports)
            sets.update(n_ips for r_ in rules for n_ips in r_.address_sets)
            pool = not mode.allow and not mode.dry_run
            mine = self.audit.enforcing(f"np:{pkey}", self._acls(pkey, pg, types,
                                                                 [] if pool else rules), mode)
            if mode.dry_run:     # observed, not enforced (pacific/audit.py)
                if self.enforced.new_version(pkey, pol):
                    self._report_enforced(pkey, False, DRY_RUN_MESSAGE, enforced.version(pol),
                                          reason="DryRun")
                continue
            applied.append(pkey)
            if self.enforced.new_version(pkey, pol):
                fresh.append((pkey, enforced.version(pol)))
            if pool:
                pooled += [(pkey, r_) for r_ in rules]
            for spec in mine:
                # a shared ACL names the first policy; it logs if any policy asks
                if spec.key not in specs or (spec.log and not specs[spec.key].log):
                    specs[spec.key] = spec
        for spec in self._rule_acls(pg, merged(pooled)):
            specs.setdefault(spec.key, spec)
        if want is None:
            return        # no policy of the group applies: what NB holds stays (reported)
        specs_list = list(specs.values())
        changes = []
        for name, ips in sets.items():
            changes += self._set_builders(name, ips)
        have, listed = self._members(pg)
        ids = group_ids(key, applied)
        if have is not None and want - have:
            changes.append(lambda api: ensure.PortGroupAddPorts(api, pg, sorted(want - have)))
        if have is not None and have - want:
            changes.append(lambda api: ensure.PortGroupRemovePorts(api, pg, sorted(have - want)))
        if have is None and want:
            changes.append(lambda api: ensure.PortGroupAddPorts(api, pg, sorted(want)))
        if (not changes and have is not None and listed == ids[names.EXT_POLICIES]
                and acl.acls_are(self.ctl.nb, pg, specs_list)):
            self.enforced.written_all(fresh)    # (a policy that changed nothing in NB)
            self.audit.named(f"np:{key}", specs_list)
            return     # the replica already holds exactly this
        # ONE transaction: group, peers' sets, members, meters and ACLs change together
        self.ctl.writer.run([lambda api: ensure.EnsurePortGroup(api, pg, ids), *changes,
                             *self.audit.meter_builders(specs_list),
                             lambda api: acl.EnsurePortGroupACLs(api, pg, specs_list)],
                            what=f"NetworkPolicy group {key}")
        self.enforced.written_all(fresh)
        self.audit.named(f"np:{key}", specs_list)
        LOG.info("NetworkPolicy group %s: %d policies (%s%s), %d pods, %d ACLs", key,
                 len(applied), ", ".join(applied[:3]), ", ..." if len(applied) > 3 else "",
                 len(want), len(specs_list))

    def _acls(self, key: str, pg: str, types: list[str], rules) -> list:
        out = []
        for t in types:
            port = "outport" if t == "ingress" else "inport"
            direction = "to-lport" if t == "ingress" else "from-lport"
            # both families once --ipv6-subnets lets pods have IPv6: a selected
            # pod's IPv6 is isolated too (its allow rules have IPv6 twins)
            for family in self.ctl.cfg.families:
                ip, sfx = f"ip{family}", rule_suffix(family)
                out.append(acl.AclSpec(direction, names.PRIO_ACL_NP_DENY, f"{port} == @{pg} && {ip}",
                                       "drop", name=f"np:{key}:{t}{sfx}"[:63],
                                       external_ids=policy_ids(key, **{names.EXT_RULE: f"{t}/deny{sfx}"})))
            if t == "egress":
                # connections INTO the pod are committed to conntrack, so their
                # replies pass the egress drop (OVN lets established replies by
                # only for connections an allow-related ACL committed; the
                # ingress side needs none: OVN commits from-lport traffic itself)
                for family in self.ctl.cfg.families:
                    ip, sfx = f"ip{family}", rule_suffix(family)
                    out.append(acl.AclSpec("to-lport", names.PRIO_ACL_NP_DENY - 1,
                                           f"outport == @{pg} && {ip}", "allow-related",
                                           name=f"np:{key}:egress-replies{sfx}"[:63],
                                           external_ids=policy_ids(key, **{names.EXT_RULE:
                                                                           f"egress/replies{sfx}"})))
            if t == "ingress":    # the nodes (kubelet probes) always reach their pods
                for join in self.ctl.cfg.join_cidrs:     # over each family they have
                    family = ipaddress.ip_network(join).version
                    ip, sfx = f"ip{family}", rule_suffix(family)
                    out.append(acl.AclSpec(direction, names.PRIO_ACL_NP_ALLOW,
                                           f"outport == @{pg} && {ip} && {ip}.src == {join}",
                                           "allow-related", name=f"np:{key}:nodes{sfx}"[:63],
                                           external_ids=policy_ids(key, **{
                                               names.EXT_RULE: f"ingress/nodes{sfx}"})))
        return self._tiered(out) + self._rule_acls(pg, [(key, r_) for r_ in rules])

    def _rule_acls(self, pg: str, rules: list) -> list:
        """The allow ACLs of (policy key, Rule) pairs."""
        out = []
        for key, r_ in rules:
            port = "outport" if r_.direction == "ingress" else "inport"
            match = f"{port} == @{pg} && ip{r_.family}" + (f" && {r_.match}" if r_.match else "")
            rule = f"{r_.direction}/{r_.index}{rule_suffix(r_.family)}"
            out.append(acl.AclSpec("to-lport" if r_.direction == "ingress" else "from-lport",
                                   names.PRIO_ACL_NP_ALLOW, match, "allow-related",
                                   name=f"np:{key}:{rule}"[:63],
                                   external_ids=policy_ids(key, **{names.EXT_RULE: rule},
                                                           **_also(r_))))
        return self._tiered(out)

    def _tiered(self, specs: list) -> list:
        if self.ctl.acl_tiers():   # between the Admin and Baseline tiers (pacific/clusterpolicy.py)
            return [dataclasses.replace(a, tier=clusterpolicy.NP_TIER) for a in specs]
        return specs

    def _reconcile_set(self, name: str) -> None:
        """One pod peer's address set (shared by every policy naming the peer)."""
        found = self.index.set_def(name)
        if found is None:
            return                   # no policy names it now: collected at "*"
        pns, peer = found
        world = self.world()
        changes = []
        for family in world.families:
            try:
                ips = peer_addresses(peer, pns, world, name, family)
            except PolicyError:
                return               # its policies' groups report it
            changes += self._set_builders(family_set_name(name, family), ips)
        if changes:
            self.ctl.writer.run(changes, what=f"NetworkPolicy peers {name}")

    def _set_builders(self, name: str, ips: frozenset) -> list:
        """Commands making address set `name` hold `ips`; [] if it already does."""
        have = self._addresses(name)
        if have == set(ips):
            return []
        ids = {names.EXT_OWNER_KIND: KIND_PEER, names.EXT_OWNER: name,
               names.EXT_CREATED_BY: names.CONTROLLER_NAME}
        return ensure.address_set_rows(name, ids, ips, have)

    def _collect(self) -> None:
        """Address sets no policy names any more, and the per-policy port groups
        of versions before decision 0031 once their policy's group holds its ACLs
        (so no pod is unprotected in between)."""
        used = self.index.set_names()
        cache = self.ctl.informer("policies")
        cmds = [lambda api, n=row.name: ensure.DeleteAddressSet(api, n)
                for row in self.ctl.nb.rows_owned(ensure.AS, KIND_PEER)
                if base_set_name(row.name) not in used]
        waiting = False
        for row in self.ctl.nb.rows_owned(ensure.PG, names.OWNER_KIND_POLICY):
            pol = cache.get(row.external_ids.get(names.EXT_OWNER, ""))
            if pol is None or programmed_group(self.ctl.nb, group_key(pol).split("/", 1)[1]):
                cmds.append(lambda api, n=row.name: ensure.DeletePortGroup(api, n))
            else:
                waiting = True
        if cmds:
            self.ctl.writer.run(cmds, what="stale NetworkPolicy address sets and port groups")
        if waiting:
            self.queue.add_after("*", 1.0)

    # -- replica reads ---------------------------------------------------------------------
    def _members(self, pg: str) -> tuple[set[str] | None, str | None]:
        """(ports, policies listed) of port group `pg` in the replica; (None,
        None) if there is no such group."""
        nb = self.ctl.nb
        with nb.ovsdb_connection.lock:
            try:
                row = nb.lookup(ensure.PG, pg)
            except idlutils.RowNotFound:
                return None, None
            return nb.ref_names(row, "ports"), row.external_ids.get(names.EXT_POLICIES)

    def _addresses(self, name: str) -> set[str] | None:
        return ensure.address_set_addresses(self.ctl.nb, name)

    def _report_enforced(self, key: str, ok, message: str, tag, reason: str = "") -> None:
        """NetworkPolicy has no status: annotations pacific.io/enforced and
        -message, and an Event, once per version."""
        ns, _, name = key.partition("/")
        pol = self.ctl.informer("policies").get(key)
        if pol is None or enforced.version(pol) != tag:
            return       # gone, or a newer version has its own barrier
        fields = enforced.status_fields(ok, message)
        ann = {names.ANN_ENFORCED: fields["enforced"],
               names.ANN_ENFORCED_MESSAGE: fields["enforcedMessage"]}
        have = model.meta(pol).get("annotations") or {}
        if all(have.get(k) == v for k, v in ann.items()):
            return
        r.patch_merge(self.ctl.kube, r.NETWORKPOLICIES, name, {"metadata": {"annotations": ann}}, ns)
        self.ctl.event(pol, reason or ("Enforced" if ok else "NotEnforced"),
                       f"NetworkPolicy {key}: {message}",
                       type="Normal" if ok or reason else "Warning")

    def _report(self, pol: dict, key: str, problem: str | None,
                reason: str = "InvalidNetworkPolicy") -> None:
        if not self.reports.due(key, pol, problem or ""):
            return
        msg = (f"NetworkPolicy {key} not applied: {problem}" if reason == "InvalidNetworkPolicy"
               else f"NetworkPolicy {key}: {problem}")
        LOG.warning("%s", msg)
        self.ctl.event(pol, reason, msg)
