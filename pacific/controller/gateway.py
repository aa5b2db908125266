"""Centralized egress: a Subnet with `gatewayType: centralized` leaves the
cluster through one of its `gatewayNodes`, which fail over in the data plane.

Per such Subnet (key: its name; rows owned by the Subnet, rule
"egress-gateway"):

* a transit switch `egw:<subnet>` (a /24 of EGRESS_TRANSIT_CIDR, controller/transit.py:
  router .1, gateway host .2) with a localnet port on the physical network
  EGRESS_PHYSNET, which every node maps to its bridge `br-egress`, whose
  internal port `pegress0` is where the active gateway's host receives;
* its router port `lrp:egw:<subnet>` on the cluster router, a distributed
  gateway port: an HA_Chassis_Group `egw:<subnet>` lists the gateway nodes by
  priority (gatewayNodes order), and ovn-controller binds the port on the live
  one of highest priority, moving it when BFD over the tunnels (NB_Global
  bfd-* options, ~300 ms) says it died: no controller, no API server involved;
* one router policy: `ip4.src == <cidr>` reroute to the gateway host (.2).
  Destinations inside the cluster are kept by the node-local allow policy of
  higher priority (controller/egress.py).  A Subnet with an IPv6 CIDR: the
  port also has the IPv6 transit /64 of its index (transit6, its host's MAC a
  static binding), and `ip6.src == <cidr6>` reroutes to its host (::2).

Which pods use a gateway (the policy names the Subnet's CIDR, never a pod) and
where the gateway is (the group) are apart: pods coming and going write none
of these rows, and a failover writes no per-pod row.  With no gateway node
alive (or none that exists), the port is bound nowhere and the Subnet's
outbound traffic is dropped, never leaked through another node.

The controller reads which chassis holds each gateway from its replica of SB
(`--sb-remote`, pacific.ovn.sb, read every status interval) into the Subnet's status
(`status.egressGateway`: nodes, active, since, lastFailover).  Once a node has
held a gateway for SETTLE seconds, the group's priorities are rewritten so
that it ranks first: a node that comes back does not take the traffic back
(no flapping); it becomes the standby.
"""
from __future__ import annotations

import datetime
import ipaddress
import logging
import threading
import time

from pacific import contract, names
from pacific.controller import informers, model
from pacific.controller.feature import Feature
from pacific.controller.reports import Reports
from pacific.controller.transit import transit, transit6
from pacific.kube import errors as kerr
from pacific.kube import resources as r
from pacific.ovn import ensure
from pacific.ovn import gateway as gw
from pacific.ovn.sb import SbView

LOG = logging.getLogger(__name__)
RULE = "egress-gateway"
SETTLE = 3.0     # seconds a node holds a gateway before the group ranks it first
CENTRALIZED = "centralized"


def gateway_ids(subnet: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_SUBNET, names.EXT_OWNER: subnet,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME, names.EXT_RULE: RULE}


def centralized_spec(obj: dict | None) -> tuple[list[str] | None, list[str]]:
    """(the CIDRs in effect, IPv4 first; gatewayNodes) of a centralized
    Subnet; (None, []) for any other (distributed, not applied yet, being
    deleted)."""
    if not obj or model.meta(obj).get("deletionTimestamp"):
        return None, []
    spec = obj.get("spec") or {}
    if spec.get("gatewayType") != CENTRALIZED:
        return None, []
    cidrs = [c for c in (contract.subnet_cidr_in_effect(obj, v) for v in (4, 6)) if c]
    if not cidrs:
        return None, []
    nodes = [n for n in spec.get("gatewayNodes") or [] if isinstance(n, str) and n]
    return cidrs, list(dict.fromkeys(nodes))


