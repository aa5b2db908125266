"""Per-interface IPv4 and IPv6 settings of the node's own interfaces
(/proc/sys of the process's network namespace), written only when they differ.

    ipv6_conf("ovn0", disable_ipv6="0", accept_ra="0", accept_dad="0")
    ipv4_conf("br-egress", arp_ignore="1")
"""
from __future__ import annotations


def ipv6_conf(ifname: str, **values: str) -> None:
    """net.ipv6.conf.<ifname>.<key> = value for each; OSError if the
    interface or IPv6 is not there."""
    _conf("ipv6", ifname, values)


def ipv4_conf(ifname: str, **values: str) -> None:
    """net.ipv4.conf.<ifname>.<key> = value for each; OSError if the
    interface is not there."""
    _conf("ipv4", ifname, values)


def _conf(family: str, ifname: str, values: dict[str, str]) -> None:
    for key, value in values.items():
        path = f"/proc/sys/net/{family}/conf/{ifname}/{key}"
        with open(path) as f:
            if f.read().strip() == value:
                continue
        with open(path, "w") as f:
            f.write(value)
