"""Per-interface IPv6 settings of the node's own interfaces (/proc/sys of the
process's network namespace), written only when they differ.

    ipv6_conf("ovn0", disable_ipv6="0", accept_ra="0", accept_dad="0")
"""
from __future__ import annotations


def ipv6_conf(ifname: str, **values: str) -> None:
    """net.ipv6.conf.<ifname>.<key> = value for each; OSError if the
    interface or IPv6 is not there."""
    for key, value in values.items():
        path = f"/proc/sys/net/ipv6/conf/{ifname}/{key}"
        with open(path) as f:
            if f.read().strip() == value:
                continue
        with open(path, "w") as f:
            f.write(value)
