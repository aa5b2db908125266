"""Startup topology: cluster router, join switch, default Subnet object.

Run by every new leader before its workers start (idempotent):
- logical router ``pacific-cluster`` (owner Cluster), relaying multicast
  between Subnets unless ``--no-multicast``;
- the ``join`` switch (``--join-cidr``, default 100.64.0.0/16) linked to the
  router at its first address; nodes' ``ovn0`` ports live on it (node.py);
- the join subnet in IPAM (so no Subnet may overlap it);
- on the join switch, two stateless ACLs for the nodes' service sources
  (address set ``pacific_service_sources``, filled by node_join.py): a node's
  connection to a Service whose endpoint is outside OVN enters OVN at the
  node's port (balanced there, in its conntrack zone) and leaves by the same
  port back to the node, and its answer takes the same two steps the other
  way; the second step of each must not meet that zone again, or conntrack
  refuses the packet as a clash with the balanced connection;
- the default ``Subnet`` object (``--default-subnet`` / ``--default-cidr``),
  created through the API if missing; subnet.py turns it into a switch like
  every other Subnet.
"""
from __future__ import annotations

import logging

from pacific import multicast, names
from pacific.controller import model
from pacific.ipam import errors as ipam_errors
from pacific.kube import errors as kerr
from pacific.kube import resources as r
from pacific.ovn.acl import LS, AclSpec, EnsureACLs
from pacific.ovn.ensure import (EnsureAddressSet, EnsurePort, EnsurePortGroup, EnsureRouter,
                                EnsureRouterPort, EnsureSwitch)
from pacific.ovn.lb import AttachLoadBalancerGroup

LOG = logging.getLogger(__name__)


def cluster_ids() -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_CLUSTER, names.EXT_OWNER: names.CLUSTER_ROUTER,
            names.EXT_CREATED_BY: names.CONTROLLER_NAME}


def join_ids(switch: str) -> dict:
    return {**cluster_ids(), names.EXT_SUBNET: switch}


def router_link_builders(switch: str, gateway: str, networks: list[str], ids: dict) -> list:
    """Builders linking `switch` to the cluster router at `networks` (each
    family's gateway/prefix), with the MAC derived from `gateway`."""
    rp = names.router_port_name(switch)
    mac = model.router_mac(gateway)
    return [
        lambda api: EnsureRouterPort(api, names.CLUSTER_ROUTER, rp, mac, list(networks), ids),
        lambda api: EnsurePort(api, switch, names.switch_router_port_name(switch),
                                      ["router"], [], ids, type="router",
                                      options={"router-port": rp}),
    ]


def service_source_acls(service_cidrs: dict[int, str], ids: dict) -> list[AclSpec]:
    """Out to a node's port without conntrack: what a node's service source sent
    (balanced already, now leaving for an endpoint outside OVN), and what comes
    back to it from a cluster IP (its answer, the balancing undone already).
    Per IP family of `service_cidrs` (family -> the service CIDR: the families
    the join network and the service CIDR share), the sources of that family."""
    fams = [(f"ip{f}", names.family_set_name(names.SERVICE_SOURCES_SET, f), cidr,
             "" if f == 4 else "-6") for f, cidr in sorted(service_cidrs.items())]
    return [acl for ip, set_name, cidr, tail in fams for acl in (
        AclSpec("to-lport", names.PRIO_ACL_SERVICE_SOURCE, f"{ip}.src == ${set_name}",
                "allow-stateless", name="service-source-out" + tail, external_ids=ids),
        AclSpec("to-lport", names.PRIO_ACL_SERVICE_SOURCE,
                f"{ip}.dst == ${set_name} && {ip}.src == {cidr}",
                "allow-stateless", name="service-source-back" + tail, external_ids=ids))]


def ensure(ctl) -> None:
    cfg = ctl.cfg
    ids = join_ids(cfg.join_switch)
    builders = [
        # relays multicast groups between Subnets (controller/multicast.py)
        lambda api: EnsureRouter(api, names.CLUSTER_ROUTER, cluster_ids(), columns={
            "options": dict(multicast.ROUTER_OPTIONS) if cfg.multicast else {}}),
        lambda api: EnsureSwitch(api, cfg.join_switch, ids),
        # Services reach the nodes through ovn0 on the join switch
        lambda api: AttachLoadBalancerGroup(api, cfg.join_switch, names.LB_GROUP),
        *router_link_builders(cfg.join_switch, cfg.join_gateway, cfg.join_networks, ids),
        # where traffic leaves the cluster (node ports, gateways' localnets join it)
        lambda api: EnsurePortGroup(api, names.EFW_EXITS_GROUP, ids),
        *(lambda api, f=f: EnsureAddressSet(
            api, names.family_set_name(names.SERVICE_SOURCES_SET, f), ids)
          for f in cfg.join_families),
        lambda api: EnsureACLs(api, cfg.join_switch, service_source_acls(
            {f: c for f in cfg.join_families if (c := cfg.service_cidr_of(f))}, ids), table=LS),
    ]
    ctl.writer.run(builders, what="startup topology")
    with ctl.ipam_lock:
        try:
            ctl.ipam.add_subnet(cfg.join_switch, ",".join(cfg.join_cidrs), gateway=",".join(cfg.join_gateways))
        except ipam_errors.SubnetExists:
            pass
    LOG.info("topology: router %s, switch %s (%s, gateway %s)", names.CLUSTER_ROUTER,
             cfg.join_switch, cfg.join_cidr, cfg.join_gateway)
    ensure_default_subnet(ctl)


def ensure_default_subnet(ctl) -> None:
    cfg = ctl.cfg
    if ctl.informer("subnets").get(cfg.default_subnet) is not None:
        return
    spec = {"cidrBlock": cfg.default_cidr, "default": True}
    if cfg.default_gateway:
        spec["gateway"] = cfg.default_gateway
    body = {"apiVersion": names.API_VERSION, "kind": "Subnet",
            "metadata": {"name": cfg.default_subnet}, "spec": spec}
    try:
        r.create(ctl.kube, r.SUBNETS, body)
        LOG.info("created default Subnet %s (%s)", cfg.default_subnet, cfg.default_cidr)
    except kerr.AlreadyExists:
        pass
    # the IPAM rebuild that follows must see it (IP objects may already use it)
    if ctl.informer("subnets").wait_for(cfg.default_subnet, lambda o: True, 30) is None:
        raise RuntimeError(f"default Subnet {cfg.default_subnet} never appeared in the watch")
