"""`pacific-central`: one member of OVN central, kept in its RAFT clusters.

Runs, on one central node, the NB and SB ovsdb-servers of that member (each a
RAFT cluster of every `--members` address) and, unless `--no-northd`, an
ovn-northd (one of the members' is active, through its lock in SB).  It
creates or joins the clusters, moves a database file that cannot be opened
aside and joins again from the peers, kicks the server ids a re-joined member
left behind, and restarts a daemon that exits.  /healthz and /readyz answer from
`cluster/status`, not from a port being open (decision 0046).
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import socket
import sys
import threading
import time

from pacific import daemonlog, names, ovsinstall
from pacific.central.member import DbMember, DbSpec, Settings
from pacific.central.northd import Northd
from pacific.metrics import MetricsServer, parse_address

LOG = logging.getLogger("pacific.central")
STATUS_STALE = 15.0      # a cluster/status older than this: not ready
SILENT_LIMIT = 60.0      # ... older than this (once it answered): not alive
MEMBERS_EVERY = 10.0     # seconds between looks at the labelled nodes


def _env(name: str, default=None):
    return os.environ.get(name, default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pacific-central",
        description="One member of OVN central: the NB and SB databases as RAFT clusters of "
                    "every --members address, and ovn-northd.  Creates or joins the "
                    "clusters, recovers a lost or unreadable database file from its peers, "
                    "restarts what exits; /healthz and /readyz report the clusters' state.  "
                    "Flags have an environment variable (in brackets).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--address", default=_env("PACIFIC_CENTRAL_ADDRESS"),
                   help="this member's address (with --members-from-nodes: its node's "
                        "InternalIP) [PACIFIC_CENTRAL_ADDRESS]")
    p.add_argument("--members", default=_env("PACIFIC_CENTRAL_MEMBERS"),
                   help="every member's address, comma-separated, this one's included "
                        "(1, 3 or 5); the lowest creates the clusters "
                        "(default: --address alone) [PACIFIC_CENTRAL_MEMBERS]")
    p.add_argument("--members-from-nodes", action="store_true",
                   default=_env("PACIFIC_CENTRAL_MEMBERS_FROM_NODES") == "1",
                   help=f"the members are the nodes labelled {names.CENTRAL_ROLE_LABEL}="
                        f"{names.CENTRAL_ROLE} (their InternalIPs); this node leaves the "
                        "clusters when it is stopped after its label was taken off "
                        "[PACIFIC_CENTRAL_MEMBERS_FROM_NODES=1]")
    p.add_argument("--node-name", default=_env("NODE_NAME", socket.gethostname()),
                   help="this node's name, with --members-from-nodes [NODE_NAME]")
    p.add_argument("--pod-name", default=_env("POD_NAME"),
                   help="this pod's name: labelled with who leads each database "
                        "(pacific.io/ovn-nb-leader, -sb-leader) [POD_NAME]")
    p.add_argument("--pod-namespace", default=_env("POD_NAMESPACE", names.PACIFIC_NAMESPACE),
                   help="[POD_NAMESPACE]")
    p.add_argument("--kubeconfig", help="with --members-from-nodes (default: $KUBECONFIG, "
                                        "else the in-cluster service account)")
    p.add_argument("--db-dir", default=_env("PACIFIC_CENTRAL_DB_DIR", "/var/lib/pacific/central"),
                   help="the databases (nb.db, sb.db) and their cluster ids "
                        "[PACIFIC_CENTRAL_DB_DIR]")
    p.add_argument("--run-dir", default=_env("PACIFIC_CENTRAL_RUN_DIR", "/var/run/pacific/central"),
                   help="control and client sockets (nb.ctl, nb.sock, ...) and the daemons' "
                        "logs [PACIFIC_CENTRAL_RUN_DIR]")
    p.add_argument("--ssl-key", default=_env("PACIFIC_CENTRAL_SSL_KEY"),
                   help="this member's private key [PACIFIC_CENTRAL_SSL_KEY]")
    p.add_argument("--ssl-cert", default=_env("PACIFIC_CENTRAL_SSL_CERT"),
                   help="its certificate [PACIFIC_CENTRAL_SSL_CERT]")
    p.add_argument("--ssl-ca", default=_env("PACIFIC_CENTRAL_SSL_CA"),
                   help="the CA every peer's and client's certificate is signed by "
                        "[PACIFIC_CENTRAL_SSL_CA]")
    p.add_argument("--allow-tcp", action="store_true",
                   default=_env("PACIFIC_CENTRAL_ALLOW_TCP") == "1",
                   help="without TLS files, listen and run RAFT on plain TCP (anyone who "
                        "reaches the ports may rewrite the network: test clusters only) "
                        "[PACIFIC_CENTRAL_ALLOW_TCP=1]")
    p.add_argument("--no-northd", action="store_true", help="do not run ovn-northd here")
    p.add_argument("--nb-port", type=int, default=names.OVN_NB_PORT)
    p.add_argument("--sb-port", type=int, default=names.OVN_SB_PORT)
    p.add_argument("--nb-raft-port", type=int, default=names.OVN_NB_RAFT_PORT)
    p.add_argument("--sb-raft-port", type=int, default=names.OVN_SB_RAFT_PORT)
    p.add_argument("--health-address", default=_env("PACIFIC_CENTRAL_HEALTH_ADDRESS",
                                                    f"127.0.0.1:{names.CENTRAL_HEALTH_PORT}"),
                   help="host:port of /healthz and /readyz ('' for none) "
                        "[PACIFIC_CENTRAL_HEALTH_ADDRESS]")
    p.add_argument("--log-file", help="log here instead of stderr")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def kube_api(args):
    if getattr(args, "_api", None) is None:
        from pacific.kube import client
        args._api = client.load(args.kubeconfig)
    return args._api


def from_nodes(args, stop: threading.Event):
    """(Discovery, address, members) once this node is labelled (said every
    10 s while waiting); None if stopped meanwhile.  Any count of labelled nodes
    is taken (a relabel passes through even ones), an even one with a warning."""
    from pacific.central.discovery import Discovery
    d = Discovery(kube_api(args), args.node_name)
    said = 0.0
    while not stop.is_set():
        try:
            own, members = d.own_address(), d.members()
            if own and own in members:
                if len(members) % 2 == 0:
                    LOG.warning("%d nodes are labelled %s=%s: a cluster of an even size "
                                "survives no more failures than one of %d", len(members),
                                names.CENTRAL_ROLE_LABEL, names.CENTRAL_ROLE, len(members) - 1)
                return d, own, members
            why = (f"node {args.node_name} is not labelled {names.CENTRAL_ROLE_LABEL}="
                   f"{names.CENTRAL_ROLE} or has no InternalIP")
        except Exception as exc:  # noqa: BLE001 - the API may not answer yet
            why = f"cannot list the nodes: {exc}"
        if time.monotonic() - said > 10:
            LOG.warning("waiting to start: %s", why)
            said = time.monotonic()
        stop.wait(2.0)
    return None


def settings(args, install: ovsinstall.Install) -> Settings:
    if not args.address:
        raise SystemExit("pacific-central: give --address (or --members-from-nodes)")
    members = tuple(m.strip() for m in (args.members or args.address).split(",") if m.strip())
    if args.address not in members:
        raise SystemExit(f"pacific-central: --address {args.address} is not one of --members "
                         f"{','.join(members)}")
    if (not args.members_from_nodes and len(members) not in (1, 3, 5)) or \
            len(set(members)) != len(members):
        raise SystemExit(f"pacific-central: --members names {len(members)} addresses "
                         f"({','.join(members)}): give 1, 3 or 5 distinct ones (a RAFT "
                         "cluster of an even size survives no more failures than one less)")
    files = (args.ssl_key, args.ssl_cert, args.ssl_ca)
    if any(files) and not all(files):
        raise SystemExit("pacific-central: give --ssl-key, --ssl-cert and --ssl-ca together")
    for f in files:
        if f and not os.path.exists(f):
            raise SystemExit(f"pacific-central: TLS file {f} does not exist")
    if not all(files) and not args.allow_tcp:
        raise SystemExit("pacific-central: no TLS files (--ssl-key, --ssl-cert, --ssl-ca): "
                         "give them, or --allow-tcp for a test cluster")
    return Settings(args.address, members, args.db_dir, args.run_dir,
                    "ssl" if all(files) else "tcp", files if all(files) else None,
                    install.program("ovsdb-server"), install.program("ovsdb-tool"),
                    install.program("ovsdb-client"), install.program("ovs-appctl"))


def specs(args, install: ovsinstall.Install) -> list[DbSpec]:
    return [DbSpec("nb", "OVN_Northbound", install.schema("ovn-nb"), args.nb_port,
                   args.nb_raft_port),
            DbSpec("sb", "OVN_Southbound", install.schema("ovn-sb"), args.sb_port,
                   args.sb_raft_port)]


def follow_members(discovery, cfg: Settings, members: list[DbMember], northd) -> Settings:
    """The labelled nodes now: a member's later re-join and ovn-northd use them."""
    try:
        now = tuple(discovery.members())
    except Exception as exc:  # noqa: BLE001 - next time
        LOG.warning("cannot list the central nodes: %s", exc)
        return cfg
    if cfg.address not in now or set(now) == set(cfg.members):
        return cfg                  # (unlabelled: leaving is decided at the stop)
    LOG.info("central members now %s (were %s)", ",".join(now), ",".join(cfg.members))
    cfg = dataclasses.replace(cfg, members=now)
    for m in members:
        m.cfg = cfg
    if northd is not None:
        northd.members_changed(cfg)
    return cfg


