"""`pacific-vswitch`: one node's Open vSwitch and ovn-controller, from Pacific's image.

Runs ovsdb-server (the node's conf.db, kept on the host), ovs-vswitchd and
ovn-controller detached, with OVS's own crash monitor, outside the pod's
cgroups: they keep forwarding while the pod is restarted or upgraded, and the
next pacific-vswitch adopts them if they are its version.  Else it replaces
them one at a time, ovs-vswitchd with its OpenFlow tables saved and replayed
before it forwards (`flow-restore-wait`), so an upgrade of Open vSwitch costs
the restart of one process, not the gap between two pods (decision 0049).
With `--underlay-interface` (the userspace datapath) it makes the bridge
`br-phy` with that interface as its port and moves the node's addresses onto
it (`--stop` gives them back).  Pacific's node daemon configures the rest
(chassis name, OVN remote, TLS files).
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
from pacific.metrics import MetricsServer, parse_address
from pacific.vswitch import flows, underlay
from pacific.vswitch.daemon import Daemon

LOG = logging.getLogger("pacific.vswitch")
OFCTRL_WAIT_MS = 3000     # ovn-controller keeps restored flows this long at most
UNDERLAY_FILE = "pacific-vswitch-underlay.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pacific-vswitch",
        description="Open vSwitch (ovsdb-server, ovs-vswitchd) and ovn-controller of this "
                    "node: started, or adopted from the previous pacific-vswitch, or replaced "
                    "with their flows kept when this image has another version; "
                    "/healthz and /readyz report them.  Flags have an environment "
                    "variable (in brackets).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--run-dir", default=os.environ.get("OVS_RUNDIR", "/run/openvswitch"),
                   help="Open vSwitch's sockets and pidfiles (db.sock, ovs-vswitchd.ctl) "
                        "[OVS_RUNDIR]")
    p.add_argument("--ovn-run-dir", default=os.environ.get("OVN_RUNDIR", "/run/ovn"),
                   help="ovn-controller's pidfile and control socket [OVN_RUNDIR]")
    p.add_argument("--db-dir", default=os.environ.get("OVS_DBDIR", "/etc/openvswitch"),
                   help="the node's conf.db (kept on the host: bridges, ports, settings) "
                        "[OVS_DBDIR]")
    p.add_argument("--log-dir", default=os.environ.get("OVS_LOGDIR", "/var/log/openvswitch"),
                   help="ovsdb-server's and ovs-vswitchd's logs [OVS_LOGDIR]")
    p.add_argument("--ovn-log-dir", default=os.environ.get("OVN_LOGDIR", os.path.dirname(
        names.OVN_CONTROLLER_LOG)), help="ovn-controller's log [OVN_LOGDIR]")
    p.add_argument("--underlay-interface", default=os.environ.get("PACIFIC_UNDERLAY_INTERFACE"),
                   help="userspace datapath: this interface becomes a port of "
                        f"--underlay-bridge, which takes over its addresses and routes "
                        "(given back by --stop) [PACIFIC_UNDERLAY_INTERFACE]")
    p.add_argument("--underlay-bridge", default=names.UNDERLAY_BRIDGE)
    p.add_argument("--no-ovn-controller", action="store_true",
                   help="run Open vSwitch only (ovn-controller runs elsewhere)")
    p.add_argument("--replace-daemons", action="store_true",
                   default=os.environ.get("PACIFIC_VSWITCH_REPLACE_DAEMONS") == "1",
                   help="replace running daemons even of this image's version (ovs-vswitchd "
                        "with its flows kept), as an upgrade does "
                        "[PACIFIC_VSWITCH_REPLACE_DAEMONS=1]")
    p.add_argument("--stop-daemons-on-exit", action="store_true",
                   help="stop the daemons (and give the underlay interface its addresses "
                        "back) when pacific-vswitch stops; by default they keep forwarding "
                        "for the next pacific-vswitch, which adopts them")
    p.add_argument("--host-cgroup", default=os.environ.get("PACIFIC_VSWITCH_HOST_CGROUP",
                                                 "/host/sys/fs/cgroup"),
                   help="the host's /sys/fs/cgroup as mounted in the pod: the daemons move "
                        "there, out of the pod's cgroups, to outlive it "
                        "[PACIFIC_VSWITCH_HOST_CGROUP]")
    p.add_argument("--stop", action="store_true",
                   help="stop the node's daemons, give the underlay interface its addresses "
                        "back, and exit (before removing pacific-vswitch from a node)")
    p.add_argument("--health-address", default=os.environ.get("PACIFIC_VSWITCH_HEALTH_ADDRESS",
                                                    f"127.0.0.1:{names.VSWITCH_HEALTH_PORT}"),
                   help="host:port of /healthz and /readyz ('' for none) "
                        "[PACIFIC_VSWITCH_HEALTH_ADDRESS]")
    p.add_argument("--log-file", help="log here instead of stderr")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def parse_neighbours(text: str) -> dict[str, tuple[str, str]]:
    """`ovs-appctl tnl/neigh/show` -> {ip: (mac, bridge)}."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 3 and f[1].count(":") == 5:
            out[f[0]] = (f[1], f[2])
    return out


