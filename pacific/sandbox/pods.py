"""Test pods for the bare sandbox: a network namespace with a veth into br-int.

This stands in for the CNI path until the node daemon exists: it plumbs what the
CNI plugin will (netns, veth, MAC/IP/MTU, checksum offload off, OVS port with
`iface-id`) so tests can put traffic on logical switch ports.
"""
from __future__ import annotations

import hashlib
import ipaddress
import logging
import re
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from pacific import names
from pacific.sandbox import netns
from pacific.sandbox.proc import SandboxError, run, start_time, stop_pid, wait_for

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox
    from pacific.sandbox.node import SandboxNode

log = logging.getLogger(__name__)
_POD_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$")
_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
POD_IFNAME = "eth0"
CREATED_BY = "pacific-sandbox-test-pod"


@dataclass
class TestPod:
    __test__ = False  # not a pytest class

    sandbox: "Sandbox"
    node: "SandboxNode"
    name: str
    netns: str
    host_ifname: str     # veth end in the node namespace = OVS port on br-int
    lsp: str
    mac: str
    ip: str
    cidr: str            # address with prefix length, e.g. 10.0.1.11/24
    gateway: str | None
    mtu: int

    def exec(self, argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
        """Run a command to completion inside the pod (kw as proc.run)."""
        return run(argv, netns=self.netns, **kw)

    def ping(self, dst: str, count: int = 1, wait: float = 5, interval: float = 0.2) -> bool:
        """True if `dst` answers: `count` replies wanted within `wait` seconds."""
        argv = ["ping", "-q", "-c", str(count), "-w", str(max(1, int(wait))), "-i", str(interval),
                dst]
        return self.exec(argv, check=False, timeout=wait + 5).returncode == 0

    def spawn(self, tag: str, argv: Sequence[str]) -> int:
        """Start a server inside the pod (stopped by delete_test_pod / down)."""
        return self.sandbox.spawn(f"{self.daemon_prefix}{tag}", argv, netns=self.netns)

    @property
    def daemon_prefix(self) -> str:
        return f"pod.{self.node.name}.{self.name}."

    def installed(self) -> bool:
        """ovn-controller has installed the flows of the port (ovn-installed=true)."""
        out = self.node.vsctl("--if-exists", "get", "Interface", self.host_ifname,
                              f"external_ids:{names.OVS_OVN_INSTALLED}")
        return out.strip().strip('"') == "true"

    def wait_installed(self, timeout: float = 10) -> None:
        wait_for(self.installed, timeout,
                 f"{names.OVS_OVN_INSTALLED} on {self.node.name}/{self.host_ifname} "
                 f"(LSP {self.lsp}; does it exist in NB?)")


def netns_name(sb: "Sandbox", node: "SandboxNode", pod: str) -> str:
    return f"{sb.netns_prefix}{node.name}-{pod}"


def host_ifname(pod: str) -> str:
    """Veth end on the node: `tp-<pod>`, or a hash when that exceeds 15 characters."""
    name = f"tp-{pod}"
    return name if len(name) <= 15 else "tp-" + hashlib.sha1(pod.encode()).hexdigest()[:12]


def _validate(name: str, mac: str, ip_cidr: str, gateway: str | None):
    if not _POD_RE.match(name):
        raise SandboxError(f"invalid test pod name {name!r}: lower-case letters, digits, '-', "
                           "at most 32 characters")
    if not _MAC_RE.match(mac):
        raise SandboxError(f"invalid MAC {mac!r} (want aa:bb:cc:dd:ee:ff, lower case)")
    try:
        iface = ipaddress.ip_interface(ip_cidr)
    except ValueError as e:
        raise SandboxError(f"invalid address {ip_cidr!r}: want IP/prefixlen") from e
    if "/" not in ip_cidr:
        raise SandboxError(f"address {ip_cidr!r} needs a prefix length, e.g. 10.0.0.5/24")
    if gateway is not None and ipaddress.ip_address(gateway) not in iface.network:
        raise SandboxError(f"gateway {gateway} is outside {iface.network}")
    return iface


def add(sb: "Sandbox", node: "SandboxNode", name: str, lsp: str, mac: str, ip_cidr: str,
        gateway: str | None) -> TestPod:
    iface = _validate(name, mac, ip_cidr, gateway)
    ns = netns_name(sb, node, name)
    if netns.exists(ns):
        log.info("test pod %s exists: recreating it", ns)
        delete(sb, name, node)
    pod = TestPod(sb, node, name, ns, host_ifname(name), lsp, mac, str(iface.ip), ip_cidr,
                  gateway, node.mtu)
    with sb.state.update() as st:
        st["pods"][ns] = {"node": node.name, "name": name, "lsp": lsp, "mac": mac,
                          "cidr": ip_cidr, "gateway": gateway, "host_ifname": pod.host_ifname}
    netns.create(ns)
    netns.veth(pod.host_ifname, node.netns, POD_IFNAME, ns, node.mtu)
    run(["ip", "link", "set", "dev", POD_IFNAME, "address", mac], netns=ns)
    netns.tx_offload_off(ns, POD_IFNAME)
    run(["ip", "addr", "add", ip_cidr, "dev", POD_IFNAME], netns=ns)
    run(["ip", "link", "set", "dev", POD_IFNAME, "up"], netns=ns)
    if gateway:
        run(["ip", "route", "add", "default", "via", gateway], netns=ns)
    run(["ip", "link", "set", "dev", pod.host_ifname, "up"], netns=node.netns)
    node.vsctl("--may-exist", "add-port", names.INTEGRATION_BRIDGE, pod.host_ifname,
               "--", "set", "Interface", pod.host_ifname,
               f"external_ids:{names.OVS_IFACE_ID}={lsp}",
               f"external_ids:\"{names.EXT_CREATED_BY}\"={CREATED_BY}")
    log.info("test pod %s on %s: %s %s, LSP %s, MTU %d", ns, node.name, ip_cidr, mac, lsp,
             node.mtu)
    return pod


def delete(sb: "Sandbox", pod: "TestPod | str", node: "SandboxNode | None") -> None:
    if isinstance(pod, TestPod):
        node, name = pod.node, pod.name
    else:
        name = pod
        if node is None:
            raise SandboxError(f"delete_test_pod({name!r}) needs the node")
    ns = netns_name(sb, node, name)
    prefix = f"pod.{node.name}.{name}."
    for tag in [t for t in sb.state.read()["daemons"] if t.startswith(prefix)]:
        sb.stop(tag)
    for pid in netns.pids(ns):
        stop_pid(pid, start_time(pid), what=f"pid {pid} in {ns}")
    node.vsctl("--if-exists", "del-port", names.INTEGRATION_BRIDGE, host_ifname(name))
    netns.delete(ns)  # takes the veth pair with it
    with sb.state.update() as st:
        st["pods"].pop(ns, None)
    log.info("test pod %s deleted", ns)
