"""`pacific-node`: the per-node daemon (CNI server, pod plumbing, node bootstrap,
management port).  Run one per node, as root, in the node's host network
namespace.  See `pacific-node --help`."""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading

from pyroute2 import IPRoute

from pacific import daemonlog, exposure, names, remotes
from pacific.node import bootstrap, settings
from pacific.node.cnihandler import CniHandler
from pacific.node.cniserver import CniServer
from pacific.node.loop import wake_on
from pacific.node.mgmtport import MgmtPort
from pacific.node.plumbing import Plumber
from pacific.node.podloop import PodLoop, ovs_attachments
from pacific.node.readiness import Readiness

log = logging.getLogger("pacific.node")
METRICS_RETRY = 5.0   # seconds between attempts to bind a taken metrics port


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
                   "empty: no route)")
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


def host_ports(args) -> list[int]:
    """The TCP ports the host firewall keeps pods from: --metrics-address's and
    --host-only-ports (ValueError naming a bad one)."""
    from pacific.metrics import parse_address
    out = []
    addr = parse_address(args.metrics_address)
    if addr is not None and addr[1]:
        out.append(addr[1])
    for p in (args.host_only_ports or "").split(","):
        p = p.strip()
        if not p:
            continue
        if not p.isdigit() or not 0 < int(p) <= 65535:
            raise ValueError(f"--host-only-ports: {p!r} is not a TCP port")
        out.append(int(p))
    return out


def detect_mtu(encap_ip: str | None) -> int:
    """Pod MTU from the underlay: the MTU of the interface holding encap_ip (else
    the default route's interface) minus the Geneve/OVN overhead."""
    with IPRoute() as ipr:
        idx = None
        if encap_ip:
            for a in ipr.addr("dump"):
                if a.get_attr("IFA_ADDRESS") == encap_ip:
                    idx = a["index"]
        if idx is None:
            for r in ipr.route("dump", family=2):
                if r["dst_len"] == 0 and r.get_attr("RTA_OIF"):
                    idx = r.get_attr("RTA_OIF")
                    break
        if idx is None:
            raise SystemExit("pacific-node: cannot detect the underlay MTU (no interface "
                             f"with {encap_ip}, no default route); pass --mtu")
        mtu = ipr.link("get", index=idx)[0].get_attr("IFLA_MTU")
    return mtu - names.POD_MTU_OVERHEAD