class ForeignOpenvSwitch(RuntimeError):
    pass


class VSwitch:
    """The three daemons of one node, in the order they need each other."""

    def __init__(self, args, install: ovsinstall.Install):
        self.args, self.install = args, install
        for d in (args.run_dir, args.ovn_run_dir, args.db_dir, args.log_dir, args.ovn_log_dir):
            os.makedirs(d, exist_ok=True)
        self.env = {**os.environ, "OVS_RUNDIR": args.run_dir, "OVS_DBDIR": args.db_dir,
                    "OVS_LOGDIR": args.log_dir, "OVN_RUNDIR": args.ovn_run_dir,
                    "OVN_LOGDIR": args.ovn_log_dir}
        self.db = os.path.join(args.db_dir, "conf.db")
        sock = os.path.join(args.run_dir, "db.sock")
        self.remote = f"unix:{sock}"
        appctl = install.program("ovs-appctl")
        self.ovsdb = Daemon("ovsdb-server", install.program("ovsdb-server"), [
            f"--remote=punix:{sock}",
            "--remote=db:Open_vSwitch,Open_vSwitch,manager_options", self.db],
            args.run_dir, args.log_dir, self.env, appctl,
            ctl=os.path.join(args.run_dir, "ovsdb-server.ctl"), host_cgroup=args.host_cgroup)
        self.vswitchd = Daemon("ovs-vswitchd", install.program("ovs-vswitchd"), [self.remote],
                               args.run_dir, args.log_dir, self.env, appctl,
                               ctl=os.path.join(args.run_dir, "ovs-vswitchd.ctl"),
                               host_cgroup=args.host_cgroup)
        self.controller = None if args.no_ovn_controller else Daemon(
            "ovn-controller", install.program("ovn-controller"), [self.remote],
            args.ovn_run_dir, args.ovn_log_dir, self.env, appctl, host_cgroup=args.host_cgroup)
        # in the order they need each other, each with how it is (re)started
        self.starters = {self.ovsdb: self._start_ovsdb_server,
                         self.vswitchd: self._start_ovs_vswitchd,
                         **({self.controller: self._start_ovn_controller}
                            if self.controller else {})}
        self.daemons = list(self.starters)
        ovs_save = install.program("ovs-save")
        if not os.path.exists(ovs_save):
            ovs_save = os.path.join(install.prefix, "share", "openvswitch", "scripts", "ovs-save")
        self.saved = flows.Saved(os.path.join(args.run_dir, "pacific-vswitch-flows"), ovs_save)
        self.underlay_file = os.path.join(args.run_dir, UNDERLAY_FILE)
        self.stopped_mark = os.path.join(args.run_dir, "pacific-vswitch.stopped")
        self.owner_mark = os.path.join(args.run_dir, "pacific-vswitch.owner")
        self.restored: list[str] = []
        self.vswitchd_pid: int | None = None      # the one whose underlay is done
        self.neighbours: dict[str, tuple[str, str]] = {}   # a replaced one's tunnel neighbours

    # -------------------------------------------------------------- commands
    def vsctl(self, *argv: str, timeout: float = 10) -> subprocess.CompletedProcess:
        return subprocess.run([self.install.program("ovs-vsctl"), f"--db={self.remote}",
                               f"--timeout={int(timeout)}", *argv], env=self.env,
                              capture_output=True, text=True, timeout=timeout + 5)

    # -------------------------------------------------------------- start
    def prepare_db(self) -> None:
        tool = self.install.program("ovsdb-tool")
        schema = self.install.schema("vswitch")
        if not os.path.exists(self.db):
            subprocess.run([tool, "create", self.db, schema], check=True, capture_output=True)
            LOG.info("created %s", self.db)
        elif subprocess.run([tool, "needs-conversion", self.db, schema], capture_output=True,
                            text=True).stdout.strip() == "yes":
            subprocess.run([tool, "convert", self.db, schema], check=True, capture_output=True)
            LOG.info("converted %s to the schema of this Open vSwitch", self.db)

    def outdated(self, d: Daemon) -> str | None:
        """Why the running `d` must be replaced (None: adopt it)."""
        if self.args.replace_daemons:
            return "--replace-daemons"
        running, own = d.version(), d.own_version()
        if running != own:
            return f"it is {running or 'not answering'}, this image has {own}"
        return None

    def start(self) -> None:
        """Adopt the daemons a previous pacific-vswitch left running when they
        are this image's version; else replace them one by one (ovs-vswitchd
        with its flows kept); start those that do not run."""
        t0 = time.monotonic()
        self.check_owned()
        with open(self.owner_mark, "w") as f:      # whatever runs from now on is ours
            f.write(f"pacific-vswitch {os.environ.get('HOSTNAME', '')} {time.ctime()}\n")
        how = {}
        for d in self.daemons:
            pid = d.pid()
            why = self.outdated(d) if pid else None
            if pid and why is None:
                how[d.name] = f"adopted (pid {pid})"
                if d is self.vswitchd:
                    self.vswitchd_pid = pid
                continue
            if pid:
                LOG.info("replacing %s (pid %d): %s", d.name, pid, why)
            self.starters[d](replacing=bool(pid))
            how[d.name] = "replaced" if pid else "started"
        self.watch()               # the underlay of an adopted ovs-vswitchd, once
        LOG.info("Open vSwitch up in %.2f s: %s%s", time.monotonic() - t0,
                 ", ".join(f"{k} {v}" for k, v in how.items()),
                 f"; saved flows of {', '.join(self.restored)} restored" if self.restored
                 else "")

    def check_owned(self) -> None:
        """Daemons running that no pacific-vswitch started (a host's own Open
        vSwitch, under systemd) are not ours to adopt, replace or stop."""
        running = [f"{d.name} (pid {d.pid()})" for d in self.daemons if d.pid()]
        if running and not os.path.exists(self.owner_mark):
            raise ForeignOpenvSwitch(
                f"{', '.join(running)} run on this node but no pacific-vswitch started them "
                f"(no {self.owner_mark}): the host's own Open vSwitch?  Label the node "
                f"{names.HOST_OVS_LABEL}=true to keep it (this pod then goes away), or "
                "stop it on the host and delete this pod")

    def _start_ovsdb_server(self, replacing: bool) -> None:
        if replacing:
            self.ovsdb.stop()
        self.prepare_db()
        self.ovsdb.start()
        p = self.vsctl("--no-wait", "init")
        if p.returncode != 0:
            raise RuntimeError(f"ovsdb-server does not answer: {p.stderr.strip()}")

    def _start_ovs_vswitchd(self, replacing: bool) -> None:
        if replacing:
            self.saved.save(self.bridges(), self.env)
        restoring = self.saved.present() and bool(self.bridges())
        if restoring:       # the new one neither forwards nor flushes until told
            self.vsctl("--no-wait", "set", "open_vswitch", ".",
                       "other_config:flow-restore-wait=true")
        else:
            self.saved.discard()
        if replacing:       # its tunnel neighbours too: the new one starts with none
            self.neighbours = parse_neighbours(self.vswitchd.appctl("tnl/neigh/show").stdout)
            self.vswitchd.stop()
        self.vswitchd_pid = self.vswitchd.start()
        self.vswitchd_ready()

    def _start_ovn_controller(self, replacing: bool) -> None:
        if replacing:       # --restart: the chassis, its ports and flows stay
            self.controller.stop("--restart")
        # keep the flows there are (restored, or the previous ovn-controller's)
        # until the new one has computed its own
        self.vsctl("--no-wait", "set", "open_vswitch", ".",
                   f"external_ids:ovn-ofctrl-wait-before-clear={OFCTRL_WAIT_MS}")
        self.controller.start()

    def bridges(self) -> list[str]:
        p = self.vsctl("--no-wait", "list-br")
        return p.stdout.split() if p.returncode == 0 else []

    def vswitchd_ready(self) -> None:
        """After every start of ovs-vswitchd: the underlay onto its bridge, the
        saved flows back, then forwarding."""
        # a change it must apply: returns once it has its bridges and ports (an
        # unchanged add-br would not wait, and br-phy's tap outlives it)
        p = self.vsctl("set", "open_vswitch", ".",
                       f"external_ids:pacific-vswitchd-pid={self.vswitchd.pid()}")
        if p.returncode != 0:
            raise RuntimeError(f"ovs-vswitchd did not apply its configuration: {p.stderr.strip()}")
        if self.args.underlay_interface:
            self.underlay_up()
        for ip, (mac, bridge) in self.neighbours.items():
            self.vswitchd.appctl("tnl/neigh/set", bridge, ip, mac)
        self.restored = self.saved.restore(self.env)
        self.vsctl("--no-wait", "remove", "open_vswitch", ".", "other_config",
                   "flow-restore-wait")
        if self.args.underlay_interface:
            self.tunnel_neighbours()

    def watch(self) -> None:
        """Every second: a daemon that no longer runs (its monitor gone too) is
        started again; an ovs-vswitchd its monitor restarted after a crash gets
        the underlay back."""
        for d in self.daemons:
            if d.pid() is None:
                LOG.warning("%s is not running: starting it", d.name)
                self.starters[d](replacing=False)
        pid = self.vswitchd.pid()
        if pid != self.vswitchd_pid:
            LOG.warning("ovs-vswitchd is a new process (pid %s, was %s): restoring the underlay",
                        pid, self.vswitchd_pid)
            self.vswitchd_pid = pid
            self.vswitchd_ready()
        elif self.args.underlay_interface:
            u = underlay.Underlay.load(self.underlay_file)
            if u is None or not underlay.has_addresses(self.args.underlay_bridge, u):
                self.vswitchd_ready()
    def underlay_up(self) -> None:
        a = self.args
        u = underlay.Underlay.load(self.underlay_file) or underlay.capture(a.underlay_interface)
        if u is None:
            raise RuntimeError(f"{a.underlay_interface} has no address to give {a.underlay_bridge}")
        u.save(self.underlay_file)
        br = a.underlay_bridge
        p = self.vsctl("--may-exist", "add-br", br, "--", "set", "bridge", br,
                       "datapath_type=netdev", "fail-mode=standalone",
                       "--", "--may-exist", "add-port", br, a.underlay_interface,
                       "--", "set", "interface", br, f"mtu_request={u.mtu}",
                       *(["--", "set", "bridge", br, f"other_config:hwaddr={u.mac}"]
                         if u.mac else []))
        if p.returncode != 0:
            raise RuntimeError(f"cannot make {br}: {p.stderr.strip()}")
        deadline = time.monotonic() + 10
        while underlay.has_addresses(br, u) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"ovs-vswitchd did not create {br}")
            time.sleep(0.01)
        underlay.move(u, a.underlay_interface, br)

    def tunnel_neighbours(self) -> None:
        """The userspace tunnels' neighbour cache, empty in a new ovs-vswitchd
        (a miss drops the packet): each remote tunnel endpoint's MAC resolved
        through the bridge and handed to ovs-vswitchd."""
        p = self.vsctl("--no-wait", "--bare", "--columns=options", "find", "Interface",
                       "type=geneve")
        remotes = sorted({w.split("=", 1)[1].strip('"') for w in p.stdout.replace(",", " ").split()
                          if w.startswith("remote_ip=")})
        remotes = [ip for ip in remotes if ip not in self.neighbours]
        self.neighbours = {}
        if not remotes:
            return
        found = underlay.resolve(self.args.underlay_bridge, remotes)
        for ip, mac in found.items():
            self.vswitchd.appctl("tnl/neigh/set", self.args.underlay_bridge, ip, mac)
        missing = [ip for ip in remotes if ip not in found]
        if missing:
            LOG.warning("tunnel endpoints %s did not answer ARP: ovs-vswitchd learns "
                        "them with the first packets", ", ".join(missing))
        LOG.info("tunnel neighbours resolved: %s", ", ".join(sorted(found)))

    # -------------------------------------------------------------- stop
    def stop(self) -> None:
        """Stop every daemon (uninstall, or a failed start) and give the
        underlay interface its addresses back."""
        t0 = time.monotonic()
        if self.controller is not None:
            self.controller.stop()
        self.vswitchd.stop()
        u = underlay.Underlay.load(self.underlay_file)
        if u is not None:
            try:
                underlay.move(u, self.args.underlay_bridge, u.interface)
                os.unlink(self.underlay_file)
            except Exception as exc:  # noqa: BLE001 - said; the node may be cut off
                LOG.error("could not give %s its addresses back: %s", u.interface, exc)
        self.ovsdb.stop()
        if os.path.exists(self.owner_mark):
            os.unlink(self.owner_mark)
        LOG.info("Open vSwitch stopped in %.2f s", time.monotonic() - t0)

    # -------------------------------------------------------------- health
    def liveness(self) -> tuple[bool, str]:
        down = [d.name for d in (self.ovsdb, self.vswitchd) if d.pid() is None]
        if down:
            return False, f"{', '.join(down)} not running"
        return True, "ovsdb-server and ovs-vswitchd run"

    def readiness(self) -> tuple[bool, str]:
        if not self.vswitchd.version():
            return False, "ovs-vswitchd does not answer"
        u = underlay.Underlay.load(self.underlay_file) if self.args.underlay_interface else None
        if u is not None and not underlay.has_addresses(self.args.underlay_bridge, u):
            return False, f"{self.args.underlay_bridge} does not have the node's addresses"
        if self.controller is None:
            return True, "ovs-vswitchd answers"
        if self.controller.pid() is None:
            return False, "ovn-controller is not running"
        remote = self.vsctl("--no-wait", "get", "open_vswitch", ".", "external_ids:ovn-remote",
                            timeout=2)
        if remote.returncode != 0:
            return True, "ovn-controller waits for external_ids:ovn-remote (pacific-node sets it)"
        status = self.controller.appctl("connection-status", timeout=2).stdout.strip()
        if status != "connected":
            return False, f"ovn-controller is {status or 'not answering'} to the OVN SB database"
        return True, "ovs-vswitchd answers, ovn-controller is connected"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    daemonlog.setup(args.verbose, args.log_file)
    install = ovsinstall.from_env()
    ovsinstall.activate(install)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    vs = VSwitch(args, install)
    if args.stop:          # the running pacific-vswitch sees the mark and lets them be
        try:
            vs.check_owned()
        except ForeignOpenvSwitch as exc:
            LOG.error("not stopping: %s", exc)
            return 1
        with open(vs.stopped_mark, "w") as f:
            f.write(f"stopped by pacific-vswitch --stop at {time.ctime()}\n")
        vs.stop()
        return 0
    if os.path.exists(vs.stopped_mark):
        os.unlink(vs.stopped_mark)
    health = None
    try:
        vs.start()
        if args.health_address:
            health = MetricsServer(parse_address(args.health_address), liveness=vs.liveness,
                                   readiness=vs.readiness).start()
        said_stopped = False
        while not stop.wait(1.0):
            if os.path.exists(vs.stopped_mark):
                if not said_stopped:
                    LOG.warning("Open vSwitch was stopped (pacific-vswitch --stop): not "
                                "starting it again")
                    said_stopped = True
                continue      # `--stop`ped for removal: nothing restarted
            try:
                vs.watch()
            except Exception as exc:  # noqa: BLE001 - said; next second again
                LOG.error("%s", exc)
        LOG.info("stopping")
    except ForeignOpenvSwitch as exc:
        LOG.error("%s", exc)
        return 1
    except Exception as exc:  # noqa: BLE001 - said, and everything stopped
        LOG.error("cannot run Open vSwitch: %s", exc)
        vs.stop()
        return 1
    stuck = [d.name for d in vs.daemons if not d.outlives_pod]
    if stuck:
        LOG.warning("%s would stop with this pod (not moved out of its cgroups): stopping "
                    "Open vSwitch cleanly instead", ", ".join(stuck))
    if args.stop_daemons_on_exit or stuck:
        vs.stop()
    else:
        LOG.info("leaving %s running for the next pacific-vswitch",
                 ", ".join(f"{d.name} (pid {d.pid()})" for d in vs.daemons))
    if health is not None:
        health.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
