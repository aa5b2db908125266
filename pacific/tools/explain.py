"""Name what an ovn-trace did in Kubernetes terms (see pacific.tools.trace).

    names = Namer(nb, sb, kube)
    hops, verdict, ok = names.explain(sections, src, dst)

Datapaths and ports are named from Pacific's naming scheme (a switch is its
Subnet, `pod:NS/NAME` a pod, `node:NAME` a node's ovn0); an ACL from its NB
row's external_ids, found through the logical flow's stage-hint; a
load-balancing step from the NB Load_Balancer of its VIP (a Service).
"""
from __future__ import annotations

from dataclasses import dataclass

from pacific import names
from pacific.exposure import host_port
from pacific.kube import resources as r
from pacific.tools import traceparse as tp
from pacific.ovn.query import Query
from pacific.tenancy import tenant_of


@dataclass
class Hop:
    where: str                # "switch ovn-default (Subnet ovn-default)", ...
    what: str                 # "NetworkPolicy y/deny-all ingress rule 0: drop"


def port_name(port: str) -> str:
    if port.startswith(names.PORT_PREFIX_POD):
        return f"pod {port[len(names.PORT_PREFIX_POD):]}"
    if port.startswith(names.PORT_PREFIX_NODE):
        return f"node {port[len(names.PORT_PREFIX_NODE):]} ({names.MGMT_PORT})"
    if port.startswith(names.PORT_PREFIX_ROUTER_LINK):
        return "the cluster router"
    if port.startswith(names.PORT_PREFIX_ROUTER):
        return f"switch {port[len(names.PORT_PREFIX_ROUTER):]}"
    return f"port {port}"


def datapath_name(dp: str) -> str:
    if dp == names.CLUSTER_ROUTER:
        return f"router {dp}"
    if dp == names.JOIN_SWITCH:
        return f"switch {dp} (nodes' management ports)"
    return f"switch {dp} (Subnet {dp})"


