"""Pod plumbing: veth pair, pod-side addressing, OVS port on br-int.

ADD, arranged for latency (each step's time is in the "plumbed" log line):

1. one netlink request creates the veth pair: host end up with its MAC, pod end
   born in the pod's namespace with its name, MAC and MTU (~1 ms);
2. then two things at once: a thread inside the pod's namespace turns tx
   checksum offload off (ethtool ioctl) and sends lo up, eth0 up, the address
   and the default route as one netlink batch (~1 ms), while this thread adds
   the host end to br-int in one OVSDB transaction that does not wait for
   ovs-vswitchd (a few ms: the OVSDB round trip);
3. finally it waits (IDL event, no polling) until ovn-controller marks the
   interface `ovn-installed`: only then can the pod talk.

Anything made before a failure is removed again.  Everything is keyed by the
container id, so DEL, CHECK and GC need no memory: the OVS Interface
external_ids are the daemon's record.
"""
from __future__ import annotations

import errno
import logging
import re
import socket
import time
from typing import Callable

from pyroute2 import IPRoute
from pyroute2.ethtool.ioctl import IoctlEthtool
from pyroute2.netlink.exceptions import NetlinkError

from pacific import names
from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError
from pacific.node import conntrack, rtnl
from pacific.node.attachment import PodAttachment, host_ifname
from pacific.node.nsutil import Netns, NetnsError
from pacific.ovn.base import Owner
from pacific.ovn.errors import OvnError

log = logging.getLogger(__name__)
_HOST_VETH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,11}_h$")
IFF_UP = 1


def _attr(msg, name, default=None):
    return msg.get_attr(name) if msg is not None else default


def _why(e: BaseException) -> str:
    """NetlinkError(code, text) reads as its text, anything else as str()."""
    if isinstance(e, NetlinkError) and len(e.args) > 1:
        return str(e.args[1])
    return str(e)


