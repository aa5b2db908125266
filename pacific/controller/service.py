"""Kubernetes Services (ClusterIP) as OVN load balancers, without kube-proxy.

Per Service (key "ns/name"): one Load_Balancer per protocol, named
`names.service_lb_name`, owned by the Service (external_ids), member of the one
Load_Balancer_Group `names.LB_GROUP` that every switch holds (subnet switches
and the join switch, attached where they are created).  So pods on any switch
and the nodes (through ovn0 on the join switch, with a route for the service
CIDR) reach every Service, and northd applies it everywhere from one row.

What the balancer holds comes from service_model.balancers(): the Service's
cluster IPs x ports -> the ready endpoints of its EndpointSlices (label
kubernetes.io/service-name).  An EndpointSlice event queues only its Service;
a Service event only itself; no other feature is re-queued.  An address
changing holder (IPAM released it, or gave it to a pod: holders_changed)
queues the Services whose slices name it (endpoint_index.py), so a
hand-written endpoint is confined again as soon as its pod is gone, long
before its address may go to another pod (the IPAM's quarantine); an address
that stops being the namespace's own is told by an Event that names neither
the new holder nor its namespace.  The balancer sits
in the client's switch pipeline before the destination port's to-lport ACLs,
so tenant isolation and NetworkPolicy ingress rules see the endpoint and the
real client address: a client reaches a Service's endpoints exactly where it
may reach the endpoint pods.

EndpointSlice is discovery.k8s.io/v1 or v1beta1, whichever the server serves
(pacific.kube.versions).
"""
from __future__ import annotations

import logging
import threading

from pacific import contract, egressip, exposure, names
from pacific.controller import informers, model
from pacific.controller import service_model as sm
from pacific.controller.endpoint_index import EndpointAddresses
from pacific.controller.feature import Feature, InformerSpec
from pacific.controller.reports import Reports
from pacific.kube import resources as r
from pacific.ovn import lb

LOG = logging.getLogger(__name__)


def service_ids(key: str) -> dict:
    return {names.EXT_OWNER_KIND: names.OWNER_KIND_SERVICE, names.EXT_OWNER: key}


def slim_slice(s: dict) -> dict:
    """What the controller reads of an EndpointSlice."""
    m = s.get("metadata") or {}
    return {"kind": "EndpointSlice", "apiVersion": s.get("apiVersion"),
            "metadata": {k: m.get(k) for k in ("name", "namespace", "uid", "resourceVersion",
                                               "labels") if m.get(k) is not None},
            "addressType": s.get("addressType"), "ports": s.get("ports") or [],
            "endpoints": [{"addresses": e.get("addresses") or [],
                           "conditions": e.get("conditions") or {}}
                          for e in s.get("endpoints") or []]}


def pod_namespace(ctl, ip: str) -> str | None:
    """The namespace of the pod Pacific allocated `ip` to (IPAM), or None when
    no pod holds it (a node's join address, anything outside the Subnets)."""
    try:
        holder = ctl.ipam.holder(ip)
    except ValueError:
        return None
    if not holder or holder.startswith("node:") or "/" not in holder:
        return None
    return holder.split("/", 1)[0]


def confined(ctl, key: str, slices: list[dict],
             host_ips: frozenset[str] = frozenset()) -> tuple[list[dict], list[str]]:
    """A Service's slices with only its own namespace's pods as endpoints
    (pacific.exposure.confine), unless the administrator trusts the Service's
    endpoints (--trusted-endpoint-services); and the addresses left out.
    `host_ips`: the addresses of the nodes where a host-network pod of the
    namespace runs, that pod's own address (a backend there reaches nothing the
    pod could not open itself on its node)."""
    if key in ctl.cfg.trusted_endpoint_services:
        return slices, []
    ns = key.split("/", 1)[0]
    return exposure.confine(
        slices, ns, lambda ip: pod_namespace(ctl, ip) or (ns if ip in host_ips else None))


def _shown(ips: list[str]) -> str:
    return ", ".join(ips[:5]) + (f" and {len(ips) - 5} more" if len(ips) > 5 else "")


def ignored_note(key: str, ignored: list[str], lost=frozenset()) -> list[str]:
    """What a Service's problems say of the endpoint addresses left out; those
    in `lost` were its namespace's pods until they changed holder (never
    naming who holds them now)."""
    out = []
    gone = [ip for ip in ignored if ip in lost]
    if gone:
        out.append(f"endpoint address {_shown(gone)} is no longer a pod of this namespace: "
                   "ignored" if len(gone) == 1 else
                   f"endpoint addresses {_shown(gone)} are no longer pods of this namespace: "
                   "ignored")
    rest = [ip for ip in ignored if ip not in lost]
    if rest:
        out.append(f"endpoint addresses {_shown(rest)} are not pods of namespace "
                   f"{key.split('/', 1)[0]}: ignored (a Service's backends are its own "
                   "namespace's pods)")
    return out


def infrastructure_ips(ctl) -> set[str]:
    """The addresses no external IP may be: every node's, OVN central's, and
    --infrastructure-ips."""
    return exposure.node_addresses(ctl.informer("nodes").list()) | ctl.cfg.reserved_ips


