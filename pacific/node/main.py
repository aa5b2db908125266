"""`pacific-node`: the per-node daemon (CNI server, pod plumbing, node bootstrap,
management port).  Run one per node, as root, in the node's host network
namespace.  See `pacific-node --help`.  This module: the flags and the
process; the daemon is core.NodeDaemon, its features registry.FEATURES."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading

from pacific import daemonlog, exposure, names
from pacific.node.core import NodeDaemon
from pacific.node.feature import service_cidrs
from pacific.node.firewall import host_ports

log = logging.getLogger("pacific.node")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pacific-node",
        description="Pacific node daemon: serves the `pacific` CNI plugin on a root-only "
        "unix socket, plumbs pods into OVS/OVN (veth, br-int port, ovn-installed), "
        "configures ovn-controller (Open_vSwitch external_ids), writes the CNI conflist "
        "and installs the plugin, and keeps the management port ovn0 in line with the "
        "Node annotations and Subnets.  Pods keep their network when it restarts.")
    p.add_argument("--node-name", default=socket.gethostname(),
                   help="Kubernetes node name = OVN chassis system-id (default: hostname)")
    p.add_argument("--kubeconfig", help="kubeconfig path (default: $KUBECONFIG, else "
                   "in-cluster)")
    p.add_argument("--ovs-remote", default="unix:/var/run/openvswitch/db.sock",
                   help="this node's Open_vSwitch database (default: %(default)s)")
    p.add_argument("--ovn-remote", help="OVN southbound database for ovn-controller, "
                   "e.g. tcp:192.168.77.1:6642 (required unless --no-bootstrap)")
    p.add_argument("--encap-ip", help="this node's tunnel endpoint address (required "
                   "unless --no-bootstrap)")
    p.add_argument("--encap-type", default="geneve", help="default: %(default)s")
    p.add_argument("--datapath-type", default="netdev",
                   help="br-int datapath type for ovn-controller ('' for the kernel "
                   "datapath; default: %(default)s)")
    p.add_argument("--no-bootstrap", action="store_true",
                   help="do not touch Open_vSwitch external_ids")
    p.add_argument("--ovn-controller-log", default=names.OVN_CONTROLLER_LOG,
                   help="ovn-controller's log file, where OVN writes the lines of audited "
                   "policies (acl_log) that become --flow-log's records (default: %(default)s)")
    p.add_argument("--ovn-controller-log-max-bytes", type=int,
                   default=names.OVN_CONTROLLER_LOG_MAX_BYTES,
                   help="with --flow-log, --ovn-controller-log is rotated once (.1) past this "
                   "size, read to its end, and ovn-controller told to reopen it (vlog/reopen "
                   "in --ovn-rundir); 0: never (default: %(default)s)")
    p.add_argument("--flow-log", default=names.FLOW_LOG,
                   help="where audit records go, one JSON object per line, for `pacific flows` "
                   "(default: %(default)s; '' for no records)")
    p.add_argument("--flow-log-max-bytes", type=int, default=names.FLOW_LOG_MAX_BYTES,
                   help="--flow-log is rotated once (.1) past this size (default: %(default)s)")
    p.add_argument("--ovn-rundir", default="/var/run/ovn",
                   help="where ovn-controller keeps its pidfile and unixctl socket "
                   "(for STATUS; default: %(default)s)")
    p.add_argument("--ovs-rundir", default="/var/run/openvswitch",
                   help="where ovs-vswitchd keeps its pidfile and unixctl socket (to make it "
                   "revalidate its datapath flows when mirroring changes; default: "
                   "%(default)s)")
    p.add_argument("--cni-socket", default=names.CNI_SOCKET, help="default: %(default)s")
    p.add_argument("--cni-conf-dir", default="/etc/cni/net.d",
                   help="where the conflist is written (default: %(default)s; '' to skip)")
    p.add_argument("--cni-bin-dir", default="/opt/cni/bin",
                   help="where the plugin is installed (default: %(default)s; '' to skip)")
    p.add_argument("--service-cidr", default=names.SERVICE_CIDR,
                   help="the cluster's Service CIDR: routed into ovn0 so the node reaches "
                   f"ClusterIPs through OVN's load balancers (default {names.SERVICE_CIDR}; "
                   "dual-stack: IPv4,IPv6 as the API server's, the IPv6 one routed once ovn0 "
                   "has IPv6; empty: no route)")
    p.add_argument("--mtu", type=int, help="pod MTU (default: MTU of the interface holding "
                   f"--encap-ip minus {names.POD_MTU_OVERHEAD})")
    p.add_argument("--allocation-timeout", type=float, default=60.0,
                   help="seconds ADD waits for the controller's allocation before "
                   "answering 'try again' (default: %(default)s)")
    p.add_argument("--installed-timeout", type=float, default=30.0,
                   help="seconds ADD waits for ovn-installed (default: %(default)s)")
    p.add_argument("--metrics-address", default=f"127.0.0.1:{names.NODE_METRICS_PORT}",
                   help="HOST:PORT serving /metrics (Prometheus), /healthz (liveness: the CNI "
                   "server runs) and /readyz (the CNI STATUS check: OVS reachable, "
                   "ovn-controller connected); ':PORT' for every address, '' for none "
                   "(default: %(default)s)")
    p.add_argument("--mirror-mode", choices=names.MIRROR_MODES, default="annotated",
                   help=f"copy pod traffic to the node's {names.MIRROR_PORT} interface: "
                   f"'annotated' pods ({names.ANN_MIRROR}: \"true\"), 'all' pods of the "
                   "node, or 'off' (default: %(default)s)")
    p.add_argument("--ovn-ssl-key", help="with an ssl: --ovn-remote: ovn-controller's private "
                   "key (written to the Open_vSwitch SSL row)")
    p.add_argument("--ovn-ssl-cert", help="... its certificate")
    p.add_argument("--ovn-ssl-ca", help="... the CA certificate SB's certificate must be "
                   "signed by")
    p.add_argument("--no-host-firewall", dest="host_firewall", action="store_false",
                   help="do not keep Pacific's nftables table `inet pacific` (natOutgoing "
                   "masquerade, forwarding of pod CIDRs, Geneve and ovn0 accepted; pod and "
                   "join sources dropped from the underlay and kept from OVN central's "
                   "--ovn-remote addresses and NB/SB/RAFT ports and from the host ports)")
    p.add_argument("--host-only-ports", default=str(names.CONTROLLER_METRICS_PORT),
                   help="comma-separated TCP ports of host daemons that pods must not reach "
                   "on any node, besides --metrics-address's port, which is always kept from "
                   "them (default: %(default)s, pacific-controller's metrics; '' for none)")
    p.add_argument("--external-ip-cidrs", default="",
                   help="comma-separated CIDRs a Service's externalIPs must lie in to be "
                   "programmed (default: none: no external IP is programmed until the "
                   "administrator names the ranges); keep equal to pacific-controller's, "
                   "which reports refusals as Events")
    p.add_argument("--external-ips-per-namespace", type=int,
                   default=int(os.environ.get("PACIFIC_EXTERNAL_IPS_PER_NAMESPACE",
                                              names.EXTERNAL_IPS_PER_NAMESPACE)),
                   help="external IPs one namespace's Services may hold, its oldest Services' "
                   "first; 0: no bound; keep equal to pacific-controller's (default: %(default)s) "
                   "[PACIFIC_EXTERNAL_IPS_PER_NAMESPACE]")
    p.add_argument("--infrastructure-ips", default="",
                   help="comma-separated addresses no Service may claim as external IP, besides "
                   "the nodes' and OVN central's (from --ovn-remote); keep equal to "
                   "pacific-controller's")
    p.add_argument("--node-port-range", default="%d-%d" % exposure.NODE_PORT_RANGE,
                   help="kube-apiserver's --service-node-port-range (default: %(default)s)")
    p.add_argument("--uninstall", action="store_true",
                   help="remove what pacific-node keeps on the host (the nftables table) and "
                   "exit: the node leaves the cluster")
    p.add_argument("--health-interval", type=float, default=10.0,
                   help="seconds between health reports (tunnel peers probed, readiness) "
                   f"written to Lease {names.NODE_HEALTH_NAMESPACE}/{names.NODE_HEALTH_LEASE_PREFIX}"
                   "NODE for `pacific diagnose`; 0: none (default: %(default)s)")
    p.add_argument("--pod-resync", type=float, default=60.0,
                   help="seconds between re-applications of every pod's port settings "
                   "(bandwidth, mirroring), which repairs what a restart of ovs-vswitchd "
                   "undid (default: %(default)s)")
    p.add_argument("--log-file", help="log here instead of stderr")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from pacific.metrics import MetricsError, parse_address
    try:
        parse_address(args.metrics_address)
        host_ports(args)
        exposure.parse_cidrs(args.external_ip_cidrs)
        exposure.parse_ips(args.infrastructure_ips)
        if args.external_ips_per_namespace < 0:
            raise ValueError(f"--external-ips-per-namespace {args.external_ips_per_namespace} "
                             "must be at least 0 (0: no bound)")
        exposure.parse_port_range(args.node_port_range)
        service_cidrs(args)
    except (MetricsError, ValueError) as e:
        print(f"pacific-node: {e}", file=sys.stderr)
        return 2
    daemonlog.setup(args.verbose, args.log_file)
    if args.uninstall:
        from pacific.node.firewall import FirewallError, HostFirewall
        try:
            HostFirewall.remove()
        except FirewallError as e:
            log.error("%s", e)
            return 1
        return 0
    if os.geteuid() != 0:
        log.error("pacific-node must run as root (netlink, OVS, root-only socket)")
        return 1
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    daemon = NodeDaemon(args)
    try:
        daemon.start()
    except SystemExit as e:
        log.error("%s", e)
        daemon.stop()
        return 1
    except Exception:
        log.exception("pacific-node failed to start")
        daemon.stop()
        return 1
    done.wait()
    daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