def checks(members: list[DbMember]):
    """(liveness, readiness) from each database's last cluster/status."""
    def liveness():
        for m in members:
            _, age = m.status()
            if m.answered_once and age > SILENT_LIMIT:
                return False, f"{m.spec.name}: ovsdb-server has not answered cluster/status " \
                              f"for {age:.0f} s (restarted {m.restarts} times)"
        return True, "ovsdb-servers answer or are starting"

    def readiness():
        out = []
        for m in members:
            st, age = m.status()
            if st is None or age > STATUS_STALE:
                return False, f"{m.spec.name}: no cluster status yet"
            if not st.member:
                return False, f"{m.spec.name}: {st.status}"
            if not st.leader_known:
                return False, f"{m.spec.name}: no leader (an election, or quorum lost)"
            out.append(f"{m.spec.name} {st.role}")
        return True, ", ".join(out)
    return liveness, readiness


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    daemonlog.setup(args.verbose, args.log_file)
    install = ovsinstall.from_env()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    discovery = None
    if args.members_from_nodes:
        found = from_nodes(args, stop)
        if found is None:
            return 0
        discovery, args.address, found_members = found
        args.members = ",".join(found_members)
    cfg = settings(args, install)
    dbs = specs(args, install)
    members = [DbMember(s, cfg) for s in dbs]
    health = None
    if args.health_address:
        live, ready = checks(members)
        health = MetricsServer(parse_address(args.health_address), liveness=live,
                               readiness=ready).start()
    LOG.info("pacific-central %s of %s (%s): NB and SB members%s", cfg.address,
             ",".join(cfg.members), cfg.proto, "" if args.no_northd else ", ovn-northd")
    for m in members:
        m.start()
    northd = None if args.no_northd else Northd(cfg, dbs, install.program("ovn-northd"))
    if northd is not None:
        northd.start()
    labels = None
    if args.pod_name:
        from pacific.central.leaderlabel import LeaderLabels
        labels = LeaderLabels(kube_api(args), args.pod_namespace, args.pod_name, members)
    next_look = time.monotonic() + MEMBERS_EVERY
    while not stop.wait(1.0):
        if labels is not None:
            labels.tick()
        if discovery is not None and time.monotonic() >= next_look:
            next_look = time.monotonic() + MEMBERS_EVERY
            cfg = follow_members(discovery, cfg, members, northd)
    LOG.info("stopping")
    t0 = time.monotonic()
    if northd is not None:
        northd.stop()
    if labels is not None:
        labels.clear()
    leaving = discovery is not None and discovery.labelled() is False
    if leaving:
        LOG.info("node %s is no longer labelled %s=%s: leaving the clusters", args.node_name,
                 names.CENTRAL_ROLE_LABEL, names.CENTRAL_ROLE)
    for m in members:
        if leaving:
            m.leave()
        else:
            m.stop()
    if health is not None:
        health.stop()
    LOG.info("stopped in %.1f s", time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