def cluster_cidrs(ctl) -> list[str]:
    """The cluster's own networks of both families: every Subnet's CIDRs in
    effect, the join and service CIDRs (no external IP, EgressIP or firewall rule is about them)."""
    cfg = ctl.cfg
    return [c for s in ctl.informer("subnets").list() for c in contract.subnet_cidrs_in_effect(s)] + \
        [*cfg.join_cidrs, *cfg.service_cidrs]


def taken_ips(ctl) -> set[str]:
    """What no Service's external IP may be: infrastructure_ips and every
    address an administrator's EgressIP names (the nodes decide alike:
    node/frontends.py taken_ips)."""
    return infrastructure_ips(ctl) | egressip.claimed(ctl.informer("egressips").list())


def service_informers(cfg) -> dict:
    """The informers of the features that read Services: Services, their
    EndpointSlices (the version the server serves: cfg.endpointslice_version,
    discovered by main at start), Nodes and Subnets (which addresses no external
    IP may take).  One spec, so the features share one cache."""
    return {"services": informers.SERVICES, "nodes": informers.NODES,
            "subnets": informers.SUBNETS, "egressips": informers.EGRESSIPS,
            "endpointslices": InformerSpec(  # (resources spelt out: deploy's RBAC scan reads them)
                r.ENDPOINTSLICES_V1BETA1 if cfg.endpointslice_version == "v1beta1"
                else r.ENDPOINTSLICES, slim_slice)}


