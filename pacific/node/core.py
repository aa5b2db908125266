"""pacific-node's daemon: OVS, the CNI server and the node features around them.

    daemon = NodeDaemon(args)      # args: main.build_parser()'s
    daemon.start()                 # returns once it serves; the features run in threads
    daemon.stop()                  # pods keep their network

`start()` brings up, in order: the metrics listener (liveness answers during
start-up), ovn-controller's Open_vSwitch external_ids (bootstrap.py), the view
of running pods rebuilt from OVS, the node features (`NodeFeatures`: those of
registry.FEATURES the flags leave on, built from one feature.NodeContext, with
one informer per name) and their informers, the plugin, the CNI server and the
conflist, then, once the caches are listed, the features in registry order.
The EndpointSlice version the API server serves is asked here, once.
"""
from __future__ import annotations

import logging

from pyroute2 import IPRoute

from pacific import names
from pacific.kube import resources as r
from pacific.kube.informer import Informer
from pacific.node import bootstrap
from pacific.node.cnihandler import CniHandler
from pacific.node.cniserver import CniServer
from pacific.node.feature import (THIS_NODES_PODS, InformerSpec, NodeContext, NodeFeature,
                                  merge_informer_specs, wire_uses)
from pacific.node.plumbing import Plumber
from pacific.node.podloop import PodLoop
from pacific.node.readiness import Readiness
from pacific.node.registry import FEATURES
from pacific.node.unixctl import vswitchd_ctl

log = logging.getLogger("pacific.node")
METRICS_RETRY = 5.0   # seconds between attempts to bind a taken metrics port
SYNC_WAIT = 30.0      # seconds the start waits for each informer's first list


def fan_out(inf_name: str, subs: list) -> dict:
    """Informer callbacks that hand each event to every subscribed feature's
    handler (informer threads: no I/O here)."""
    def deliver(old, new):
        for feature, handler in subs:
            try:
                handler(old, new)
            except Exception:  # a handler bug must not keep the event from the others
                log.exception("node feature %s: handler for %s failed", feature.name, inf_name)
    return {"on_add": lambda obj: deliver(None, obj),
            "on_update": lambda old, new: deliver(old, new),
            "on_delete": lambda obj: deliver(obj, None)}


def served_endpointslices(api) -> r.Resource:
    """EndpointSlices in the version the API server serves (v1; v1beta1 on 1.20)."""
    from pacific.kube import versions
    return versions.endpointslice_resource(versions.served_endpointslice_version(api))


