"""The node daemon's health report: a Lease per node, read by `pacific diagnose`.

Every `interval` seconds the reporter probes each tunnel peer (an ICMP echo
from the node's own namespace to the remote_ip of every Geneve interface
ovn-controller made on br-int: the underlay path the tunnel takes), asks the
node's readiness (OVS and ovn-controller, as CNI STATUS does), and writes Lease
`pacific-node-<node>` in pacific-health, as the kubelet writes its node Lease:

    spec.renewTime             now (a stale Lease: the daemon is gone or cut off)
    spec.leaseDurationSeconds  3 x interval (when diagnose calls it stale)
    pacific.io/ready           "true", or what is not ready
    pacific.io/tunnels         {"node2": "up", "node3": "down"}  (peer chassis)

A peer is "down" after MISSES consecutive unanswered probes.  The Lease is a
report for people and tools, never an input to a decision: a node daemon may
write any node's report (RBAC cannot scope create by name), which is why
nothing acts on it, and why the reports have a namespace of their own (a
node's credentials reach no other Lease, such as the controller's).
"""
from __future__ import annotations

import json
import logging
import os
import select
import socket
import struct
import time

from pacific import names
from pacific.kube import errors as kerr
from pacific.kube import resources as r
from pacific.node import metrics
from pacific.node.feature import NodeFeature

log = logging.getLogger(__name__)
MISSES = 2


def lease_name(node: str) -> str:
    return f"{names.NODE_HEALTH_LEASE_PREFIX}{node}"


def icmp_checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of an ICMP message."""
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def icmp_probe(addrs: list[str], timeout: float = 1.0) -> set[str]:
    """The addresses of `addrs` that answer one ICMP echo within `timeout`."""
    if not addrs:
        return set()
    ident = os.getpid() & 0xFFFF
    answered: set[str] = set()
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as s:
        for seq, addr in enumerate(addrs):
            head = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            body = b"pacific-health"
            pkt = struct.pack("!BBHHH", 8, 0, icmp_checksum(head + body), ident, seq) + body
            try:
                s.sendto(pkt, (addr, 0))
            except OSError as e:
                log.debug("probe to %s not sent: %s", addr, e)
        deadline = time.monotonic() + timeout
        want = set(addrs)
        while want - answered:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([s], [], [], left)[0]:
                break
            data, (src, _) = s.recvfrom(2048)
            ihl = (data[0] & 0x0F) * 4
            if len(data) >= ihl + 8:
                typ, _, _, rid, _ = struct.unpack("!BBHHH", data[ihl:ihl + 8])
                if typ == 0 and rid == ident and src in want:
                    answered.add(src)
    return answered


class HealthReporter(NodeFeature):
    name = "health"               # no informer: a report every interval

    @classmethod
    def disabled(cls, args) -> str | None:
        return None if args.health_interval > 0 else f"--health-interval {args.health_interval:g}"

    def __init__(self, ctx, namespace: str = names.NODE_HEALTH_NAMESPACE):
        super().__init__(ctx)
        self.api, self.ovs, self.node = ctx.api, ctx.ovs, ctx.node_name
        self.readiness_check, self.interval = ctx.readiness.check, ctx.args.health_interval
        self.namespace = namespace
        self._misses: dict[str, int] = {}

    def peers(self) -> dict[str, str]:
        """peer chassis -> its tunnel's remote_ip, from br-int's Geneve ports."""
        out = {}
        with self.ovs.ovsdb_connection.lock:
            for port in self.ovs.tables["Port"].rows.values():
                chassis = (port.external_ids.get("ovn-chassis-id") or "").split("@")[0]
                for iface in port.interfaces:
                    ip = iface.options.get("remote_ip")
                    if chassis and ip and iface.type in ("geneve", "vxlan", "stt"):
                        out[chassis] = ip
        return out

    def report(self) -> dict:
        peers = self.peers()
        answered = icmp_probe(sorted(set(peers.values())))
        tunnels = {}
        for chassis, ip in sorted(peers.items()):
            self._misses[chassis] = 0 if ip in answered else self._misses.get(chassis, 0) + 1
            tunnels[chassis] = "down" if self._misses[chassis] >= MISSES else "up"
            metrics.TUNNEL_UP.labels(chassis).set(tunnels[chassis] == "up")
        for gone in set(self._misses) - set(peers):
            del self._misses[gone]
            metrics.TUNNEL_UP.remove(gone)
        try:
            self.readiness_check()
            ready = "true"
        except Exception as e:  # noqa: BLE001 - the report says what is wrong
            ready = str(e) or type(e).__name__
        return {names.ANN_HEALTH_READY: ready, names.ANN_HEALTH_TUNNELS: json.dumps(tunnels)}

    def write(self, annotations: dict) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        body = {"metadata": {"name": lease_name(self.node), "namespace": self.namespace,
                             "annotations": annotations},
                "spec": {"holderIdentity": self.node, "renewTime": now,
                         "leaseDurationSeconds": int(3 * self.interval)}}
        cur = r.get(self.api, r.LEASES, lease_name(self.node), self.namespace)
        if cur is None:
            r.create(self.api, r.LEASES, body, self.namespace)
            return
        cur["metadata"].setdefault("annotations", {}).update(annotations)
        cur["spec"].update(body["spec"])
        r.replace(self.api, r.LEASES, cur, self.namespace)

    def run_once(self) -> None:
        ann = self.report()
        try:
            self.write(ann)
        except (kerr.ApiError, OSError) as e:
            log.warning("health report not written to Lease %s/%s: %s", self.namespace,
                        lease_name(self.node), e)

    @property
    def repair(self) -> float:        # a report every interval
        return self.interval

    def converge(self) -> None:
        self.run_once()
