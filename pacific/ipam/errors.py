"""IPAM errors.  Every one subclasses IPAMError and its message names the
address, subnet and holder involved, ready for a Kubernetes Event or status."""

from __future__ import annotations

import time


class IPAMError(Exception):
    """Base class; `reason` is a CamelCase word for Event reasons / conditions."""

    reason = "IPAMError"


class InvalidSubnet(IPAMError):
    """Malformed CIDR, gateway outside the subnet, bad exclude entry."""

    reason = "InvalidSubnet"


class SubnetExists(IPAMError):
    reason = "SubnetExists"


class SubnetNotFound(IPAMError):
    reason = "SubnetNotFound"


class SubnetOverlap(IPAMError):
    reason = "SubnetOverlap"

    def __init__(self, name: str, cidr: str, other: str, other_cidr: str):
        self.name, self.cidr, self.other, self.other_cidr = name, cidr, other, other_cidr
        super().__init__(f"subnet {name} ({cidr}) overlaps subnet {other} ({other_cidr})")


class SubnetInUse(IPAMError):
    """Remove or shrinking update refused while addresses are allocated."""

    reason = "SubnetInUse"


class SubnetFull(IPAMError):
    """No free address; `free_at` (clock time) when a quarantined one is free
    again, None when none is quarantined: a refused pod is retried then."""

    reason = "SubnetFull"

    def __init__(self, message: str, free_at: float | None = None):
        self.free_at = free_at
        super().__init__(message)


class InvalidAddress(IPAMError):
    """Not an IP address at all."""

    reason = "InvalidAddress"


class AddressOutOfRange(IPAMError):
    reason = "AddressOutOfRange"


class AddressExcluded(IPAMError):
    """Excluded, the gateway, the network or the broadcast address."""

    reason = "AddressExcluded"


class AddressInUse(IPAMError):
    """The message does not name the holder (it may be another tenant's pod:
    a refusal shown to one tenant never reveals another's objects): `.holder`
    has it, for the controller's log."""

    reason = "AddressInUse"

    def __init__(self, ip: str, subnet: str, holder: str):
        self.ip, self.subnet, self.holder = ip, subnet, holder
        super().__init__(f"address {ip} in subnet {subnet} is already in use")


class AddressQuarantined(IPAMError):
    """A requested address released by another holder moments ago, held back
    until `free_at` (clock time, seconds since the epoch) so that nothing of
    its old holder's exposure reaches the new one (ipam/quarantine.py).  The
    message names the address and when it is free again, never who held it."""

    reason = "AddressQuarantined"

    def __init__(self, ip: str, subnet: str, free_at: float, now: float):
        self.ip, self.subnet, self.free_at = ip, subnet, free_at
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(free_at))
        super().__init__(f"address {ip} in subnet {subnet} was released recently and is "
                         f"quarantined until {when} (in {max(0, int(free_at - now + 0.999))} s); "
                         "the allocation is retried then")


class InvalidMac(IPAMError):
    reason = "InvalidMAC"


class MacInUse(IPAMError):
    """The message does not name the holder (it may be another tenant's pod, or
    a node): `.holder` has it, for logs."""

    reason = "MACInUse"

    def __init__(self, mac: str, holder: str):
        self.mac, self.holder = mac, holder
        super().__init__(f"MAC address {mac} is already in use by another port")


class ReservedMac(IPAMError):
    """A requested MAC that belongs to the infrastructure (router, gateway,
    transit and management ports): never a pod's."""

    reason = "ReservedMAC"


class OwnerConflict(IPAMError):
    """The owner already holds a different address than the one requested;
    release it first to move the owner."""

    reason = "OwnerConflict"