class Plumber:
    """Plumbs pods into `bridge` of the node's OVS (an OvsAPI)."""

    def __init__(self, ovs, bridge: str = names.INTEGRATION_BRIDGE,
                 installed_timeout: float = 30.0,
                 on_installed_wait: Callable[[float, bool], None] | None = None):
        """on_installed_wait(seconds, ok): after each ADD's wait for
        ovn-installed (e.g. a metric)."""
        self.ovs = ovs
        self.bridge = bridge
        self.installed_timeout = installed_timeout
        self.on_installed_wait = on_installed_wait
        # ADD and DEL look interfaces up in the OVS API's interface index, not
        # under the IDL's lock (held across every transaction's round trip)
        ovs.index_interfaces()

    # ------------------------------------------------------------------ ADD
    def add(self, att: PodAttachment) -> dict:
        steps = Steps()
        host = att.host_ifname
        host_mac = rtnl.random_mac()
        try:
            ns = Netns(att.netns)
        except NetnsError as e:
            raise CniError(proto.ERR_PLUMBING, str(e)) from None
        made_veth = made_port = False
        try:
            with ns:
                existing = self.ovs.interface_record(host)
                if existing is not None:
                    other = _recorded_for_other(existing, att.container_id, att.ifname)
                    if other:
                        raise CniError(proto.ERR_PLUMBING, f"cannot attach {att.ifname} of "
                                       f"container {att.container_id[:12]}: OVS port {host} "
                                       f"is in use by {other}", "host ports are named after "
                                       "the first 12 characters of the container id: one "
                                       "interface per container")
                    # A repeated ADD replaces what the first one made; a stale
                    # ovn-installed must not answer for the new veth.
                    log.info("ADD: replacing existing OVS port %s", host)
                    self._del_ports([host])
                self._remove_stale_sandboxes(att)
                steps.mark("lookup")
                self._create_veth(ns, att, host, host_mac)
                made_veth = True
                steps.mark("veth")
                pod_side = ns.start(lambda: _configure_pod_side(att))
                try:
                    with self.ovs.transaction(wait_vswitchd=False) as txn:
                        txn.add(self.ovs.add_interface_port(
                            self.bridge, host, external_ids=att.ovs_external_ids(),
                            owner=Owner(names.OWNER_KIND_POD, att.pod)))
                except BaseException:
                    pod_side.wait()  # never roll back under its feet
                    raise
                made_port = True
                steps.mark("ovs-port")
                steps.note("pod side", pod_side.result())
                steps.mark("pod-side-rest")
            waited = time.perf_counter()
            installed = self.ovs.wait_ovn_installed(host, self.installed_timeout)
            if self.on_installed_wait is not None:
                self.on_installed_wait(time.perf_counter() - waited, installed)
            if not installed:
                raise CniError(proto.ERR_TRY_AGAIN, f"ovn-controller did not mark OVS port "
                               f"{host} ovn-installed within {self.installed_timeout:g} s",
                               f"is ovn-controller running and connected, and does logical "
                               f"switch port {att.lsp} exist in OVN NB?")
        except BaseException as e:
            self._rollback(host, made_veth, made_port)
            if isinstance(e, CniError):
                raise
            if isinstance(e, OvnError):
                raise CniError(proto.ERR_OVS, f"adding OVS port {host} to {self.bridge} "
                               f"failed: {e}") from None
            if isinstance(e, (NetlinkError, OSError)):
                raise CniError(proto.ERR_PLUMBING, f"plumbing {host} <-> {att.netns} "
                               f"{att.ifname} failed: {_why(e)}") from None
            raise
        steps.mark("ovn-installed")
        log.info("plumbed %s in %s", host, steps)
        return att.result(host_mac)

    def _remove_stale_sandboxes(self, att: PodAttachment) -> None:
        """A pod has one sandbox at a time: a port bound to the same logical switch
        port for another container is a sandbox whose DEL never came (daemon down,
        runtime crash).  Left there, ovn-controller would install both and which one
        gets the pod's traffic would be undefined.  A second interface of the
        same container is refused (CniError)."""
        bound = self.ovs.interfaces_with(names.OVS_IFACE_ID, att.lsp)
        twin = [i for i in bound if i.external_ids.get(names.OVS_CONTAINER_ID) == att.container_id
                and i.external_ids.get(names.OVS_IFNAME, att.ifname) != att.ifname]
        if twin:
            # a meta-plugin (Multus) adding Pacific again as net1: both veths
            # would carry the pod's one address and MAC on one logical port
            raise CniError(proto.ERR_INVALID_CONFIG, (
                f"pod {att.pod} already has its Pacific interface "
                f"{twin[0].external_ids.get(names.OVS_IFNAME)} in container "
                f"{att.container_id[:12]}: Pacific is a pod's primary network and attaches "
                f"it once; a second interface {att.ifname} is not supported"),
                "give secondary networks to another CNI plugin (e.g. macvlan or bridge "
                "through Multus)")
        stale = [i for i in bound if i.external_ids.get(names.OVS_CONTAINER_ID) != att.container_id]
        if not stale:
            return
        for i in stale:
            log.warning("ADD %s: removing OVS port %s of stale sandbox %s bound to the same "
                        "logical switch port %s", att.pod, i.name,
                        i.external_ids.get(names.OVS_CONTAINER_ID, "?")[:12], att.lsp)
        self._del_ports(sorted(i.name for i in stale))
        for i in stale:
            _del_link(i.name)

    def _create_veth(self, ns: Netns, att: PodAttachment, host: str, host_mac: str) -> None:
        req = rtnl.add_veth(host, host_mac, att.mtu, att.ifname, att.mac, ns.fd)
        err = rtnl.run([req])[0]
        if err is not None and err.code == errno.EEXIST and _link_exists(host):
            log.info("ADD: replacing existing veth %s", host)
            _del_link(host)
            err = rtnl.run([req])[0]
        if err is not None and err.code == errno.EEXIST:
            raise CniError(proto.ERR_PLUMBING, f"cannot create veth {host}: interface "
                           f"{att.ifname} already exists in {att.netns}")
        if err is not None:
            raise err

    def _rollback(self, host: str, made_veth: bool, made_port: bool) -> None:
        try:
            if made_port:
                self._del_ports([host])
            if made_veth:
                _del_link(host)
            if made_veth or made_port:
                log.info("ADD of %s rolled back", host)
        except Exception:  # noqa: BLE001 - keep the original error
            log.exception("rollback of %s incomplete (GC or the next DEL removes it)", host)

    # ------------------------------------------------------------------ DEL
    def delete(self, container_id: str, ifname: str) -> bool:
        """Remove the pod's OVS port and veth; True if anything was there."""
        host = host_ifname(container_id, ifname)
        # the ports OVS records for this attachment: their names are the veths
        # (one plumbed before the hashed names has its own)
        ports = {iface.name for iface in self.ovs.interfaces_with(names.OVS_CONTAINER_ID,
                                                                  container_id)
                 if iface.external_ids.get(names.OVS_IFNAME, ifname) == ifname}
        iface = self.ovs.interface_record(host)
        other = iface is not None and _recorded_for_other(iface, container_id, ifname)
        if other:
            log.info("DEL %s %s: OVS port %s belongs to %s; left alone", container_id[:12],
                     ifname, host, other)
        elif iface is not None:
            ports.add(host)
        found = False
        if ports:
            self._del_ports(sorted(ports))
            found = True
        for link in ports | (set() if other else {host}):
            found |= _del_link(link)
        return found

    def _del_ports(self, ports: list[str]) -> None:
        # No wait for ovs-vswitchd: nothing after a removal depends on it.
        with self.ovs.transaction(wait_vswitchd=False) as txn:
            for port in ports:
                txn.add(self.ovs.del_port(port, if_exists=True))

    # ------------------------------------------------------------------ CHECK
    def check(self, att: PodAttachment, prev_result: dict | None = None) -> None:
        diffs = []
        host = att.host_ifname
        iface = self.ovs.get_interface(host)
        if iface is None:
            diffs.append(f"OVS port {host} missing from {self.bridge}")
        else:
            ids = iface.external_ids
            if ids.get(names.OVS_IFACE_ID) != att.lsp:
                diffs.append(f"OVS iface-id is {ids.get(names.OVS_IFACE_ID)!r}, "
                             f"expected {att.lsp!r}")
            if ids.get(names.OVS_OVN_INSTALLED) != "true":
                diffs.append(f"OVS port {host} not ovn-installed")
        with IPRoute() as ipr:
            links = ipr.link("get", ifname=host) if ipr.link_lookup(ifname=host) else []
            if not links:
                diffs.append(f"host veth {host} missing")
            elif not links[0]["flags"] & IFF_UP:
                diffs.append(f"host veth {host} is down")
        diffs += self._check_pod_side(att)
        if prev_result:
            want_ips = {ip.get("address") for ip in prev_result.get("ips", [])}
            if want_ips and want_ips != {att.ip_cidr}:
                diffs.append(f"prevResult addresses {sorted(want_ips)} differ from the "
                             f"allocation {att.ip_cidr}")
            for i in prev_result.get("interfaces", []):
                if i.get("name") == att.ifname and i.get("mac", att.mac).lower() != att.mac:
                    diffs.append(f"prevResult MAC {i.get('mac')} differs from {att.mac}")
        if diffs:
            raise CniError(proto.ERR_CHECK_FAILED, f"CHECK {att.pod} ({att.container_id[:12]}): "
                           + "; ".join(diffs))

    def _check_pod_side(self, att: PodAttachment) -> list[str]:
        try:
            ns = Netns(att.netns)
        except NetnsError as e:
            return [str(e)]
        with ns, ns.iproute() as pr:
            found = pr.link_lookup(ifname=att.ifname)
            if not found:
                return [f"interface {att.ifname} missing in {att.netns}"]
            link = pr.link("get", index=found[0])[0]
            out = []
            mac = (_attr(link, "IFLA_ADDRESS") or "").lower()
            if mac != att.mac:
                out.append(f"{att.ifname} MAC is {mac}, expected {att.mac}")
            if _attr(link, "IFLA_MTU") != att.mtu:
                out.append(f"{att.ifname} MTU is {_attr(link, 'IFLA_MTU')}, expected {att.mtu}")
            if not link["flags"] & IFF_UP:
                out.append(f"{att.ifname} is down")
            addrs = {f"{_attr(a, 'IFA_ADDRESS')}/{a['prefixlen']}"
                     for a in pr.addr("dump", index=found[0])}
            gws = {_attr(r, "RTA_GATEWAY") for fam in (socket.AF_INET, socket.AF_INET6)
                   for r in pr.route("dump", family=fam)
                   if r["dst_len"] == 0 and _attr(r, "RTA_OIF") == found[0]}
            for address, gateway in att.addresses():
                if address not in addrs:
                    out.append(f"{att.ifname} lacks address {address} (has "
                               f"{', '.join(sorted(addrs)) or 'none'})")
                if gateway and gateway not in gws:
                    out.append(f"default route via {gateway} missing in {att.netns}")
            return out

    # ------------------------------------------------------------------ GC / view
    def attachment(self, container_id: str, ifname: str, mtu: int) -> PodAttachment | None:
        """One attachment, from its OVS Interface (None when there is none)."""
        iface = self.ovs.interface_record(host_ifname(container_id, ifname))
        return PodAttachment.from_ovs(dict(iface.external_ids), mtu, iface.name) \
            if iface is not None else None

    def conntrack_zone(self, lsp: str) -> int | None:
        """The conntrack zone ovn-controller gave the logical port `lsp` here."""
        return conntrack.own_zone(self.ovs.bridge_external_ids(self.bridge), lsp)

    def attachments(self, mtu: int) -> dict[tuple[str, str], PodAttachment]:
        """The daemon's view, rebuilt from OVS: (container id, ifname) -> attachment."""
        out = {}
        for iface in self.ovs.find_interfaces({}):
            att = PodAttachment.from_ovs(dict(iface.external_ids), mtu, iface.name)
            if att is not None:
                out[(att.container_id, att.ifname)] = att
        return out

    def remove_orphans(self) -> list[str]:
        """OVS ports of pods whose veth is gone (the plugin's DEL removed it while
        the daemon was down): removed, with their state.  At start-up."""
        gone = [i.name for i in self.ovs.find_interfaces({})
                if names.OVS_CONTAINER_ID in i.external_ids and not _link_exists(i.name)]
        if gone:
            self._del_ports(gone)
            log.info("removed %d OVS ports whose pods were deleted while pacific-node was "
                     "down: %s", len(gone), ", ".join(sorted(gone)))
        return gone

    def gc(self, valid: set[tuple[str, str]]) -> list[str]:
        """Remove ports and veths of attachments not in `valid`; returns their names."""
        removed = []
        keep_hosts = {host_ifname(cid, ifname) for cid, ifname in valid}
        for (cid, ifname), att in self.attachments(0).items():
            if (cid, ifname) not in valid:
                self.delete(cid, ifname)
                removed.append(att.host_ifname)
        ovs_ports = {i.name for i in self.ovs.find_interfaces({})}
        with IPRoute() as ipr:
            for link in ipr.link("dump"):
                name = _attr(link, "IFLA_IFNAME", "")
                info = _attr(link, "IFLA_LINKINFO")
                kind = info.get_attr("IFLA_INFO_KIND") if info is not None else None
                if (kind == "veth" and _HOST_VETH.match(name) and name not in keep_hosts
                        and name not in ovs_ports):
                    _link_del(ipr, name)
                    removed.append(name)
        if removed:
            log.info("GC removed %s", ", ".join(sorted(set(removed))))
        return removed


