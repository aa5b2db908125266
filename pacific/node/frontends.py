"""A node's Service frontends: external IPs and node ports, as rules of the
host firewall's ``services`` chain (nat, prerouting).

    fe = ServiceFrontends(services, slices, all_nodes, subnets, pods, join_cidrs,
                          service_cidr="10.96.0.0/12")
    fe.rules()      # [(comment, nft JSON expressions), ...] for HostFirewall
    fe = view(feature)  # the same over a node feature's informers (INFORMERS) and flags

A view of informer caches, no state of its own: the host firewall (its
``services`` chain) and egress SNAT (which Services' endpoints leave with their
external IPs) each read one.

What is granted comes from pacific.exposure.exposures(), the function the
controller calls too (it reports the refusals as Events).  A packet that
arrives for a granted frontend is sent on into OVN:

* ``externalTrafficPolicy: Cluster`` (the default): DNAT to the Service's
  cluster IP and port.  The host routes the service CIDR into ovn0, where the
  Service's load balancer on the join switch picks an endpoint on any node, and
  the firewall's ``pacific-service-masquerade`` rule gives the connection the
  node's ovn0 address, so the answer comes back through this node;
* ``Local``: DNAT straight to one of this node's ready endpoints (numgen
  random when there are several), keeping the client's address; the answer
  leaves the endpoint's node (this one) by distributed egress, where conntrack
  undoes the DNAT.  Without a local endpoint the packet is dropped, as
  kube-proxy does.

A rule's comment names the Service and frontend and ends with a hash of the
rule, so the firewall rewrites the chain exactly when what it holds differs.
"""
from __future__ import annotations

import hashlib
import ipaddress
import json

from pacific import contract, egressip, exposure, names, remotes
from pacific.node.feature import ALL_NODES, EGRESSIPS, ENDPOINTSLICES, SERVICES, SUBNETS, \
    THIS_NODE, THIS_NODES_PODS, service_cidr

COMMENT_MAX = 128
# what a ServiceFrontends reads: a node feature that builds one declares these
INFORMERS = {"services": SERVICES, "endpointslices": ENDPOINTSLICES, "nodes": ALL_NODES,
             "subnets": SUBNETS, "pods": THIS_NODES_PODS, "node": THIS_NODE, "egressips": EGRESSIPS}


def _match(left: dict, right, op: str = "==") -> dict:
    return {"match": {"op": op, "left": left, "right": right}}


def _port_match(proto: str, port: int) -> list[dict]:
    return [_match({"meta": {"key": "l4proto"}}, proto),
            _match({"payload": {"protocol": "th", "field": "dport"}}, port)]


def _dnat(backends: list[tuple[str, int]], family: str = "ip") -> dict:
    if len(backends) == 1:
        return {"dnat": {"family": family, "addr": backends[0][0], "port": backends[0][1]}}
    return {"dnat": {"family": family, "addr": {"map": {
        "key": {"numgen": {"mode": "random", "mod": len(backends), "offset": 0}},
        "data": {"set": [[i, {"concat": [ip, port]}] for i, (ip, port) in enumerate(backends)]}}}}}


def rule_for(fe: exposure.Frontend, local_backends: list[tuple[str, int]],
             version: int = 4) -> tuple[str, list]:
    """The rule serving `fe` in one IP version (a node port: at the node's
    addresses of that family, sent on to the Service's cluster IP of it)."""
    family = "ip" if version == 4 else "ip6"
    where = [_match({"payload": {"protocol": family, "field": "daddr"}}, fe.ip)
             if fe.kind == exposure.EXTERNAL_IP
             else _match({"fib": {"result": "type", "flags": ["daddr"]}}, "local")]
    if version == 6 and fe.kind == exposure.NODE_PORT:
        where.insert(0, _match({"meta": {"key": "nfproto"}}, "ipv6"))
    expr = [*where, *_port_match(fe.protocol, fe.port)]
    if not fe.local:
        expr.append({"dnat": {"family": family, "addr": fe.cluster_ip_of(version),
                              "port": fe.service_port}})
    elif local_backends:
        expr.append(_dnat(local_backends, family))
    else:
        expr.append({"drop": None})        # Local with no endpoint on this node
    digest = hashlib.sha1(json.dumps(expr, sort_keys=True).encode()).hexdigest()[:10]
    label = f"{fe.service} {fe.ip or 'node'}:{fe.protocol}/{fe.port}" + \
        (" ipv6" if version == 6 else "")
    return f"{label[:COMMENT_MAX - 12]} #{digest}", expr


def join_networks(node: dict | None) -> list[str]:
    """The join network of each family, IPv4 first, from the controller's
    record on a Node ([] before it)."""
    try:
        rec = contract.NodeRecord.of(node) if node else None
    except contract.ContractError:
        return []
    return [str(ipaddress.ip_interface(c).network) for c, _ in rec.interfaces] if rec else []


def held_addresses(pod: dict | None) -> tuple[str, frozenset[str]] | None:
    """(namespace, addresses) a pod of this node holds by the controller's
    record, None without one: when it changes, so do the `Local` backends."""
    rec = contract.own_record(pod) if pod is not None else None
    if rec is None:
        return None
    return (pod.get("metadata") or {}).get("namespace"), frozenset(rec.addresses)