def reroutes(ctl, index: int, prio: int, matches: dict[int, str]) -> tuple[list[str], str, list]:
    """(the gateway port's networks, its MAC, its router policies) on transit
    network `index`: for each family of `matches` (IP version -> the match of
    what leaves through the gateway), a reroute to that family's transit host.
    IPv6 only with a dual-stack join network: without one IPv6 has neither a
    way out of the cluster router nor the node-local allow that keeps the
    cluster's own IPv6 destinations off the gateway, so the reroute would carry
    pod-to-pod IPv6 out of the cluster."""
    router_cidr, host, mac = transit(index)
    networks, policies = [router_cidr], []
    for version, match in sorted(matches.items()):
        hop = host
        if version == 6:
            if not ctl.cfg.join_cidr_of(6):
                continue
            router6, hop = transit6(index)
            networks.append(router6)
        policies.append((prio, match, "reroute", [hop]))
    return networks, mac, policies


def gateway_rows(sw: str, lrp: str, ln: str, router_cidr: str | list[str], mac: str, ids: dict,
                 ranked: list[str], policies: list) -> list:
    """NB writer builders of one gateway: transit switch `sw` with its router
    and localnet ports, router port `lrp` (its network, or networks: IPv4
    first) bound by HA chassis group `sw` of `ranked` (first = highest
    priority), and `policies` owned by `ids`."""
    networks = [router_cidr] if isinstance(router_cidr, str) else list(router_cidr)
    # the transit host's MAC, known: never learned (gw.EnsureStaticMacBindings
    # says why)
    hosts = {str(ipaddress.ip_interface(n).ip + 1): names.EGRESS_PORT_MAC for n in networks}
    return [
        lambda api: ensure.EnsureSwitch(api, sw, ids, merge_ids=False),
        lambda api: ensure.EnsureRouterPort(api, names.CLUSTER_ROUTER, lrp, mac, networks,
                                            ids, peer=None),
        lambda api: gw.EnsureStaticMacBindings(api, lrp, hosts),
        lambda api: ensure.EnsurePort(api, sw, names.switch_router_port_name(sw), ["router"], [],
                                      ids, type="router", options={"router-port": lrp}),
        lambda api: ensure.EnsurePort(api, sw, ln, ["unknown"], [], ids, type="localnet",
                                      options={"network_name": names.EGRESS_PHYSNET}),
        # an exit of the cluster: the egress firewalls' ACLs apply where it leaves
        lambda api: ensure.PortGroupAddPorts(api, names.EFW_EXITS_GROUP, [ln]),
        lambda api: gw.EnsureHAChassisGroup(
            api, sw, {n: names.GATEWAY_PRIO_TOP - i for i, n in enumerate(ranked)},
            external_ids=ids, router_port=lrp),
        lambda api: ensure.EnsureRouterPolicies(api, names.CLUSTER_ROUTER, ids, policies),
    ]


def remove_gateway_rows(ctl, sw: str, lrp: str, ids: dict, what: str,
                        *address_sets: str, policies=()) -> None:
    """What gateway_rows wrote (and the gateway's members' address sets), gone;
    its transit network released.  `policies`: the router policies `ids` keep
    instead of none (a refused gateway's drops, controller/egress_snat.py)."""
    ctl.writer.run([
        lambda api: ensure.EnsureRouterPolicies(api, names.CLUSTER_ROUTER, ids, list(policies)),
        lambda api: gw.EnsureStaticMacBindings(api, lrp, {}),
        lambda api: ensure.DeleteRouterPort(api, names.CLUSTER_ROUTER, lrp),
        lambda api: ensure.DeleteSwitch(api, sw),
        *[lambda api, n=n: ensure.DeleteAddressSet(api, n) for n in address_sets],
    ], what=f"{what}: removed")
    # once no port refers to it (OVSDB checks references before it collects
    # the deleted port, so not in the same transaction)
    ctl.writer.run([lambda api: gw.DeleteHAChassisGroup(api, sw)],
                   what=f"{what}: gateway chassis group removed")
    ctl.transit.release(lrp)


