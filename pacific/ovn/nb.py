"""OVN Northbound access for Pacific, on ovsdbapp.

``NorthboundAPI`` *is* an ovsdbapp ``OvnNbApiIdlImpl`` (every ovsdbapp command:
``ls_add``, ``lsp_set_addresses``, ``pg_add_ports``, ``db_set``, ``db_find``
...), with its own IDL connection and Pacific's error model
(:mod:`pacific.ovn.errors`).  Pacific writes its rows through the create-or-update
commands of :mod:`pacific.ovn.ensure` (an existing row is updated to the desired
columns; rows created earlier in the same transaction are found by name), which
carry the owner's external_ids (``names.EXT_OWNER_KIND`` / ``names.EXT_OWNER``).

Usage::

    from pacific import names
    from pacific.ovn import ensure
    from pacific.ovn.base import owner_ids
    from pacific.ovn.nb import NorthboundAPI, Owner

    nb = NorthboundAPI("unix:/run/pacific-sandbox/default/nb.sock")
    cluster = Owner(names.OWNER_KIND_CLUSTER, names.CLUSTER_ROUTER)
    subnet = Owner(names.OWNER_KIND_SUBNET, "ovn-default")

    # many commands, one transaction (raises OvnTransactionError on failure)
    with nb.transaction() as txn:
        txn.add(ensure.EnsureRouter(nb, names.CLUSTER_ROUTER, owner_ids(cluster)))
        txn.add(ensure.EnsureSwitch(nb, "ovn-default", owner_ids(subnet)))

    pod = Owner(names.OWNER_KIND_POD, "default/web-0")
    addr = "0a:00:00:10:00:05 10.16.0.5"
    nb.commit(ensure.EnsurePort(nb, "ovn-default", names.pod_lsp_name("default", "web-0"),
                                [addr], [addr], owner_ids(pod)))

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

from typing import Iterable, Mapping

from ovsdbapp.schema.ovn_northbound import impl_idl

from pacific import names
from pacific.ovn.capabilities import Capabilities
from pacific.ovn.capabilities import from_schema as capabilities_of
from pacific.ovn.base import DEFAULT_TIMEOUT, ApiBase, Owner
from pacific.ovn.errors import (OvnConnectionError, OvnError, OvnTimeoutError,
                                OvnTransactionError)

__all__ = ["NorthboundAPI", "Owner", "OvnError", "OvnConnectionError",
           "OvnTransactionError", "OvnTimeoutError", "NB_TABLES",
           "CONTROLLER_MONITOR", "CONTROLLER_COMPACT"]

# Only these tables are monitored (pass tables=[...] to add more).
NB_TABLES = (
    "NB_Global", "Logical_Switch", "Logical_Switch_Port", "Logical_Router",
    "Logical_Router_Port", "Logical_Router_Static_Route",
    "Logical_Router_Policy", "NAT", "ACL", "Address_Set", "Port_Group",
    "Load_Balancer", "Load_Balancer_Group", "QoS", "Gateway_Chassis", "HA_Chassis_Group",
    "HA_Chassis", "Meter", "Meter_Band", "Static_MAC_Binding",
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
    "Logical_Router": ("name", "ports", "external_ids", "policies", "static_routes", "options"),
    # egress (controller/egress.py): reroute a node's pods to its ovn0
    "Logical_Router_Policy": ("priority", "match", "action", "nexthops", "external_ids"),
    "Logical_Router_Static_Route": ("ip_prefix", "nexthop", "external_ids"),
    "Logical_Router_Port": ("name", "mac", "networks", "peer", "external_ids",
                            "ha_chassis_group"),
    # centralized egress gateways (controller/gateway.py, ovn/gateway.py)
    "HA_Chassis_Group": ("name", "ha_chassis", "external_ids"),
    "HA_Chassis": ("chassis_name", "priority", "external_ids"),
    # an IPv6 gateway's transit host (ovn/gateway.py EnsureStaticMacBindings)
    "Static_MAC_Binding": ("logical_port", "ip", "mac", "override_dynamic_mac"),
    # NetworkPolicy / tenant isolation (ensure.EnsurePortGroup, ...)
    "Port_Group": ("name", "ports", "acls", "external_ids"),
    "Address_Set": ("name", "addresses", "external_ids"),
    "ACL": None,
    # the audit meter (controller/audit.py)
    "Meter": ("name", "unit", "bands", "fair", "external_ids"),
    "Meter_Band": ("action", "rate", "burst_size"),
    # Services (pacific.ovn.lb)
    "Load_Balancer": ("name", "vips", "protocol", "options", "external_ids"),
    "Load_Balancer_Group": ("name", "load_balancer"),
}


# What pacific-controller keeps as tuples rather than IDL Rows
# (``NorthboundAPI(..., compact=CONTROLLER_COMPACT)``, pacific.ovn.compact):
# the pods' switch ports, 100,000 at scale.  Read them through lookup(),
# rows_owned(), row_uuid() and ref_names(); they raise no row events.
CONTROLLER_COMPACT: dict[str, tuple[str, str]] = {
    "Logical_Switch_Port": (names.EXT_OWNER_KIND, names.OWNER_KIND_POD),
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
        compact: table -> (external_ids key, value) of rows kept as tuples
            rather than Rows, e.g. CONTROLLER_COMPACT (pacific.ovn.compact).
    """

    TABLES = NB_TABLES

    def __init__(self, remote: str, timeout: float = DEFAULT_TIMEOUT,
                 tables: Iterable[str] | None = None,
                 created_by: str | None = None,
                 monitor: Mapping[str, Iterable[str] | None] | None = None,
                 compact: Mapping[str, tuple[str, str]] | None = None):
        super().__init__(remote, timeout=timeout, tables=tables,
                         created_by=created_by, monitor=monitor, compact=compact)

    def capabilities(self) -> Capabilities:
        """What this server's OVN can do (pacific.ovn.capabilities)."""
        return capabilities_of(self.server_schema)

