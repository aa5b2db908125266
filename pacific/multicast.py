"""Multicast per namespace: which namespaces enabled it, and the OVN form of
the gate (pure; the controller's `multicast` feature writes it, `pacific
trace` and `diagnose` explain with it).

Model.  A namespace takes part in IPv4 multicast when an administrator sets
`pacific.io/multicast: "true"` on the Namespace (annotation or label: tenants
with `edit` in a namespace cannot write the Namespace object).  Its pods then
send to groups and receive the groups they joined (IGMPv2/v3) from pods of
enabled namespaces; nothing else sends them multicast and they send nothing
anywhere else.  Tenant isolation (ACLs at 3000, above the gate) keeps groups
inside a tenant; NetworkPolicy (1000/1001, below) applies to what the gate lets
through: an ingress-isolated pod receives a group's datagrams only from
senders a rule admits, an egress-isolated pod sends to a group only if an
egress rule's `ipBlock` holds the group's address.

OVN form: every pod port is in exactly one of two port groups, `pacific_mcast`
(enabled namespaces) and `pacific_mcast_off` (all others), moved in one
transaction when a namespace changes.  Their ACLs (GATE_ACLS) drop, above
NetworkPolicy: multicast from and to `pacific_mcast_off`; multicast to
`pacific_mcast` whose source is not an enabled pod (hosts, anything routed
in).  IGMP of enabled pods is allowed one priority above, so a NetworkPolicy
does not cut joins or the querier's queries.  Each Subnet's switch snoops IGMP
and runs a querier (SWITCH_CONFIG): a group reaches only ports that joined it
(`mcast_flood_unregistered=false`), except the link-local 224.0.0.0/24 that
OVN always floods on the switch, which the gate still confines to enabled
pods.  The cluster router relays groups between Subnets (`mcast_relay`), so a
sender needs an IP TTL of 2 or more for receivers on another Subnet.

IPv6 (a cluster with IPv6 Subnets): the gate has IPv6 twins (GATE_ACLS6,
rule names with names.RULE_SUFFIX_IP6), so a namespace that has not enabled
multicast sends and receives no IPv6 multicast either; OVN exempts neighbour
discovery and MLD from every ACL, so they are not cut.  An enabled pod's
IPv6 multicast from its own addresses or its link-local one (the source of
link-local groups) reaches enabled pods that joined the group (MLD snooping
on the same switches, each with an MLD querier); the cluster router relays
IPv6 groups between Subnets as it does IPv4's.
"""
from __future__ import annotations

import ipaddress

from pacific import names

TRUE, FALSE = "true", "false"


def enabled(ns_obj: dict | None) -> tuple[bool, str | None]:
    """(enabled, problem): the Namespace's `pacific.io/multicast`, annotation
    or label ("true" / "false"; anything else is off, and named)."""
    meta = (ns_obj or {}).get("metadata") or {}
    found = [v for v in ((meta.get("annotations") or {}).get(names.ANN_MULTICAST),
                         (meta.get("labels") or {}).get(names.ANN_MULTICAST)) if v is not None]
    if not found:
        return False, None
    bad = [v for v in found if v not in (TRUE, FALSE)]
    if bad:
        return False, (f"{names.ANN_MULTICAST}={bad[0]!r} is neither \"true\" nor \"false\": "
                       f"multicast stays off")
    if len(set(found)) > 1:
        return False, (f"{names.ANN_MULTICAST} is \"true\" on one of annotation and label and "
                       f"\"false\" on the other: multicast stays off")
    return found[0] == TRUE, None


def group_of(on: bool) -> str:
    return names.PG_MCAST if on else names.PG_MCAST_OFF


