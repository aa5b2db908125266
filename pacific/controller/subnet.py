"""Subnet objects -> IPAM pools + logical switches on the cluster router.

Per Subnet (key: its name), level-triggered:
- invalid spec (malformed CIDR, gateway outside, bad excludeIps, reserved
  name) or a CIDR overlapping an applied subnet: status Ready=False with the
  reason, a Warning Event, nothing else changes (a previously applied spec of
  the same Subnet keeps working);
- valid: IPAM pool added/updated, switch + router port at the gateway ensured,
  status Ready=True with used/available counts;
- deletion: the finalizer ``pacific.io/subnet-protection`` holds the object
  while addresses are in use (status says which pods); once unused, the switch,
  router port and pool are removed and the finalizer is dropped.
Older subnets win overlaps; when a subnet goes away, refused ones are retried.
"""
from __future__ import annotations

import datetime
import ipaddress
import logging
import threading

from pacific import exposure, multicast, names
from pacific.controller import cluster_router, informers, model, rebuild
from pacific.controller.feature import Feature
from pacific.controller.model import SubnetSpec, SubnetSpecError
from pacific.ipam import errors as ipam_errors
from pacific.kube import errors as kerr
from pacific.kube import resources as r
from pacific.ovn import acl, ensure, lb

LOG = logging.getLogger(__name__)
READY = "Ready"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def subnet_ids(name: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_SUBNET, names.EXT_OWNER: name,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, names.EXT_SUBNET: name}


MAX_COUNT = 2**53 - 1       # the largest count a status integer holds exactly
_UNCHANGED = object()


def infrastructure_clash(cidr: str, ctl) -> str | None:
    """What infrastructure address (a node's, OVN central's, one of
    --infrastructure-ips) lies in cidr, named; None if none does."""
    net = ipaddress.ip_network(cidr)
    for node in ctl.informer("nodes").list():
        for ip in sorted(exposure.node_addresses([node])):
            if _inside(ip, net):
                return f"node {model.meta(node).get('name')}'s address {ip}"
    for ip in sorted(ctl.cfg.reserved_ips):
        if _inside(ip, net):
            return f"the infrastructure address {ip}"
    return None


def _inside(ip, net) -> bool:
    try:
        return ipaddress.ip_address(ip) in net
    except (TypeError, ValueError):
        return False


def private_acls(spec: SubnetSpec, join_cidrs: list[str]) -> list:
    """A private Subnet's switch drops IP of each family to its addresses from
    anything but its own addresses, its allowSubnets and the nodes (the join
    network's CIDRs); the same tier as tenant isolation, above NetworkPolicy."""
    if not spec.private:
        return []
    out = []
    for cidr in spec.cidrs:
        ip = f"ip{ipaddress.ip_network(cidr).version}"
        allowed = ", ".join([c for c in (cidr, *spec.allow_subnets, *join_cidrs)
                             if _same_family(c, cidr)])
        out.append(acl.AclSpec(direction="to-lport", priority=names.PRIO_ACL_ISOLATION_DROP,
                               match=f"{ip} && {ip}.dst == {cidr} && {ip}.src != {{{allowed}}}",
                               action="drop", name=f"private-subnet:{spec.name}"[:63],
                               external_ids={**subnet_ids(spec.name), names.EXT_RULE: "private"}))
    return out


def ipv6_acls(spec: SubnetSpec) -> list:
    """An IPv6 Subnet's switch drops ICMPv6 redirects from its ports: routes
    are static, so any is a pod's attempt to become another pod's router.
    (Router advertisements cannot be dropped so: OVN exempts neighbour
    discovery, router solicitations and advertisements and MLD from every
    ACL.  Pods run with accept_ra=0 instead, docs/dual-stack.md.)"""
    if 6 not in spec.families:
        return []
    return [acl.AclSpec(direction="from-lport", priority=names.PRIO_ACL_ISOLATION_DROP,
                        match="ip6 && icmp6.type == 137", action="drop",
                        name=f"no-redirects:{spec.name}"[:63],
                        external_ids={**subnet_ids(spec.name), names.EXT_RULE: "ipv6-redirect"})]


def _same_family(a: str, b: str) -> bool:
    return ipaddress.ip_network(a, strict=False).version == ipaddress.ip_network(b).version


