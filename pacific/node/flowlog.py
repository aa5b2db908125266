"""Audit records on this node (decision 0039): the lines OVN's ACL logging
writes into ovn-controller's log (`acl_log`, one per logged packet, already
limited by the meter names.METER_AUDIT) become JSON records in Kubernetes terms
(pacific/audit.py: time, node, verdict allow / deny / would-deny, the policy's
kind, namespace, name and rule, both ends' address, pod and port, protocol),
one per line in --flow-log, which `pacific flows` follows across nodes: one
record per connection and verdict (OVN logs every packet of an allowed one in
its original direction; later lines of it within REPEAT seconds are dropped).

The source is read from where the last pass stopped (its inode and offset are
kept beside the records, `<flow-log>.pos`, so a restart neither repeats nor
loses a line; a rotated or truncated source is read from its start).  The
records file is rotated once (`.1`) past --flow-log-max-bytes, and the source
too past --ovn-controller-log-max-bytes, once read to its end: renamed to
`.1`, ovn-controller told to reopen its log (`vlog/reopen` on its unixctl
socket in --ovn-rundir), and what it wrote into the renamed file meanwhile
read too; so the disk holds at most twice each size (decision 0050).  Addresses
become pods through the cluster's `IP` objects (every pod's, this node's and
the others'), kept slim.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict

from pacific import audit, tailfile
from pacific.kube import resources as r
from pacific.node import metrics, unixctl
from pacific.node.readiness import find_controller_ctl
from pacific.node.feature import InformerSpec, NodeFeature

log = logging.getLogger(__name__)
READ_MAX = 4 * 1024 * 1024          # bytes of source per pass (the rest next pass)
REPEAT = 10.0                       # s: lines of one connection this close are one record
SEEN_MAX = 50000                    # connections remembered for that


def slim_ip(obj: dict) -> dict:
    """What an address -> pod lookup needs of an IP object."""
    m, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    return {"metadata": {"name": m.get("name"), "resourceVersion": m.get("resourceVersion")},
            "spec": {"ipAddress": spec.get("ipAddress"), "namespace": spec.get("namespace"),
                     "pod": spec.get("pod"),
                     **({"ipAddresses": spec["ipAddresses"]} if spec.get("ipAddresses") else {})}}


IPS = InformerSpec(r.IPS, wait_synced=False, transform=slim_ip)       # "ips"


class FlowLog(NodeFeature):
    name, repair = "flow-log", 0.5
    informers = {"ips": IPS}
    expected = (OSError,)

    @classmethod
    def disabled(cls, args):
        return None if args.flow_log else "--flow-log ''"

    def __init__(self, ctx):
        super().__init__(ctx)
        self.source = ctx.args.ovn_controller_log
        self.dest = ctx.args.flow_log
        self.max_bytes = ctx.args.flow_log_max_bytes
        self.source_max = ctx.args.ovn_controller_log_max_bytes
        self.ovn_rundir = ctx.args.ovn_rundir
        self._lock = threading.Lock()
        self._pods: dict[str, str] = {}          # address -> namespace/name
        self._pos: tuple[int, int] | None = None  # (inode, offset) read up to
        self._seen: OrderedDict[tuple, float] = OrderedDict()   # connection -> last line

    def handlers(self):
        return {"ips": self._on_ip}              # no kick: the next pass reads them

    def _on_ip(self, old, new):
        with self._lock:
            if old is not None:
                for ip in _addresses(old):
                    if self._pods.get(ip) == _pod(old):
                        self._pods.pop(ip, None)
            if new is not None:
                for ip in _addresses(new):
                    self._pods[ip] = _pod(new)

    def pod_of(self, ip: str | None) -> str | None:
        with self._lock:
            return self._pods.get(ip) if ip else None

    # -- one pass ------------------------------------------------------------------------
    def converge(self) -> None:
        if self._pos is None:
            self._pos = self._load_pos()
        lines, pos = tailfile.new_lines(self.source, self._pos, READ_MAX)
        if self.source_max and tailfile.end_of(self.source) == pos and pos[1] > self.source_max:
            more, pos = self._rotate_source(pos)
            lines += more
        out = []
        now = time.monotonic()
        for raw in lines:
            entry = audit.parse_line(raw)
            if entry is not None and self._first(entry, now):
                out.append(audit.record(entry, self.ctx.node_name, self.pod_of))
        if out:
            self._write(out)
        if pos != self._pos:
            self._pos = pos
            self._save_pos()

    def _rotate_source(self, pos: tailfile.Position) -> tuple[list[str], tailfile.Position]:
        """ovn-controller's log, read to its end at `pos`, becomes `.1` and
        ovn-controller writes a new one: the lines it wrote into the old one
        meanwhile, and the position in the new one.  Not without its unixctl
        socket (it would write on into the renamed file)."""
        ctl = find_controller_ctl(self.ovn_rundir)
        if ctl is None:
            return [], pos
        os.replace(self.source, self.source + ".1")
        try:
            unixctl.call(ctl, "vlog/reopen")
        except unixctl.UnixctlError as e:
            log.warning("ovn-controller's log %s rotated, but not reopened: %s", self.source, e)
        lines, _ = tailfile.new_lines(self.source + ".1", pos, READ_MAX)
        log.info("ovn-controller's log %s rotated (over %d bytes)", self.source, self.source_max)
        return lines, (tailfile.end_of(self.source)[0], 0)

    def _first(self, entry: dict, now: float) -> bool:
        """Is this line the first of its connection (within REPEAT s)?  OVN
        evaluates ACLs again for every packet of an established connection in
        its original direction, so a logged allow logs each of them."""
        key = (entry["name"], entry["verdict"], entry["protocol"], entry["src"], entry["sport"],
               entry["dst"], entry["dport"], entry["icmp_type"])
        last = self._seen.pop(key, None)
        self._seen[key] = now
        while len(self._seen) > SEEN_MAX:
            self._seen.popitem(last=False)
        return last is None or now - last > REPEAT

    def _write(self, records: list[dict]) -> None:
        os.makedirs(os.path.dirname(self.dest) or ".", exist_ok=True)
        try:
            if os.path.getsize(self.dest) > self.max_bytes:
                os.replace(self.dest, self.dest + ".1")
                log.info("flow log %s rotated (over %d bytes)", self.dest, self.max_bytes)
        except FileNotFoundError:
            pass
        with open(self.dest, "a") as f:
            f.write("".join(json.dumps(rec, sort_keys=True) + "\n" for rec in records))
        for rec in records:
            metrics.FLOW_RECORDS.labels(rec["verdict"]).inc()

    def _load_pos(self) -> tuple[int, int]:
        """Where the last run stopped; a first run starts at the source's end
        (what OVN logged before Pacific read it is history, not news)."""
        try:
            with open(self.dest + ".pos") as f:
                inode, offset = (int(x) for x in f.read().split())
                return inode, offset
        except (OSError, ValueError):
            pass
        return tailfile.end_of(self.source)

    def _save_pos(self) -> None:
        os.makedirs(os.path.dirname(self.dest) or ".", exist_ok=True)
        tmp = self.dest + ".pos.tmp"
        with open(tmp, "w") as f:
            f.write(f"{self._pos[0]} {self._pos[1]}\n")
        os.replace(tmp, self.dest + ".pos")


def _addresses(ip_obj) -> list[str]:
    """An IP object's addresses: spec.ipAddresses (dual-stack), else ipAddress."""
    spec = ip_obj.get("spec") or {}
    many = spec.get("ipAddresses")
    return [str(a) for a in many] if isinstance(many, (list, tuple)) and many else \
        ([spec["ipAddress"]] if spec.get("ipAddress") else [])


def _pod(obj: dict) -> str | None:
    spec = obj.get("spec") or {}
    return f"{spec['namespace']}/{spec['pod']}" if spec.get("namespace") and spec.get("pod") else None
