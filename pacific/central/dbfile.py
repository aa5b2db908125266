"""A member's database file: what to do with it before ovsdb-server starts.

    p = plan(state, cid_marker, peers, seed, peers_answer)
    p.action: "use" | "create" | "join"  (and p.reason, said in the log)

The rules (decision 0046):
- a file ovsdb-server can open is used as it is (a torn last record included:
  ovsdb-server itself drops it);
- a file it cannot open (its header unreadable) is moved aside, never deleted,
  and replaced as a missing one is;
- a missing file joins the cluster when this member knows it was in one (the
  cluster id it kept beside the file: `join-cluster --cid`), or when any peer
  serves the database as a cluster member (`in_cluster`: a peer that is itself
  still joining does not count), or when it is not the seed; only the seed (the first
  member address) creates a cluster, and only with no peer answering: a seed
  that lost its file while its peers run joins them instead of starting a
  second cluster;
- a member without peers (one central node) creates a new, empty database:
  Pacific's controller rewrites NB from Kubernetes, ovn-northd rewrites SB.
"""
from __future__ import annotations

import datetime
import json
import logging
import os
import subprocess
from dataclasses import dataclass
from typing import Callable

LOG = logging.getLogger(__name__)
MISSING, USABLE, CORRUPT = "missing", "usable", "corrupt"
NO_CLUSTER = "00000000-0000-0000-0000-000000000000"   # _Server's cid of a server still joining


@dataclass(frozen=True)
class Plan:
    action: str               # use, create, join
    reason: str
    cid: str | None = None    # join-cluster --cid


def plan(state: str, cid_marker: str | None, has_peers: bool, seed: bool,
         peers_answer: bool) -> Plan:
    if state == USABLE:
        return Plan("use", "its database file opens")
    lost = "is corrupt (moved aside)" if state == CORRUPT else "is missing"
    if not has_peers:
        return Plan("create", f"the database file {lost} and there is no other member: "
                              "a new, empty database (the controller and ovn-northd refill it)")
    if cid_marker:
        return Plan("join", f"the database file {lost}; this member was in cluster "
                            f"{cid_marker}: joining it again from its peers", cid_marker)
    if peers_answer:
        return Plan("join", f"the database file {lost} and a peer answers: joining its cluster")
    if seed:
        return Plan("create", f"the database file {lost}, no peer answers and this member is "
                              "the seed (first address): creating the cluster")
    return Plan("join", f"the database file {lost}: joining the seed's cluster "
                        "(waiting for it to answer)")


def tool(*args: str, program: str = "ovsdb-tool") -> subprocess.CompletedProcess:
    return subprocess.run([program, *args], capture_output=True, text=True, timeout=60)


def inspect(path: str, program: str = "ovsdb-tool") -> tuple[str, str]:
    """(MISSING | USABLE | CORRUPT, why)."""
    if not os.path.exists(path):
        return MISSING, f"{path} does not exist"
    cp = tool("db-sid", path, program=program)
    if cp.returncode != 0:
        return CORRUPT, (cp.stderr or cp.stdout).strip() or f"ovsdb-tool db-sid {path} failed"
    return USABLE, cp.stdout.strip()


def move_aside(path: str, why: str = "corrupt") -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dest = f"{path}.{why}-{stamp}"
    os.replace(path, dest)
    return dest


def cid_marker_path(path: str) -> str:
    return f"{path}.cid"


def read_cid_marker(path: str) -> str | None:
    try:
        with open(cid_marker_path(path)) as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def forget_cid(path: str) -> None:
    try:
        os.unlink(cid_marker_path(path))
    except FileNotFoundError:
        pass


def write_cid_marker(path: str, cid: str) -> None:
    if read_cid_marker(path) == cid:
        return
    tmp = cid_marker_path(path) + ".tmp"
    with open(tmp, "w") as f:
        f.write(cid + "\n")
    os.replace(tmp, cid_marker_path(path))


def in_cluster(remote: str, name: str, ssl_args: list[str],
               program: str = "ovsdb-client") -> bool:
    """Does the server at client remote `remote` hold `name` as a member of a
    cluster (its `_Server` row has a cluster id)?  A server still joining (a
    cid of zeros), or not answering, does not."""
    query = json.dumps(["_Server", {"op": "select", "table": "Database",
                                    "where": [["name", "==", name]], "columns": ["cid"]}])
    try:
        cp = subprocess.run([program, "--timeout=3", *ssl_args, "query", remote, query],
                            capture_output=True, text=True, timeout=10)
        rows = json.loads(cp.stdout)[0]["rows"] if cp.returncode == 0 else []
    except (subprocess.TimeoutExpired, ValueError, LookupError, TypeError):
        return False
    return any(isinstance(r.get("cid"), list) and r["cid"][0] == "uuid" and
               r["cid"][1] != NO_CLUSTER for r in rows)


def prepare(path: str, schema: str, name: str, local: str, peers: list[str], seed: bool,
            peer_in_cluster: Callable[[], bool], program: str = "ovsdb-tool") -> Plan:
    """Make `path` ready for ovsdb-server (the rules above); returns what was done."""
    state, why = inspect(path, program)
    if state == CORRUPT:
        dest = move_aside(path)
        LOG.error("%s: database file unusable (%s): moved aside to %s", name, why, dest)
    p = plan(state, read_cid_marker(path), bool(peers), seed,
             state != USABLE and bool(peers) and peer_in_cluster())
    if p.action == "create":
        cp = tool("create-cluster", path, schema, local, program=program)
    elif p.action == "join":
        cid = [f"--cid={p.cid}"] if p.cid else []
        cp = tool(*cid, "join-cluster", path, name, local, *peers, program=program)
    else:
        return p
    if cp.returncode != 0:
        raise RuntimeError(f"{name}: ovsdb-tool {p.action} failed: "
                           f"{(cp.stderr or cp.stdout).strip()}")
    return p
