"""End-to-end fixtures for the CNI plugin and node daemon.

`cni_cluster` is a 2-node sandbox with the real control plane and one pacific-node per
node, plus `FakeController`: a stand-in for pacific-controller that watches pods
and, for each new one, creates a real logical switch port in OVN NB and writes
the allocation annotations through the API (the real NB rows and real packets
are what the tests check; only the IPAM decision is trivial here).
"""
from __future__ import annotations

import ipaddress
import itertools
import logging
import threading

import nb_commands
from pacific import contract, names
from pacific.kube import resources as kr
from pacific.kube.informer import Informer
from pacific.ovn.base import Owner
from pacific.ovn.nb import NorthboundAPI

log = logging.getLogger(__name__)
SWITCH = "cni-test"
CIDR = "10.77.0.0/16"
GATEWAY = "10.77.0.1"
ROUTER = "cni-test-router"
JOIN = "cni-test-join"
JOIN_CIDR = "100.64.0.0/16"
JOIN_GW = "100.64.0.1"


class FakeController:
    def __init__(self, sb, api, hold: set | None = None):
        self.sb, self.api = sb, api
        self.nb = NorthboundAPI(sb.nb_remote, created_by="cni-test-fake-controller")
        self.nb.commit(nb_commands.add_switch(self.nb, SWITCH,
                                              owner=Owner(names.OWNER_KIND_SUBNET, SWITCH)))
        self.net = ipaddress.ip_network(CIDR)
        self._next = itertools.count(10)
        self._mu = threading.Lock()
        self.allocated: dict[str, str] = {}
        self.hold = hold if hold is not None else set()   # pod keys not to allocate (yet)
        self.informer = Informer(api, kr.PODS, on_add=self._on_pod, on_update=lambda o, n:
                                 self._on_pod(n), on_delete=self._on_delete)
        self.informer.start()
        assert self.informer.wait_synced(20)

    def _on_pod(self, pod: dict) -> None:
        key = kr.object_key(pod)
        ann = pod["metadata"].get("annotations") or {}
        if key in self.hold or contract.own_record(pod) is not None:
            return
        threading.Thread(target=self.allocate, args=(pod,), daemon=True).start()

    def allocate(self, pod: dict) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        key = f"{ns}/{name}"
        with self._mu:
            if key in self.allocated:
                return
            n = next(self._next)
            ip = str(self.net[n])
            self.allocated[key] = ip
        mac = "0a:58:%02x:%02x:%02x:%02x" % tuple(ipaddress.ip_address(ip).packed)
        lsp = names.pod_lsp_name(ns, name)
        self.nb.commit(nb_commands.add_switch_port(self.nb,
            SWITCH, lsp, owner=Owner(names.OWNER_KIND_POD, key),
            addresses=[f"{mac} {ip}"], port_security=[f"{mac} {ip}"]))
        rec = contract.PodRecord(uid=pod["metadata"]["uid"], port=lsp, ip=ip, mac=mac, cidr=CIDR,
                                 gateway=GATEWAY, subnet=SWITCH)
        kr.patch_merge(self.api, kr.PODS, name, {"metadata": {"annotations": rec.annotations()}},
                       namespace=ns)
        log.info("fake controller: %s -> %s %s", key, ip, mac)

    def add_router_and_join(self) -> None:
        """Router between the pod switch and a join switch, as the controller builds
        the cluster router; the node management ports sit on the join switch."""
        owner = Owner(names.OWNER_KIND_CLUSTER, ROUTER)
        with self.nb.transaction() as txn:
            txn.add(nb_commands.add_router(self.nb, ROUTER, owner=owner))
            txn.add(nb_commands.add_switch(self.nb, JOIN, owner=owner))
            for c in nb_commands.link_router_switch(self.nb, ROUTER, SWITCH, "0a:58:0a:4d:00:01",
                                                f"{GATEWAY}/16", owner=owner):
                txn.add(c)
            for c in nb_commands.link_router_switch(self.nb, ROUTER, JOIN, "0a:58:64:40:00:01",
                                                f"{JOIN_GW}/16", owner=owner):
                txn.add(c)

    def annotate_node(self, node: str, index: int) -> str:
        """Node object with the join-port annotations and its LSP on the join switch;
        returns the join IP."""
        ip = f"100.64.0.{index + 1}"
        mac = f"0a:58:64:40:00:{index + 1:02x}"
        lsp = names.node_lsp_name(node)
        self.nb.commit(nb_commands.add_switch_port(self.nb,
            JOIN, lsp, owner=Owner(names.OWNER_KIND_NODE, node),
            addresses=[f"{mac} {ip}"], port_security=[f"{mac} {ip}"]))
        ann = contract.NodeRecord(ip_cidr=f"{ip}/16", mac=mac, gateway=JOIN_GW, port=lsp).annotations()
        if kr.get(self.api, kr.NODES, node) is None:
            kr.create(self.api, kr.NODES, {"apiVersion": "v1", "kind": "Node",
                                           "metadata": {"name": node, "annotations": ann}})
        else:
            kr.patch_merge(self.api, kr.NODES, node, {"metadata": {"annotations": ann}})
        return ip

    def add_subnet_object(self) -> None:
        """The Subnet, and the status the controller writes once it applied it
        (nodes route only status.cidrBlock)."""
        kr.create(self.api, kr.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                         "metadata": {"name": SWITCH},
                                         "spec": {"cidrBlock": CIDR, "gateway": GATEWAY}})
        kr.patch_merge(self.api, kr.SUBNETS, SWITCH, {"status": {"cidrBlock": CIDR, "gateway": GATEWAY}},
                       subresource="status")

    def refuse(self, ns: str, name: str, why: str) -> None:
        kr.patch_merge(self.api, kr.PODS, name, {"metadata": {"annotations": {
            names.ANN_ALLOCATION_ERROR: why}}}, namespace=ns)

    def _on_delete(self, pod: dict) -> None:
        key = kr.object_key(pod)
        with self._mu:
            self.allocated.pop(key, None)
        lsp = names.pod_lsp_name(pod["metadata"]["namespace"], pod["metadata"]["name"])
        try:
            self.nb.commit(self.nb.lsp_del(lsp, if_exists=True))
        except Exception:  # noqa: BLE001 - best effort in a test helper
            log.exception("fake controller: deleting %s", lsp)

    def close(self) -> None:
        self.informer.stop()
        self.nb.close()
