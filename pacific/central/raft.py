"""A RAFT member's `cluster/status`, read; and which servers its leader kicks.

    st = parse(text)             # text: `ovs-appctl -t CTL cluster/status DB`
    st.member, st.leader_known, st.role, st.servers
    stale(st)                    # server ids the leader should kick

A member that lost its database file joins again as a new server at the same
address; the cluster still lists its old server id, which never answers and
counts against the majority.  Only the leader knows when each server last
answered it, so the leader kicks an old id once a newer server at the same
address has answered and the old one has been silent for STALE_MS
(kube-ovn's leader checker does the same).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

STALE_MS = 10_000      # an old id at a re-joined address silent this long is kicked
FRESH_MS = 5_000       # ... once the new id answered within this

_SERVER = re.compile(r"^\s+(\w+) \((\w+) at (\S+)\)( \(self\))?(.*)$")
_LAST = re.compile(r"last msg (\d+) ms ago")


@dataclass(frozen=True)
class Server:
    sid: str                  # the short id cluster/status prints
    address: str
    self_: bool
    last_msg_ms: int | None   # None: the leader has not heard from it (or not leader)


@dataclass
class Status:
    name: str = ""
    cluster_id: str = ""       # full uuid
    server_id: str = ""        # full uuid
    status: str = ""           # "cluster member", "joining cluster", "disconnected from the cluster"...
    role: str = ""             # leader, follower, candidate
    leader: str = ""           # "self", a short id, or "unknown"
    servers: list[Server] = field(default_factory=list)

    @property
    def member(self) -> bool:
        return self.status == "cluster member"

    @property
    def leader_known(self) -> bool:
        return self.leader not in ("", "unknown")

    @property
    def is_leader(self) -> bool:
        return self.role == "leader"


def _full(value: str) -> str:
    """"4a2c (4a2c56dc-...)" -> the uuid in parentheses."""
    m = re.search(r"\(([0-9a-f-]{36})\)", value)
    return m.group(1) if m else value.strip()


def parse(text: str) -> Status:
    st = Status()
    in_servers = False
    for line in text.splitlines():
        if in_servers:
            m = _SERVER.match(line)
            if m:
                last = _LAST.search(m.group(5))
                st.servers.append(Server(m.group(1), m.group(3), bool(m.group(4)),
                                         int(last.group(1)) if last else None))
                continue
            in_servers = False
        key, sep, value = line.partition(":")
        if not sep:
            continue
        value = value.strip()
        if key == "Servers":
            in_servers = True
        elif key == "Name":
            st.name = value
        elif key == "Cluster ID":
            st.cluster_id = _full(value)
        elif key == "Server ID":
            st.server_id = _full(value)
        elif key == "Status":
            st.status = value
        elif key == "Role":
            st.role = value
        elif key == "Leader":
            st.leader = value
    return st


def stale(st: Status) -> list[str]:
    """The server ids a leader should kick: at an address another server also
    has, silent for STALE_MS while the other (or the leader itself) is fresh."""
    if not st.is_leader:
        return []
    by_address: dict[str, list[Server]] = {}
    for s in st.servers:
        by_address.setdefault(s.address, []).append(s)
    out = []
    for same in by_address.values():
        if len(same) < 2:
            continue
        fresh = [s for s in same if s.self_ or
                 (s.last_msg_ms is not None and s.last_msg_ms <= FRESH_MS)]
        if not fresh:
            continue
        out += [s.sid for s in same if not s.self_ and s not in fresh and
                (s.last_msg_ms is None or s.last_msg_ms >= STALE_MS)]
    return sorted(out)