def _recorded_for_other(iface, container_id: str, ifname: str) -> str:
    """'' if OVS Interface `iface` (anything with external_ids) is recorded for
    attachment (container_id, ifname) or carries no record, else a description
    of whose it is."""
    ids = iface.external_ids
    cid, name = ids.get(names.OVS_CONTAINER_ID), ids.get(names.OVS_IFNAME)
    if cid is None or (cid, name) == (container_id, ifname):
        return ""
    return (f"container {cid[:12]} interface {name} (pod "
            f"{ids.get(names.OVS_POD) or '?'})")


def _configure_pod_side(att: PodAttachment) -> float:
    """Runs on a thread inside the pod's namespace; returns its duration (s)."""
    t0 = time.monotonic()
    # Userspace datapath: TCP with partial checksums from the pod breaks.
    eth = IoctlEthtool(att.ifname)
    try:
        eth.set_offload_flag("tx-checksumming", 0)
    finally:
        eth.close()
    idx = socket.if_nametoindex(att.ifname)
    reqs = []
    try:
        reqs.append(rtnl.link_up(socket.if_nametoindex("lo"), "lo"))
    except OSError:
        pass  # no loopback device: nothing to bring up
    if any(":" in a for a, _ in att.addresses()):
        # static addresses only: no router advertisement may add a route or address
        _sysctl(f"net/ipv6/conf/{att.ifname}/accept_ra", "0")
    reqs.append(rtnl.link_up(idx, att.ifname))
    for address, gateway in att.addresses():
        ip, _, prefix = address.partition("/")
        reqs.append(rtnl.add_address(idx, att.ifname, ip, int(prefix)))
        if gateway:
            reqs.append(rtnl.add_default_route(gateway, idx, att.ifname))
    rtnl.check(reqs)
    return time.monotonic() - t0