class SubnetFeature(Feature):
    name = "subnet"
    informers = {"subnets": informers.SUBNETS, "ips": informers.IPS, "nodes": informers.NODES}
    uses = {"pods": "pod"}             # pods refused for a missing Subnet are retried

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self.applied: dict[str, SubnetSpec] = {}
        self.refused: dict[str, str] = {}
        self._dirty: set[str] = set()
        self._binding: dict[str, str] | None = None   # namespace -> subnet, cached
        self._binding_gen = 0                          # bumped by every invalidation

    # -- feature wiring (informer threads: keys only) ------------------------------
    def handlers(self):
        return {"subnets": self._on_subnet}

    def _on_subnet(self, old, new):
        with self._lock:
            self._invalidate_binding()
        return (model.meta(new or old).get("name"),)

    def _invalidate_binding(self) -> None:   # under self._lock
        self._binding, self._binding_gen = None, self._binding_gen + 1

    def prepare(self) -> None:
        rebuild.restore_subnets(self.ctl)

    def tick(self) -> None:
        self.queue_dirty()

    def resync_keys(self):
        yield from (model.meta(s)["name"] for s in self.ctl.informer("subnets").list())
        for row in self.ctl.nb.rows_owned(ensure.LS, names.OWNER_KIND_SUBNET):
            yield row.external_ids.get(names.EXT_OWNER)

    # -- queries used by the pod reconciler ----------------------------------
    def spec(self, name: str) -> SubnetSpec | None:
        with self._lock:
            return self.applied.get(name)

    def is_terminating(self, name: str) -> bool:
        """The Subnet object is being deleted: its pods keep their addresses, new
        pods get none."""
        obj = self.ctl.informer("subnets").get(name)
        return obj is not None and bool(model.meta(obj).get("deletionTimestamp"))

    def is_refused(self, name: str) -> bool:
        with self._lock:
            return name in self.refused

    def why_not(self, name: str) -> str:
        with self._lock:
            if name in self.refused:
                return f"subnet {name} is not ready: {self.refused[name]}"
        return f"subnet {name} does not exist"

    def default_name(self) -> str:
        with self._lock:
            if self.ctl.cfg.default_subnet in self.applied:
                return self.ctl.cfg.default_subnet
            for name, spec in sorted(self.applied.items()):
                if spec.default:
                    return name
        return self.ctl.cfg.default_subnet

    def namespace_binding(self) -> dict[str, str]:
        """namespace -> its Subnet: applied, or not yet reconciled (a pod of the
        namespace then waits for it instead of landing in the default Subnet
        for good); refused ones never.  Computed once per change of the Subnets
        or of what is applied or refused, not per pod reconcile."""
        with self._lock:
            if self._binding is not None:
                return self._binding
            applied, refused, gen = set(self.applied), set(self.refused), self._binding_gen
        objs = [s for s in self.ctl.informer("subnets").list()
                if model.meta(s).get("name") in applied or model.meta(s).get("name") not in refused]
        binding = model.namespace_subnets(objs)
        with self._lock:
            if self._binding_gen == gen:   # nothing changed meanwhile
                self._binding = binding
        return binding

    def mark_dirty(self, name: str) -> None:
        with self._lock:
            self._dirty.add(name)

    def queue_dirty(self) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        for name in dirty:
            self.queue.add(name)

    # -- reconcile -------------------------------------------------------------
    def reconcile(self, name: str) -> None:
        ctl = self.ctl
        if name == ctl.cfg.join_switch and ctl.informer("subnets").get(name) is None:
            return
        obj = ctl.informer("subnets").get(name)
        if obj is None:
            self._teardown(name)
            return
        if model.meta(obj).get("deletionTimestamp"):
            self._delete(obj)
            return
        self._ensure_finalizer(obj)
        try:
            spec = model.parse_subnet(obj, reserved_names=(ctl.cfg.join_switch,),
                                          ipv6=ctl.cfg.ipv6)
        except SubnetSpecError as exc:
            self._refuse(obj, "InvalidSpec", str(exc))
            return
        for cidr in spec.cidrs:
            clash = infrastructure_clash(cidr, self.ctl)
            if clash:
                # pods with a node's or OVN central's address would take it over,
                # and every node would treat the underlay as pod traffic
                self._refuse(obj, "InfrastructureOverlap", f"spec.cidrBlock {cidr} contains "
                             f"{clash}: a Subnet cannot hold the cluster's infrastructure addresses")
                return
        with self._lock:
            old = self.applied.get(name)
        if old is not None and (old.cidrs, old.gateways) != (spec.cidrs, spec.gateways):
            used, _ = self._usage(name)
            if used:
                # running pods hold addresses (and a gateway) of the applied spec:
                # it stays until they are gone (a release re-queues this Subnet)
                self._refuse(obj, "SubnetInUse", (
                    f"cidrBlock/gateway cannot change from {old.cidr_block} (gateway "
                    f"{old.gateway_list}) to {spec.cidr_block} (gateway {spec.gateway_list}) "
                    f"while {used} address(es) are in "
                    f"use, by {', '.join(self._holders(name))}; delete those pods first"))
                return
        try:
            with ctl.ipam_lock:   # the pool may exist without `applied` (NB write failed)
                if old != spec:
                    ctl.ipam.ensure_subnet(name, spec.cidr_block, gateway=spec.gateway_list,
                                           exclude=spec.exclude)
        except ipam_errors.IPAMError as exc:
            self._refuse(obj, exc.reason, str(exc))
            return
        ids = subnet_ids(name)
        acls = private_acls(spec, ctl.cfg.join_cidrs) + ipv6_acls(spec)
        # IGMP and MLD snooping and a querier of each family the Subnet has
        # (none: --no-multicast)
        gw4 = next((g for g in spec.gateways if ":" not in g), None)
        mcast = (multicast.switch_config(gw4, model.router_mac(spec.gateway),
                                         ctl.cfg.multicast_query_interval, 6 in spec.families)
                 if ctl.cfg.multicast else {})
        ctl.writer.run([lambda api: ensure.EnsureSwitch(api, name, ids, other_config=mcast),
                        lambda api: lb.AttachLoadBalancerGroup(api, name, names.LB_GROUP),
                        *cluster_router.router_link_builders(name, spec.gateway, spec.networks(), ids),
                        lambda api: acl.EnsureACLs(api, name, acls, table=ensure.LS,
                                                   scope={names.EXT_OWNER_KIND: names.OWNER_KIND_SUBNET})],
                       what=f"subnet {name}")
        with self._lock:
            self.applied[name] = spec
            self._invalidate_binding()
            was_refused = self.refused.pop(name, None) is not None
        if old != spec:
            LOG.info("subnet %s applied: %s gateway %s exclude %s", name, spec.cidr_block,
                     spec.gateway_list, list(spec.exclude) or "-")
        self._set_status(obj, True, "Applied", f"logical switch {name} on {names.CLUSTER_ROUTER}, "
                         f"gateway {spec.gateway_list}", gateway=spec.gateway_list,
                         cidr=spec.cidr_block)
        if old is None or was_refused:
            self.pods.requeue_refused()

    # -- pieces ------------------------------------------------------------------
    def _usage(self, name: str) -> tuple[int, int]:
        with self.ctl.ipam_lock:
            try:
                return self.ctl.ipam.usage(name)
            except ipam_errors.IPAMError:
                return 0, 0

    def _family_counts(self, name: str) -> dict:
        """A dual-stack or IPv6 Subnet's free addresses per family
        (v4availableIPs/v6availableIPs, kube-ovn's names; numbers: a /64 holds
        more than an integer field), {} for an IPv4 one."""
        with self.ctl.ipam_lock:
            try:
                by = self.ctl.ipam.usage_by_family(name)
            except ipam_errors.IPAMError:
                return {}
        if 6 not in by:
            return {}
        return {f"v{v}availableIPs": float(a) if a > MAX_COUNT else a for v, (_, a) in by.items()}

    def _refuse(self, obj: dict, reason: str, message: str) -> None:
        name = model.meta(obj)["name"]
        with self._lock:
            kept = name in self.applied
            first = self.refused.get(name) != message
            if name not in self.refused:
                self._invalidate_binding()
            self.refused[name] = message
        if kept:
            message += " (the previously applied spec stays in effect)"
        if first:
            LOG.warning("subnet %s refused: %s", name, message)
            self.ctl.event(obj, reason, message)
        # nothing applied: no CIDR in effect, so no node routes it
        self._set_status(obj, False, reason, message, **({} if kept else {"cidr": None}))

    def _set_status(self, obj: dict, ok: bool, reason: str, message: str,
                    gateway: str | None = None, cidr=_UNCHANGED) -> None:
        """Ready condition, address counts and (once applied) the effective gateway,
        which spec.gateway may leave to its default, and the CIDR in effect
        (contract.subnet_cidr_in_effect: nodes route only that; None removes it)."""
        name = model.meta(obj)["name"]
        used, available = self._usage(name)
        available = min(available, MAX_COUNT)
        families = self._family_counts(name)
        old = obj.get("status") or {}
        old_cond = next((c for c in old.get("conditions") or [] if c.get("type") == READY), {})
        want_status = "True" if ok else "False"
        if (old.get("usedIPs") == used and old.get("availableIPs") == available
                and all(old.get(k) == v for k, v in families.items())
                and old_cond.get("status") == want_status and old_cond.get("reason") == reason
                and old_cond.get("message") == message
                and (gateway is None or old.get("gateway") == gateway)
                and (cidr is _UNCHANGED or old.get("cidrBlock") == cidr)):
            return
        cond = model.condition(READY, ok, reason, message, _now())
        if old_cond.get("status") == want_status and old_cond.get("lastTransitionTime"):
            cond["lastTransitionTime"] = old_cond["lastTransitionTime"]
        patch = {"status": {"usedIPs": used, "availableIPs": available, "conditions": [cond],
                            **families}}
        if gateway is not None:
            patch["status"]["gateway"] = gateway
        if cidr is not _UNCHANGED:
            patch["status"]["cidrBlock"] = cidr
        try:
            r.patch_merge(self.ctl.kube, r.SUBNETS, name, patch, subresource="status")
        except kerr.NotFound:
            pass

    def _ensure_finalizer(self, obj: dict) -> None:
        fins = list(model.meta(obj).get("finalizers") or [])
        if names.SUBNET_FINALIZER in fins:
            return
        patch = {"metadata": {"finalizers": fins + [names.SUBNET_FINALIZER],
                              "resourceVersion": model.meta(obj).get("resourceVersion")}}
        r.patch_merge(self.ctl.kube, r.SUBNETS, model.meta(obj)["name"], patch)

    def _delete(self, obj: dict) -> None:
        name = model.meta(obj)["name"]
        used, _ = self._usage(name)
        if used:
            holders = self._holders(name)
            msg = (f"deletion refused: {used} address(es) still in use"
                   + (f" (by {', '.join(holders)})" if holders else "")
                   + "; delete those pods first")
            if self.refused.get(name) != msg:
                self.ctl.event(obj, "SubnetInUse", msg)
            with self._lock:
                self.refused[name] = msg
            self._set_status(obj, False, "SubnetInUse", msg)
            return
        if not self._teardown(name):
            # a pod got an address between the check above and the teardown: keep the
            # finalizer and come back (the work queue retries with backoff)
            raise RuntimeError(f"subnet {name}: addresses allocated while deleting; retrying")
        fins = [f for f in model.meta(obj).get("finalizers") or [] if f != names.SUBNET_FINALIZER]
        try:
            r.patch_merge(self.ctl.kube, r.SUBNETS, name, {"metadata": {"finalizers": fins}})
        except kerr.NotFound:
            pass

    def _holders(self, name: str, limit: int = 5) -> list[str]:
        out = []
        for ip in self.ctl.informer("ips").list():
            spec = ip.get("spec") or {}
            if spec.get("subnet") == name:
                out.append(f"{spec.get('namespace')}/{spec.get('pod')}")
                if len(out) >= limit:
                    out.append("...")
                    break
        return out

    def _teardown(self, name: str) -> bool:
        """Remove the subnet's pool, switch and router port; False (nothing removed)
        while addresses are still in use."""
        ctl = self.ctl
        with ctl.ipam_lock:
            used, _ = self._usage(name)
            if used:
                LOG.error("subnet %s is gone but %d addresses are still in use; keeping its switch "
                          "until they are released", name, used)
                return False
            try:
                ctl.ipam.remove_subnet(name)
            except ipam_errors.SubnetNotFound:
                pass
        owned = ctl.nb.rows_owned(ensure.LS, names.OWNER_KIND_SUBNET, name)
        with self._lock:
            was_applied = self.applied.pop(name, None) is not None
            self._invalidate_binding()
            self.refused.pop(name, None)
            retry = list(self.refused)
        if owned or was_applied:
            ctl.writer.run([lambda api: ensure.DeleteRouterPort(api, names.CLUSTER_ROUTER,
                                                                names.router_port_name(name)),
                            lambda api: ensure.DeleteSwitch(api, name)], what=f"delete subnet {name}")
            LOG.info("subnet %s removed (switch and router port deleted)", name)
        for other in retry:
            self.queue.add(other)
        return True
