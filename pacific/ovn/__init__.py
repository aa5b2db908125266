"""OVSDB access layer: OVN Northbound and a node's Open_vSwitch database.

    from pacific.ovn import NorthboundAPI, OvsAPI, Owner, OvnError

See pacific/ovn/nb.py and pacific/ovn/ovs.py for usage, docs/architecture.md
("OVSDB access layer") for the connection, ownership and error model.
"""

from pacific.ovn.base import DEFAULT_TIMEOUT, Owner, configure_ssl
from pacific.ovn.errors import (OvnConnectionError, OvnError, OvnTimeoutError,
                                OvnTransactionError)
from pacific.ovn.nb import NorthboundAPI
from pacific.ovn.ovs import OvsAPI

__all__ = ["NorthboundAPI", "OvsAPI", "Owner", "DEFAULT_TIMEOUT", "OvnError",
           "OvnConnectionError", "OvnTransactionError", "OvnTimeoutError", "configure_ssl"]
