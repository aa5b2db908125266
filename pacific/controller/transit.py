"""Transit networks of the egress gateways: one /24 of EGRESS_TRANSIT_CIDR per
gateway, a centralized Subnet's (controller/gateway.py) or a Service's egress
SNAT (controller/egress_snat.py): router port .1, the gateway host .2, and a
router MAC made from the network's index.

Both features reconcile on several workers at once, and a router port reaches
the NB replica only once its transaction has committed, so a free network is
not read from NB alone (two Subnets created together took the same /24, the
same router address and MAC): `TransitNetworks` hands indexes out under one
lock and remembers each one it handed out until its port is removed.  A port
that shares its network with another one (as such a race left them) moves to a
free network; the port whose name sorts first keeps it.

Tenants draw from the same 256 as administrators (a Service's egress SNAT
gateway): a Service's port takes a network it does not have yet only while
more than `reserved` are free (`TransitRefused` otherwise), so a tenant's
Services cannot leave a centralized Subnet or an EgressIP without a gateway;
how many one namespace holds is controller/egress_snat.py's to bound.  Every
release is told to the callbacks of `on_release` (a Service refused for the
reserve is reconciled again).
"""
from __future__ import annotations

import ipaddress
import threading

from pacific import names
from pacific.ovn import ensure

_BASE = ipaddress.ip_network(names.EGRESS_TRANSIT_CIDR)
COUNT = 2 ** (24 - _BASE.prefixlen)
PORT_PREFIX = names.router_port_name(names.egress_switch_name(""))


def transit(index: int) -> tuple[str, str, str]:
    """(router CIDR, host address, router MAC) of transit network `index`."""
    if not 0 <= index < COUNT:
        raise ValueError(f"transit network {index} outside {names.EGRESS_TRANSIT_CIDR}")
    net = _BASE.network_address + (index << 8)
    return f"{net + 1}/24", str(net + 2), f"0e:00:64:41:{index:02x}:01"


_BASE6 = ipaddress.ip_network(names.EGRESS_TRANSIT_CIDR6)


def transit6(index: int) -> tuple[str, str]:
    """(router CIDR, host address) of transit network `index` in IPv6 (an IPv6
    EgressIP's gateway port has both): the /64 of EGRESS_TRANSIT_CIDR6 numbered
    by the index, ::1 and ::2."""
    transit(index)          # the same bounds
    net = _BASE6.network_address + (index << 64)
    return f"{net + 1}/64", str(net + 2)


def transit_index(networks) -> int | None:
    """The index of the transit network among a router port's `networks`."""
    for n in networks or []:
        iface = ipaddress.ip_interface(n)
        if iface.ip in _BASE:
            return (int(iface.ip) - int(_BASE.network_address)) >> 8
    return None


class TransitRefused(RuntimeError):
    """No transit network for a tenant's gateway: the rest is the reserve."""


class TransitNetworks:
    """Which transit network each gateway router port has: what NB shows,
    plus what this controller handed out and NB may not show yet."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}       # router port -> index handed out
        self.on_release: list = []            # callables, run after every release

    def index(self, nb, lrp: str, reserved: int = 0) -> int:
        """The transit network of router port `lrp`: the one it has unless
        another port that sorts first has it too, else the lowest free one,
        if more than `reserved` are free (else TransitRefused)."""
        with self._lock:
            if lrp in self._held:   # parted from any other port when handed out
                return self._held[lrp]
            where = {row.name: transit_index(row.networks) for row in nb.rows_owned(ensure.LRP)
                     if row.name.startswith(PORT_PREFIX)}
            where.update(self._held)
            mine = where.pop(lrp, None)
            if mine is None or any(i == mine and n < lrp for n, i in where.items()):
                taken = set(where.values())
                mine = next((i for i in range(COUNT) if i not in taken), None)
                if mine is not None and COUNT - len(taken - {None}) <= reserved:
                    raise TransitRefused(f"no transit network free for {lrp} outside the "
                                         f"{reserved} reserved")
                if mine is None:
                    raise RuntimeError(f"no free transit network left in "
                                       f"{names.EGRESS_TRANSIT_CIDR} for {lrp}")
            self._held[lrp] = mine
            return mine

    def holds(self, lrp: str) -> bool:
        """Did this controller hand `lrp` a network it has not released?"""
        with self._lock:
            return lrp in self._held

    def release(self, lrp: str) -> None:
        """`lrp` was removed: its network is free again."""
        with self._lock:
            self._held.pop(lrp, None)
        for tell in list(self.on_release):
            tell()
