"""Keep a sandbox node's underlay up across ovs-vswitchd crashes.

    python -m pacific.sandbox.nodeguard --sandbox NAME --node node1

The sandbox runs ovs-vswitchd with `--monitor`, so a crash is followed by a
restart, as systemd does on a real node (Debian 12's Open vSwitch 3.1.0 aborts
in its userspace conntrack after gateway failovers; the OVS the suite runs by
default does not, docs/decisions/0029, and the tests fail on any crash).  With the
userspace datapath the node's address lives on br-phy's tap device, which goes
with the process: this guard notices the tap without its address, restores the
address, the default route and the tunnel neighbour cache (what
bringup.restart_node_daemon does after a deliberate restart), and records the
new ovs-vswitchd pid in the sandbox state so `up()` still sees a healthy sandbox.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time

from pacific.sandbox.proc import run

log = logging.getLogger("pacific.sandbox.nodeguard")


def has_address(ns: str, dev: str, ip: str) -> bool | None:
    """None if the device does not exist (yet)."""
    p = run(["ip", "-o", "-4", "addr", "show", "dev", dev], netns=ns, check=False)
    if p.returncode != 0:
        return None
    return f" {ip}/" in p.stdout


def restore(sb, node) -> None:
    from pacific.sandbox import bringup
    bringup.underlay_on(sb, node, bringup.PHYS_BRIDGE)
    node.appctl("tnl/neigh/aging", "3600")
    for other in sb.nodes:
        if other is not node:
            run(["ip", "neigh", "del", other.underlay_ip, "dev", bringup.PHYS_BRIDGE],
                netns=node.netns, check=False)
            run(["ping", "-c1", "-W1", other.underlay_ip], netns=node.netns, check=False)


def record_new_pid(sb, node) -> None:
    sb.adopt_restarted(f"{node.name}/ovs-vswitchd")


def main(argv=None) -> int:
    from pacific.sandbox import bringup
    from pacific.sandbox.cluster import Sandbox
    p = argparse.ArgumentParser(prog="python -m pacific.sandbox.nodeguard",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--sandbox", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--interval", type=float, default=0.3)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    sb = Sandbox(a.sandbox)
    node = sb.node(a.node)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(a.interval):
        if not os.path.isdir(sb.dir):
            return 0          # the sandbox is gone
        try:
            record_new_pid(sb, node)
            if has_address(node.netns, bringup.PHYS_BRIDGE, node.underlay_ip) is False:
                t0 = time.monotonic()
                restore(sb, node)
                log.warning("%s: br-phy came back without %s: underlay restored in %.2f s",
                            node.name, node.underlay_ip, time.monotonic() - t0)
        except Exception as e:  # noqa: BLE001 - keep guarding
            log.warning("%s: %s", node.name, e)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
