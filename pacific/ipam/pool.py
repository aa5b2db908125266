"""One subnet's address pool: a byte-per-address state map with a next-free cursor.

Memory: one byte per address of the "window" (the whole subnet up to 2**20
addresses; 64 KiB for a /16) plus one dict entry per allocated address.  Next-free
search is `bytearray.find` (memchr speed) from a rotating cursor, so addresses are
handed out round-robin (a just-released address is not reused at once, which
spares stale ARP/conntrack entries elsewhere) and allocation is amortized O(1);
a specific address and release are O(1).  A released address may be marked
QUARANTINED instead of FREE (ipam/quarantine.py): next-free skips it, and the
IPAM decides who may take it by request.

IPv6 subnets larger than the window (a /64) allocate dynamically from the first
2**20 addresses; a requested address beyond the window is tracked in a small dict.
"""

from __future__ import annotations

import bisect
import ipaddress

from pacific.ipam.addr import format_ip, parse_ip
from pacific.ipam.errors import (AddressExcluded, AddressOutOfRange, InvalidAddress,
                                 InvalidSubnet, SubnetFull)

MAX_WINDOW = 1 << 20

FREE, USED, EXCLUDED, GATEWAY, NETWORK, BROADCAST, QUARANTINED = 0, 1, 2, 3, 4, 5, 6
MAX_OFFSET = 1 << 128
_WHY = {EXCLUDED: "in excludeIps", GATEWAY: "the gateway", NETWORK: "the network address",
        BROADCAST: "the broadcast address"}


