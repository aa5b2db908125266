"""A sandbox node: one network namespace with ovsdb-server, ovs-vswitchd, ovn-controller."""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field

from pacific.sandbox.proc import read_pidfile, run


@dataclass
class SandboxNode:
    """Where a node's pieces are.  `name` is both the Kubernetes node name and the
    OVN chassis name; `mtu` is the MTU pods on this node must use (underlay - 100)."""
    name: str
    index: int
    netns: str
    rundir: str
    underlay_ip: str
    underlay_prefixlen: int
    underlay_mtu: int
    mtu: int
    underlay_ip6: str = ""     # a --dual-stack sandbox's nodes speak IPv6 on the underlay too
    ipv6_only: bool = False    # an --ipv6-only sandbox's Nodes have their IPv6 address only
    ovs_remote: str = field(init=False)

    def __post_init__(self):
        self.ovs_remote = f"unix:{self.db_sock}"

    @property
    def node_ip(self) -> str:
        """The Node's InternalIP addresses as kubelet's --node-ip spells them:
        the underlay address, and its IPv6 one after it (dual-stack); the IPv6
        one alone in an IPv6-only cluster."""
        if self.ipv6_only:
            return self.underlay_ip6
        return ",".join(filter(None, (self.underlay_ip, self.underlay_ip6)))

    @property
    def db_sock(self) -> str:
        return os.path.join(self.rundir, "db.sock")

    @property
    def vswitchd_ctl(self) -> str:
        return os.path.join(self.rundir, "ovs-vswitchd.ctl")

    @property
    def controller_ctl(self) -> str | None:
        pid = read_pidfile(os.path.join(self.rundir, "ovn-controller.pid"))
        return os.path.join(self.rundir, f"ovn-controller.{pid}.ctl") if pid else None

    def log(self, daemon: str) -> str:
        """Log file of `daemon` (ovsdb-server, ovs-vswitchd, ovn-controller)."""
        return os.path.join(self.rundir, f"{daemon}.log")

    def vsctl(self, *args: str, timeout: float = 30) -> str:
        """ovs-vsctl against this node's database (setup/tests, not a hot path)."""
        return run(["ovs-vsctl", f"--db={self.ovs_remote}", f"--timeout={int(timeout)}",
                    *args], timeout=timeout + 5).stdout

    def appctl(self, *args: str, target: str | None = None) -> str:
        """ovs-appctl to ovs-vswitchd (default) or another unixctl socket path."""
        return run(["ovs-appctl", "-t", target or self.vswitchd_ctl, *args]).stdout

    def exec(self, argv, **kw) -> subprocess.CompletedProcess:
        """Run a command in the node's (host) network namespace."""
        return run(argv, netns=self.netns, **kw)

    def describe(self) -> dict:
        return {
            "name": self.name, "netns": self.netns, "underlay_ip": self.underlay_ip,
            "mtu": self.mtu, "underlay_mtu": self.underlay_mtu, "rundir": self.rundir,
            "sockets": {"ovsdb": self.db_sock, "ovs-vswitchd": self.vswitchd_ctl,
                        "ovn-controller": self.controller_ctl},
            "logs": {d: self.log(d) for d in ("ovsdb-server", "ovs-vswitchd", "ovn-controller")},
        }
