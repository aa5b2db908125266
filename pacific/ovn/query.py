"""One-shot OVSDB reads, for the day-two tools (trace, topology, diagnose).

The daemons keep IDL replicas (pacific.ovn); a command-line tool that asks a
few questions once must not download a 100,000-port database first, so it
sends OVSDB `select` operations with only the columns it needs over one
JSON-RPC connection (the ovs library's, so tcp:, ssl: and unix: all work):

    with Query("tcp:172.31.0.1:6641", "OVN_Northbound") as nb:
        rows = nb.select("ACL", ["_uuid", "external_ids"])
        acl = nb.select("ACL", ["name"], [["_uuid", "==", ["uuid", u]]])

Rows come back as plain dicts: maps as dicts, uuids as strings, sets as lists,
except that OVSDB sends a set of one element as the bare element: read set
columns through `as_list`.
"""
from __future__ import annotations

import os

import ovs.jsonrpc
import ovs.stream

from pacific.ovn import base


class QueryError(Exception):
    pass


def _value(v):
    if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str):
        kind, body = v
        if kind == "map":
            return {_value(k): _value(x) for k, x in body}
        if kind == "set":
            return [_value(x) for x in body]
        if kind in ("uuid", "named-uuid"):
            return body
    return v


def as_list(v) -> list:
    """A set column's value as a list (one element comes bare, see above)."""
    return v if isinstance(v, list) else [v]


def ssl_argv() -> list[str]:
    """ovn-trace / ovn-*ctl flags for the PKI pacific.ovn.base.configure_ssl set
    (none if not set)."""
    pki = base.ssl_files()
    if not pki:
        return []
    return [f"--private-key={pki['private key']}", f"--certificate={pki['certificate']}",
            f"--ca-cert={pki['CA certificate']}"]


class Query:
    def __init__(self, remote: str, database: str, timeout: float = 10.0):
        self.database, self.timeout = database, timeout
        self.remote = remote
        self._conn = None
        last = None
        # a clustered database is given as "tcp:a,tcp:b,tcp:c": any member answers reads
        for one in remote.split(","):
            err, stream = ovs.stream.Stream.open_block(ovs.stream.Stream.open(one.strip()),
                                                      int(timeout * 1000))
            if not err:
                self._conn = ovs.jsonrpc.Connection(stream)
                break
            last = f"{one}: {os.strerror(err) if err > 0 else err}"
        if self._conn is None:
            raise QueryError(f"cannot connect to {database} at {remote} ({last})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def transact(self, *ops: dict) -> list:
        msg = ovs.jsonrpc.Message.create_request("transact", [self.database, *ops])
        err, reply = self._conn.transact_block(msg)
        if err:
            raise QueryError(f"{self.database} at {self.remote}: connection error {err}")
        if reply.error:
            raise QueryError(f"{self.database} at {self.remote}: {reply.error}")
        for res in reply.result:
            if isinstance(res, dict) and "error" in res:
                raise QueryError(f"{self.database}: {res['error']}: {res.get('details', '')}")
        return reply.result

    def select(self, table: str, columns: list[str], where: list | None = None) -> list[dict]:
        res = self.transact({"op": "select", "table": table, "where": where or [],
                             "columns": columns})
        return [{k: _value(v) for k, v in row.items()} for row in res[0]["rows"]]

    def one(self, table: str, columns: list[str], where: list) -> dict | None:
        rows = self.select(table, columns, where)
        return rows[0] if rows else None
