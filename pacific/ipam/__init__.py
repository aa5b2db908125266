"""Pure in-memory IP address management: subnets, addresses, MACs.

    from pacific.ipam import IPAM, errors
    ipam = IPAM()
    ipam.add_subnet("ovn-default", "10.16.0.0/16", gateway="10.16.0.1",
                    exclude=["10.16.0.2", "10.16.0.10..10.16.0.20"])
    a = ipam.allocate("ovn-default", "default/web-0")      # next free address
    a.ip, a.mac, a.cidr, a.gateway, a.subnet, a.ip_with_prefix
    b = ipam.allocate("ovn-default", "default/db-0", ip="10.16.0.50")  # fixed address
    ipam.allocate("ovn-default", "default/web-0") == a      # idempotent
    ipam.holder("10.16.0.50")                                # "default/db-0"
    ipam.usage("ovn-default")                                # (used, available)
    ipam.release("default/web-0")
    ipam.restore("ovn-default", "default/db-0", "10.16.0.50", "0a:58:0a:10:00:32")

Errors (all `errors.IPAMError`, with `.reason` for Events): InvalidSubnet,
SubnetExists, SubnetNotFound, SubnetOverlap, SubnetInUse, SubnetFull,
InvalidAddress, AddressOutOfRange, AddressExcluded, AddressInUse (.holder),
InvalidMac, MacInUse (.holder), OwnerConflict.

Cost: a /16 subnet is a 64 KiB byte map; allocate/release are O(1) (next-free is
a memchr from a rotating cursor).  IPv4 and IPv6 (dynamic allocation from the
first 2**20 addresses of a larger IPv6 subnet).
"""

from pacific.ipam import errors
from pacific.ipam.ipam import IPAM, Allocation, SubnetInfo

__all__ = ["IPAM", "Allocation", "SubnetInfo", "errors"]
