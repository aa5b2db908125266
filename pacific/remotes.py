"""OVSDB remotes as Pacific's daemons are given them: "tcp:HOST:PORT",
"ssl:HOST:PORT", "unix:PATH", several joined by commas (a RAFT cluster's
members).  Parsed once here for whoever needs the addresses behind them (the
addresses no Service may claim, the host firewall's OVN central rules).

    endpoints("ssl:192.168.77.1:6642,ssl:[fd00::1]:6642")
        # [("192.168.77.1", 6642), ("fd00::1", 6642)]
"""
from __future__ import annotations

import ipaddress


def members(remote: str | None) -> list[tuple[str, int | None]]:
    """(host, port or None) of every tcp:/ssl: member, the host as written
    (an address or a name, IPv6 without its brackets); unix: members are
    skipped."""
    out = []
    for item in (remote or "").split(","):
        kind, _, rest = item.strip().partition(":")
        if kind not in ("tcp", "ssl") or not rest:
            continue
        host, _, port = rest.rpartition(":")
        if not host:
            host, port = rest, ""
        out.append((host.strip("[]"), int(port) if port.isdigit() else None))
    return out


def endpoints(remote: str | None) -> list[tuple[str, int]]:
    """(address, port) of every tcp:/ssl: member whose host is an IP address;
    unix: members and host names are skipped (nothing to match on the wire)."""
    out = []
    for host, port in members(remote):
        try:
            if port is not None:
                out.append((str(ipaddress.ip_address(host)), port))
        except ValueError:
            continue
    return out


def addresses(*remotes: str | None) -> set[str]:
    """Every IP address the remotes name."""
    return {host for r in remotes for host, _ in endpoints(r)}
