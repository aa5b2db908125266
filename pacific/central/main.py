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
import logging
import os
import signal
import subprocess
import sys
import threading
import time

from pacific import daemonlog, names, ovsinstall
from pacific.central.member import DbMember, DbSpec, Settings, die_with_parent
from pacific.metrics import MetricsServer, parse_address

LOG = logging.getLogger("pacific.central")
STATUS_STALE = 15.0      # a cluster/status older than this: the server does not answer


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
    p.add_argument("--address", default=_env("PACIFIC_CENTRAL_ADDRESS"), required=not _env(
        "PACIFIC_CENTRAL_ADDRESS"), help="this member's address [PACIFIC_CENTRAL_ADDRESS]")
    p.add_argument("--members", default=_env("PACIFIC_CENTRAL_MEMBERS"),
                   help="every member's address, comma-separated, this one's included "
                        "(1, 3 or 5); the lowest creates the clusters "
                        "(default: --address alone) [PACIFIC_CENTRAL_MEMBERS]")
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


def settings(args, install: ovsinstall.Install) -> Settings:
    members = tuple(m.strip() for m in (args.members or args.address).split(",") if m.strip())
    if args.address not in members:
        raise SystemExit(f"pacific-central: --address {args.address} is not one of --members "
                         f"{','.join(members)}")
    if len(members) not in (1, 3, 5) or len(set(members)) != len(members):
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


class Northd:
    """ovn-northd on every member's NB and SB, restarted when it exits."""

    def __init__(self, cfg: Settings, dbs: list[DbSpec], program: str):
        def remotes(spec):
            return ",".join(cfg.remote(a, spec.client_port) for a in cfg.members)
        self.cmd = [program, "--no-chdir", f"--ovnnb-db={remotes(dbs[0])}",
                    f"--ovnsb-db={remotes(dbs[1])}", *cfg.ssl_args(),
                    f"--unixctl={os.path.join(cfg.run_dir, 'northd.ctl')}",
                    "-vconsole:warn", "-vsyslog:off",
                    f"--log-file={os.path.join(cfg.run_dir, 'northd.log')}"]
        self._stop = threading.Event()
        self.proc: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._run, name="central-northd", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL,
                                         preexec_fn=die_with_parent)
            LOG.info("ovn-northd started (pid %d)", self.proc.pid)
            rc = self.proc.wait()
            if self._stop.wait(1.0):
                return
            LOG.warning("ovn-northd exited (status %s): starting it again", rc)

    def stop(self) -> None:
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._thread.join(5)


def checks(members: list[DbMember]):
    """(liveness, readiness) from each database's last cluster/status."""
    def liveness():
        for m in members:
            st, age = m.status()
            if st is None and m.restarts and age > STATUS_STALE:
                return False, f"{m.spec.name}: ovsdb-server does not answer (restarted " \
                              f"{m.restarts} times)"
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
    cfg = settings(args, install)
    dbs = specs(args, install)
    members = [DbMember(s, cfg) for s in dbs]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
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
    while not stop.wait(1.0):
        pass
    LOG.info("stopping")
    t0 = time.monotonic()
    if northd is not None:
        northd.stop()
    for m in members:
        m.stop()
    if health is not None:
        health.stop()
    LOG.info("stopped in %.1f s", time.monotonic() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