class NodeFeatures:
    """The features one daemon runs, their informers and their life cycle
    (feature.py says what a feature declares and how it is wired)."""

    def __init__(self, args, classes=None, own: dict[str, InformerSpec] | None = None):
        """Which features run with pacific-node's flags `args` and the informers
        they read (no I/O; build() makes them).  classes: registry.FEATURES by
        default; own: the informers the daemon itself reads (the CNI handler:
        this node's pods), merged with the features' (one spec per name)."""
        classes = list(FEATURES if classes is None else classes)
        seen = [c.name for c in classes]
        if "" in seen or len(set(seen)) != len(seen):
            raise ValueError(f"node features need unique names: {seen}")
        self.off: dict[str, str] = {}
        self.enabled = []
        for cls in classes:
            reason = cls.disabled(args)
            if reason:
                self.off[cls.name] = reason
                log.info("%s off: %s", cls.name, reason)
            else:
                self.enabled.append(cls)
        self.specs = merge_informer_specs([(f"node feature {c.name}", c.informers)
                                           for c in self.enabled] + [("pacific-node", own or {})])
        self.features: list[NodeFeature] = []
        self.ctx: NodeContext | None = None

    def reads(self, res: r.Resource) -> bool:
        return any(s.resource == res for s in self.specs.values())

    def build(self, ctx: NodeContext, make_informer=Informer) -> None:
        """Each informer once (not started; an EndpointSlice spec in the version
        ctx.endpointslices names), then the features in order, their uses and
        their handlers.  make_informer: Informer's signature."""
        subs: dict[str, list] = {name: [] for name in self.specs}
        ctx.informers = {
            name: make_informer(ctx.api, ctx.endpointslices if s.resource == r.ENDPOINTSLICES
                                else s.resource, field_selector=s.selector(ctx.node_name),
                                **({"transform": s.transform} if s.transform else {}),
                                **fan_out(name, subs[name]))
            for name, s in self.specs.items()}
        self.ctx = ctx
        self.features = [cls(ctx) for cls in self.enabled]
        wire_uses(self.features, self.off)
        for f in self.features:
            for inf_name, handler in f.handlers().items():
                if inf_name not in f.informers:
                    raise ValueError(f"node feature {f.name} handles informer {inf_name!r}, "
                                     "which it does not declare")
                subs[inf_name].append((f, handler))

    def get(self, name: str) -> NodeFeature | None:
        """The feature of that name, None when the flags turned it off."""
        return next((f for f in self.features if f.name == name), None)

    def informer(self, name: str) -> Informer:
        return self.ctx.informers[name]

    def start_informers(self) -> None:
        for inf in self.ctx.informers.values():
            inf.start()

    def wait_synced(self, timeout: float = SYNC_WAIT) -> None:
        """Wait for the first list of every informer whose spec says so (the
        others' readers act only once they listed)."""
        for name, spec in self.specs.items():
            inf = self.ctx.informers[name]
            if spec.wait_synced and not inf.wait_synced(timeout):
                log.warning("%s not listed within %.0f s (API server reachable?); retrying "
                            "in the background", inf.res.plural, timeout)

    def start(self) -> None:
        for f in self.features:
            f.start()

    def stop(self) -> None:
        for f in reversed(self.features):
            f.stop()
        for inf in (self.ctx.informers.values() if self.ctx is not None else ()):
            inf.stop()


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
            for rt in ipr.route("dump", family=2):
                if rt["dst_len"] == 0 and rt.get_attr("RTA_OIF"):
                    idx = rt.get_attr("RTA_OIF")
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
        self.features: NodeFeatures | None = None
        self.metrics = None   # pacific.metrics.MetricsServer

    def feature(self, name: str) -> NodeFeature | None:
        """A running feature (e.g. for the metrics); None when off or not built yet."""
        return self.features.get(name) if self.features is not None else None

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
        self.readiness = readiness = Readiness(self.ovs, a.ovn_rundir)
        # the CNI handler waits on this node's pods: an informer of the daemon's own
        self.features = features = NodeFeatures(a, own={"pods": THIS_NODES_PODS})
        api = kclient.load(a.kubeconfig)
        # asked once, and only when an enabled feature reads EndpointSlices
        slices = served_endpointslices(api) if features.reads(r.ENDPOINTSLICES) \
            else r.ENDPOINTSLICES
        features.build(NodeContext(a, api=api, ovs=self.ovs, mtu=mtu, plumber=plumber,
                                   readiness=readiness, endpointslices=slices))
        features.start_informers()
        pod_loop = features.get(PodLoop.name)
        handler = CniHandler(plumber, features.informer("pods"), mtu, readiness.check,
                             allocation_timeout=a.allocation_timeout,
                             after_add=pod_loop.apply_now if pod_loop else None,
                             vswitchd_ctl=lambda: vswitchd_ctl(a.ovs_rundir))
        # Plugin first, the conflist last: a runtime that sees the conflist finds
        # the plugin and the socket behind it.
        if a.cni_bin_dir:
            bootstrap.install_plugin(a.cni_bin_dir)
        self.server = CniServer(a.cni_socket, handler)
        self.server.start()
        if a.cni_conf_dir:
            bootstrap.write_conflist(a.cni_conf_dir, a.cni_socket)
        # the features start on listed caches: ovn0 converged on an empty Subnet
        # cache would lose its routes, the firewall its pod networks
        features.wait_synced()
        features.start()
        log.info("pacific-node ready on %s: node %s, pod MTU %d, CNI socket %s (features: %s)",
                 a.ovs_remote, a.node_name, mtu, a.cni_socket,
                 ", ".join(f.name for f in features.features))

    def stop(self) -> None:
        """Stop serving; pods and their ports are left as they are."""
        if self.server:
            self.server.stop()
        # what the features built stays: the firewall's table (pods keep their
        # egress), a held external IP (until another node takes it), pegress0 and
        # its routes
        if self.features is not None:
            self.features.stop()
        if self.metrics:
            self.metrics.stop()
        if self.ovs:
            self.ovs.close()
        log.info("pacific-node stopped (pods keep their network)")
