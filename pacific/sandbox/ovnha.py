"""OVN central as RAFT clusters (`pacific sandbox up --ha`).

Three member namespaces `pac-<name>-ovn1..3` hang off the underlay bridge, at
192.168.77.2-4.  Each runs a clustered NB and SB ovsdb-server (RAFT on ports
6643 / 6644, clients on 6641 / 6642, all TLS, and on a unix socket in its
directory); members 1 and 2 run ovn-northd (one active, through its lock).
Clients are given every member:

    Pacific's controllers, ovn-nbctl/sbctl   unix:<m1>/nb.sock,unix:<m2>/nb.sock,...
    ovn-controller (its SSL row), northd     ssl:192.168.77.2:6642,ssl:...:6642,...

Every TLS peer has a certificate of the sandbox's OVN CA (central/pki) and
verifies the other's against it.

and follow the leader (the ovs IDL's leader_only).  `member_*` functions are the
operations a test or an operator needs: who leads, stop and start a member,
and re-create one whose database file is gone (kicked from the cluster, then
joined with a new file).
"""
from __future__ import annotations

import ipaddress
import logging
import os
from typing import TYPE_CHECKING

from pacific import names
from pacific.sandbox import daemons, netns
from pacific.sandbox.k8s.pki import Pki
from pacific.sandbox.proc import SandboxError, run, stop_pid, wait_for

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox

log = logging.getLogger(__name__)
MEMBERS = 3
RAFT_PORTS = {"nb": 6643, "sb": 6644}
CLIENT_PORTS = {"nb": names.OVN_NB_PORT, "sb": names.OVN_SB_PORT}
DB_NAMES = {"nb": "OVN_Northbound", "sb": "OVN_Southbound"}
NORTHD_MEMBERS = (1, 2)


def member_ip(sb: "Sandbox", i: int) -> str:
    return str(ipaddress.ip_network(names.SANDBOX_UNDERLAY_CIDR)[1 + i])


def member_netns(sb: "Sandbox", i: int) -> str:
    return f"{sb.netns_prefix}ovn{i}"


def member_dir(sb: "Sandbox", i: int) -> str:
    return os.path.join(sb.central_dir, f"ovn{i}")


def unix_remote(sb: "Sandbox", i: int, db: str) -> str:
    return f"unix:{member_dir(sb, i)}/{db}.sock"


def pki(sb: "Sandbox") -> Pki:
    return Pki(os.path.join(sb.central_dir, "pki")).ensure_ca("pacific-sandbox-ovn-ca")


def ssl_files(sb: "Sandbox", name: str, hosts=()) -> tuple[str, str, str]:
    """(private key, certificate, CA certificate) of TLS peer `name`."""
    p = pki(sb)
    crt, key = p.peer(name, list(hosts))
    return key, crt, p.ca_crt


def _ssl_args(files) -> list[str]:
    key, crt, ca = files
    return [f"--private-key={key}", f"--certificate={crt}", f"--ca-cert={ca}"]


def remotes(sb: "Sandbox") -> dict[str, str]:
    """nb_remote, sb_remote (unix, any namespace), nb_tcp_remote, sb_tcp_remote."""
    members = range(1, MEMBERS + 1)
    return {
        "nb_remote": ",".join(unix_remote(sb, i, "nb") for i in members),
        "sb_remote": ",".join(unix_remote(sb, i, "sb") for i in members),
        "nb_tcp_remote": ",".join(f"ssl:{member_ip(sb, i)}:{CLIENT_PORTS['nb']}" for i in members),
        "sb_tcp_remote": ",".join(f"ssl:{member_ip(sb, i)}:{CLIENT_PORTS['sb']}" for i in members),
    }


def _tag(i: int, db: str) -> str:
    return f"central/ovn{i}/{db}"


def _ctl(sb: "Sandbox", i: int, db: str) -> str:
    return os.path.join(member_dir(sb, i), f"{db}.ctl")


def _create_file(sb: "Sandbox", i: int, db: str) -> None:
    path = os.path.join(member_dir(sb, i), f"{db}.db")
    if os.path.exists(path):
        os.unlink(path)
    local = f"ssl:{member_ip(sb, i)}:{RAFT_PORTS[db]}"
    if i == 1 and not _others_alive(sb, i, db):
        run(["ovsdb-tool", "create-cluster", path, sb.ovs.schema(f"ovn-{db}"), local])
    else:
        others = [f"ssl:{member_ip(sb, j)}:{RAFT_PORTS[db]}" for j in range(1, MEMBERS + 1)
                  if j != i]
        run(["ovsdb-tool", "join-cluster", path, DB_NAMES[db], local, *others])


def _others_alive(sb: "Sandbox", i: int, db: str) -> bool:
    st = sb.state.read()
    return any(_tag(j, db) in st["daemons"] for j in range(1, MEMBERS + 1) if j != i)


def _start_server(sb: "Sandbox", i: int, db: str) -> None:
    d = member_dir(sb, i)
    files = ssl_files(sb, f"ovn{i}", [member_ip(sb, i)])
    st = daemons.start_detached("ovsdb-server", db, [
        f"--remote=punix:{d}/{db}.sock", f"--remote=pssl:{CLIENT_PORTS[db]}:{member_ip(sb, i)}",
        *_ssl_args(files), os.path.join(d, f"{db}.db")], member_netns(sb, i), d)
    sb._record_daemon(_tag(i, db), st, member_netns(sb, i))


