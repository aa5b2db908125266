"""Controller configuration (flags / environment), validated once at start."""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pacific import exposure, names, remotes


def _cidr(flag: str, value: str):
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ConfigError(f"{flag} {value!r} is not a valid CIDR: {exc}") from None


class ConfigError(ValueError):
    """A controller setting is invalid; the message names the flag."""


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",")]


def _of(cidrs: list[str], version: int) -> str | None:
    return next((c for c in cidrs if ipaddress.ip_network(c).version == version), None)


def _families(flag: str, value: str) -> list:
    """An IPv4 CIDR, an IPv4 and an IPv6 one (dual-stack), or an IPv6 one
    (IPv6-only), as kube-apiserver's --service-cluster-ip-range."""
    nets = [_cidr(flag, v) for v in _split(value)]
    if len(nets) > 2 or len({n.version for n in nets}) != len(nets) or \
            (len(nets) == 2 and nets[0].version != 4):
        raise ConfigError(f"{flag} {value!r}: one IPv4 CIDR, one IPv4 and one IPv6 "
                          "(dual-stack, IPv4 first), or one IPv6 (IPv6-only)")
    return nets


@dataclass
class Config:
    nb_remote: str
    kubeconfig: str | None = None
    default_subnet: str = names.DEFAULT_SUBNET
    default_cidr: str = names.DEFAULT_CIDR
    default_gateway: str | None = None
    join_switch: str = names.JOIN_SWITCH
    join_cidr: str = names.JOIN_CIDR
    workers: int = 8
    batch: bool = True
    batch_max: int = 500
    batch_delay: float = 0.001
    gc_interval: float = 300.0
    status_interval: float = 1.0
    nb_failure_exit: float = 60.0               # seconds of failing NB writes before giving up
    lag_probe_interval: float = 30.0            # NB -> chassis lag probe (lagprobe.py); 0: off
    isolation: bool = True                      # tenant isolation between namespaces
    ipv6_subnets: bool = False                  # IPv6 Subnets in a cluster of IPv4 networks
    global_namespaces: tuple = names.DEFAULT_GLOBAL_NAMESPACES
    multicast: bool = True                      # snooping, the gate, relay (controller/multicast.py)
    multicast_query_interval: int = names.MCAST_QUERY_INTERVAL
    audit_rate: int = names.AUDIT_RATE          # log records/s per audited scope (controller/audit.py)
    audit_burst: int = names.AUDIT_BURST
    audit_node_cap: int = names.AUDIT_NODE_CAP  # ... of all scopes together, on one node
    sb_remote: str = ""                         # read-only: which chassis holds each gateway
    service_cidr: str = names.SERVICE_CIDR      # kube-apiserver's --service-cluster-ip-range
    external_ip_cidrs: str = ""                 # where externalIPs may lie ("": nowhere)
    egress_ip_cidrs: str = ""                   # where EgressIP addresses may lie ("": nowhere)
    dns_servers: tuple = ()                     # the egress firewall's resolvers (): resolv.conf
    infrastructure_ips: tuple = ()              # no external IP may be one (+ nodes, OVN central)
    trusted_endpoint_services: tuple = ("default/kubernetes",)   # endpoints not confined
    node_port_range: str = "%d-%d" % exposure.NODE_PORT_RANGE
    endpointslice_version: str = "v1"           # what the API server serves (main discovers it)
    event_burst: int = 20                       # Events per namespace at once (kube/budget.py)
    event_rate: float = 1.0                     # ... and per second after that (0: no limit)
    address_quarantine: float = names.ADDRESS_QUARANTINE   # s a released address rests
    transit_networks_per_namespace: int = names.TRANSIT_NETWORKS_PER_NAMESPACE   # Services' gateways
    external_ips_per_namespace: int = names.EXTERNAL_IPS_PER_NAMESPACE   # 0: no bound
    transit_networks_reserved: int = names.TRANSIT_NETWORKS_RESERVED   # left to administrators'

    @property
    def ipv6(self) -> bool:
        """Does the cluster carry IPv6: its join network, service CIDR or
        default Subnet has an IPv6 CIDR (a dual-stack or an IPv6-only
        cluster), or --ipv6-subnets accepts IPv6 Subnets in an IPv4 one."""
        return self.ipv6_subnets or any(":" in c for c in (
            *_split(self.join_cidr), *_split(self.service_cidr), *_split(self.default_cidr)))

    @property
    def families(self) -> tuple[int, ...]:
        """The IP versions pods may have: IPv6 too in a cluster that carries it."""
        return (4, 6) if self.ipv6 else (4,)

    def validate(self) -> "Config":
        joins = _families("--join-cidr", self.join_cidr)
        _families("--service-cidr", self.service_cidr)
        defaults = [_cidr("--default-cidr", v.strip()) for v in self.default_cidr.split(",")]
        if len(defaults) > 2 or len({n.version for n in defaults}) != len(defaults):
            raise ConfigError(f"--default-cidr {self.default_cidr!r}: one CIDR, or one IPv4 and "
                              "one IPv6 (dual-stack)")
        if any(n.overlaps(j) for n in defaults for j in joins if n.version == j.version):
            raise ConfigError(f"--default-cidr {self.default_cidr} overlaps --join-cidr {self.join_cidr}")
        if not 1 <= self.audit_rate <= 100000 or not 1 <= self.audit_burst <= 100000:
            raise ConfigError(f"--audit-rate {self.audit_rate} / --audit-burst {self.audit_burst}: "
                              "each must be 1 to 100000 records per second")
        if not self.audit_rate <= self.audit_node_cap <= 100000:
            raise ConfigError(f"--audit-node-cap {self.audit_node_cap}: must be --audit-rate "
                              f"({self.audit_rate}) to 100000 records per second")
        if not 5 <= self.multicast_query_interval <= 1790:
            raise ConfigError(f"--multicast-query-interval {self.multicast_query_interval} is "
                              "outside 5..1790 s (OVN ages a membership out after two of them "
                              "and 5 s, between 15 and 3600 s)")
        try:
            exposure.parse_cidrs(self.external_ip_cidrs)
            exposure.parse_cidrs(self.egress_ip_cidrs)
            exposure.parse_ips(",".join(self.infrastructure_ips))
            exposure.parse_port_range(self.node_port_range)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        for server in self.dns_servers:
            host, _, port = server.rpartition(":") if server.count(":") == 1 else (server, "", "")
            try:
                ipaddress.ip_address(host or server)
                if port and not 0 < int(port) < 65536:
                    raise ValueError(port)
            except ValueError:
                raise ConfigError(f"--dns-servers: {server!r} is not an IP address or "
                                  "address:port") from None
        for key in self.trusted_endpoint_services:
            if key.count("/") != 1 or not all(key.split("/")):
                raise ConfigError(f"--trusted-endpoint-services: {key!r} is not namespace/name")
        if self.workers < 1:
            raise ConfigError("--workers must be at least 1")
        if self.event_burst < 1 or self.event_rate < 0:
            raise ConfigError("--event-burst must be at least 1 and --event-rate at least 0")
        if not 0 <= self.address_quarantine <= 86400:
            raise ConfigError(f"--address-quarantine {self.address_quarantine:g} is outside "
                              "0..86400 s")
        from pacific.controller.transit import COUNT as count
        if not 0 <= self.transit_networks_per_namespace <= count or \
                not 0 <= self.transit_networks_reserved <= count:
            raise ConfigError(f"--transit-networks-per-namespace "
                              f"{self.transit_networks_per_namespace} / --transit-networks-reserved "
                              f"{self.transit_networks_reserved}: each must be 0 to {count} (the "
                              f"/24s of {names.EGRESS_TRANSIT_CIDR})")
        if self.external_ips_per_namespace < 0:
            raise ConfigError(f"--external-ips-per-namespace {self.external_ips_per_namespace} "
                              "must be at least 0 (0: no bound)")
        if self.batch_max < 1:
            raise ConfigError("--batch-max must be at least 1")
        return self

    @property
    def service_cidrs(self) -> list[str]:
        """--service-cidr's CIDRs, IPv4 first."""
        return _split(self.service_cidr)

    def service_cidr_of(self, version: int) -> str | None:
        """The service CIDR of IP `version`, None when the cluster has none."""
        return _of(self.service_cidrs, version)

    @property
    def join_cidrs(self) -> list[str]:
        """--join-cidr's CIDRs, IPv4 first (dual-stack: the nodes' ovn0 gets
        an address of each)."""
        return _split(self.join_cidr)

    def join_cidr_of(self, version: int) -> str | None:
        return _of(self.join_cidrs, version)

    @property
    def join_families(self) -> tuple[int, ...]:
        """The IP versions of the join network, in its order (IPv4 first)."""
        return tuple(ipaddress.ip_network(c).version for c in self.join_cidrs)

    @property
    def join_gateways(self) -> list[str]:
        """The cluster router's address on the join switch, per family."""
        return [str(ipaddress.ip_network(c).network_address + 1) for c in self.join_cidrs]

    @property
    def join_networks(self) -> list[str]:
        """The router port's networks on the join switch ("100.64.0.1/16", ...)."""
        return [f"{g}/{ipaddress.ip_network(c).prefixlen}"
                for g, c in zip(self.join_gateways, self.join_cidrs)]

    @property
    def join_gateway(self) -> str:
        """The first family's join gateway (the nodes' default towards OVN)."""
        return self.join_gateways[0]

    def join_gateway_of(self, version: int) -> str | None:
        """The cluster router's address on the join switch in IP `version`."""
        return _of(self.join_gateways, version)

    @property
    def join_prefixlen(self) -> int:
        return ipaddress.ip_network(self.join_cidrs[0]).prefixlen

    @property
    def reserved_ips(self) -> set[str]:
        """Addresses no Service may claim besides the nodes': OVN central's
        (from the remotes) and --infrastructure-ips."""
        return remotes.addresses(self.nb_remote, self.sb_remote) | set(self.infrastructure_ips)

    @property
    def egress_ip_networks(self) -> list[str]:
        """The CIDRs EgressIP addresses may come from (none: no address granted)."""
        return exposure.parse_cidrs(self.egress_ip_cidrs) or []

    @property
    def exposure_settings(self) -> tuple[list[str] | None, tuple[int, int]]:
        """(the CIDRs external IPs may come from or None, the node port range)."""
        return exposure.parse_cidrs(self.external_ip_cidrs), exposure.parse_port_range(
            self.node_port_range)
