"""Start the OVS / OVN daemons of the sandbox (detached, one private dir each).

Each daemon gets its own --pidfile, --log-file, --unixctl and -vconsole:off, and
runs with OVS_RUNDIR/OVN_RUNDIR (and DB/LOG dirs) set to its own directory:
ovn-controller has no --unixctl and finds `br-int.mgmt` of its node's
ovs-vswitchd through OVS_RUNDIR.  `--detach` returns once the daemon is ready
and the pidfile holds the daemon's own pid.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from pacific import names, ovsinstall
from pacific.sandbox.proc import SandboxError, read_pidfile, run, start_time


def default_install() -> ovsinstall.Install:
    """The OVS/OVN a new sandbox runs: $PACIFIC_OVS_PREFIX if set (/usr: Debian's
    packages), else hack/build-ovs-ovn.sh's build when there is one, else Debian's."""
    chosen = os.environ.get(ovsinstall.PREFIX_ENV)
    if chosen:
        return ovsinstall.Install(chosen)
    # the versioned directory, not the link: a sandbox keeps the build it started with
    built = ovsinstall.Install(os.path.realpath(names.OVS_BUILD_CURRENT))
    return built if built.usable() else ovsinstall.Install(ovsinstall.SYSTEM_PREFIX)


@dataclass
class Started:
    pid: int
    start: int
    pidfile: str
    log: str
    ctl: str | None


def dir_env(directory: str) -> dict[str, str]:
    return {k: directory for k in ("OVS_RUNDIR", "OVS_DBDIR", "OVS_LOGDIR",
                                   "OVN_RUNDIR", "OVN_DBDIR", "OVN_LOGDIR")}


def start_detached(binary: str, base: str, args: list[str], netns: str | None,
                   directory: str, unixctl: bool = True, wrap: Sequence[str] = ()) -> Started:
    """Run `binary --detach ...` with files `<directory>/<base>.{pid,log,ctl}`;
    `wrap` is a command that execs it (nsenter into a node's mount namespace)."""
    pidfile = os.path.join(directory, f"{base}.pid")
    logfile = os.path.join(directory, f"{base}.log")
    ctl = os.path.join(directory, f"{base}.ctl") if unixctl else None
    argv = [binary, "--detach", "--no-chdir", "-vconsole:off", f"--pidfile={pidfile}",
            f"--log-file={logfile}"]
    if ctl:
        argv.append(f"--unixctl={ctl}")
    run([*wrap, *argv, *args], netns=netns, env=dir_env(directory))
    pid = read_pidfile(pidfile)
    started = start_time(pid) if pid else None
    if not pid or started is None:
        raise SandboxError(f"{binary} did not stay up (pidfile {pidfile}); see {logfile}")
    return Started(pid, started, pidfile, logfile, ctl)


def create_db(path: str, schema: str) -> None:
    if os.path.exists(path):
        os.unlink(path)
    run(["ovsdb-tool", "create", path, schema])


def ovsdb_server(base: str, db: str, remotes: list[str], netns: str | None,
                 directory: str) -> Started:
    return start_detached("ovsdb-server", base, [f"--remote={r}" for r in remotes] + [db],
                          netns, directory)


def ovn_northd(nb_remote: str, sb_remote: str, netns: str, directory: str) -> Started:
    # --monitor: restarted after a crash, as ovn-ctl and systemd do (OVN 26.03.1's
    # northd once aborted in ods_assign_array_index() while switches came and went)
    return start_detached("ovn-northd", "northd",
                          ["--monitor", f"--ovnnb-db={nb_remote}", f"--ovnsb-db={sb_remote}"],
                          netns, directory)


def ovs_vswitchd(db_remote: str, netns: str, directory: str,
                 wrap: Sequence[str] = ()) -> Started:
    # --monitor: restarted after a crash, as systemd would (pacific.sandbox.nodeguard
    # then restores the node's underlay, which lives on the restarted process's tap)
    return start_detached("ovs-vswitchd", "ovs-vswitchd", ["--monitor", db_remote], netns,
                          directory, wrap=wrap)


def ovn_controller(db_remote: str, netns: str, directory: str,
                   wrap: Sequence[str] = ()) -> Started:
    # no --unixctl: it creates ovn-controller.<pid>.ctl in OVS_RUNDIR (= directory)
    st = start_detached("ovn-controller", "ovn-controller", [db_remote], netns, directory,
                        unixctl=False, wrap=wrap)
    st.ctl = os.path.join(directory, f"ovn-controller.{st.pid}.ctl")
    return st