def parse_cidr(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if not isinstance(cidr, str) or "/" not in cidr:
        raise InvalidSubnet(f"CIDR {cidr!r} is malformed: expected address/prefix, "
                            "e.g. 10.16.0.0/16")
    try:
        return ipaddress.ip_network(cidr.strip(), strict=True)
    except ValueError as e:
        if "host bits set" in str(e):
            fixed = ipaddress.ip_network(cidr.strip(), strict=False)
            raise InvalidSubnet(f"CIDR {cidr} has host bits set; did you mean {fixed}?") from None
        raise InvalidSubnet(f"CIDR {cidr!r} is malformed: {e}") from None


class Pool:
    def __init__(self, name: str, cidr: str, gateway: str | None = None,
                 exclude: tuple[str, ...] | list[str] = ()):
        net = parse_cidr(cidr)
        self.name = name
        self.network = net
        self.cidr = str(net)
        self.version = net.version
        self.prefixlen = net.prefixlen
        self.base = int(net.network_address)
        self.size = net.num_addresses
        self.window = min(self.size, MAX_WINDOW)
        self.state = bytearray(self.window)
        self.sparse: dict[int, int] = {}          # offset >= window -> state
        self.holders: dict[int, str] = {}         # offset -> owner key
        self.cursor = 0
        self._excl_ranges: list[tuple[int, int]] = []  # sorted offsets, for beyond-window
        self.reserved = 0                          # addresses never allocatable
        self.exclude = tuple(exclude or ())

        # network / broadcast (not for /31, /32, /127, /128: RFC 3021)
        small = self.size <= 2
        if not small:
            self._reserve(0, NETWORK)
            if self.version == 4:
                self._reserve(self.size - 1, BROADCAST)
        # gateway: default first address
        if gateway in (None, ""):
            gw_off = 0 if small else 1
        else:
            gw_off = self._offset_of(gateway, "gateway")
            cur = self._state(gw_off)
            if cur in (NETWORK, BROADCAST):
                raise InvalidSubnet(f"gateway {gateway} is {_WHY[cur]} of {self.cidr}")
        self.gateway_offset = gw_off
        self.gateway = format_ip(self.version, self.base + gw_off)
        self._reserve(gw_off, GATEWAY)
        self._excl_ranges = _merge([self._parse_exclude(i) for i in self.exclude])
        for lo, hi in self._excl_ranges:
            top = min(hi, self.window - 1)
            if lo <= top:
                seg = self.state[lo:top + 1]
                self.reserved += seg.count(FREE)
                self.state[lo:top + 1] = seg.replace(b"\x00", bytes([EXCLUDED]))
            if hi >= self.window:
                start = max(lo, self.window)
                inside = sum(1 for o in self.sparse if start <= o <= hi)
                self.reserved += hi - start + 1 - inside

    # -- construction helpers ------------------------------------------------
    def _offset_of(self, text: str, what: str) -> int:
        try:
            version, value = parse_ip(text)
        except InvalidAddress:
            raise InvalidSubnet(f"{what} {text!r} of subnet {self.name} is not an IP address") from None
        off = value - self.base
        if version != self.version or not 0 <= off < self.size:
            raise InvalidSubnet(f"{what} {text} is outside subnet {self.name} ({self.cidr})")
        return off

    def _parse_exclude(self, item: str) -> tuple[int, int]:
        if not isinstance(item, str) or not item.strip():
            raise InvalidSubnet(f"excludeIps entry {item!r} of subnet {self.name} is empty")
        if ".." in item:
            a, _, b = item.partition("..")
            lo = self._offset_of(a.strip(), "excludeIps start")
            hi = self._offset_of(b.strip(), "excludeIps end")
            if hi < lo:
                raise InvalidSubnet(f"excludeIps range {item} of subnet {self.name} is "
                                    "reversed (start after end)")
            return lo, hi
        off = self._offset_of(item.strip(), "excludeIps address")
        return off, off

    def _reserve(self, off: int, code: int) -> None:
        if self._state(off) != FREE:
            return
        if off < self.window:
            self.state[off] = code
        else:
            self.sparse[off] = code
        self.reserved += 1

    # -- queries -----------------------------------------------------------------
    def _state(self, off: int) -> int:
        if off < self.window:
            return self.state[off]
        code = self.sparse.get(off, FREE)
        if code == FREE and self._excl_ranges:
            i = bisect.bisect_right(self._excl_ranges, (off, MAX_OFFSET)) - 1
            if i >= 0 and off <= self._excl_ranges[i][1]:
                return EXCLUDED
        return code

    def offset(self, version: int, value: int, text: str) -> int:
        """Offset of an address in this pool; raises AddressOutOfRange."""
        off = value - self.base
        if version != self.version or not 0 <= off < self.size:
            raise AddressOutOfRange(f"address {text} is outside subnet {self.name} "
                                    f"({self.cidr})")
        return off

    def check_free(self, off: int, text: str) -> str | None:
        """None if free (or quarantined: the IPAM decides who may take it),
        else the holder's key; raises AddressExcluded."""
        code = self._state(off)
        if code in (FREE, QUARANTINED):
            return None
        if code == USED:
            return self.holders[off]
        raise AddressExcluded(f"address {text} is {_WHY[code]} of subnet {self.name} "
                              f"({self.cidr}) and cannot be assigned")

    def next_free(self) -> int:
        st = self.state
        i = st.find(FREE, self.cursor)
        if i < 0:
            i = st.find(FREE, 0, self.cursor)
        if i < 0:
            raise SubnetFull(f"subnet {self.name} ({self.cidr}) has no free address "
                             f"({len(self.holders)} in use)")
        return i

    def take(self, off: int, owner: str) -> None:
        if off < self.window:
            self.state[off] = USED
            self.cursor = off + 1 if off + 1 < self.window else 0
        else:
            self.sparse[off] = USED
        self.holders[off] = owner

    def free(self, off: int, quarantined: bool = False) -> None:
        """Release `off`: FREE, or QUARANTINED (not handed out by next_free)."""
        if off < self.window:
            self.state[off] = QUARANTINED if quarantined else FREE
        elif quarantined:
            self.sparse[off] = QUARANTINED
        else:
            self.sparse.pop(off, None)
        self.holders.pop(off, None)

    def unquarantine(self, off: int) -> None:
        """A quarantined `off` is FREE again (nothing if it is not quarantined)."""
        if self._state(off) == QUARANTINED:
            self.free(off)

    def ip(self, off: int) -> str:
        return format_ip(self.version, self.base + off)

    @property
    def used(self) -> int:
        return len(self.holders)

    @property
    def available(self) -> int:
        return self.size - self.reserved - len(self.holders)


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, disjoint union of inclusive (lo, hi) ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out
