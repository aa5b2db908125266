"""Kubernetes NetworkPolicy in OVN (semantics in policy_model.py).

Per policy (key `namespace/name`), in ONE transaction:

* port group `np_<hash>` (external_ids name the policy) with the ports of the
  pods it selects, changed by add/remove mutations;
* its ACLs, exactly: for each type it isolates a drop at PRIO_ACL_NP_DENY
  (to-lport `outport == @pg && ip4`, from-lport `inport == @pg && ip4`), for an
  egress-isolated pod an allow-related just below it on to-lport that commits
  connections into the pod (so their replies pass the egress drop), for
  ingress an allow of the nodes (join CIDR: kubelet probes), and one
  allow-related ACL per rule at PRIO_ACL_NP_ALLOW.  Several policies selecting
  a pod add up: any allow (1001) beats every deny (1000); tenant isolation
  (3000) stays above all of them.  ACL external_ids name the policy and the
  rule (`pacific.io/rule`: "ingress/0", "egress/deny", ...) so a trace can
  name what dropped a packet;
* address sets `np_as_<hash>` of pod peers, shared by the policies of a
  namespace that name the same peer (their addresses changed by mutation).

A new pod joins the groups of the policies selecting it in the transaction that
creates its port (`port_builders`), so it never sends or receives a packet a
policy forbids.  Pod label, pod address and namespace label changes re-queue
the policies (not Services: they do not touch policies).  Rows of policies
gone are collected at resync.
"""
from __future__ import annotations

import hashlib
import logging
import threading

from ovsdbapp.backend.ovs_idl import idlutils

from pacific import contract, names
from pacific.controller import informers, model
from pacific.controller.feature import Feature
from pacific.controller.policy_model import (PodInfo, PolicyError, World, compile_policy,
                                             selector_matches)
from pacific.ovn import acl, ensure

LOG = logging.getLogger(__name__)
KIND_PEER = "NetworkPolicyPeer"


def group_name(key: str) -> str:
    return "np_" + hashlib.sha256(key.encode()).hexdigest()[:16]


def policy_ids(key: str, **extra) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_POLICY, names.EXT_OWNER: key,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, **extra}


def selects_other_namespaces(policy: dict) -> bool:
    """Has the policy a peer with a namespaceSelector (pods of other namespaces)?"""
    spec = policy.get("spec") or {}
    return any("namespaceSelector" in (peer or {})
               for direction, side in (("ingress", "from"), ("egress", "to"))
               for rule in spec.get(direction) or [] for peer in (rule or {}).get(side) or [])


def relabel_matters(policy: dict, ns: str, ns_labels: dict, before: dict, after: dict) -> bool:
    """Does relabelling a pod of `ns` (labels `before` -> `after`) change
    whether the policy selects it, as subject or as a peer?"""
    def moved(sel) -> bool:
        return selector_matches(sel, before) != selector_matches(sel, after)
    m, spec = model.meta(policy), policy.get("spec") or {}
    own = m.get("namespace") == ns
    if own and moved(spec.get("podSelector") or {}):
        return True
    for direction, side in (("ingress", "from"), ("egress", "to")):
        for rule in spec.get(direction) or []:
            for peer in (rule or {}).get(side) or []:
                if "podSelector" not in (peer or {}):
                    continue                    # whole namespaces or ipBlock: labels of pods don't matter
                if "namespaceSelector" in peer:
                    if not selector_matches(peer["namespaceSelector"], ns_labels):
                        continue
                elif not own:
                    continue
                if moved(peer["podSelector"] or {}):
                    return True
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
    return PodInfo(m.get("namespace"), m.get("name"), dict(m.get("labels") or {}), rec.ip,
                   rec.port, named)


