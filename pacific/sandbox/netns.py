"""Network namespaces and links of the sandbox (setup only, not a hot path)."""
from __future__ import annotations

import logging
import os

from pacific.sandbox.proc import SandboxError, run

log = logging.getLogger(__name__)

NETNS_DIR = "/run/netns"


def exists(name: str) -> bool:
    return os.path.exists(os.path.join(NETNS_DIR, name))


def identity(name: str) -> str | None:
    """Which namespace the name stands for now (its nsfs inode): a name given
    up and taken again by someone else is another namespace."""
    try:
        st = os.stat(os.path.join(NETNS_DIR, name))
    except FileNotFoundError:
        return None
    return f"{st.st_dev}:{st.st_ino}"


def list_with_prefix(prefix: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def create(name: str, ipv6: bool = False, forwarding: bool = False) -> None:
    """Create netns `name` with lo up; IPv6 off unless asked (link-locals on
    pod veths make OVS's route table and tunnel ports churn)."""
    if exists(name):
        raise SandboxError(f"network namespace {name} already exists")
    run(["ip", "netns", "add", name])
    run(["ip", "link", "set", "dev", "lo", "up"], netns=name)
    sysctls = []
    if not ipv6:
        sysctls += ["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]
    if forwarding:
        sysctls += ["net.ipv4.ip_forward=1"]
    if sysctls:
        run(["sysctl", "-qw", *sysctls], netns=name)


# The userspace datapath's only buffer: ovs-vswitchd reads every port through an
# AF_PACKET socket whose receive buffer is the host's net.core.rmem_default (not
# settable per namespace, and OVS sets none).  Its 208 kB (~90 frames) overflowed
# in a sender's bursts at 50-100 Mbit/s whenever vswitchd waited for a busy core,
# and TCP then ran short of every rate (`ss -0 -m` in the node counts drops: d...).
PACKET_RCVBUF = 4 * 1024 * 1024
RMEM_DEFAULT = "/proc/sys/net/core/rmem_default"


def raise_packet_buffers() -> None:
    """Raise the host's default socket receive buffer to PACKET_RCVBUF (never
    lower it): sockets take it when created, so before any ovs-vswitchd runs."""
    with open(RMEM_DEFAULT) as f:
        now = int(f.read())
    if now < PACKET_RCVBUF:
        with open(RMEM_DEFAULT, "w") as f:
            f.write(str(PACKET_RCVBUF))
        log.info("net.core.rmem_default raised from %d to %d bytes: ovs-vswitchd's "
                 "AF_PACKET sockets are the userspace datapath's only buffer", now, PACKET_RCVBUF)


def pids(name: str) -> list[int]:
    """Pids of every process whose network namespace is `name`."""
    if not exists(name):
        return []
    cp = run(["ip", "netns", "pids", name], check=False)
    return [int(p) for p in cp.stdout.split() if p.isdigit()]


def delete(name: str) -> None:
    if exists(name):
        cp = run(["ip", "netns", "del", name], check=False)
        if cp.returncode != 0 and exists(name):
            raise SandboxError(f"cannot delete network namespace {name}: {cp.stderr.strip()}")
        log.debug("deleted netns %s", name)


def veth(name: str, ns: str, peer: str, peer_ns: str, mtu: int) -> None:
    """veth pair `name`@`ns` <-> `peer`@`peer_ns` (both created down)."""
    run(["ip", "-n", ns, "link", "add", "name", name, "mtu", str(mtu), "type", "veth",
         "peer", "name", peer, "netns", peer_ns, "mtu", str(mtu)])


def tx_offload_off(ns: str, dev: str) -> None:
    """Checksum offload off: OVS netdev ports read frames raw via AF_PACKET, and
    CHECKSUM_PARTIAL TCP/UDP would arrive with wrong checksums."""
    run(["ethtool", "-K", dev, "tx", "off"], netns=ns)