class Namer:
    def __init__(self, nb: Query, sb: Query, kube, global_namespaces=frozenset()):
        self.nb, self.sb, self.kube = nb, sb, kube
        self.global_namespaces = frozenset(global_namespaces)
        self._acls: dict[str, dict] | None = None
        self._lbs: list[dict] | None = None

    # -- NB/SB lookups (each table read once, only the columns needed) ------------
    def acl_of(self, step: tp.Step, pipeline: str) -> dict | None:
        flows = self.sb.select("Logical_Flow", ["_uuid", "external_ids"],
                               [["table_id", "==", step.table], ["priority", "==", step.priority],
                                ["pipeline", "==", pipeline]])
        hint = next((f["external_ids"].get("stage-hint") for f in flows
                     if f["_uuid"].startswith(step.uuid)), None)
        if not hint:
            return None
        if self._acls is None:
            self._acls = {a["_uuid"]: a for a in self.nb.select(
                "ACL", ["_uuid", "external_ids", "name", "direction", "action"])}
        return next((a for u, a in self._acls.items() if u.startswith(hint)), None)

    def service_of(self, vip: str) -> str | None:
        if self._lbs is None:
            self._lbs = self.nb.select("Load_Balancer", ["name", "vips", "external_ids"])
        for lb in self._lbs:
            if vip in lb["vips"]:
                return lb["external_ids"].get(names.EXT_OWNER) or lb["name"]
        return None

    def tenant(self, namespace: str | None) -> str | None:
        if namespace is None:
            return None
        return tenant_of(r.get(self.kube, r.NAMESPACES, namespace), namespace,
                         self.global_namespaces)[0]

    # -- naming ------------------------------------------------------------------
    def acl_words(self, acl: dict | None, src) -> tuple[str, str]:
        """(what the ACL is, why it dropped) in Kubernetes terms."""
        if acl is None:
            return "an ACL Pacific does not own", "dropped by an ACL Pacific does not own"
        ids = acl["external_ids"]
        kind, owner, rule = (ids.get(names.EXT_OWNER_KIND), ids.get(names.EXT_OWNER),
                             ids.get(names.EXT_RULE, ""))
        rule = rule.removesuffix(names.RULE_SUFFIX_IP6)      # a rule's IPv6 twin is the rule
        if kind == names.OWNER_KIND_TENANT:
            theirs = self.tenant(src.namespace) if src.kind == "pod" else None
            what = f"tenant isolation of tenant {owner!r}"
            why = (f"dropped by tenant isolation: tenant {owner!r} admits no traffic from "
                   + (f"tenant {theirs!r}" if theirs else f"{src.kind} {src.name}"))
            return what, why
        if kind == names.OWNER_KIND_POLICY:
            direction, _, index = rule.partition("/")
            if index == "deny":
                what = f"NetworkPolicy {owner} ({direction}: what no rule allows)"
                return what, (f"dropped by NetworkPolicy {owner}: it selects the pod for "
                              f"{direction} and no {direction} rule of any policy allows this")
            what = f"NetworkPolicy {owner} {direction} rule {index}" if index.isdigit() \
                else f"NetworkPolicy {owner} ({rule})"
            also = [a for a in ids.get(names.EXT_ALSO, "").split(",") if a]
            if also:       # one ACL for the rules of several policies with the same peers
                what += (f" (one ACL with {len(also)} more rule{'s' if len(also) > 1 else ''} "
                         f"of the same peers: {', '.join(also[:3])}{', ...' if len(also) > 3 else ''})")
            return what, f"dropped by {what}"
        if kind == names.OWNER_KIND_CLUSTER_POLICY:
            direction, _, index = rule.partition("/")
            what = f"ClusterNetworkPolicy {owner} {direction} rule {index}"
            return what, f"dropped by {what} (spec.{direction}[{index}]: Deny)"
        if kind == names.OWNER_KIND_EGRESS_FIREWALL:
            index = str((acl.get("name") or [""])[0] if isinstance(acl.get("name"), list)
                        else acl.get("name") or "").rpartition(":")[2]
            what = f"EgressFirewall {owner}/{names.EGRESS_FIREWALL_NAME} rule {index}"
            if index == names.EFW_RULE_IPV6_DEFAULT:
                return what, f"dropped by {what} (its rules name no IPv6 CIDR: IPv6 is denied)"
            return what, f"dropped by {what} (spec.egress[{index}])"
        what = f"{kind or 'ACL'} {owner or acl['_uuid'][:8]}" + (f" ({rule})" if rule else "")
        return what, f"dropped by {what}"

    def explain(self, sections: list[tp.Section], src, dst) -> tuple[list, str, bool, str | None]:
        """(hops, verdict, delivered?, the port it reached)."""
        hops: list[Hop] = []
        service = None
        drop_words = None
        for sec in sections:
            where = datapath_name(sec.datapath)
            if sec.pipeline == "ingress":
                hops.append(Hop(where, f"in from {port_name(sec.inport)}"))
            for st in sec.steps:
                if st.is_acl and (st.drops or self._decides(st)):
                    acl = self.acl_of(st, sec.pipeline)
                    what, why = self.acl_words(acl, src)
                    if acl is None and not st.drops:
                        continue
                    verdict = "drop" if st.drops else \
                        "pass (on to the next tier)" if (acl or {}).get("action") == "pass" else "allow"
                    hops.append(Hop(where, f"{what}: {verdict}"))
                    if st.drops:
                        drop_words = why
                elif st.backends:
                    vip = host_port(dst.ip, dst.service_port) if dst.kind == "service" else None
                    service = self.service_of(vip) if vip else None
                    hops.append(Hop(where, f"load-balanced by Service {service or '?'} to "
                                    f"{', '.join(st.backends)} (the trace takes the first)"))
                elif st.stage == "lr_in_ip_routing" and st.drops:
                    no_route = f"no route to {dst.ip} in the cluster router"
                    hops.append(Hop(where, f"{no_route}: drop"))
                    drop_words = f"dropped: {no_route} (an address outside the cluster)"
                elif st.stage == "lr_in_ip_routing":
                    hops.append(Hop(where, f"routed ({st.match})"))
                elif st.drops:
                    hops.append(Hop(where, f"dropped in {st.stage} (flow {st.uuid}: {st.match})"))
            if sec.output and sec.output[1] in ("", "localport"):
                hops.append(Hop(where, f"out to {port_name(sec.output[0])}"))
        out = tp.outcome(sections)
        if out.delivered_to and dst.kind == "address" \
                and out.delivered_to.startswith(names.PORT_PREFIX_NODE):
            return hops, (f"leaves the cluster through {port_name(out.delivered_to)}: the "
                          "node's host routes it on (distributed egress)"), True, None
        if out.delivered_to:
            verdict = f"delivered to {port_name(out.delivered_to)}"
            if service:
                verdict += f" through Service {service}"
            return hops, verdict, True, out.delivered_to
        if out.dropped_at is not None:
            if drop_words is None:
                st = out.dropped_at
                drop_words = (f"dropped in {datapath_name(out.last.datapath)} at {st.stage} "
                              f"(flow {st.uuid}: {st.match})")
            return hops, drop_words, False, None
        last = out.last
        stage = last.steps[-1].stage if last and last.steps else "?"
        return hops, (f"not delivered: the trace ends in "
                      f"{datapath_name(last.datapath) if last else '?'} after {stage} "
                      "(no route or no port for the destination)"), False, None

    @staticmethod
    def _decides(st: tp.Step) -> bool:
        """An ACL step that applied a rule (not the stage's default flows)."""
        return st.priority >= 1000 + names.PRIO_ACL_DEFAULT_ALLOW