class FirstRanked:
    """Which node a gateway's HA group ranks first: the node holding it, once it
    has held it for SETTLE seconds.  Under load the userspace datapath's BFD
    flaps; re-ranking on every flap wrote every group on every flap, which
    every chassis recomputed, which made more flaps.  Callers hold their lock."""

    def __init__(self, settle: float = SETTLE):
        self.settle = settle
        self._held: dict[str, tuple[str | None, float]] = {}   # key -> (holder, since)
        self._first: dict[str, str] = {}

    def observe(self, key: str, chassis: str | None, mono: float) -> bool:
        """`chassis` holds `key`'s gateway at monotonic time `mono`: True when
        it has just become the node to rank first."""
        held = self._held.get(key)
        if held is None or held[0] != chassis:
            held = self._held[key] = (chassis, mono)
        if chassis is None or self._first.get(key) == chassis or mono - held[1] < self.settle:
            return False
        self._first[key] = chassis
        return True

    def first(self, key: str) -> str | None:
        return self._first.get(key)

    def forget(self, key: str) -> None:
        self._held.pop(key, None)
        self._first.pop(key, None)


def ranked(first: str | None, nodes: list[str]) -> list[str]:
    """`nodes` in order, `first` (if among them) moved to the front."""
    return ([first] if first in nodes else []) + [n for n in nodes if n != first]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class GatewayFeature(Feature):
    name = "gateway"
    informers = {"subnets": informers.SUBNETS, "nodes": informers.NODES}

    def __init__(self, ctl):
        super().__init__(ctl)
        self._lock = threading.Lock()
        self._active: dict[str, tuple[str | None, str]] = {}   # subnet -> (chassis, since)
        self._failover: dict[str, str] = {}                       # subnet -> last failover
        self._holder: dict[str, str] = {}                         # subnet -> last node holding it
        self._first = FirstRanked()                               # subnet -> node ranked first
        self.reports = Reports()

    def handlers(self):
        return {"subnets": self._on_subnet, "nodes": self._on_node}

    @staticmethod
    def _on_subnet(old, new):
        return (model.meta(new or old).get("name"),)

    def _on_node(self, old, new):
        node = model.meta(new or old).get("name")
        return [model.meta(s)["name"] for s in self.ctl.informer("subnets").list()
                if node in ((s.get("spec") or {}).get("gatewayNodes") or [])]

    def prepare(self) -> None:
        self.ctl.writer.run([lambda api: gw.SetGlobalOptions(api, names.EGRESS_BFD)],
                            what="BFD timers of the gateway chassis")

    def resync_keys(self):
        yield from (model.meta(s)["name"] for s in self.ctl.informer("subnets").list())
        for row in self.ctl.nb.rows_owned(ensure.LS, names.OWNER_KIND_SUBNET):
            if row.external_ids.get(names.EXT_RULE) == RULE:
                yield row.external_ids.get(names.EXT_OWNER)

    # -- reconcile -------------------------------------------------------------------
    def reconcile(self, name: str) -> None:
        obj = self.ctl.informer("subnets").get(name)
        cidrs, asked = centralized_spec(obj)
        sw = names.egress_switch_name(name)
        lrp = names.router_port_name(sw)
        have = self._lrp(lrp)
        if cidrs is None:
            if have is not None or self._owns_policy(name):
                self._remove(name, sw, lrp)
            return
        nodes = [n for n in asked if self.ctl.informer("nodes").get(n) is not None]
        missing = [n for n in asked if n not in nodes]
        networks, mac, policies = reroutes(
            self.ctl, self.ctl.transit.index(self.ctl.nb, lrp),
            names.PRIO_POLICY_CENTRALIZED_EGRESS,
            {v: f"ip{v}.src == {c}" for c in cidrs for v in (6 if ":" in c else 4,)})
        ranked = self._ranked(name, nodes)
        ids = gateway_ids(name)
        self.ctl.writer.run([
            *gateway_rows(sw, lrp, names.egress_localnet_name(name), networks, mac, ids, ranked,
                          policies),
        ], what=f"egress gateway of subnet {name}")
        problems = ([f"gatewayNodes {', '.join(missing)}: no such node"] if missing else [])
        if not nodes:
            problems.append("no gateway node available: the Subnet's traffic to the outside "
                            "is dropped")
        self._status(obj, nodes, networks, problems)

    def _ranked(self, name: str, nodes: list[str]) -> list[str]:
        """gatewayNodes order, except that the node that has held the gateway
        for SETTLE seconds comes first."""
        with self._lock:
            return ranked(self._first.first(name), nodes)

    def _lrp(self, lrp: str):
        rows = [row for row in self.ctl.nb.rows_owned(ensure.LRP, names.OWNER_KIND_SUBNET)
                if row.name == lrp]
        return rows[0] if rows else None

    def _owns_policy(self, name: str) -> bool:
        return not ensure.router_policies_are(self.ctl.nb, names.CLUSTER_ROUTER,
                                              gateway_ids(name), [])

    def _remove(self, name: str, sw: str, lrp: str) -> None:
        remove_gateway_rows(self.ctl, sw, lrp, gateway_ids(name),
                            f"egress gateway of subnet {name}")
        with self._lock:
            self._active.pop(name, None)
            self._first.forget(name)
        obj = self.ctl.informer("subnets").get(name)
        if obj is not None and names.STATUS_EGRESS in (obj.get("status") or {}):
            self._patch_status(name, None)
        LOG.info("egress gateway of subnet %s removed (distributed egress)", name)

    # -- status ------------------------------------------------------------------------
    def _status(self, obj: dict, nodes: list[str], networks: list[str],
                problems: list[str]) -> None:
        name = model.meta(obj)["name"]
        with self._lock:
            active, since = self._active.get(name, (None, ""))
            last = self._failover.get(name)
        want = {"nodes": nodes, "transit": networks[0],
                "transit6": networks[1] if len(networks) > 1 else None,
                "active": active, "since": since or None,
                "lastFailover": last, "message": "; ".join(problems) or None}
        if (obj.get("status") or {}).get(names.STATUS_EGRESS) != {
                k: v for k, v in want.items() if v is not None}:
            self._patch_status(name, want)
        text = "; ".join(problems)
        if self.reports.due(name, obj, text):
            self.ctl.event(obj, "EgressGatewayProblem", text)
            LOG.warning("subnet %s: %s", name, text)

    def _patch_status(self, name: str, value: dict | None) -> None:
        try:
            r.patch_merge(self.ctl.kube, r.SUBNETS, name, {"status": {names.STATUS_EGRESS: value}},
                          subresource="status")
        except kerr.NotFound:
            pass

    def tick(self) -> None:
        """Which chassis holds each gateway now (SB), queueing the Subnets whose
        holder changed (status) or has held it SETTLE s without being ranked
        first yet (priorities re-ranked: no flapping back).  Ranking only a
        settled holder keeps a burst of BFD flaps from turning into a burst of
        priority writes, each of which every chassis recomputes."""
        view = self.ctl.southbound_view()
        if view is None:
            return
        holders = gateway_holders(view)
        now, mono, changed, rerank = _now(), time.monotonic(), [], []
        with self._lock:
            for subnet, chassis in holders.items():
                if subnet.startswith((names.SNAT_GATEWAY_PREFIX, names.EIP_GATEWAY_PREFIX)):
                    continue          # a Service's or an EgressIP's (egress_snat.py, egress_ip.py)
                before = self._active.get(subnet)
                if before is None or before[0] != chassis:
                    self._active[subnet] = (chassis, now)
                    changed.append(subnet)
                    last = self._holder.get(subnet)
                    if chassis is not None:
                        if last is not None and last != chassis:
                            self._failover[subnet] = f"{now}: {last} -> {chassis}"
                        self._holder[subnet] = chassis
                if self._first.observe(subnet, chassis, mono):
                    rerank.append(subnet)
        for subnet in changed:
            LOG.info("egress gateway of subnet %s: active %s", subnet,
                     self._active[subnet][0] or "none (no gateway alive)")
        for subnet in rerank:
            LOG.log(logging.INFO if subnet in self._failover else logging.DEBUG,
                    "egress gateway of subnet %s: %s ranked first (held it %.0f s)", subnet,
                    self._first.first(subnet), SETTLE)
        for subnet in dict.fromkeys(changed + rerank):
            self.queue.add(subnet)


def gateway_holders(view: SbView) -> dict[str, str | None]:
    """Subnet -> the chassis (node) its gateway port is bound on now, or None:
    the chassisredirect ports `cr-lrp:egw:<subnet>` that ovn-controllers claim."""
    return view.held_under("cr-" + names.router_port_name(names.egress_switch_name("")))
