"""Address and MAC parsing/formatting helpers (fast paths over the socket module)."""

from __future__ import annotations

import ipaddress
import random
import re
import socket

from pacific.ipam.errors import InvalidAddress, InvalidMac

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
    if version == 4:
        return socket.inet_ntop(socket.AF_INET, value.to_bytes(4, "big"))
    return str(ipaddress.IPv6Address(value))


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
    return mac


def mac_from_ip(version: int, value: int) -> str:
    """Deterministic locally administered MAC: 0a:58 + the last 4 address bytes."""
    b = (value & 0xFFFFFFFF).to_bytes(4, "big")
    return "0a:58:%02x:%02x:%02x:%02x" % (b[0], b[1], b[2], b[3])


def random_mac(rng: random.Random) -> str:
    """Random locally administered unicast MAC (02:xx:...)."""
    b = rng.getrandbits(40).to_bytes(5, "big")
    return "02:" + ":".join("%02x" % x for x in b)
