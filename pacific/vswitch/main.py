"""`pacific-vswitch`: one node's Open vSwitch and ovn-controller, from Pacific's image.

Runs ovsdb-server (the node's conf.db, kept on the host), ovs-vswitchd and
ovn-controller as its children, restarting any that exits.  With
`--underlay-interface` (the userspace datapath) it makes the bridge `br-phy`
with that interface as its port and moves the node's addresses onto it, and
back when it stops.  A stop saves the OpenFlow tables and the next start
replays them before forwarding (`flow-restore-wait`), so an upgrade costs the
gap between the two pods, not a recomputation (decision 0049).  Pacific's
node daemon configures the rest (chassis name, OVN remote, TLS files).
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
from pacific.vswitch.supervised import Supervised

LOG = logging.getLogger("pacific.vswitch")
OFCTRL_WAIT_MS = 3000     # ovn-controller keeps restored flows this long at most
UNDERLAY_FILE = "pacific-vswitch-underlay.json"


def _env(name: str, default=None):
    return os.environ.get(name, default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pacific-vswitch",
        description="Open vSwitch (ovsdb-server, ovs-vswitchd) and ovn-controller of this "
                    "node, restarted when they exit, their flows kept across an upgrade; "
                    "/healthz and /readyz report them.  Flags have an environment "
                    "variable (in brackets).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--run-dir", default=_env("OVS_RUNDIR", "/run/openvswitch"),
                   help="Open vSwitch's sockets and pidfiles (db.sock, ovs-vswitchd.ctl) "
                        "[OVS_RUNDIR]")
    p.add_argument("--ovn-run-dir", default=_env("OVN_RUNDIR", "/run/ovn"),
                   help="ovn-controller's pidfile and control socket [OVN_RUNDIR]")
    p.add_argument("--db-dir", default=_env("OVS_DBDIR", "/etc/openvswitch"),
                   help="the node's conf.db (kept on the host: bridges, ports, settings) "
                        "[OVS_DBDIR]")
    p.add_argument("--log-dir", default=_env("OVS_LOGDIR", "/var/log/openvswitch"),
                   help="ovsdb-server's and ovs-vswitchd's logs [OVS_LOGDIR]")
    p.add_argument("--ovn-log-dir", default=_env("OVN_LOGDIR", os.path.dirname(
        names.OVN_CONTROLLER_LOG)), help="ovn-controller's log [OVN_LOGDIR]")
    p.add_argument("--underlay-interface", default=_env("PACIFIC_UNDERLAY_INTERFACE"),
                   help="userspace datapath: this interface becomes a port of "
                        f"--underlay-bridge, which takes over its addresses and routes "
                        "(given back when pacific-vswitch stops) [PACIFIC_UNDERLAY_INTERFACE]")
    p.add_argument("--underlay-bridge", default=names.UNDERLAY_BRIDGE)
    p.add_argument("--no-ovn-controller", action="store_true",
                   help="run Open vSwitch only (ovn-controller runs elsewhere)")
    p.add_argument("--health-address", default=_env("PACIFIC_VSWITCH_HEALTH_ADDRESS",
                                                    f"127.0.0.1:{names.VSWITCH_HEALTH_PORT}"),
                   help="host:port of /healthz and /readyz ('' for none) "
                        "[PACIFIC_VSWITCH_HEALTH_ADDRESS]")
    p.add_argument("--log-file", help="log here instead of stderr")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


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
        self.sock = os.path.join(args.run_dir, "db.sock")
        self.remote = f"unix:{self.sock}"
        self.vswitchd_ctl = os.path.join(args.run_dir, "ovs-vswitchd.ctl")
        self.saved = flows.Saved(os.path.join(args.run_dir, "pacific-vswitch-flows"),
                                 install.program("ovs-save") if os.path.exists(
                                     install.program("ovs-save")) else os.path.join(
                                     install.prefix, "share", "openvswitch", "scripts",
                                     "ovs-save"))
        self.underlay_file = os.path.join(args.run_dir, UNDERLAY_FILE)
        self.ovsdb = self.vswitchd = self.controller = None
        self.restored: list[str] = []

    # -------------------------------------------------------------- commands
    def vsctl(self, *argv: str, timeout: float = 10) -> subprocess.CompletedProcess:
        return subprocess.run([self.install.program("ovs-vsctl"), f"--db={self.remote}",
                               f"--timeout={int(timeout)}", *argv], env=self.env,
                              capture_output=True, text=True, timeout=timeout + 5)

    def appctl(self, target: str, *argv: str, timeout: float = 5) -> subprocess.CompletedProcess:
        return subprocess.run([self.install.program("ovs-appctl"), "-t", target,
                               f"--timeout={int(timeout)}", *argv], env=self.env,
                              capture_output=True, text=True, timeout=timeout + 5)

    def controller_ctl(self) -> str | None:
        pid = self.controller.pid if self.controller else None
        return os.path.join(self.args.ovn_run_dir, f"ovn-controller.{pid}.ctl") if pid else None

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

    def start(self) -> None:
        t0 = time.monotonic()
        self.prepare_db()
        a = self.args
        self.ovsdb = Supervised("ovsdb-server", [
            self.install.program("ovsdb-server"), "--no-chdir", "-vconsole:warn",
            "-vsyslog:off", f"--remote=punix:{self.sock}",
            "--remote=db:Open_vSwitch,Open_vSwitch,manager_options",
            f"--unixctl={os.path.join(a.run_dir, 'ovsdb-server.ctl')}",
            f"--pidfile={os.path.join(a.run_dir, 'ovsdb-server.pid')}",
            f"--log-file={os.path.join(a.log_dir, 'ovsdb-server.log')}", self.db],
            env=self.env, ready=lambda: self.vsctl("--no-wait", "init", timeout=2).returncode == 0)
        self.ovsdb.start()
        restoring = self.saved.present() and bool(self.bridges())
        if restoring:
            self.vsctl("--no-wait", "set", "open_vswitch", ".",
                       "other_config:flow-restore-wait=true")
        else:
            self.saved.discard()
        self.vswitchd = Supervised("ovs-vswitchd", [
            self.install.program("ovs-vswitchd"), "--no-chdir", "-vconsole:warn",
            "-vsyslog:off", f"--unixctl={self.vswitchd_ctl}",
            f"--pidfile={os.path.join(a.run_dir, 'ovs-vswitchd.pid')}",
            f"--log-file={os.path.join(a.log_dir, 'ovs-vswitchd.log')}", self.remote],
            env=self.env, ready=lambda: self.appctl(self.vswitchd_ctl, "version",
                                                    timeout=2).returncode == 0,
            on_ready=self.vswitchd_ready)
        self.vswitchd.start()
        if not a.no_ovn_controller:
            self.vsctl("--no-wait", *(["set", "open_vswitch", ".",
                                       f"external_ids:ovn-ofctrl-wait-before-clear={OFCTRL_WAIT_MS}"]
                                      if restoring else
                                      ["remove", "open_vswitch", ".", "external_ids",
                                       "ovn-ofctrl-wait-before-clear"]))
            self.controller = Supervised("ovn-controller", [
                self.install.program("ovn-controller"), "--no-chdir", "-vconsole:warn",
                "-vsyslog:off", f"--pidfile={os.path.join(a.ovn_run_dir, 'ovn-controller.pid')}",
                f"--log-file={os.path.join(a.ovn_log_dir, 'ovn-controller.log')}", self.remote],
                env=self.env, ready=lambda: bool(self.controller_ctl()) and os.path.exists(
                    self.controller_ctl()))
            self.controller.start()
        LOG.info("Open vSwitch%s up in %.2f s%s", "" if a.no_ovn_controller else
                 " and ovn-controller", time.monotonic() - t0,
                 f" (saved flows of {', '.join(self.restored)} restored)" if self.restored else "")

    def bridges(self) -> list[str]:
        p = self.vsctl("--no-wait", "list-br")
        return p.stdout.split() if p.returncode == 0 else []

    def vswitchd_ready(self) -> None:
        """After every start of ovs-vswitchd: the underlay onto its bridge, the
        saved flows back, then forwarding."""
        # a change it must apply: returns once it has its bridges and ports (an
        # unchanged add-br would not wait, and br-phy's tap outlives it)
        p = self.vsctl("set", "open_vswitch", ".",
                       f"external_ids:pacific-vswitchd-pid={self.vswitchd.pid}")
        if p.returncode != 0:
            raise RuntimeError(f"ovs-vswitchd did not apply its configuration: {p.stderr.strip()}")
        if self.args.underlay_interface:
            self.underlay_up()
        self.restored = self.saved.restore(self.env)
        self.vsctl("--no-wait", "remove", "open_vswitch", ".", "other_config",
                   "flow-restore-wait")
        if self.args.underlay_interface:
            self.tunnel_neighbours()

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
        if not remotes:
            return
        found = underlay.resolve(self.args.underlay_bridge, remotes)
        for ip, mac in found.items():
            self.appctl(self.vswitchd_ctl, "tnl/neigh/set", self.args.underlay_bridge, ip, mac)
        missing = [ip for ip in remotes if ip not in found]
        if missing:
            LOG.warning("tunnel endpoints %s did not answer ARP: ovs-vswitchd learns "
                        "them with the first packets", ", ".join(missing))
        LOG.info("tunnel neighbours resolved: %s", ", ".join(sorted(found)))

    # -------------------------------------------------------------- stop
    def stop(self) -> None:
        t0 = time.monotonic()
        if self.vswitchd is not None and self.vswitchd.running():
            self.saved.save(self.bridges(), self.env)
        if self.controller is not None:
            ctl = self.controller_ctl()
            # --restart: the chassis, its ports and flows stay for the next one
            self.controller.stop(lambda: self.appctl(ctl, "exit", "--restart") if ctl else None)
        if self.vswitchd is not None:
            self.vswitchd.stop(lambda: self.appctl(self.vswitchd_ctl, "exit"))
        u = underlay.Underlay.load(self.underlay_file)
        if u is not None:
            try:
                underlay.move(u, self.args.underlay_bridge, u.interface)
            except Exception as exc:  # noqa: BLE001 - said; the node may be cut off
                LOG.error("could not give %s its addresses back: %s", u.interface, exc)
        if self.ovsdb is not None:
            self.ovsdb.stop(lambda: self.appctl(os.path.join(self.args.run_dir,
                                                             "ovsdb-server.ctl"), "exit"))
        LOG.info("stopped in %.2f s", time.monotonic() - t0)

    # -------------------------------------------------------------- health
    def liveness(self) -> tuple[bool, str]:
        for d in (self.ovsdb, self.vswitchd):
            if d is not None and not d.running() and d.restarts > 5:
                return False, f"{d.name} keeps exiting ({d.restarts} restarts)"
        return True, "ovsdb-server and ovs-vswitchd run or are being restarted"

    def readiness(self) -> tuple[bool, str]:
        if self.appctl(self.vswitchd_ctl, "version", timeout=2).returncode != 0:
            return False, "ovs-vswitchd does not answer"
        u = underlay.Underlay.load(self.underlay_file) if self.args.underlay_interface else None
        if u is not None and not underlay.has_addresses(self.args.underlay_bridge, u):
            return False, f"{self.args.underlay_bridge} does not have the node's addresses"
        if self.controller is None:
            return True, "ovs-vswitchd answers"
        ctl = self.controller_ctl()
        if ctl is None:
            return False, "ovn-controller is not running"
        remote = self.vsctl("--no-wait", "get", "open_vswitch", ".", "external_ids:ovn-remote",
                            timeout=2)
        if remote.returncode != 0:
            return True, "ovn-controller waits for external_ids:ovn-remote (pacific-node sets it)"
        status = self.appctl(ctl, "connection-status", timeout=2).stdout.strip()
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
    health = None
    try:
        vs.start()
        if args.health_address:
            health = MetricsServer(parse_address(args.health_address), liveness=vs.liveness,
                                   readiness=vs.readiness).start()
        stop.wait()
        LOG.info("stopping")
    except Exception as exc:  # noqa: BLE001 - said, and everything stopped
        LOG.error("cannot run Open vSwitch: %s", exc)
        vs.stop()
        return 1
    vs.stop()
    if health is not None:
        health.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