def _sysctl(path: str, value: str) -> None:
    """Write a sysctl of this thread's network namespace (/proc/sys/net is the
    opening thread's namespace's)."""
    with open(f"/proc/sys/{path}", "w") as f:
        f.write(value)


def _link_exists(name: str) -> bool:
    """Link `name` in this thread's namespace (an ioctl, no netlink)."""
    try:
        socket.if_nametoindex(name)
        return True
    except OSError:
        return False


def _del_link(name: str) -> bool:
    """Delete link `name` (this namespace) if it exists; True if it did."""
    err = rtnl.run([rtnl.del_link(name)])[0]
    if err is None:
        return True
    if err.code == errno.ENODEV:
        return False
    raise err


class Steps:
    """Per-step durations of one operation, for the log: "12.3 ms (veth 1.0,
    ...)"."""

    def __init__(self):
        self.t0 = self.last = time.monotonic()
        self.marks: list[tuple[str, float]] = []

    def mark(self, step: str) -> None:
        now = time.monotonic()
        self.marks.append((step, now - self.last))
        self.last = now

    def note(self, what: str, seconds: float) -> None:
        """A duration measured elsewhere (e.g. concurrently)."""
        self.marks.append((f"[{what}]", seconds))

    def __str__(self):
        return (f"{(self.last - self.t0) * 1e3:.1f} ms ("
                + ", ".join(f"{s} {d * 1e3:.1f}" for s, d in self.marks) + ")")


def _link_del(ipr: IPRoute, name: str) -> bool:
    """Delete link `name` if it exists; True if it did."""
    idx = ipr.link_lookup(ifname=name)
    if not idx:
        return False
    try:
        ipr.link("del", index=idx[0])
    except NetlinkError as e:
        if e.code != errno.ENODEV:
            raise
        return False
    return True
