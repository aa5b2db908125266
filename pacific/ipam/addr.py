"""Address and MAC parsing/formatting helpers (fast paths over the socket module)."""

from __future__ import annotations

import ipaddress
import random
import re
import socket
import sys

from pacific.ipam.errors import InvalidAddress, InvalidMac, ReservedMac

# MACs the controller gives infrastructure ports: router ports (model.router_mac),
# the egress transit ports and every node's pegress0 (controller/transit.py,
# names.EGRESS_PORT_MAC) all start with 0e:00; management ports (ovn0) have the
# MAC of their join address (MAC_PREFIX_FROM_IP + the address)
MAC_PREFIX_INFRASTRUCTURE = "0e:00:"
MAC_PREFIX_FROM_IP = "0a:58:"
_MAC_RE = re.compile(r"^[0-9a-f]{2}([:-])[0-9a-f]{2}(\1[0-9a-f]{2}){4}$")


def parse_ip(text: str) -> tuple[int, int]:
    """(version, integer) of an address string; raises InvalidAddress."""
    if not isinstance(text, str):
        raise InvalidAddress(f"{text!r} is not an IP address")
    try:
        if ":" in text:
            return 6, int.from_bytes(socket.inet_pton(socket.AF_INET6, text), "big")
        return 4, int.from_bytes(socket.inet_pton(socket.AF_INET, text), "big")
    except OSError:
        raise InvalidAddress(f"{text!r} is not an IP address") from None


def format_ip(version: int, value: int) -> str:
    """The address as text, interned: a pod's address is held by IPAM, its IP
    object and record, one copy for all."""
    if version == 4:
        return sys.intern(socket.inet_ntop(socket.AF_INET, value.to_bytes(4, "big")))
    return sys.intern(str(ipaddress.IPv6Address(value)))


def normalize_mac(text: str) -> str:
    """Lower-case colon form of a unicast, non-zero MAC; raises InvalidMac."""
    mac = text.strip().lower() if isinstance(text, str) else ""
    if not _MAC_RE.match(mac):
        raise InvalidMac(f"{text!r} is not a MAC address (expected aa:bb:cc:dd:ee:ff)")
    mac = mac.replace("-", ":")
    if int(mac[:2], 16) & 1:
        raise InvalidMac(f"{mac} is a multicast MAC address; a port needs a unicast one")
    if mac == "00:00:00:00:00:00":
        raise InvalidMac("00:00:00:00:00:00 is not a usable MAC address")
    return sys.intern(mac)      # also in the pod's IP object: one copy


def mac_from_ip(version: int, value: int) -> str:
    """Deterministic locally administered MAC: 0a:58 + the last 4 address bytes."""
    b = (value & 0xFFFFFFFF).to_bytes(4, "big")
    return "0a:58:%02x:%02x:%02x:%02x" % (b[0], b[1], b[2], b[3])


def check_requested_mac(text: str, infrastructure_cidrs=()) -> str:
    """A MAC a tenant asked for (pod annotation), normalized; raises InvalidMac,
    or ReservedMac when it is, or may become, an infrastructure port's MAC: the
    0e:00 prefix of router/gateway/transit ports, or the MAC derived from an
    address of `infrastructure_cidrs` (the join network: nodes' ovn0 ports,
    also of nodes that join later; transit networks)."""
    mac = normalize_mac(text)
    if mac.startswith(MAC_PREFIX_INFRASTRUCTURE):
        raise ReservedMac(f"MAC address {mac} is reserved for the cluster's router, gateway "
                          f"and transit ports (prefix {MAC_PREFIX_INFRASTRUCTURE.rstrip(':')}) "
                          "and cannot be a pod's")
    if mac.startswith(MAC_PREFIX_FROM_IP):
        embedded = ipaddress.IPv4Address(bytes(int(x, 16) for x in mac.split(":")[2:]))
        for cidr in infrastructure_cidrs:
            net = ipaddress.ip_network(cidr, strict=False)
            if net.version == 4 and embedded in net:
                raise ReservedMac(f"MAC address {mac} is reserved for the cluster's node and "
                                  f"transit ports (the MACs of {net}) and cannot be a pod's")
    return mac


def random_mac(rng: random.Random) -> str:
    """Random locally administered unicast MAC (02:xx:...)."""
    b = rng.getrandbits(40).to_bytes(5, "big")
    return "02:" + ":".join("%02x" % x for x in b)
