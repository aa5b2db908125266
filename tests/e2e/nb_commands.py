"""Create-or-update helpers for NB rows that tests and benchmarks set up by hand.

Pacific itself writes through `pacific.ovn.ensure` and its features' own commands;
these wrap the same commands (and ovsdbapp's `*_add(may_exist=True)` with
`NorthboundAPI.stamp`) so a test states a row in one call, owner ids stamped:

    nb.commit(nb_commands.add_switch(nb, "ls", owner=owner))
"""
from __future__ import annotations

from typing import Iterable, Sequence

from pacific import names
from pacific.ovn import ensure
from pacific.ovn.base import Owner, owner_ids


def _owner_ids(nb, owner, extra_ids, columns):
    """(external_ids, other columns, merge) for an ensure command: the owner's ids
    (names.EXT_OWNER_KIND / EXT_OWNER, EXT_CREATED_BY) are merged into the row's
    external_ids, as stamp() does; an explicit external_ids=... column replaces the
    map instead, owner ids on top."""
    ids = owner_ids(owner, extra_ids, nb.created_by)
    given = columns.pop("external_ids", None)
    if given is None:
        return ids, columns, True
    return {**given, **ids}, columns, False


# --- switches and routers -------------------------------------------------
# Built on pacific.ovn.ensure: create-or-update, and rows created earlier
# in the same transaction are found by name.
def add_switch(nb, name: str, *, owner: Owner,
               extra_ids: dict | None = None, **columns):
    """Create (or update) logical switch `name`; columns (e.g.
    other_config={...}) are set either way, other columns kept."""
    ids, columns, merge = _owner_ids(nb, owner, extra_ids, columns)
    return ensure.EnsureSwitch(nb, name, ids, columns=columns,
                               merge_ids=merge)

def add_router(nb, name: str, *, owner: Owner,
               extra_ids: dict | None = None, **columns):
    """Create (or update) logical router `name`."""
    ids, columns, merge = _owner_ids(nb, owner, extra_ids, columns)
    return ensure.EnsureRouter(nb, name, ids, columns=columns,
                               merge_ids=merge)

def add_switch_port(nb, switch: str, port: str, *, owner: Owner,
                    addresses: Sequence[str] | None = None,
                    port_security: Sequence[str] | None = None,
                    type: str | None = None,
                    options: dict[str, str] | None = None,
                    extra_ids: dict | None = None, **columns):
    """Create (or update) logical switch port `port` on `switch` (moved
    there if it is on another switch).

    addresses / port_security: e.g. ["0a:00:00:10:00:05 10.16.0.5"];
    type: "" (VIF), "router", "localnet", ...; options: e.g.
    {"router-port": "pacific-cluster-ovn-default"}.  An argument left at
    None is not managed: an existing port keeps its value.
    """
    ids, columns, merge = _owner_ids(nb, owner, extra_ids, columns)
    keep = ensure.KEEP
    return ensure.EnsurePort(
        nb, switch, port,
        keep if addresses is None else addresses,
        keep if port_security is None else port_security, ids,
        type=keep if type is None else type,
        options=keep if options is None else options,
        columns=columns, merge_ids=merge)

def add_router_port(nb, router: str, port: str, mac: str,
                    networks: Sequence[str], *, owner: Owner,
                    peer: str | None = None,
                    extra_ids: dict | None = None, **columns):
    """Create (or update) logical router port `port` on `router`: an
    existing port converges to `mac` / `networks` (and is moved to
    `router` if it is on another one).  `peer` None is not managed."""
    ids, columns, merge = _owner_ids(nb, owner, extra_ids, columns)
    return ensure.EnsureRouterPort(
        nb, router, port, mac, list(networks), ids,
        peer=ensure.KEEP if peer is None else peer,
        columns=columns, merge_ids=merge)

def link_router_switch(nb, router: str, switch: str, mac: str,
                       network: str, *, owner: Owner,
                       router_port: str | None = None,
                       switch_port: str | None = None) -> list:
    """Commands connecting `router` to `switch`: a router port with
    `mac`/`network` (the gateway, e.g. "10.16.0.1/16") and its peer switch
    port of type router.  Port names default to names.router_port_name /
    names.switch_router_port_name."""
    rp = router_port or names.router_port_name(switch)
    sp = switch_port or names.switch_router_port_name(switch)
    return [
        add_router_port(nb, router, rp, mac, [network], owner=owner),
        add_switch_port(nb, switch, sp, owner=owner, type="router", addresses=["router"],
                        options={"router-port": rp}),
    ]