def switch_config(gateway: str | None, router_mac: str,
                  query_interval: int = names.MCAST_QUERY_INTERVAL,
                  ipv6: bool = False) -> dict[str, str]:
    """A Subnet switch's other_config: IGMP and MLD snooping and a querier that
    speaks from the Subnet's router port: IGMP from its IPv4 gateway (None:
    an IPv6-only Subnet, no IGMP queries), MLD (`ipv6`) from the link-local
    address of its MAC, as RFC 3810 wants a query's source; a membership not
    refreshed for two query intervals (and 5 s) ages out."""
    out = {"mcast_snoop": TRUE, "mcast_querier": TRUE,
           "mcast_flood_unregistered": FALSE, "mcast_eth_src": router_mac,
           "mcast_query_interval": str(query_interval),
           "mcast_idle_timeout": str(2 * query_interval + 5)}
    if gateway:
        out["mcast_ip4_src"] = gateway
    if ipv6:
        out["mcast_ip6_src"] = link_local(router_mac)
    return out


def link_local(mac: str) -> str:
    """The EUI-64 link-local IPv6 address of `mac` (what the kernel and OVN give
    an interface of that MAC)."""
    b = bytes.fromhex(mac.replace(":", ""))
    eui = bytes([b[0] ^ 0x02]) + b[1:3] + b"\xff\xfe" + b[3:]
    return str(ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + eui))


ROUTER_OPTIONS = {"mcast_relay": TRUE}
ROUTER_POLICY_MATCH = "ip4.mcast"   # kept on the router, never rerouted towards a node's egress

# (port group, direction, priority, match, action, rule name): the gate
_ON, _OFF = names.PG_MCAST, names.PG_MCAST_OFF
GATE_ACLS = (
    (_OFF, "from-lport", names.PRIO_ACL_MCAST_GATE, f"inport == @{_OFF} && ip4.mcast", "drop",
     "mcast-off-sends"),
    (_OFF, "to-lport", names.PRIO_ACL_MCAST_GATE, f"outport == @{_OFF} && ip4.mcast", "drop",
     "mcast-off-receives"),
    (_ON, "to-lport", names.PRIO_ACL_MCAST_GATE,
     f"outport == @{_ON} && ip4.mcast && ip4.src != ${_ON}_ip4", "drop", "mcast-foreign-source"),
    (_ON, "from-lport", names.PRIO_ACL_MCAST_IGMP, f"inport == @{_ON} && igmp", "allow",
     "mcast-igmp-out"),
    (_ON, "to-lport", names.PRIO_ACL_MCAST_IGMP, f"outport == @{_ON} && igmp", "allow",
     "mcast-igmp-in"),
)

# the same drops for IPv6 (a cluster with IPv6 Subnets)
GATE_ACLS6 = (
    (_OFF, "from-lport", names.PRIO_ACL_MCAST_GATE, f"inport == @{_OFF} && ip6.mcast", "drop",
     "mcast-off-sends" + names.RULE_SUFFIX_IP6),
    (_OFF, "to-lport", names.PRIO_ACL_MCAST_GATE, f"outport == @{_OFF} && ip6.mcast", "drop",
     "mcast-off-receives" + names.RULE_SUFFIX_IP6),
    (_ON, "to-lport", names.PRIO_ACL_MCAST_GATE,
     f"outport == @{_ON} && ip6.mcast && ip6.src != ${_ON}_ip6 && ip6.src != fe80::/10", "drop",
     "mcast-foreign-source" + names.RULE_SUFFIX_IP6),
)


def gate(ipv6: bool) -> tuple:
    """The gate's ACLs: IPv4's, and IPv6's in a cluster with IPv6 Subnets."""
    return GATE_ACLS + (GATE_ACLS6 if ipv6 else ())


def why_dropped(rule: str) -> str:
    """What a gate ACL's rule name means, for `pacific trace`."""
    return {
        "mcast-off-sends": "the sender's namespace has not enabled multicast "
                           f"({names.ANN_MULTICAST})",
        "mcast-off-receives": "the receiver's namespace has not enabled multicast "
                              f"({names.ANN_MULTICAST})",
        "mcast-foreign-source": "multicast reaches enabled pods only from pods of enabled "
                                "namespaces",
    }.get(rule.removesuffix(names.RULE_SUFFIX_IP6), rule)
