"""Which pods' IPv6 may leave the cluster through their node (distributed
egress in IPv6, controller/egress.py), and which is held back.

An EgressIP and a Service whose endpoints leave with its external IP
(servicesnat.opted_in) decide both families (their IPv6 addresses reroute
the pods' `ip6.src`, above the node reroute), but a namespace they decide for
is held all the same: its pods they have no IPv6 address for, or do not
select, must not get out over IPv6 past them.  (A
centralized Subnet's gateway reroutes both families, controller/gateway.py;
an EgressFirewall decides both itself: a firewall naming no IPv6 CIDR denies
IPv6 at the exits, egressfirewall.py.)  A pod of such a namespace must not get
out over IPv6 past the administrator's choice, so its IPv6 is *held*: left out
of its node's IPv6 reroute set, it has no way out but the EgressIP's (the
cluster router's `::/0` leads to no next hop), while its IPv4 goes where the
feature says.  Coarse on purpose, failing closed: a namespace an EgressIP's
namespaceSelector matches is held whole (whatever its podSelector), as is a
namespace with a Service opted into SNAT.

    h = held(egressips, namespaces, services)
    h.holds("shop")     # -> the reason, or None
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pacific import selectors, servicesnat
from pacific.controller import model


@dataclass(frozen=True)
class Held:
    namespaces: dict[str, str] = field(default_factory=dict)   # namespace -> why

    def holds(self, namespace: str) -> str | None:
        """Why a pod of `namespace` may not leave over IPv6 through its node, or None."""
        return self.namespaces.get(namespace)


def held(egressips, namespaces, services) -> Held:
    """From the caches' objects: EgressIPs, Namespaces and Services."""
    ns: dict[str, str] = {}
    labels = {model.meta(n).get("name"): model.meta(n).get("labels") or {} for n in namespaces}
    for eip in egressips:
        sel = (eip.get("spec") or {}).get("namespaceSelector")
        for name, lab in labels.items():
            try:
                if selectors.matches(sel, lab):
                    ns.setdefault(name, f"EgressIP {model.meta(eip).get('name')} selects its "
                                        "namespace")
            except selectors.SelectorError:
                break        # a broken selector decides for no pod in IPv4 either
    for svc in services:
        if servicesnat.opted_in(svc):
            ns.setdefault(model.meta(svc).get("namespace"),
                          "a Service of its namespace leaves with its external IP")
    return Held({k: v for k, v in ns.items() if k})