class ServiceFeature(Feature):
    name = "service"

    def __init__(self, ctl):
        super().__init__(ctl)
        # pods: only the host-network ones matter here (their node's address
        # may be a backend of their namespace's Services)
        self.informers = {**service_informers(ctl.cfg), "pods": informers.PODS}
        self._lock = threading.Lock()
        self._host: dict[str, dict[str, str]] = {}  # namespace -> host-network pod -> node
        self._slices: dict[str, set[str]] = {}   # service key -> slice keys
        self.addresses = EndpointAddresses()     # address -> Services whose slices name it
        # Service -> endpoint addresses that were its namespace's pods until they
        # changed holder, kept while they are ignored (the Event's text)
        self._lost: dict[str, set[str]] = {}
        self.reports = Reports()
        self._exposed: set[str] = set()          # Services with external IPs or node ports

    def handlers(self):
        return {"services": self._on_service, "endpointslices": self._on_slice,
                "egressips": self._on_egressip, "pods": self._on_pod}

    def _on_pod(self, old, new):
        """A host-network pod that starts or stops running on a node: its
        namespace's Services (their endpoints may name the node's address)."""
        if not any(p is not None and (p.get("spec") or {}).get("hostNetwork") for p in (old, new)):
            return ()
        m = model.meta(new or old)
        ns, key = m.get("namespace"), r.object_key(new or old)
        node = (new.get("spec") or {}).get("nodeName") if new is not None else None
        live = bool(node) and not m.get("deletionTimestamp") and \
            (new.get("status") or {}).get("phase") not in model.TERMINAL_PHASES
        with self._lock:
            pods = self._host.setdefault(ns, {})
            if live:
                pods[key] = node
            else:
                pods.pop(key, None)
                if not pods:
                    del self._host[ns]
            return sorted(k for k in self._slices if k.startswith(f"{ns}/"))

    def prepare(self) -> None:
        """A new leader cannot know which addresses were released just before
        it took over (IPAM is rebuilt from the IP objects of the held ones): every
        address an EndpointSlice names that nothing holds now is quarantined for
        one period, so no new holder gets it before every Service naming it was
        confined again (rebuild.py)."""
        with self.ctl.ipam_lock:
            held_back = sum(self.ctl.ipam.hold_back(ip) for ip in self.addresses.all())
        if held_back:
            LOG.info("%d address(es) named by EndpointSlices but held by no pod: quarantined "
                     "for %g s", held_back, self.ctl.cfg.address_quarantine)

    def host_ips(self, ns: str) -> frozenset[str]:
        """The addresses of the nodes where a host-network pod of `ns` runs."""
        with self._lock:
            nodes = set((self._host.get(ns) or {}).values())
        cache = self.ctl.informer("nodes")
        return frozenset(a for n in nodes for a in exposure.internal_ips(cache.get(n)))

    def _on_egressip(self, old, new):
        """An address an EgressIP names (or stops naming) may be a Service's."""
        if old is not None and new is not None and \
                egressip.spec_addresses(old) == egressip.spec_addresses(new):
            return ()
        with self._lock:
            return sorted(self._exposed)

    def _on_service(self, old, new):
        key = r.object_key(new or old)
        with self._lock:
            if new is not None and _exposes(new):
                self._exposed.add(key)
            else:
                self._exposed.discard(key)
        return (key,)

    def holders_changed(self, ips, released_by):
        """The Services whose slices name `ips` are confined again; those of the
        namespace that released them will say the addresses are no longer its."""
        keys = self.addresses.services(ips)
        if released_by:
            with self._lock:
                for key in keys:
                    if key.startswith(f"{released_by}/"):
                        self._lost.setdefault(key, set()).update(
                            self.addresses.named_by(key, ips))
        if keys:
            LOG.info("addresses %s changed holder: re-confining service(s) %s",
                     ", ".join(ips), ", ".join(sorted(keys)))
        self.queue_keys(sorted(keys))

    def _on_slice(self, old, new):
        self.addresses.update(old, new)
        keys = set()
        for obj, present in ((old, False), (new, True)):
            if obj is None:
                continue
            m = model.meta(obj)
            svc = (m.get("labels") or {}).get(sm.SERVICE_NAME_LABEL)
            if not svc:
                continue
            skey, key = f"{m.get('namespace')}/{svc}", r.object_key(obj)
            with self._lock:
                if present:
                    self._slices.setdefault(skey, set()).add(key)
                elif new is None or (model.meta(new).get("labels") or {}).get(
                        sm.SERVICE_NAME_LABEL) != svc:
                    self._slices.get(skey, set()).discard(key)
            keys.add(skey)
        return keys

    def resync_keys(self):
        keys = {r.object_key(s) for s in self.ctl.informer("services").list()}
        keys |= {row.external_ids.get(names.EXT_OWNER) for row in self._owned()}
        return sorted(k for k in keys if k)

    # -- reconcile ---------------------------------------------------------------------
    def reconcile(self, key: str) -> None:
        svc = self.ctl.informer("services").get(key)
        ns, name = r.split_key(key)
        with self._lock:
            slice_keys = sorted(self._slices.get(key, ()))
        cache = self.ctl.informer("endpointslices")
        slices, ignored = confined(self.ctl, key, [s for s in (cache.get(k) for k in slice_keys)
                                                   if s is not None], self.host_ips(ns))
        want, problems = sm.balancers(svc, slices, self.ctl.cfg.families) if svc is not None else ({}, [])
        problems += ignored_note(key, ignored, self._still_lost(key, svc, ignored))
        if svc is not None and _exposes(svc):
            problems += self._refused_frontends(key)
        have = {row.name: row for row in self.ctl.nb.rows_owned(lb.LB, names.OWNER_KIND_SERVICE, key)}
        group = names.LB_GROUP
        builders = []
        for proto, b in want.items():
            lb_name = names.service_lb_name(ns, name, proto)
            row = have.pop(lb_name, None)
            if row is not None and _same(row, b, key):
                continue
            builders.append(lambda api, n=lb_name, b=b: lb.EnsureLoadBalancer(
                api, n, b.protocol, b.vips, options=b.options, external_ids=service_ids(key),
                group=group))
        for lb_name in have:
            builders.append(lambda api, n=lb_name: lb.DeleteLoadBalancer(api, n, group=group))
        if builders:
            self.ctl.writer.run(builders, what=f"service {key}")
            LOG.info("service %s: %s", key, ", ".join(
                f"{p} {len(b.vips)} vips / {sum(bool(v) for v in b.vips.values())} with endpoints"
                for p, b in want.items()) or "no balancer")
        self._report(svc, key, problems)

    def _still_lost(self, key: str, svc, ignored: list[str]) -> frozenset[str]:
        """The Service's addresses that changed holder and are ignored now;
        forgotten once named no more or its own namespace's again."""
        spelt = {exposure.canonical(ip) or ip: ip for ip in ignored}
        with self._lock:
            lost = self._lost.get(key, set()) & set(spelt) if svc is not None else set()
            if lost:
                self._lost[key] = lost
            else:
                self._lost.pop(key, None)
            return frozenset(spelt[ip] for ip in lost)

    def _refused_frontends(self, key: str) -> list[str]:
        """What of the Service's external IPs and node ports the nodes do not
        program, and why: pacific.exposure decides, on every node alike; only the
        Services that expose anything are compared."""
        with self._lock:
            exposed = sorted(self._exposed)
        cache = self.ctl.informer("services")
        services = [s for s in (cache.get(k) for k in exposed) if s is not None]
        allowed, port_range = self.ctl.cfg.exposure_settings
        _, refused = exposure.exposures(services, cluster_cidrs(self.ctl), taken_ips(self.ctl),
                                        allowed, port_range,
                                        self.ctl.cfg.external_ips_per_namespace)
        return refused.get(key, [])

    def _owned(self) -> list:
        return self.ctl.nb.rows_owned(lb.LB, names.OWNER_KIND_SERVICE)

    def _report(self, svc, key: str, problems: list[str]) -> None:
        text = "; ".join(problems)
        if self.reports.due(key, svc, text):
            LOG.warning("service %s: %s", key, text)
            self.ctl.event(svc, "ServiceNotFullyProgrammed", text)


def _exposes(svc: dict) -> bool:
    spec = svc.get("spec") or {}
    return bool(spec.get("externalIPs")) or spec.get("type") in ("NodePort", "LoadBalancer")


def _same(row, b: sm.Balancer, key: str) -> bool:
    proto = row.protocol if isinstance(row.protocol, list) else [row.protocol]
    return (dict(row.vips) == b.vips and proto == [b.protocol]
            and dict(row.options) == b.options
            and dict(row.external_ids) == service_ids(key))