class PolicyFeature(Feature):
    name = "policy"
    informers = {"policies": informers.NETWORK_POLICIES, "pods": informers.PODS,
                 "namespaces": informers.NAMESPACES}

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self._reported: dict[str, str] = {}
        # the pods and namespace labels every policy is compiled against, kept
        # from the informers' events (namespace -> pod name -> PodInfo): a
        # change re-reads one pod, never all (rebuilding from every pod, each
        # record parsed again, on every relabel of any pod was most of the
        # CPU under another tenant's churn).  A snapshot (World) is taken after
        # a change (None: one is due), replacing only the changed namespaces' lists.
        self._pods: dict[str, dict[str, PodInfo]] = {}
        self._lists: dict[str, list[PodInfo]] = {}
        self._dirty: set[str] = set()
        self._ns_labels: dict[str, dict] = {}
        self._world_cache: World | None = None
        # policy key -> does it select peers by namespaceSelector (then a pod of
        # any namespace may be its peer); else only pods of its own namespace
        # matter to it.  Kept from policy events, so a pod event wakes only the
        # policies that can select it, not every policy of the cluster
        self._wide: dict[str, bool] = {}

    # -- wiring ----------------------------------------------------------------------
    def handlers(self):
        return {"policies": self._on_policy, "pods": self._on_pod, "namespaces": self._on_namespace}

    def _on_policy(self, old, new):
        m = model.meta(new or old)
        key = model.object_key(m.get("namespace"), m.get("name"))
        with self._lock:
            if new is None:
                self._wide.pop(key, None)
            else:
                self._wide[key] = selects_other_namespaces(new)
        return (key,)

    def _for_namespace(self, ns: str | None) -> list[str]:
        """The policies a pod of `ns` can be a subject or peer of."""
        prefix = f"{ns}/"
        with self._lock:
            return [k for k, wide in self._wide.items() if wide or k.startswith(prefix)]

    def _all(self) -> list[str]:
        return [model.object_key(model.meta(p).get("namespace"), model.meta(p)["name"])
                for p in self.ctl.informer("policies").list()]

    def _on_pod(self, old, new):
        rec_old = contract.own_record(old) if old is not None else None
        rec_new = contract.own_record(new) if new is not None else None
        if rec_old is None and rec_new is None:
            return ()       # no address before or after (pending, refused): in no policy
        relabel = old is not None and new is not None and rec_old == rec_new
        if relabel and model.labels_of(old) == model.labels_of(new):
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
        keys = self._for_namespace(ns)
        if relabel:
            # only labels changed: only the policies where the pod's membership
            # changes (a relabel under `podSelector: {}` changes nothing)
            cache, before, after = self.ctl.informer("policies"), model.labels_of(old), \
                model.labels_of(new)
            ns_obj = self.ctl.informer("namespaces").get(ns)
            ns_labels = model.labels_of(ns_obj) if ns_obj else {}
            keys = [k for k in keys if (pol := cache.get(k)) is None
                    or relabel_matters(pol, ns, ns_labels, before, after)]
        return keys

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
        return self._all()

    def resync_keys(self):
        keys = set(self._all())
        for row in self.ctl.nb.rows_owned(ensure.PG, names.OWNER_KIND_POLICY):
            keys.add(row.external_ids.get(names.EXT_OWNER))
        keys.add("*")     # stale address sets
        return [k for k in keys if k]

    def _world(self) -> World:
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
            self._world_cache = World.indexed(dict(self._lists), dict(self._ns_labels))
            return self._world_cache

    # -- a new pod's port joins the groups of the policies selecting it ---------------
    def port_builders(self, pod: dict, lsp: str) -> list:
        m = model.meta(pod)
        out = []
        for pol in self.ctl.informer("policies").list():
            pm = model.meta(pol)
            if pm.get("namespace") != m.get("namespace"):
                continue
            sel = (pol.get("spec") or {}).get("podSelector")
            if selector_matches({} if sel is None else sel, model.labels_of(pod)):
                key = model.object_key(pm["namespace"], pm["name"])
                pg = group_name(key)
                out += [lambda api, pg=pg, key=key: ensure.EnsurePortGroup(api, pg, policy_ids(key)),
                        lambda api, pg=pg: ensure.PortGroupAddPorts(api, pg, [lsp])]
        return out

    # -- reconcile -------------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        if key == "*":
            self._collect_sets()
            return
        pol = self.ctl.informer("policies").get(key)
        pg = group_name(key)
        if pol is None:
            if self.ctl.nb.rows_owned(ensure.PG, names.OWNER_KIND_POLICY, key):
                self.ctl.writer.run([lambda api: ensure.DeletePortGroup(api, pg)],
                                    what=f"NetworkPolicy {key} removed")
                LOG.info("NetworkPolicy %s: removed", key)
            return
        try:
            types, rules, ports = compile_policy(pol, self._world())
        except PolicyError as exc:
            self._report(pol, key, str(exc))
            return
        self._report(pol, key, None)
        specs = self._acls(key, pg, types, rules)
        changes = []
        for name, ips in {n: ips for r_ in rules for n, ips in r_.address_sets}.items():
            changes += self._set_builders(name, ips)
        have, want = self._members(pg), set(ports)
        if have is not None and want - have:
            changes.append(lambda api: ensure.PortGroupAddPorts(api, pg, sorted(want - have)))
        if have is not None and have - want:
            changes.append(lambda api: ensure.PortGroupRemovePorts(api, pg, sorted(have - want)))
        if have is None and want:
            changes.append(lambda api: ensure.PortGroupAddPorts(api, pg, sorted(want)))
        if not changes and have is not None and acl.acls_are(self.ctl.nb, pg, specs):
            return     # the replica already holds exactly this
        # ONE transaction: group, peers' sets, members and ACLs change together
        self.ctl.writer.run([lambda api: ensure.EnsurePortGroup(api, pg, policy_ids(key)), *changes,
                             lambda api: acl.EnsurePortGroupACLs(api, pg, specs)],
                            what=f"NetworkPolicy {key}")
        LOG.info("NetworkPolicy %s: %d pods, %s isolated, %d rules", key, len(want),
                 "+".join(types) or "nothing", len(rules))

    def _acls(self, key: str, pg: str, types: list[str], rules) -> list:
        out = []
        for t in types:
            port = "outport" if t == "ingress" else "inport"
            direction = "to-lport" if t == "ingress" else "from-lport"
            out.append(acl.AclSpec(direction, names.PRIO_ACL_NP_DENY, f"{port} == @{pg} && ip4",
                                   "drop", name=f"np:{key}:{t}"[:63],
                                   external_ids=policy_ids(key, **{names.EXT_RULE: f"{t}/deny"})))
            if t == "egress":
                # connections INTO the pod are committed to conntrack, so their
                # replies pass the egress drop (OVN lets established replies by
                # only for connections an allow-related ACL committed; the
                # ingress side needs none: OVN commits from-lport traffic itself)
                out.append(acl.AclSpec("to-lport", names.PRIO_ACL_NP_DENY - 1,
                                       f"outport == @{pg} && ip4", "allow-related",
                                       name=f"np:{key}:egress-replies"[:63],
                                       external_ids=policy_ids(key, **{names.EXT_RULE: "egress/replies"})))
            if t == "ingress":    # the nodes (kubelet probes) always reach their pods
                out.append(acl.AclSpec(direction, names.PRIO_ACL_NP_ALLOW,
                                       f"outport == @{pg} && ip4 && ip4.src == {self.ctl.cfg.join_cidr}",
                                       "allow-related", name=f"np:{key}:nodes"[:63],
                                       external_ids=policy_ids(key, **{names.EXT_RULE: "ingress/nodes"})))
        for r_ in rules:
            port = "outport" if r_.direction == "ingress" else "inport"
            match = f"{port} == @{pg} && ip4" + (f" && {r_.match}" if r_.match else "")
            out.append(acl.AclSpec("to-lport" if r_.direction == "ingress" else "from-lport",
                                   names.PRIO_ACL_NP_ALLOW, match, "allow-related",
                                   name=f"np:{key}:{r_.direction}/{r_.index}"[:63],
                                   external_ids=policy_ids(key, **{names.EXT_RULE: f"{r_.direction}/{r_.index}"})))
        return out

    def _set_builders(self, name: str, ips: frozenset) -> list:
        """Commands making address set `name` hold `ips`; [] if it already does."""
        have = self._addresses(name)
        if have == set(ips):
            return []
        ids = {names.EXT_OWNER_KIND: KIND_PEER, names.EXT_OWNER: name,
               names.EXT_CREATED_BY: names.CONTROLLER_NAME}
        have = have or set()
        out = [lambda api: ensure.EnsureAddressSet(api, name, ids)]
        if ips - have:
            out.append(lambda api: ensure.AddressSetAddAddresses(api, name, sorted(ips - have)))
        if have - ips:
            out.append(lambda api: ensure.AddressSetRemoveAddresses(api, name, sorted(have - ips)))
        return out

    def _collect_sets(self) -> None:
        world = self._world()
        used = set()
        for pol in self.ctl.informer("policies").list():
            try:
                _, rules, _ = compile_policy(pol, world)
            except PolicyError:
                continue
            used |= {n for r_ in rules for n, _ in r_.address_sets}
        stale = [row.name for row in self.ctl.nb.rows_owned(ensure.AS, KIND_PEER) if row.name not in used]
        if stale:
            self.ctl.writer.run([lambda api, n=n: ensure.DeleteAddressSet(api, n) for n in stale],
                                what="stale NetworkPolicy address sets")

    # -- replica reads ---------------------------------------------------------------------
    def _members(self, pg: str) -> set[str] | None:
        """Ports of port group `pg` in the replica; None if there is no such group."""
        nb = self.ctl.nb
        with nb.ovsdb_connection.lock:
            try:
                return {p.name for p in nb.lookup(ensure.PG, pg).ports}
            except idlutils.RowNotFound:
                return None

    def _addresses(self, name: str) -> set[str] | None:
        return ensure.address_set_addresses(self.ctl.nb, name)

    def _report(self, pol: dict, key: str, problem: str | None) -> None:
        with self._lock:
            if problem is None or self._reported.get(key) == problem:
                if problem is None:
                    self._reported.pop(key, None)
                return
            self._reported[key] = problem
        msg = f"NetworkPolicy {key} not applied: {problem}"
        LOG.warning("%s", msg)
        self.ctl.event(pol, "InvalidNetworkPolicy", msg)