# --- address sets, port groups, ACLs --------------------------------------
def add_address_set(nb, name: str, addresses: Iterable[str] = (), *,
                    owner: Owner, extra_ids: dict | None = None):
    """Create address set `name`, or replace its addresses.  Replacing
    loses members another writer added meanwhile: to change membership
    use ensure.AddressSetAddAddresses / AddressSetRemoveAddresses."""
    return nb.stamp("Address_Set",
                        nb.address_set_add(name, may_exist=True),
                        owner, extra_ids,
                        {"addresses": sorted(set(addresses))})

def add_port_group(nb, name: str, ports: Iterable = (), *,
                   owner: Owner, extra_ids: dict | None = None):
    """Create port group `name`, or replace its ports (LSP rows/uuids,
    or commands creating them in the same transaction).  Replacing
    loses members another writer added meanwhile: to change membership
    use ensure.PortGroupAddPorts / PortGroupRemovePorts."""
    return nb.stamp("Port_Group", nb.pg_add(name, may_exist=True),
                        owner, extra_ids, {"ports": list(ports)})

def add_acl(nb, switch_or_port_group: str, direction: str,
            priority: int, match: str, action: str, *, owner: Owner,
            port_group: bool = False, log: bool = False,
            extra_ids: dict | None = None, **columns):
    """ACL on a logical switch (or a port group if port_group=True);
    identified by (direction, priority, match): re-adding updates action."""
    if port_group:
        inner = nb.pg_acl_add(switch_or_port_group, direction, priority,
                                match, action, log=log, may_exist=True)
    else:
        inner = nb.acl_add(switch_or_port_group, direction, priority,
                             match, action, log=log, may_exist=True)
    columns["action"] = action
    return nb.stamp("ACL", inner, owner, extra_ids, columns)


# --- services, NAT, routing, QoS --------------------------------------------
def add_load_balancer(nb, name: str, vip: str, backends: Sequence[str],
                      protocol: str = "tcp", *, owner: Owner,
                      extra_ids: dict | None = None, **columns):
    """Create load balancer `name` or set one VIP ("10.96.0.10:80") to
    `backends` (["10.16.0.5:8080", ...]).  Attach with ls_lb_add/lr_lb_add."""
    return nb.stamp("Load_Balancer",
                        nb.lb_add(name, vip, list(backends), protocol,
                                    may_exist=True),
                        owner, extra_ids, columns)

def add_nat(nb, router: str, nat_type: str, external_ip: str,
            logical_ip: str, *, owner: Owner,
            logical_port: str | None = None,
            external_mac: str | None = None,
            extra_ids: dict | None = None):
    """NAT rule (nat_type "snat", "dnat" or "dnat_and_snat")."""
    return nb.stamp("NAT",
                        nb.lr_nat_add(router, nat_type, external_ip,
                                        logical_ip, logical_port,
                                        external_mac, may_exist=True),
                        owner, extra_ids, {})

def add_static_route(nb, router: str, prefix: str, nexthop: str, *,
                     owner: Owner, port: str | None = None,
                     policy: str = "dst-ip", ecmp: bool = False,
                     extra_ids: dict | None = None):
    """Static route prefix -> nexthop (policy "dst-ip" or "src-ip")."""
    return nb.stamp("Logical_Router_Static_Route",
                        nb.lr_route_add(router, prefix, nexthop, port,
                                          policy, may_exist=True,
                                          ecmp=ecmp),
                        owner, extra_ids, {})

def add_policy(nb, router: str, priority: int, match: str, action: str,
               *, owner: Owner, nexthops: Sequence[str] | None = None,
               extra_ids: dict | None = None, **columns):
    """Router policy (action "allow", "drop" or "reroute" with nexthops)."""
    if nexthops is not None:
        columns["nexthops"] = list(nexthops)
    return nb.stamp("Logical_Router_Policy",
                        nb.lr_policy_add(router, priority, match,
                                           action, may_exist=True,
                                           **columns),
                        owner, extra_ids, columns)

def add_qos(nb, switch: str, direction: str, priority: int, match: str,
            *, owner: Owner, rate: int | None = None,
            burst: int | None = None, dscp: int | None = None,
            extra_ids: dict | None = None):
    """QoS rule on a switch (rate/burst in kbit/s, or dscp marking)."""
    return nb.stamp("QoS",
                        nb.qos_add(switch, direction, priority, match,
                                     rate=rate, burst=burst, dscp=dscp,
                                     may_exist=True),
                        owner, extra_ids, {})
