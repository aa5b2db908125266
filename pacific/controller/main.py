"""`pacific-controller`: the cluster brain (Subnets, Nodes, Pods -> OVN NB + IPAM).

Runs leader-elected by default: every replica campaigns for a Lease, the leader
runs the controller (see core.py), the others wait and take over within the
lease duration when it dies.  Losing the lease stops the controller (its NB
writer commits nothing more: a fence checked before every transaction) and the
process exits with status 1, as client-go's do, to be restarted as a fresh
standby; SIGTERM stops it and releases the lease at once.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading

from pacific import daemonlog, heap, names
from pacific.controller.config import Config, ConfigError

LOG = logging.getLogger("pacific.controller")
METRICS_RETRY = 5.0   # seconds between attempts to bind a taken metrics port
MALLOC_ARENAS = 2     # pacific.heap: fewer arenas, a smaller resident heap at scale


def _env(name: str, default=None):
    return os.environ.get(name, default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pacific-controller",
        description="Pacific controller: watches Kubernetes (Pods, Namespaces, Nodes, Subnets, "
                    "IPs, NetworkPolicies, Services, EndpointSlices, StatefulSets), allocates pod "
                    "and node addresses, programs the OVN Northbound database and writes the "
                    "pod/node annotations the node daemon reads.  Most flags have an "
                    "environment variable (in brackets).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--kubeconfig", default=_env("KUBECONFIG"),
                   help="kubeconfig of the API server (else in-cluster) [KUBECONFIG]")
    p.add_argument("--nb-remote", default=_env("PACIFIC_NB_REMOTE"),
                   help="OVN Northbound OVSDB remote, e.g. unix:/run/ovn/ovnnb_db.sock or "
                        "tcp:10.0.0.1:6641 (required) [PACIFIC_NB_REMOTE]")
    p.add_argument("--sb-remote", default=_env("PACIFIC_SB_REMOTE", ""),
                   help="OVN Southbound, read only: which node holds each centralized "
                   "Subnet's egress gateway, for the Subnet's status (default: none)")
    p.add_argument("--nb-ssl-key", default=_env("PACIFIC_NB_SSL_KEY"),
                   help="private key for ssl: NB remotes [PACIFIC_NB_SSL_KEY]")
    p.add_argument("--nb-ssl-cert", default=_env("PACIFIC_NB_SSL_CERT"),
                   help="certificate for ssl: NB remotes [PACIFIC_NB_SSL_CERT]")
    p.add_argument("--nb-ssl-ca", default=_env("PACIFIC_NB_SSL_CA"),
                   help="CA certificate the NB servers' certificates must be signed by "
                   "[PACIFIC_NB_SSL_CA]")
    g = p.add_argument_group("topology")
    g.add_argument("--default-subnet", default=_env("PACIFIC_DEFAULT_SUBNET", names.DEFAULT_SUBNET),
                   help="name of the default Subnet (created if missing) [PACIFIC_DEFAULT_SUBNET]")
    g.add_argument("--default-cidr", default=_env("PACIFIC_DEFAULT_CIDR", names.DEFAULT_CIDR),
                   help="CIDR of the default Subnet when it is created; dual-stack: an IPv4 "
                   "and an IPv6 one, 10.16.0.0/16,fd00:16::/64; IPv6-only: one IPv6 "
                   "[PACIFIC_DEFAULT_CIDR]")
    g.add_argument("--default-gateway", default=_env("PACIFIC_DEFAULT_GATEWAY"),
                   help="gateway of the default Subnet (default: its first address) "
                        "[PACIFIC_DEFAULT_GATEWAY]")
    g.add_argument("--node-switch", default=_env("PACIFIC_NODE_SWITCH", names.JOIN_SWITCH),
                   help="name of the join switch carrying the nodes' ovn0 ports [PACIFIC_NODE_SWITCH]")
    g.add_argument("--join-cidr", default=_env("PACIFIC_JOIN_CIDR", names.JOIN_CIDR),
                   help="CIDR of the join switch (node addresses); dual-stack: IPv4 first "
                   "(100.64.0.0/16,fd00:64::/64); IPv6-only: one IPv6.  An IPv6 CIDR here, in "
                   "--service-cidr or --default-cidr makes the cluster carry IPv6 (IPv6 "
                   "Subnets accepted, every rule in both families) [PACIFIC_JOIN_CIDR]")
    g = p.add_argument_group("services")
    g.add_argument("--service-cidr", default=_env("PACIFIC_SERVICE_CIDR", names.SERVICE_CIDR),
                   help="kube-apiserver's --service-cluster-ip-range: no external IP may lie "
                   "in it; dual-stack as the API server's, IPv4 first (10.96.0.0/12,fd00:96::/108), "
                   "or IPv6-only (default: %(default)s)")
    g.add_argument("--external-ip-cidrs", default=_env("PACIFIC_EXTERNAL_IP_CIDRS", ""),
                   help="comma-separated CIDRs a Service's externalIPs must lie in (default: "
                   "none: no Service gets an external IP until the administrator names the "
                   "ranges; an address belongs to one namespace); refused ones get an Event. "
                   "Keep equal to pacific-node's [PACIFIC_EXTERNAL_IP_CIDRS]")
    g.add_argument("--egress-ip-cidrs", default=_env("PACIFIC_EGRESS_IP_CIDRS", ""),
                   help="comma-separated CIDRs EgressIP addresses must lie in: the underlay "
                   "networks of the nodes labelled pacific.io/egress-assignable (default: none: "
                   "no EgressIP address is granted) [PACIFIC_EGRESS_IP_CIDRS]")
    g.add_argument("--dns-servers", default=_env("PACIFIC_DNS_SERVERS", ""),
                   help="comma-separated DNS servers that resolve EgressFirewall dnsName rules "
                   "(default: those of /etc/resolv.conf) [PACIFIC_DNS_SERVERS]")
    g.add_argument("--infrastructure-ips", default=_env("PACIFIC_INFRASTRUCTURE_IPS", ""),
                   help="comma-separated addresses no Service may claim as external IP, besides "
                   "the nodes' and OVN central's (taken from --nb-remote/--sb-remote): default "
                   "routers, DNS, API VIPs [PACIFIC_INFRASTRUCTURE_IPS]")
    g.add_argument("--trusted-endpoint-services",
                   default=_env("PACIFIC_TRUSTED_ENDPOINT_SERVICES", "default/kubernetes"),
                   help="comma-separated namespace/name of the Services whose endpoints may be "
                   "other than pods of their own namespace (default: %(default)s, whose "
                   "endpoint is the API server); every other Service's hand-written endpoints "
                   "outside its namespace are ignored with an Event [PACIFIC_TRUSTED_ENDPOINT_SERVICES]")
    g.add_argument("--node-port-range", default=_env("PACIFIC_NODE_PORT_RANGE", "30000-32767"),
                   help="kube-apiserver's --service-node-port-range (default: %(default)s)")
    g.add_argument("--external-ips-per-namespace", type=int,
                   default=int(_env("PACIFIC_EXTERNAL_IPS_PER_NAMESPACE",
                                    str(names.EXTERNAL_IPS_PER_NAMESPACE))),
                   help="external IPs one namespace's Services may hold, its oldest Services' "
                   "first (the others are refused with an Event), so that no tenant takes every "
                   "address --external-ip-cidrs grants; 0: no bound; keep equal to "
                   "pacific-node's (default: %(default)s) [PACIFIC_EXTERNAL_IPS_PER_NAMESPACE]")
    g.add_argument("--transit-networks-per-namespace", type=int,
                   default=int(_env("PACIFIC_TRANSIT_NETWORKS_PER_NAMESPACE",
                                    str(names.TRANSIT_NETWORKS_PER_NAMESPACE))),
                   help=f"transit networks (/24s of {names.EGRESS_TRANSIT_CIDR}, one per egress "
                   "gateway) one namespace's Services may hold: one per external IP their ready "
                   "endpoints leave by (Services sharing an address share one); the namespace's "
                   "oldest such Services get them, the others an EgressSNAT Event and their "
                   "endpoints' traffic to the outside dropped (default: %(default)s) "
                   "[PACIFIC_TRANSIT_NETWORKS_PER_NAMESPACE]")
    g.add_argument("--transit-networks-reserved", type=int,
                   default=int(_env("PACIFIC_TRANSIT_NETWORKS_RESERVED",
                                    str(names.TRANSIT_NETWORKS_RESERVED))),
                   help="transit networks kept for administrators' gateways (centralized "
                   "Subnets, EgressIPs): a Service takes a new one only while more than this "
                   "many are free (default: %(default)s) [PACIFIC_TRANSIT_NETWORKS_RESERVED]")
    g = p.add_argument_group("tenant isolation")
    g.add_argument("--no-isolation", dest="isolation", action="store_false",
                   default=_env("PACIFIC_ISOLATION", "true").lower() not in ("false", "0", "no"),
                   help="switch tenant isolation between namespaces off cluster-wide "
                   "(default: on; PACIFIC_ISOLATION=false)")
    g.add_argument("--global-namespaces",
                   default=_env("PACIFIC_GLOBAL_NAMESPACES", ",".join(names.DEFAULT_GLOBAL_NAMESPACES)),
                   help="comma-separated namespaces that are global (reach and are reached by "
                   f"every tenant) unless labelled {names.LABEL_TENANT}=... "
                   "(default: %(default)s)")
    g.add_argument("--ipv6-subnets", action="store_true",
                   default=_env("PACIFIC_IPV6_SUBNETS", "false").lower() in ("true", "1", "yes"),
                   help="accept IPv6 and dual-stack Subnets in a cluster whose join network "
                   "and service CIDR are IPv4 only: isolation and policies hold for their "
                   "IPv6, but it reaches no node, Service or outside (docs/dual-stack.md).  A "
                   "cluster with an IPv6 --join-cidr, --service-cidr or --default-cidr accepts "
                   "them without it.  Default: refused with a reason "
                   "[PACIFIC_IPV6_SUBNETS=true]")
    g.add_argument("--address-quarantine", type=float, metavar="SECONDS",
                   default=float(_env("PACIFIC_ADDRESS_QUARANTINE", str(names.ADDRESS_QUARANTINE))),
                   help="seconds a released pod address goes to no other pod, fixed-address "
                   "requests included (refused with an Event saying when it is free; retried "
                   "then), so nothing of its old holder's exposure (a Service's hand-written "
                   "endpoints, connection tracking, caches) reaches the new one; the pod that "
                   "released it takes it back at once.  0: none (default: %(default)s) "
                   "[PACIFIC_ADDRESS_QUARANTINE]")
    g = p.add_argument_group("multicast")
    g.add_argument("--no-multicast", dest="multicast", action="store_false",
                   default=_env("PACIFIC_MULTICAST", "true").lower() not in ("false", "0", "no"),
                   help="no multicast feature: no IGMP snooping, no gate, no relay between Subnets; "
                   "OVN then floods a group on its Subnet like broadcast (tenant isolation still "
                   f"holds).  Default: on, and a namespace takes part once an administrator sets "
                   f"{names.ANN_MULTICAST}=true on it [PACIFIC_MULTICAST=false]")
    g.add_argument("--multicast-query-interval", type=int,
                   default=int(_env("PACIFIC_MULTICAST_QUERY_INTERVAL", str(names.MCAST_QUERY_INTERVAL))),
                   help="seconds between each Subnet querier's IGMP general queries; a membership "
                   "not refreshed for two of them (and 5 s) ends (default: %(default)s) "
                   "[PACIFIC_MULTICAST_QUERY_INTERVAL]")
    g = p.add_argument_group("audit")
    g.add_argument("--audit-rate", type=int,
                   default=int(_env("PACIFIC_AUDIT_RATE", str(names.AUDIT_RATE))),
                   help=f"log records per second of each audited scope (a namespace's "
                   f"NetworkPolicies with {names.ANN_AUDIT} or dry-run, a tenant's isolation, a "
                   "ClusterNetworkPolicy, an EgressFirewall), however many ACLs it has, before "
                   f"its OVN meter ({names.METER_AUDIT}:KIND:OWNER) drops the rest "
                   "(default: %(default)s) [PACIFIC_AUDIT_RATE]")
    g.add_argument("--audit-burst", type=int,
                   default=int(_env("PACIFIC_AUDIT_BURST", str(names.AUDIT_BURST))),
                   help="records a scope may log at once above the rate (default: %(default)s) "
                   "[PACIFIC_AUDIT_BURST]")
    g.add_argument("--audit-node-cap", type=int,
                   default=int(_env("PACIFIC_AUDIT_NODE_CAP", str(names.AUDIT_NODE_CAP))),
                   help="log records per second of all scopes together on one node: each "
                   "scope's rate is at most this over the number of audited scopes, so no "
                   "flood fills a node's disk or its packet-in queue (ARP, DHCP, IGMP) "
                   "(default: %(default)s) [PACIFIC_AUDIT_NODE_CAP]")
    g = p.add_argument_group("performance")
    g.add_argument("--workers", type=int, default=int(_env("PACIFIC_WORKERS", "16")),
                   help="pod reconcile workers (every other feature gets a quarter) [PACIFIC_WORKERS]")
    g.add_argument("--batch-max", type=int, default=int(_env("PACIFIC_BATCH_MAX", "500")),
                   help="most reconciles per NB transaction [PACIFIC_BATCH_MAX]")
    g.add_argument("--batch-delay-ms", type=float, default=float(_env("PACIFIC_BATCH_DELAY_MS", "1")),
                   help="how long a batch waits for more work after its first item "
                        "[PACIFIC_BATCH_DELAY_MS]")
    g.add_argument("--no-batch", action="store_true", help="one NB transaction per reconcile")
    g.add_argument("--event-burst", type=int, default=int(_env("PACIFIC_EVENT_BURST", "20")),
                   help="Events the controller writes about one namespace's objects at once; "
                   "past it, --event-rate a second (a tenant's thousand refused pods do not "
                   "cost a thousand API writes; the pods still carry the refusal) "
                   "[PACIFIC_EVENT_BURST, default %(default)s]")
    g.add_argument("--event-rate", type=float, default=float(_env("PACIFIC_EVENT_RATE", "1")),
                   help="Events per second per namespace past --event-burst (0: no limit) "
                   "[PACIFIC_EVENT_RATE, default %(default)s]")
    g.add_argument("--gc-interval", type=float, default=float(_env("PACIFIC_GC_INTERVAL", "300")),
                   help="seconds between full re-checks of every object and owned NB row")
    g.add_argument("--nb-failure-exit", type=float,
                   default=float(_env("PACIFIC_NB_FAILURE_EXIT", "60")), metavar="SECONDS",
                   help="give up leadership and exit (status 1) when NB writes have failed "
                   "this long, so a replica with a working NB connection takes over "
                   "[PACIFIC_NB_FAILURE_EXIT, default 60; 0: never]")
    g.add_argument("--lag-probe-interval", type=float,
                   default=float(_env("PACIFIC_LAG_PROBE_INTERVAL", "30")),
                   help="seconds between NB -> chassis lag probes (bump NB_Global.nb_cfg, time "
                   "until ovn-northd and every chassis applied it; metrics "
                   "pacific_ovn_nb_to_*_seconds); 0: off (default: %(default)s)")
    g = p.add_argument_group("leader election")
    g.add_argument("--no-leader-elect", dest="leader_elect", action="store_false",
                   help="run without a Lease (only ever run ONE replica like this)")
    g.add_argument("--lease-name", default=_env("PACIFIC_LEASE_NAME", names.CONTROLLER_NAME),
                   help="Lease object name [PACIFIC_LEASE_NAME]")
    g.add_argument("--lease-namespace", default=_env("PACIFIC_LEASE_NAMESPACE",
                                                     names.CONTROLLER_LEASE_NAMESPACE),
                   help="Lease namespace [PACIFIC_LEASE_NAMESPACE]")
    g.add_argument("--identity", default=_env("PACIFIC_IDENTITY", f"{socket.gethostname()}-{os.getpid()}"),
                   help="this replica's identity in the Lease [PACIFIC_IDENTITY]")
    g.add_argument("--lease-duration", type=float, default=15.0,
                   help="seconds a standby waits for a silent leader before taking over")
    g.add_argument("--renew-deadline", type=float, default=10.0,
                   help="seconds the leader keeps trying to renew before it steps down")
    g.add_argument("--retry-period", type=float, default=2.0, help="seconds between Lease attempts")
    g = p.add_argument_group("health and metrics")
    g.add_argument("--metrics-address", default=_env("PACIFIC_METRICS_ADDRESS",
                                                     f"127.0.0.1:{names.CONTROLLER_METRICS_PORT}"),
                   help="HOST:PORT serving /metrics (Prometheus), /healthz (liveness) and "
                        "/readyz (readiness: NB connected and, on the leader, caches synced; "
                        "the answer says whether this replica leads); ':PORT' for every "
                        "address, '' for none [PACIFIC_METRICS_ADDRESS]")
    g = p.add_argument_group("logging")
    g.add_argument("--log-file", default=_env("PACIFIC_LOG_FILE"), help="log here instead of stderr")
    g.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def _items(text: str) -> tuple[str, ...]:
    return tuple(i.strip() for i in (text or "").split(",") if i.strip())


def config_from_args(args) -> Config:
    if not args.nb_remote:
        raise ConfigError("--nb-remote (or PACIFIC_NB_REMOTE) is required")
    return Config(nb_remote=args.nb_remote, kubeconfig=args.kubeconfig,
                  default_subnet=args.default_subnet, default_cidr=args.default_cidr,
                  default_gateway=args.default_gateway, join_switch=args.node_switch,
                  join_cidr=args.join_cidr, workers=args.workers, batch=not args.no_batch,
                  batch_max=args.batch_max, batch_delay=args.batch_delay_ms / 1000.0,
                  gc_interval=args.gc_interval, lag_probe_interval=args.lag_probe_interval, isolation=args.isolation,
                  multicast=args.multicast, multicast_query_interval=args.multicast_query_interval,
                  ipv6_subnets=args.ipv6_subnets,
                  audit_rate=args.audit_rate, audit_burst=args.audit_burst,
                  audit_node_cap=args.audit_node_cap,
                  nb_failure_exit=args.nb_failure_exit, service_cidr=args.service_cidr,
                  sb_remote=args.sb_remote, event_burst=args.event_burst,
                  event_rate=args.event_rate, address_quarantine=args.address_quarantine,
                  external_ip_cidrs=args.external_ip_cidrs, egress_ip_cidrs=args.egress_ip_cidrs,
                  node_port_range=args.node_port_range,
                  transit_networks_per_namespace=args.transit_networks_per_namespace,
                  external_ips_per_namespace=args.external_ips_per_namespace,
                  transit_networks_reserved=args.transit_networks_reserved,
                  infrastructure_ips=_items(args.infrastructure_ips),
                  dns_servers=_items(args.dns_servers),
                  trusted_endpoint_services=_items(args.trusted_endpoint_services),
                  global_namespaces=tuple(n.strip() for n in args.global_namespaces.split(",")
                                          if n.strip())).validate()


def _ensure_namespace(kube, namespace: str) -> None:
    """The Lease lives in a namespace that a bare API server may not have yet."""
    from pacific.kube import errors, resources as r
    try:
        if r.get(kube, r.NAMESPACES, namespace) is None:
            r.create(kube, r.NAMESPACES, {"metadata": {"name": namespace}})
            LOG.info("created namespace %s for the leader Lease", namespace)
    except errors.AlreadyExists:
        pass
    except errors.ApiError as exc:
        LOG.warning("cannot ensure namespace %s for the leader Lease: %s", namespace, exc)


def run_leader_elected(cfg: Config, args, kube, nb, shutdown: threading.Event,
                       health=None) -> bool:
    """Campaign, lead until shutdown or until the Lease is lost; False if lost."""
    from pacific.controller.core import Controller, NBUnavailable
    from pacific.kube.leader import run_leader_elected as campaign

    _ensure_namespace(kube, args.lease_namespace)
    if shutdown.is_set():
        return True
    term = threading.Event()        # ends this term of leadership
    leading = threading.Event()     # a term started: wait for it to end
    done = threading.Event()
    elector_stop = threading.Event()

    def lead():
        leading.set()
        ctl = Controller(cfg, kube, nb)
        # NB unwritable too long: release the Lease at once (a standby leads)
        # rather than after the hung transaction and the shutdown finished
        ctl.on_giving_up = elector_stop.set
        try:
            run_term(ctl, term, health)
        except NBUnavailable as exc:
            LOG.error("%s", exc)
        finally:
            done.set()

    def wait_term_done():
        # a standby never led: nothing to wait for (it used to sit 15 s on
        # SIGTERM until the sandbox killed it)
        if leading.is_set():
            done.wait(15)

    def on_shutdown():
        shutdown.wait()
        term.set()
        wait_term_done()
        elector_stop.set()          # release the Lease only once we stopped writing

    threading.Thread(target=on_shutdown, daemon=True, name="shutdown").start()
    # the Lease has an API client (a connection pool) of its own: renewals
    # queued behind the workers' requests in a busy cluster (one tenant's
    # churn) lost the Lease ("Connection pool is full", bench_fairness)
    from pacific.kube import client
    lease_api = client.load(cfg.kubeconfig)
    campaign(lease_api, args.lease_name, args.lease_namespace, args.identity,
             on_started_leading=lead, on_stopped_leading=term.set,
             lease_duration=args.lease_duration, renew_deadline=args.renew_deadline,
             retry_period=args.retry_period, stop=elector_stop)
    term.set()
    wait_term_done()
    elector_stop.set()
    if not shutdown.is_set():
        # as client-go: a process that lost its Lease exits (its Deployment
        # restarts it as a fresh standby) instead of campaigning again with
        # the state of the term it lost
        LOG.error("leadership lost; exiting so that a fresh process campaigns")
        return False
    return True


def run_term(ctl, stop: threading.Event, health=None) -> None:
    """Run one Controller until `stop`; `health` (metrics.ControllerHealth)
    reports it as the leader meanwhile."""
    if health is not None:
        health.leading(ctl)
    try:
        ctl.run(stop)
    finally:
        if health is not None:
            health.not_leading()


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    daemonlog.setup(args.verbose, args.log_file)
    heap.limit_arenas(MALLOC_ARENAS)
    from pacific.metrics import MetricsError, MetricsServer, parse_address
    try:
        cfg = config_from_args(args)
        metrics_addr = parse_address(args.metrics_address)
    except (ConfigError, MetricsError) as exc:
        print(f"pacific-controller: {exc}", file=sys.stderr)
        return 2
    from pacific.controller.core import Controller
    from pacific.kube import client
    from pacific.ovn.base import configure_ssl
    from pacific.ovn.nb import CONTROLLER_COMPACT, CONTROLLER_MONITOR, NorthboundAPI, OvnError

    shutdown = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: shutdown.set())
    try:
        kube = client.load(cfg.kubeconfig)
        if args.nb_ssl_key or args.nb_ssl_cert or args.nb_ssl_ca:
            configure_ssl(args.nb_ssl_key, args.nb_ssl_cert, args.nb_ssl_ca)
        # only the NB tables/columns the controller reads: a smaller replica
        nb = NorthboundAPI(cfg.nb_remote, created_by=names.CONTROLLER_NAME,
                           monitor=CONTROLLER_MONITOR, compact=CONTROLLER_COMPACT)
    except (client.KubeconfigError, OvnError) as exc:
        LOG.error("%s", exc)
        return 1
    from pacific.controller import metrics
    health = metrics.install(metrics.ControllerHealth(nb, args.identity, args.leader_elect))
    server = None
    if metrics_addr is not None:   # a taken port is retried: NB programming does not wait for it
        server = MetricsServer(metrics_addr, health.liveness, health.readiness).start(
            retry_interval=METRICS_RETRY)
    LOG.info("pacific-controller %s starting (NB %s, API %s, leader election %s)", args.identity,
             cfg.nb_remote, kube.configuration.host, "on" if args.leader_elect else "off")
    LOG.info("%s", nb.capabilities().describe())
    from pacific.kube import versions
    # once, not per leadership term
    cfg.endpointslice_version = versions.served_endpointslice_version(kube)
    try:
        if args.leader_elect:
            if not run_leader_elected(cfg, args, kube, nb, shutdown, health):
                return 1
        else:
            run_term(Controller(cfg, kube, nb), shutdown, health)
    finally:
        if server is not None:
            server.stop()
        nb.close()
    LOG.info("pacific-controller %s exited", args.identity)
    return 0


if __name__ == "__main__":
    sys.exit(main())
