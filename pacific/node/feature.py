"""What a node feature declares; what the node daemon builds it from.

pacific-node is a wiring of features, as the controller is
(pacific/controller/feature.py).  A feature is one module with one class
derived from `NodeFeature`, a `Loop` (loop.py: converge at start, when
kicked, every `repair` seconds, back-off on failure) that also declares:

    class HostFirewall(NodeFeature):
        name, repair = "host-firewall", 5.0            # thread, logs
        informers = {"node": THIS_NODE, "subnets": SUBNETS, ...}   # every cache it reads
        wakes_on = ("node", "subnets", ...)            # any event of these kicks it
        uses = {"snat": "egress-snat"}                 # self.snat: that feature, or None
        @classmethod
        def disabled(cls, args):                       # why these flags turn it off
            return None if args.host_firewall else "--no-host-firewall"
        def __init__(self, ctx): ...                   # ctx: NodeContext
        def converge(self): ...

and one line in `registry.FEATURES`.  The daemon (core.NodeFeatures):

- leaves out the features whose `disabled(args)` gives a reason (logged);
- creates each informer once from the enabled features' specs (features naming
  one informer share its cache: their specs must agree, else the daemon does
  not start) and fans every event out to each feature that handles it:
  `handlers()` is by default a kick for each informer of `wakes_on`; a handler
  may filter (the pod loop queues only pods whose settings changed).  Handlers
  run on informer threads: in-memory work only, never I/O;
- builds the features in list order from one `NodeContext`; the informers exist
  by then, and `self.informer(name)` returns one the feature declares;
- sets each `uses` attribute to the feature it names, or to None when the flags
  disable that one (the feature does without: the egress gateway without egress
  SNAT's routes).  `needs` is the same for a feature that cannot work without
  the other: a disabled one stops the start with an error naming both.  A name
  that no registered feature has is an error either way;
- starts the informers, waits for the first list of those whose spec says
  `wait_synced`, then starts the features in list order (`start()`: the Loop's
  thread, or the feature's own, as the pod loop's work queue); stops them in
  the reverse order.

A field selector may name `{node}`: this daemon's node.  A spec of
EndpointSlices (discovery.k8s.io/v1) gets the version the API server serves,
discovered once at start (pacific.kube.versions: v1beta1 on Kubernetes 1.20).
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Callable

from pacific.kube import resources as r
from pacific.kube.resources import Resource
from pacific.node.loop import Loop

Handler = Callable[[dict | None, dict | None], None]


@dataclass(frozen=True)
class InformerSpec:
    resource: Resource
    field_selector: str | None = None   # "{node}" stands for this daemon's node
    wait_synced: bool = True            # the features start once it listed (or 30 s passed)
    transform: Callable[[dict], dict] | None = None   # trims what the cache keeps

    def selector(self, node: str) -> str | None:
        return self.field_selector.format(node=node) if self.field_selector else None


# The informers node features read, each defined once (one spec per informer
# name, so the features that name one agree).
THIS_NODES_PODS = InformerSpec(r.PODS, "spec.nodeName={node}")      # "pods"
THIS_NODE = InformerSpec(r.NODES, "metadata.name={node}")           # "node"
SUBNETS = InformerSpec(r.SUBNETS)                                   # "subnets"
# the Service frontends' (frontends.py), which act only once these are listed
# (their rules are None before): the start does not wait for them
SERVICES = InformerSpec(r.SERVICES, wait_synced=False)              # "services"
ENDPOINTSLICES = InformerSpec(r.ENDPOINTSLICES, wait_synced=False)  # "endpointslices"
ALL_NODES = InformerSpec(r.NODES, wait_synced=False)                # "nodes"
EGRESSIPS = InformerSpec(r.EGRESSIPS, wait_synced=False)            # "egressips"


@dataclass
class NodeContext:
    """What the node features are built from: one per daemon."""
    args: Any                     # pacific-node's flags (main.build_parser())
    api: Any = None               # the Kubernetes API client
    ovs: Any = None               # this node's Open_vSwitch database (pacific.ovn OvsAPI)
    mtu: int = 0                  # the pods' MTU
    plumber: Any = None           # plumbing.Plumber: pods' veths and OVS ports
    readiness: Any = None         # readiness.Readiness: check() as CNI STATUS
    endpointslices: Resource = r.ENDPOINTSLICES   # the version the API server serves
    informers: dict[str, Any] = field(default_factory=dict)   # made before the features

    @property
    def node_name(self) -> str:
        return self.args.node_name


class NodeFeature(Loop):
    name = ""
    informers: dict[str, InformerSpec] = {}
    wakes_on: tuple[str, ...] = ()
    # other features this one calls, attribute -> feature name (see the module doc)
    uses: dict[str, str] = {}
    needs: dict[str, str] = {}

    @classmethod
    def disabled(cls, args) -> str | None:
        """Why pacific-node's flags `args` turn this feature off (logged), or
        None: it runs."""
        return None

    def __init__(self, ctx: NodeContext):
        super().__init__()
        self.ctx = ctx
        for attr in (*self.uses, *self.needs):
            setattr(self, attr, None)       # wire_uses sets them once every feature exists

    def handlers(self) -> dict[str, Handler]:
        """informer name -> handler(old, new): (None, obj) on add, (old, new) on
        update, (obj, None) on delete.  By default any event of `wakes_on` kicks."""
        return {name: self.kick for name in self.wakes_on}

    def informer(self, name: str):
        """The cache of an informer this feature declares."""
        if name not in self.informers:
            raise KeyError(f"node feature {self.name} reads informer {name!r}, which it "
                           f"does not declare (it declares {', '.join(self.informers) or 'none'})")
        return self.ctx.informers[name]


def merge_informer_specs(declared: list[tuple[str, dict[str, InformerSpec]]]
                         ) -> dict[str, InformerSpec]:
    """name -> spec over (declarer, informers) pairs; two declarers naming one
    informer must declare the same spec (one cache, one selector)."""
    out: dict[str, InformerSpec] = {}
    by: dict[str, str] = {}
    for who, informers in declared:
        for name, spec in informers.items():
            if name in out and out[name] != spec:
                raise ValueError(f"{who} declares informer {name!r} as {spec}, {by[name]} "
                                 f"as {out[name]}: one informer, one spec")
            out.setdefault(name, spec)
            by.setdefault(name, who)
    return out


def wire_uses(features: list[NodeFeature], off: dict[str, str]) -> None:
    """Set every feature's `uses` and `needs` attributes to the features they
    name; off: the registered features the flags disabled -> why.  A disabled
    one is None for `uses` and an error for `needs`; an unknown name is an
    error (at start, not at the first event)."""
    by_name = {f.name: f for f in features}
    for f in features:
        for attr, dep in {**f.uses, **f.needs}.items():
            if dep in by_name:
                setattr(f, attr, by_name[dep])
            elif dep not in off:
                raise ValueError(f"node feature {f.name} uses feature {dep!r}, which is not a "
                                 f"node feature ({', '.join([*by_name, *off])})")
            elif attr in f.needs:
                raise ValueError(f"node feature {f.name} needs feature {dep}, which is off "
                                 f"({off[dep]})")
            else:
                setattr(f, attr, None)


def service_cidrs(args) -> list[str]:
    """--service-cidr's CIDRs (kube-apiserver's --service-cluster-ip-range:
    IPv4, or IPv4 and IPv6); [] when empty.  ValueError names a bad one."""
    out = []
    for item in (args.service_cidr or "").split(","):
        if item.strip():
            try:
                out.append(str(ipaddress.ip_network(item.strip())))
            except ValueError:
                raise ValueError(f"--service-cidr: {item.strip()!r} is not a CIDR") from None
    if len({ipaddress.ip_network(c).version for c in out}) != len(out):
        raise ValueError(f"--service-cidr {args.service_cidr!r}: at most one CIDR per family")
    return out


def service_cidr(args, version: int = 4) -> str | None:
    """The service CIDR of IP `version`, None without one."""
    return next((c for c in service_cidrs(args) if ipaddress.ip_network(c).version == version),
                None)
