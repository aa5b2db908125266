"""OVN Northbound access for Pacific, on ovsdbapp.

``NorthboundAPI`` *is* an ovsdbapp ``OvnNbApiIdlImpl`` (every ovsdbapp command:
``ls_add``, ``lsp_set_addresses``, ``pg_add_ports``, ``db_set``, ``db_find``
...), with its own IDL connection, Pacific's error model
(:mod:`pacific.ovn.errors`), and ``add_*`` helpers that create-or-update a row
and always stamp the owner's external_ids (``names.EXT_OWNER_KIND`` /
``names.EXT_OWNER``).  All ``add_*`` helpers are idempotent: running them
twice converges to the same row.  Switches, routers and their ports are
written through :mod:`pacific.ovn.ensure` (an existing row is updated to the
desired columns, e.g. a router port's new MAC; rows created earlier in the
same transaction are found by name); the other helpers wrap ovsdbapp's
``*_add(may_exist=True)`` commands with :meth:`stamp`.

Usage::

    from pacific import names
    from pacific.ovn.nb import NorthboundAPI, Owner

    nb = NorthboundAPI("unix:/run/pacific-sandbox/default/nb.sock")
    cluster = Owner(names.OWNER_KIND_CLUSTER, names.CLUSTER_ROUTER)
    subnet = Owner(names.OWNER_KIND_SUBNET, "ovn-default")

    # many commands, one transaction (raises OvnTransactionError on failure)
    with nb.transaction() as txn:
        txn.add(nb.add_router(names.CLUSTER_ROUTER, owner=cluster))
        txn.add(nb.add_switch("ovn-default", owner=subnet))
        for c in nb.link_router_switch(names.CLUSTER_ROUTER, "ovn-default",
                                       "0a:00:00:10:00:01", "10.16.0.1/16",
                                       owner=subnet):
            txn.add(c)

    pod = Owner(names.OWNER_KIND_POD, "default/web-0")
    nb.commit(nb.add_switch_port(
        "ovn-default", names.pod_lsp_name("default", "web-0"), owner=pod,
        addresses=["0a:00:00:10:00:05 10.16.0.5"],
        port_security=["0a:00:00:10:00:05 10.16.0.5"]))

    # raw ovsdbapp commands work too (use commit()/transaction() so errors raise)
    nb.commit(nb.lsp_set_addresses("web-0.default", ["0a:00:00:10:00:06 10.16.0.6"]))

    # stale-row cleanup: every Pod-owned port whose pod no longer exists
    live = {"default/web-0"}
    nb.commit(nb.delete_owned("Logical_Switch_Port", names.OWNER_KIND_POD,
              keep=lambda row: row.external_ids[names.EXT_OWNER] in live))

    # wait (no polling) until northd marks the port up
    nb.wait_for_row("Logical_Switch_Port",
                    lambda r: r.name == "web-0.default" and r.up == [True], 10)
    nb.close()
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ovsdbapp.schema.ovn_northbound import impl_idl

from pacific.ovn import ensure
from pacific.ovn.capabilities import Capabilities
from pacific.ovn.capabilities import from_schema as capabilities_of
from pacific.ovn.base import DEFAULT_TIMEOUT, ApiBase, Owner, owner_ids
from pacific.ovn.errors import (OvnConnectionError, OvnError, OvnTimeoutError,
                                OvnTransactionError)

__all__ = ["NorthboundAPI", "Owner", "OvnError", "OvnConnectionError",
           "OvnTransactionError", "OvnTimeoutError", "NB_TABLES",
           "CONTROLLER_MONITOR"]

# Only these tables are monitored (pass tables=[...] to add more).
NB_TABLES = (
    "NB_Global", "Logical_Switch", "Logical_Switch_Port", "Logical_Router",
    "Logical_Router_Port", "Logical_Router_Static_Route",
    "Logical_Router_Policy", "NAT", "ACL", "Address_Set", "Port_Group",
    "Load_Balancer", "Load_Balancer_Group", "QoS", "Gateway_Chassis", "HA_Chassis_Group",
    "HA_Chassis",
)

# What pacific-controller monitors (``NorthboundAPI(..., monitor=CONTROLLER_MONITOR)``):
# the tables and columns it and pacific.ovn.ensure read or write, so the IDL
# replica (100,000 pod ports at scale) holds nothing else.  A column not here
# does not exist for the controller's IDL: reading or writing it raises
# AttributeError/KeyError.  A controller feature that needs another table or
# column adds it here (None: every column of the table).
CONTROLLER_MONITOR: dict[str, tuple[str, ...] | None] = {
    # the lag probe (controller/lagprobe.py)
    "NB_Global": ("nb_cfg", "sb_cfg", "hv_cfg", "options"),
    "Logical_Switch": ("name", "ports", "acls", "other_config", "external_ids",
                       "load_balancer_group"),
    "Logical_Switch_Port": ("name", "addresses", "port_security", "type",
                            "options", "external_ids"),
    "Logical_Router": ("name", "ports", "external_ids", "policies", "static_routes"),
    # egress (controller/egress.py): reroute a node's pods to its ovn0
    "Logical_Router_Policy": ("priority", "match", "action", "nexthops", "external_ids"),
    "Logical_Router_Static_Route": ("ip_prefix", "nexthop", "external_ids"),
    "Logical_Router_Port": ("name", "mac", "networks", "peer", "external_ids",
                            "ha_chassis_group"),
    # centralized egress gateways (controller/gateway.py, ovn/gateway.py)
    "HA_Chassis_Group": ("name", "ha_chassis", "external_ids"),
    "HA_Chassis": ("chassis_name", "priority", "external_ids"),
    # NetworkPolicy / tenant isolation (ensure.EnsurePortGroup, ...)
    "Port_Group": ("name", "ports", "acls", "external_ids"),
    "Address_Set": ("name", "addresses", "external_ids"),
    "ACL": None,
    # Services (pacific.ovn.lb)
    "Load_Balancer": ("name", "vips", "protocol", "options", "external_ids"),
    "Load_Balancer_Group": ("name", "load_balancer"),
}


class NorthboundAPI(ApiBase, impl_idl.OvnNbApiIdlImpl):
    """OVN Northbound database; one IDL connection per instance.

    Args:
        remote: OVSDB remote, e.g. "unix:/path/nb.sock" or "tcp:127.0.0.1:6641".
        timeout: seconds to connect, and per transaction (incl. retries).
        tables: extra NB tables to monitor (every column) beyond NB_TABLES
            (or `monitor`).
        created_by: component name stamped as names.EXT_CREATED_BY.
        monitor: only these tables, each with only these columns (None:
            all columns), instead of every column of NB_TABLES; e.g.
            CONTROLLER_MONITOR.  The node daemon, sandbox and tests keep
            the default (everything in NB_TABLES).
    """

    TABLES = NB_TABLES

    def __init__(self, remote: str, timeout: float = DEFAULT_TIMEOUT,
                 tables: Iterable[str] | None = None,
                 created_by: str | None = None,
                 monitor: Mapping[str, Iterable[str] | None] | None = None):
        super().__init__(remote, timeout=timeout, tables=tables,
                         created_by=created_by, monitor=monitor)

    def capabilities(self) -> Capabilities:
        """What this server's OVN can do (pacific.ovn.capabilities)."""
        return capabilities_of(self.server_schema)

    # --- switches and routers -------------------------------------------------
    # Built on pacific.ovn.ensure: create-or-update, and rows created earlier
    # in the same transaction are found by name.
    def add_switch(self, name: str, *, owner: Owner,
                   extra_ids: dict | None = None, **columns):
        """Create (or update) logical switch `name`; columns (e.g.
        other_config={...}) are set either way, other columns kept."""
        ids, columns, merge = self._owner_ids(owner, extra_ids, columns)
        return ensure.EnsureSwitch(self, name, ids, columns=columns,
                                   merge_ids=merge)

    def add_router(self, name: str, *, owner: Owner,
                   extra_ids: dict | None = None, **columns):
        """Create (or update) logical router `name`."""
        ids, columns, merge = self._owner_ids(owner, extra_ids, columns)
        return ensure.EnsureRouter(self, name, ids, columns=columns,
                                   merge_ids=merge)

    def add_switch_port(self, switch: str, port: str, *, owner: Owner,
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
        ids, columns, merge = self._owner_ids(owner, extra_ids, columns)
        keep = ensure.KEEP
        return ensure.EnsurePort(
            self, switch, port,
            keep if addresses is None else addresses,
            keep if port_security is None else port_security, ids,
            type=keep if type is None else type,
            options=keep if options is None else options,
            columns=columns, merge_ids=merge)

    def add_router_port(self, router: str, port: str, mac: str,
                        networks: Sequence[str], *, owner: Owner,
                        peer: str | None = None,
                        extra_ids: dict | None = None, **columns):
        """Create (or update) logical router port `port` on `router`: an
        existing port converges to `mac` / `networks` (and is moved to
        `router` if it is on another one).  `peer` None is not managed."""
        ids, columns, merge = self._owner_ids(owner, extra_ids, columns)
        return ensure.EnsureRouterPort(
            self, router, port, mac, list(networks), ids,
            peer=ensure.KEEP if peer is None else peer,
            columns=columns, merge_ids=merge)

    def link_router_switch(self, router: str, switch: str, mac: str,
                           network: str, *, owner: Owner,
                           router_port: str | None = None,
                           switch_port: str | None = None) -> list:
        """Commands connecting `router` to `switch`: a router port with
        `mac`/`network` (the gateway, e.g. "10.16.0.1/16") and its peer switch
        port of type router.  Port names default to names.router_port_name /
        names.switch_router_port_name."""
        from pacific import names
        rp = router_port or names.router_port_name(switch)
        sp = switch_port or names.switch_router_port_name(switch)
        return [
            self.add_router_port(router, rp, mac, [network], owner=owner),
            self.add_switch_port(switch, sp, owner=owner, type="router",
                                 addresses=["router"],
                                 options={"router-port": rp}),
        ]

    # --- address sets, port groups, ACLs --------------------------------------
    def add_address_set(self, name: str, addresses: Iterable[str] = (), *,
                        owner: Owner, extra_ids: dict | None = None):
        """Create address set `name`, or replace its addresses.  Replacing
        loses members another writer added meanwhile: to change membership
        use ensure.AddressSetAddAddresses / AddressSetRemoveAddresses."""
        return self._ensure("Address_Set",
                            self.address_set_add(name, may_exist=True),
                            owner, extra_ids,
                            {"addresses": sorted(set(addresses))})

    def add_port_group(self, name: str, ports: Iterable = (), *,
                       owner: Owner, extra_ids: dict | None = None):
        """Create port group `name`, or replace its ports (LSP rows/uuids,
        or commands creating them in the same transaction).  Replacing
        loses members another writer added meanwhile: to change membership
        use ensure.PortGroupAddPorts / PortGroupRemovePorts."""
        return self._ensure("Port_Group", self.pg_add(name, may_exist=True),
                            owner, extra_ids, {"ports": list(ports)})

    def add_acl(self, switch_or_port_group: str, direction: str,
                priority: int, match: str, action: str, *, owner: Owner,
                port_group: bool = False, log: bool = False,
                extra_ids: dict | None = None, **columns):
        """ACL on a logical switch (or a port group if port_group=True);
        identified by (direction, priority, match): re-adding updates action."""
        if port_group:
            inner = self.pg_acl_add(switch_or_port_group, direction, priority,
                                    match, action, log=log, may_exist=True)
        else:
            inner = self.acl_add(switch_or_port_group, direction, priority,
                                 match, action, log=log, may_exist=True)
        columns["action"] = action
        return self._ensure("ACL", inner, owner, extra_ids, columns)

    # --- services, NAT, routing, QoS --------------------------------------------
    def add_load_balancer(self, name: str, vip: str, backends: Sequence[str],
                          protocol: str = "tcp", *, owner: Owner,
                          extra_ids: dict | None = None, **columns):
        """Create load balancer `name` or set one VIP ("10.96.0.10:80") to
        `backends` (["10.16.0.5:8080", ...]).  Attach with ls_lb_add/lr_lb_add."""
        return self._ensure("Load_Balancer",
                            self.lb_add(name, vip, list(backends), protocol,
                                        may_exist=True),
                            owner, extra_ids, columns)

    def add_nat(self, router: str, nat_type: str, external_ip: str,
                logical_ip: str, *, owner: Owner,
                logical_port: str | None = None,
                external_mac: str | None = None,
                extra_ids: dict | None = None):
        """NAT rule (nat_type "snat", "dnat" or "dnat_and_snat")."""
        return self._ensure("NAT",
                            self.lr_nat_add(router, nat_type, external_ip,
                                            logical_ip, logical_port,
                                            external_mac, may_exist=True),
                            owner, extra_ids, {})

    def add_static_route(self, router: str, prefix: str, nexthop: str, *,
                         owner: Owner, port: str | None = None,
                         policy: str = "dst-ip", ecmp: bool = False,
                         extra_ids: dict | None = None):
        """Static route prefix -> nexthop (policy "dst-ip" or "src-ip")."""
        return self._ensure("Logical_Router_Static_Route",
                            self.lr_route_add(router, prefix, nexthop, port,
                                              policy, may_exist=True,
                                              ecmp=ecmp),
                            owner, extra_ids, {})

    def add_policy(self, router: str, priority: int, match: str, action: str,
                   *, owner: Owner, nexthops: Sequence[str] | None = None,
                   extra_ids: dict | None = None, **columns):
        """Router policy (action "allow", "drop" or "reroute" with nexthops)."""
        if nexthops is not None:
            columns["nexthops"] = list(nexthops)
        return self._ensure("Logical_Router_Policy",
                            self.lr_policy_add(router, priority, match,
                                               action, may_exist=True,
                                               **columns),
                            owner, extra_ids, columns)

    def add_qos(self, switch: str, direction: str, priority: int, match: str,
                *, owner: Owner, rate: int | None = None,
                burst: int | None = None, dscp: int | None = None,
                extra_ids: dict | None = None):
        """QoS rule on a switch (rate/burst in kbit/s, or dscp marking)."""
        return self._ensure("QoS",
                            self.qos_add(switch, direction, priority, match,
                                         rate=rate, burst=burst, dscp=dscp,
                                         may_exist=True),
                            owner, extra_ids, {})

    # --- internals -------------------------------------------------------------
    def _ensure(self, table, inner, owner, extra_ids, columns):
        return self.stamp(table, inner, owner, extra_ids, columns)

    def _owner_ids(self, owner, extra_ids, columns):
        """(external_ids, other columns, merge) for an ensure command: the
        owner's ids (names.EXT_OWNER_KIND / EXT_OWNER, EXT_CREATED_BY) are
        merged into the row's external_ids, as stamp() does; an explicit
        external_ids=... column replaces the map instead, owner ids on top."""
        ids = owner_ids(owner, extra_ids, self.created_by)
        given = columns.pop("external_ids", None)
        if given is None:
            return ids, columns, True
        return {**given, **ids}, columns, False
