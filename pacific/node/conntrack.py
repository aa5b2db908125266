"""No connection tracking state of a pod's addresses survives the pod (issue
51): its address may go to another tenant's pod, and an established entry of
the old holder (a client's load-balanced connection, a node port's DNAT to a
`Local` endpoint) would carry packets to the new one without any ACL seeing
them as new.

On CNI DEL, once the pod's OVS port is gone:

* Open vSwitch's (userspace datapath) tracker: the pod's own zone (ovn-controller
  keeps a zone per port on br-int's external_ids, `ct-zone-<port>`) is flushed
  whole, and every entry of another zone with one of the pod's addresses in its
  original or reply direction is flushed by its original tuple (what the
  userspace tracker matches on), read from one `dpctl/dump-conntrack`;
* the host's kernel tracker (nftables' node ports and masquerade): every entry
  with the address as original source or destination or reply source (a DNAT
  to it), through netlink (pyroute2).

Idempotent (a repeated DEL finds nothing) and logged; a failure is logged and
never fails the DEL (the runtime would retry it forever), the IPAM's
quarantine being the other half of the guarantee.
"""
from __future__ import annotations

import logging
import re

from pacific.node import unixctl

log = logging.getLogger(__name__)
ZONE_PREFIX = "ct-zone-"      # ovn-controller's key on br-int: ct-zone-<logical port> = zone
PROTOCOLS = {"tcp": 6, "udp": 17, "sctp": 132, "icmp": 1, "icmpv6": 58, "icmp6": 58}
_ORIG = re.compile(r"orig=\(([^)]*)\)")
_REPLY = re.compile(r"reply=\(([^)]*)\)")
_ZONE = re.compile(r"(?:^|,)zone=(\d+)")


def own_zone(bridge_ids: dict[str, str], lsp: str) -> int | None:
    """The conntrack zone ovn-controller gave the logical port `lsp`."""
    try:
        return int(bridge_ids[ZONE_PREFIX + lsp])
    except (KeyError, ValueError):
        return None


def _fields(text: str) -> dict[str, str]:
    return dict(f.split("=", 1) for f in text.split(",") if "=" in f)


def entries_of(dump: str, ips: set[str]) -> list[tuple[int, str]]:
    """(zone, original tuple as flush-conntrack takes it) of every entry of a
    `dpctl/dump-conntrack` text with one of `ips` as original source or
    destination or reply source."""
    out = []
    for line in dump.splitlines():
        orig, reply = _ORIG.search(line), _REPLY.search(line)
        if orig is None:
            continue
        o = _fields(orig.group(1))
        r = _fields(reply.group(1)) if reply else {}
        if not ({o.get("src"), o.get("dst"), r.get("src")} & ips):
            continue
        zone = _ZONE.search(line)
        proto = line.split(",", 1)[0].strip()
        family = "ct_ipv6" if ":" in (o.get("src") or "") else "ct_nw"
        tup = [f"{family}_src={o.get('src')}", f"{family}_dst={o.get('dst')}"]
        if proto in PROTOCOLS:       # the whole tuple: userspace looks it up exactly
            tup.append(f"ct_nw_proto={PROTOCOLS[proto]}")
            if "sport" in o and "dport" in o:
                tup += [f"ct_tp_src={o['sport']}", f"ct_tp_dst={o['dport']}"]
            elif "id" in o:
                tup += [f"icmp_{k}={o[k]}" for k in ("id", "type", "code") if k in o]
        out.append((int(zone.group(1)) if zone else 0, ",".join(tup)))
    return sorted(set(out))


def flush_ovs(ctl: str | None, ips: set[str], zone: int | None) -> int:
    """Flush the pod's zone and every entry of its addresses in ovs-vswitchd's
    tracker (its unixctl socket `ctl`); the number of flush calls made."""
    if ctl is None:
        log.warning("conntrack of %s not flushed: no ovs-vswitchd control socket",
                    ", ".join(sorted(ips)))
        return 0
    calls = 0
    if zone is not None:
        unixctl.call(ctl, "dpctl/flush-conntrack", [f"zone={zone}"])
        calls += 1
    for z, tup in entries_of(unixctl.call(ctl, "dpctl/dump-conntrack", []), ips):
        try:
            unixctl.call(ctl, "dpctl/flush-conntrack", [f"zone={z}", tup])
        except unixctl.UnixctlError as exc:     # expired since the dump: gone already
            log.debug("flush of zone %d %s: %s", z, tup, exc)
        calls += 1
    return calls


def flush_kernel(ips: set[str]) -> int:
    """Delete the host kernel's entries of `ips` (original source or
    destination, reply source), found in one dump and matched here (the
    kernel's own tuple filter refuses IPv6 on some kernels); how many."""
    from pyroute2 import Conntrack
    n = 0
    with Conntrack() as ct:
        for entry in list(ct.dump_entries()):
            o, r = entry.tuple_orig, entry.tuple_reply
            if not {o.saddr, o.daddr, r.saddr} & ips:
                continue
            try:
                ct.delete(entry)
                n += 1
            except OSError:     # gone meanwhile
                continue
    return n


def flush(ctl: str | None, ips: set[str], zone: int | None, what: str) -> None:
    """Both trackers, logged; never raises."""
    if not ips:
        return
    done = []
    for name, run in (("ovs", lambda: flush_ovs(ctl, ips, zone)),
                      ("kernel", lambda: flush_kernel(ips))):
        try:
            done.append(f"{name} {run()}")
        except Exception as exc:  # noqa: BLE001 - a DEL must not fail on it
            log.warning("%s: flushing the %s conntrack of %s failed: %s", what, name,
                        ", ".join(sorted(ips)), exc)
    log.info("%s: conntrack of %s flushed (%s)", what, ", ".join(sorted(ips)), ", ".join(done))