class NodeDaemon:
    def __init__(self, args):
        self.args = args
        self.ovs = self.server = self.plumber = self.readiness = None
        self.informers: list = []
        self.mgmt: MgmtPort | None = None
        self.pod_loop: PodLoop | None = None
        self.health = None    # pacific.node.health.HealthReporter
        self.firewall = None  # pacific.node.firewall.HostFirewall
        self.egressgw = None  # pacific.node.egressgw.EgressGateway
        self.egresssnat = None  # pacific.node.egresssnat.EgressSnat (needs the firewall)
        self.metrics = None   # pacific.metrics.MetricsServer

    def loops(self) -> list:
        """The background loops, in start order (pacific.node.loop.Loop)."""
        return [loop for loop in (self.mgmt, self.egressgw, self.firewall, self.egresssnat,
                                  self.health) if loop is not None]

    def start_metrics(self) -> None:
        """/metrics, /healthz, /readyz first: liveness answers during start-up."""
        from pacific.metrics import MetricsServer, parse_address
        from pacific.node import metrics
        addr = parse_address(self.args.metrics_address)
        if addr is not None:
            health = metrics.install(self)
            self.metrics = MetricsServer(addr, health.liveness, health.readiness).start(
                retry_interval=METRICS_RETRY)

    def start(self) -> None:
        from pacific.kube import client as kclient
        from pacific.kube.informer import Informer
        from pacific.kube.resources import NODES, PODS, SUBNETS
        from pacific.node import metrics
        from pacific.ovn.ovs import OvsAPI
        a = self.args
        self.start_metrics()
        mtu = a.mtu or detect_mtu(a.encap_ip)
        self.ovs = OvsAPI(a.ovs_remote, created_by="pacific-node")
        if not a.no_bootstrap:
            if not (a.ovn_remote and a.encap_ip):
                raise SystemExit("pacific-node: --ovn-remote and --encap-ip are required "
                                 "(or --no-bootstrap)")
            if a.ovn_ssl_key or a.ovn_ssl_cert or a.ovn_ssl_ca:
                bootstrap.configure_ssl(self.ovs, a.ovn_ssl_key, a.ovn_ssl_cert, a.ovn_ssl_ca)
            elif a.ovn_remote.startswith("ssl:"):
                log.warning("--ovn-remote %s is ssl: but no --ovn-ssl-key/cert/ca given: "
                            "ovn-controller uses the SSL row already in OVS, if any",
                            a.ovn_remote)
            bootstrap.configure_ovs(self.ovs, bootstrap.ovs_external_ids(
                a.node_name, a.ovn_remote, a.encap_ip, a.encap_type, a.datapath_type))
        if self.ovs.wait_for_row("Bridge", lambda r: r.name == names.INTEGRATION_BRIDGE,
                                 30) is None:
            log.warning("%s does not exist yet (is ovn-controller running?); ADDs fail "
                        "until it does", names.INTEGRATION_BRIDGE)
        self.plumber = plumber = Plumber(self.ovs, installed_timeout=a.installed_timeout,
                                         on_installed_wait=metrics.installed_wait)
        plumber.remove_orphans()
        view = plumber.attachments(mtu)
        log.info("rebuilt view from OVS: %d pod attachments on %s (left untouched)",
                 len(view), names.INTEGRATION_BRIDGE)
        api = kclient.load(a.kubeconfig)
        pods = Informer(api, PODS, field_selector=f"spec.nodeName={a.node_name}")
        nodes = Informer(api, NODES, field_selector=f"metadata.name={a.node_name}")
        subnets = Informer(api, SUBNETS)
        self.mgmt = MgmtPort(self.ovs, a.node_name, nodes, subnets, mtu,
                             service_cidr=a.service_cidr or None)
        extra = []            # the informers only the host firewall's frontends need
        from pacific.node.egressgw import EgressGateway
        if a.host_firewall:
            from pacific.node.firewall import HostFirewall
            frontends = self._frontends(api, pods, subnets, extra)
            self.egresssnat = self._egress_snat(nodes, frontends)
            self.firewall = HostFirewall(subnets, nodes, a.node_name,
                                         service_cidr=a.service_cidr or None,
                                         frontends=frontends, snat=self.egresssnat,
                                         ovn_remote=a.ovn_remote, host_ports=host_ports(a),
                                         node_ips=frontends.node_ips)
        self.egressgw = EgressGateway(self.ovs, subnets, a.node_name,
                                      datapath_type=a.datapath_type or "system",
                                      extra=self.egresssnat.routes if self.egresssnat else None)
        # which informer wakes which of the background loops (pacific.node.loop)
        for inf in (nodes, subnets):
            wake_on(inf, [self.mgmt, self.egressgw, self.firewall, self.egresssnat])
        for inf in extra:                  # Services, EndpointSlices, all Nodes
            wake_on(inf, [self.firewall, self.egresssnat])
        self.pod_loop = PodLoop(pods, ovs_attachments(self.ovs, mtu),
                                settings.build(a, self.ovs), resync=a.pod_resync).start()
        self.informers = [pods, nodes, subnets, *extra]
        for inf in self.informers:
            inf.start()
        self.readiness = readiness = Readiness(self.ovs, a.ovn_rundir)
        handler = CniHandler(plumber, pods, mtu, readiness.check,
                             allocation_timeout=a.allocation_timeout,
                             after_add=self.pod_loop.apply_now)
        # Plugin first, the conflist last: a runtime that sees the conflist finds
        # the plugin and the socket behind it.
        if a.cni_bin_dir:
            bootstrap.install_plugin(a.cni_bin_dir)
        self.server = CniServer(a.cni_socket, handler)
        self.server.start()
        if a.cni_conf_dir:
            bootstrap.write_conflist(a.cni_conf_dir, a.cni_socket)
        for inf in (pods, nodes, subnets):     # the frontends' informers sync on their own
            if not inf.wait_synced(30):
                log.warning("%s not listed within 30 s (API server reachable?); retrying "
                            "in the background", inf.res.plural)
        if a.health_interval > 0:
            from pacific.node.health import HealthReporter
            self.health = HealthReporter(api, self.ovs, a.node_name, readiness.check,
                                         a.health_interval)
        for loop in self.loops():
            loop.start()
        log.info("pacific-node ready on %s: node %s, pod MTU %d, CNI socket %s",
                 a.ovs_remote, a.node_name, mtu, a.cni_socket)

    def _egress_snat(self, nodes, frontends):
        """Egress SNAT to Services' external IPs, on nodes labelled
        pacific.io/egress-gateway (it reads SB: needs --ovn-remote and --encap-ip)."""
        a = self.args
        if not (a.ovn_remote and a.encap_ip):
            log.info("egress SNAT off: no --ovn-remote/--encap-ip")
            return None
        from pacific.node.egresssnat import EgressSnat
        if a.ovn_remote.startswith("ssl:") and a.ovn_ssl_key:
            from pacific.ovn.base import configure_ssl
            configure_ssl(a.ovn_ssl_key, a.ovn_ssl_cert, a.ovn_ssl_ca)

        def changed():
            if self.firewall:
                self.firewall.kick()
            if self.egressgw:
                self.egressgw.kick()
        return EgressSnat(a.ovn_remote, a.node_name, nodes, frontends, a.encap_ip,
                          on_change=changed)

    def _frontends(self, api, pods, subnets, extra: list):
        """Services' external IPs and node ports for the host firewall (informers
        of Services, EndpointSlices and all Nodes appended to extra)."""
        from pacific.kube import versions
        from pacific.kube.informer import Informer
        from pacific.kube.resources import ENDPOINTSLICES, ENDPOINTSLICES_V1BETA1, NODES, SERVICES
        from pacific.node.frontends import ServiceFrontends
        from pacific.kube import errors as kerr
        a = self.args
        try:
            v1beta1 = versions.endpointslice_version(api) == "v1beta1"
        except (kerr.ApiError, OSError) as e:
            log.warning("EndpointSlice version not discovered (%s): using v1", e)
            v1beta1 = False
        services = Informer(api, SERVICES)
        slices = Informer(api, ENDPOINTSLICES_V1BETA1) if v1beta1 else Informer(api, ENDPOINTSLICES)
        all_nodes = Informer(api, NODES)
        extra += [services, slices, all_nodes]
        return ServiceFrontends(services, slices, all_nodes, subnets, pods,
                                join_cidr=lambda: self.firewall.join_cidr(),
                                service_cidr=a.service_cidr or None,
                                allowed=exposure.parse_cidrs(a.external_ip_cidrs),
                                port_range=exposure.parse_port_range(a.node_port_range),
                                reserved=remotes.addresses(a.ovn_remote)
                                | set(exposure.parse_ips(a.infrastructure_ips)))

    def stop(self) -> None:
        """Stop serving; pods and their ports are left as they are."""
        if self.server:
            self.server.stop()
        # what they built stays: the firewall's table (pods keep their egress), a
        # held external IP (until another node takes it), pegress0 and its routes
        for loop in reversed(self.loops()):
            loop.stop()
        if self.pod_loop:
            self.pod_loop.stop()
        for inf in self.informers:
            inf.stop()
        if self.metrics:
            self.metrics.stop()
        if self.ovs:
            self.ovs.close()
        log.info("pacific-node stopped (pods keep their network)")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from pacific.metrics import MetricsError, parse_address
    try:
        parse_address(args.metrics_address)
        host_ports(args)
        exposure.parse_cidrs(args.external_ip_cidrs)
        exposure.parse_ips(args.infrastructure_ips)
        exposure.parse_port_range(args.node_port_range)
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