def central_up(sb: "Sandbox") -> None:
    """The members' namespaces, databases and northds (the underlay bridge is up)."""
    for i in range(1, MEMBERS + 1):
        ns = member_netns(sb, i)
        sb._record_netns(ns)
        netns.create(ns)
        netns.veth(f"ovn{i}", sb.central_netns, "eth0", ns, sb.underlay_mtu)
        run(["ip", "link", "set", "dev", f"ovn{i}", "master", names.SANDBOX_UNDERLAY_BRIDGE, "up"],
            netns=sb.central_netns)
        run(["ip", "addr", "add", f"{member_ip(sb, i)}/{sb.underlay_prefixlen}", "dev", "eth0"],
            netns=ns)
        run(["ip", "link", "set", "dev", "eth0", "up"], netns=ns)
        netns.tx_offload_off(ns, "eth0")
        os.makedirs(member_dir(sb, i), exist_ok=True)
        for db in ("nb", "sb"):
            _create_file(sb, i, db)
            _start_server(sb, i, db)
    for db in ("nb", "sb"):
        wait_for(lambda db=db: len(members_up(sb, db)) == MEMBERS, 30,
                 f"{DB_NAMES[db]} cluster of {MEMBERS} members")
    r = remotes(sb)
    for i in NORTHD_MEMBERS:
        d = member_dir(sb, i)
        st = daemons.start_detached("ovn-northd", "northd",
                                    ["--monitor", f"--ovnnb-db={r['nb_tcp_remote']}",
                                     f"--ovnsb-db={r['sb_tcp_remote']}",
                                     *_ssl_args(ssl_files(sb, "northd"))],
                                    member_netns(sb, i), d)
        sb._record_daemon(f"central/ovn{i}/northd", st, member_netns(sb, i))
    log.info("OVN central: NB and SB clusters of %d members, northd on members %s",
             MEMBERS, ", ".join(map(str, NORTHD_MEMBERS)))


def status_at(ctl: str, db: str) -> str:
    """`cluster/status` of the clustered `db` ("nb", "sb") whose ovsdb-server
    answers on control socket `ctl` ("" if it does not answer)."""
    cp = run(["ovs-appctl", "-t", ctl, "cluster/status", DB_NAMES[db]], check=False, timeout=5)
    return cp.stdout if cp.returncode == 0 else ""


def cluster_status(sb: "Sandbox", i: int, db: str) -> str:
    """`cluster/status` of member i's db ("" if it does not answer)."""
    return status_at(_ctl(sb, i, db), db)


def members_up(sb: "Sandbox", db: str) -> list[int]:
    """Members whose server answers and has joined the cluster."""
    out = []
    for i in range(1, MEMBERS + 1):
        st = cluster_status(sb, i, db)
        if "Status: cluster member" in st:
            out.append(i)
    return out


def members_running(sb: "Sandbox", db: str) -> list[int]:
    """Members whose server this sandbox runs (started, not stopped)."""
    st = sb.state.read()["daemons"]
    return [i for i in range(1, MEMBERS + 1) if _tag(i, db) in st]


def leader(sb: "Sandbox", db: str) -> int | None:
    for i in range(1, MEMBERS + 1):
        if "Role: leader" in cluster_status(sb, i, db):
            return i
    return None


def member_stop(sb: "Sandbox", i: int, db: str, kill: bool = True) -> None:
    """Stop member i's server of `db` (SIGKILL by default: a crash)."""
    st = sb.state.read()["daemons"].get(_tag(i, db))
    if st is None:
        raise SandboxError(f"member {i} of {DB_NAMES[db]} is not running")
    if kill:
        try:
            os.kill(st["pid"], 9)
        except ProcessLookupError:
            pass
    stop_pid(st["pid"], st["start"], what=_tag(i, db))
    with sb.state.update() as s:
        s["daemons"].pop(_tag(i, db), None)


def member_start(sb: "Sandbox", i: int, db: str) -> None:
    """Start member i's server of `db` with its database file (it rejoins)."""
    if not os.path.exists(os.path.join(member_dir(sb, i), f"{db}.db")):
        raise SandboxError(f"member {i} of {DB_NAMES[db]} has no database file: "
                           "member_recreate() it")
    _start_server(sb, i, db)


def member_recreate(sb: "Sandbox", i: int, db: str) -> None:
    """Member i lost its database file: the leader kicks its old server id out of
    the cluster, and a new file joins as a new server."""
    d = member_dir(sb, i)
    sid_file = os.path.join(d, f"{db}.sid")
    old = None
    if os.path.exists(sid_file):
        with open(sid_file) as f:
            old = f.read().strip()
    lead = leader(sb, db)
    if lead is None:
        raise SandboxError(f"{DB_NAMES[db]} has no leader (quorum lost): a member cannot be "
                           "re-created now")
    if old:
        run(["ovs-appctl", "-t", _ctl(sb, lead, db), "cluster/kick", DB_NAMES[db], old],
            check=False)
    _create_file(sb, i, db)
    _start_server(sb, i, db)


def remember_server_ids(sb: "Sandbox") -> None:
    """Each member's server id, kept beside its files (to kick it if the file is lost)."""
    for i in range(1, MEMBERS + 1):
        for db in ("nb", "sb"):
            for line in cluster_status(sb, i, db).splitlines():
                if line.startswith("Server ID:"):
                    # "Server ID: 3f2a (3f2a1b...-...)": the full id in parentheses
                    full = line.split("(", 1)[-1].rstrip(")").strip()
                    with open(os.path.join(member_dir(sb, i), f"{db}.sid"), "w") as f:
                        f.write(full)