class ServiceFrontends:
    def __init__(self, services, slices, all_nodes, subnets, pods, join_cidrs,
                 service_cidr: str | None, allowed: list[str] | None = None,
                 port_range: tuple[int, int] = exposure.NODE_PORT_RANGE, reserved=frozenset(),
                 egressips=None, service_cidr6: str | None = None,
                 per_namespace: int = names.EXTERNAL_IPS_PER_NAMESPACE):
        self.egressips = egressips            # their addresses: no Service may take one
        self.reserved = frozenset(reserved)   # OVN central, --infrastructure-ips
        self.services, self.slices, self.all_nodes = services, slices, all_nodes
        self.subnets, self.pods, self.join_cidrs = subnets, pods, join_cidrs  # () -> [CIDR]
        self.service_cidr, self.allowed, self.port_range = service_cidr, allowed, port_range
        self.service_cidr6 = service_cidr6
        self.per_namespace = per_namespace    # --external-ips-per-namespace

    def cluster_cidrs(self) -> list[str]:
        """The cluster's own networks of both families (as the controller's
        service.cluster_cidrs): no external IP may be inside one."""
        cidrs = [c for s in self.subnets.list() for c in contract.subnet_cidrs_in_effect(s)]
        return cidrs + [c for c in (*self.join_cidrs(), self.service_cidr, self.service_cidr6)
                        if c]

    def node_ips(self) -> set[str]:
        """Every infrastructure address: the nodes', OVN central's, the reserved ones."""
        return exposure.node_addresses(self.all_nodes.list()) | self.reserved

    def taken_ips(self) -> set[str]:
        """What no Service's external IP may be: infrastructure and every
        address an administrator's EgressIP names."""
        eips = self.egressips.list() if self.egressips is not None else []
        return self.node_ips() | egressip.claimed(eips)

    def local_pod_ips(self) -> dict[str, str]:
        """address (of either family) -> namespace of this node's pods (the
        controller's records)."""
        out = {}
        for pod in self.pods.list():
            rec = contract.own_record(pod)
            if rec is not None:
                for ip in rec.addresses:
                    out[ip] = (pod.get("metadata") or {}).get("namespace")
        return out

    def granted(self) -> list[exposure.Frontend]:
        grants, _ = exposure.exposures(self.services.list(), self.cluster_cidrs(), self.taken_ips(),
                                       self.allowed, self.port_range, self.per_namespace)
        return grants

    def synced(self) -> bool:
        return all(getattr(i, "synced", True)
                   for i in (self.services, self.slices, self.all_nodes, self.subnets, self.pods,
                             self.egressips) if i is not None)

    def rules(self) -> list[tuple[str, list]] | None:
        """The services chain's rules; None while a cache is not listed yet (a
        restarted node keeps the frontends it has instead of dropping them)."""
        if not self.synced():
            return None
        grants = self.granted()
        if not grants:
            return []
        local_ips = self.local_pod_ips() if any(fe.local for fe in grants) else {}
        out = []
        for fe in grants:
            for version in fe.versions:
                out.append(rule_for(fe, self._local_backends(fe, version, local_ips)
                                    if fe.local else [], version))
        return out

    def _local_backends(self, fe: exposure.Frontend, version: int,
                        local_ips: dict[str, str]) -> list[tuple[str, int]]:
        """(address, port) of the Service's ready endpoints of `version` on this node."""
        ns, name = fe.service.split("/", 1)
        slices = [s for s in self.slices.list()
                  if (s.get("metadata") or {}).get("namespace") == ns
                  and ((s.get("metadata") or {}).get("labels") or {}).get(
                      exposure.SERVICE_NAME_LABEL) == name]
        proto = {v: k for k, v in exposure.PROTOCOLS.items()}[fe.protocol]
        # only the Service's own namespace's pods (exposure.confine)
        slices, _ = exposure.confine(slices, ns, local_ips.get)
        out = []
        for b in exposure.ready_backends(slices, fe.port_name, proto, version):
            ip, port = exposure.split_host_port(b)
            if ip in local_ips:
                out.append((ip, int(port)))
        return out


def view(feature) -> ServiceFrontends:
    """The frontends over the informers of a node feature that declares
    INFORMERS, with pacific-node's flags (its NodeContext)."""
    ctx, a = feature.ctx, feature.ctx.args
    node = feature.informer("node")
    return ServiceFrontends(
        feature.informer("services"), feature.informer("endpointslices"),
        feature.informer("nodes"), feature.informer("subnets"), feature.informer("pods"),
        join_cidrs=lambda: join_networks(node.get(ctx.node_name)),
        service_cidr=service_cidr(a, 4), service_cidr6=service_cidr(a, 6),
        allowed=exposure.parse_cidrs(a.external_ip_cidrs),
        port_range=exposure.parse_port_range(a.node_port_range),
        reserved=remotes.addresses(a.ovn_remote) | set(exposure.parse_ips(a.infrastructure_ips)),
        egressips=feature.informer("egressips"), per_namespace=a.external_ips_per_namespace)
