"""Built-in table printers: the columns and cells kube-apiserver's
pkg/printers/internalversion computes for `kubectl get` (Pod READY/STATUS/
RESTARTS, Node STATUS/ROLES/VERSION, Service EXTERNAL-IP/PORT(S), Event OBJECT,
Deployment READY, ...).  `PRINTERS[(group, plural)] = (columns, cells)`:
columns are (name, type, priority) after NAME, cells(obj) the whole row."""
import datetime

NONE = "<none>"


def parse_time(ts) -> datetime.datetime | None:
    if not ts or not isinstance(ts, str):
        return None
    try:
        return datetime.datetime.fromisoformat(ts.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        dy = (hours // 24) % 365
        return f"{hours // 24 // 365}y{dy}d" if dy else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(ts, now: datetime.datetime | None = None) -> str:
    """translateTimestampSince: "<unknown>" for no timestamp."""
    t = parse_time(ts)
    if t is None:
        return "<unknown>" if not ts else "<invalid>"
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return human_duration((now - t).total_seconds())


def _meta_age(o):
    return age(o["metadata"].get("creationTimestamp"))


def _sel(m) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((m or {}).items())) or NONE


def _label_selector(sel) -> str:
    if not sel:
        return NONE
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin"}.get(e.get("operator"))
        if op:
            parts.append(f"{e['key']} {op} ({','.join(e.get('values') or [])})")
        elif e.get("operator") == "Exists":
            parts.append(e["key"])
        else:
            parts.append("!" + e["key"])
    return ",".join(parts) or NONE


def _containers(o) -> tuple[str, str]:
    cs = (((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return (",".join(c.get("name", "") for c in cs) or NONE, ",".join(c.get("image", "") for c in cs) or NONE)


# ---------------------------------------------------------------- core/v1
def _pod(o):
    spec, st, meta = o.get("spec") or {}, o.get("status") or {}, o["metadata"]
    total = len(spec.get("containers") or [])
    reason = st.get("reason") or st.get("phase") or ""
    ready = restarts = 0
    last_restart = None
    has_running = False
    for c in reversed(st.get("containerStatuses") or []):
        restarts += int(c.get("restartCount") or 0)
        lt = ((c.get("lastState") or {}).get("terminated") or {}).get("finishedAt")
        if lt and (last_restart is None or (parse_time(lt) or last_restart) > last_restart):
            last_restart = parse_time(lt)
        state = c.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
        elif "terminated" in state:
            t = state["terminated"] or {}
            reason = f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode', 0)}"
        elif c.get("ready") and "running" in state:
            has_running = True
            ready += 1
    if reason == "Completed" and has_running:
        cond = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), {})
        reason = "Running" if cond.get("status") == "True" else "NotReady"
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if st.get("reason") == "NodeLost" else "Terminating"
    restarts_s = str(restarts)
    if last_restart is not None:
        restarts_s += f" ({age(last_restart.isoformat())} ago)"
    gates = spec.get("readinessGates") or []
    conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
    gates_s = f"{sum(1 for g in gates if conds.get(g.get('conditionType')) == 'True')}/{len(gates)}" \
        if gates else NONE
    return [meta["name"], f"{ready}/{total}", reason, restarts_s, _meta_age(o), st.get("podIP") or NONE,
            spec.get("nodeName") or NONE, st.get("nominatedNodeName") or NONE, gates_s]


def _node(o):
    st, spec, labels = o.get("status") or {}, o.get("spec") or {}, o["metadata"].get("labels") or {}
    status = []
    ready = next((c for c in st.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is not None:
        status.append("Ready" if ready.get("status") == "True" else "NotReady")
    if not status:
        status.append("Unknown")
    if spec.get("unschedulable"):
        status.append("SchedulingDisabled")
    roles = {k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and k.split("/", 1)[1]}
    if labels.get("kubernetes.io/role"):
        roles.add(labels["kubernetes.io/role"])
    info = st.get("nodeInfo") or {}
    addrs = st.get("addresses") or []

    def addr(t):
        return next((a.get("address") for a in addrs if a.get("type") == t), None) or NONE
    return [o["metadata"]["name"], ",".join(status), ",".join(sorted(roles)) or NONE, _meta_age(o),
            info.get("kubeletVersion", ""), addr("InternalIP"), addr("ExternalIP"),
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def _service(o):
    spec, st = o.get("spec") or {}, o.get("status") or {}
    stype = spec.get("type", "ClusterIP")
    ext = list(spec.get("externalIPs") or [])
    if stype == "LoadBalancer":
        ing = [i.get("ip") or i.get("hostname") for i in (st.get("loadBalancer") or {}).get("ingress") or []]
        ext_s = ",".join([x for x in ing if x] + ext) or "<pending>"
    elif stype == "ExternalName":
        ext_s = spec.get("externalName") or NONE
    else:
        ext_s = ",".join(ext) or NONE
    ports = ",".join(f"{p.get('port')}{':' + str(p['nodePort']) if p.get('nodePort') else ''}/"
                     f"{p.get('protocol', 'TCP')}" for p in spec.get("ports") or []) or NONE
    return [o["metadata"]["name"], stype, spec.get("clusterIP") or NONE, ext_s, ports, _meta_age(o),
            _sel(spec.get("selector"))]


def _endpoints(o):
    eps = []
    for s in o.get("subsets") or []:
        ports = s.get("ports") or [{}]
        for a in s.get("addresses") or []:
            for p in ports:
                eps.append(f"{a.get('ip')}:{p['port']}" if p.get("port") else a.get("ip"))
    text = ",".join(eps[:3]) + (f" + {len(eps) - 3} more..." if len(eps) > 3 else "")
    return [o["metadata"]["name"], text or NONE, _meta_age(o)]


def _event(o):
    inv, src = o.get("involvedObject") or {}, o.get("source") or {}
    first = o.get("firstTimestamp") or o.get("eventTime")
    last = o.get("lastTimestamp") or (o.get("series") or {}).get("lastObservedTime") or first
    source = src.get("component") or o.get("reportingComponent") or ""
    if src.get("host"):
        source += ", " + src["host"]
    return [age(last), o.get("type", ""), o.get("reason", ""),
            f"{(inv.get('kind') or '').lower()}/{inv.get('name', '')}", inv.get("fieldPath", ""), source,
            (o.get("message") or "").strip(), age(first), int(o.get("count") or 1), o["metadata"]["name"]]


def _named(*fns):
    return lambda o: [o["metadata"]["name"]] + [f(o) for f in fns]


def _replicas(o):
    return (o.get("spec") or {}).get("replicas", 1)


def _st(o, k):
    return int((o.get("status") or {}).get(k) or 0)


S, I = "string", "integer"
PRINTERS = {
    ("", "pods"): ([("Ready", S, 0), ("Status", S, 0), ("Restarts", S, 0), ("Age", S, 0), ("IP", S, 1),
                    ("Node", S, 1), ("Nominated Node", S, 1), ("Readiness Gates", S, 1)], _pod),
    ("", "nodes"): ([("Status", S, 0), ("Roles", S, 0), ("Age", S, 0), ("Version", S, 0), ("Internal-IP", S, 1),
                     ("External-IP", S, 1), ("OS-Image", S, 1), ("Kernel-Version", S, 1),
                     ("Container-Runtime", S, 1)], _node),
    ("", "namespaces"): ([("Status", S, 0), ("Age", S, 0)],
                         _named(lambda o: (o.get("status") or {}).get("phase", ""), _meta_age)),
    ("", "services"): ([("Type", S, 0), ("Cluster-IP", S, 0), ("External-IP", S, 0), ("Port(s)", S, 0),
                        ("Age", S, 0), ("Selector", S, 1)], _service),
    ("", "endpoints"): ([("Endpoints", S, 0), ("Age", S, 0)], _endpoints),
    ("", "events"): ([("Last Seen", S, 0), ("Type", S, 0), ("Reason", S, 0), ("Object", S, 0),
                      ("Subobject", S, 1), ("Source", S, 1), ("Message", S, 0), ("First Seen", S, 1),
                      ("Count", I, 1), ("Name", S, 1)], _event),
    ("", "configmaps"): ([("Data", I, 0), ("Age", S, 0)],
                         _named(lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {}), _meta_age)),
    ("", "secrets"): ([("Type", S, 0), ("Data", I, 0), ("Age", S, 0)],
                      _named(lambda o: o.get("type", "Opaque"),
                             lambda o: len(o.get("data") or {}) + len(o.get("stringData") or {}), _meta_age)),
    ("", "serviceaccounts"): ([("Secrets", I, 0), ("Age", S, 0)],
                              _named(lambda o: len(o.get("secrets") or []), _meta_age)),
    ("discovery.k8s.io", "endpointslices"): (
        [("AddressType", S, 0), ("Ports", S, 0), ("Endpoints", S, 0), ("Age", S, 0)],
        _named(lambda o: o.get("addressType", ""),
               lambda o: ",".join(str(p.get("port")) for p in o.get("ports") or [] if p.get("port")) or NONE,
               lambda o: ",".join(a for e in o.get("endpoints") or [] for a in e.get("addresses") or []) or NONE,
               _meta_age)),
    ("networking.k8s.io", "networkpolicies"): (
        [("Pod-Selector", S, 0), ("Age", S, 0)],
        _named(lambda o: _label_selector((o.get("spec") or {}).get("podSelector")), _meta_age)),
    ("coordination.k8s.io", "leases"): (
        [("Holder", S, 0), ("Age", S, 0)],
        _named(lambda o: (o.get("spec") or {}).get("holderIdentity") or "", _meta_age)),
    ("apps", "deployments"): (
        [("Ready", S, 0), ("Up-to-date", I, 0), ("Available", I, 0), ("Age", S, 0), ("Containers", S, 1),
         ("Images", S, 1), ("Selector", S, 1)],
        _named(lambda o: f"{_st(o, 'readyReplicas')}/{_replicas(o)}", lambda o: _st(o, "updatedReplicas"),
               lambda o: _st(o, "availableReplicas"), _meta_age, lambda o: _containers(o)[0],
               lambda o: _containers(o)[1], lambda o: _label_selector((o.get("spec") or {}).get("selector")))),
    ("apps", "statefulsets"): (
        [("Ready", S, 0), ("Age", S, 0), ("Containers", S, 1), ("Images", S, 1)],
        _named(lambda o: f"{_st(o, 'readyReplicas')}/{_replicas(o)}", _meta_age,
               lambda o: _containers(o)[0], lambda o: _containers(o)[1])),
    ("apps", "daemonsets"): (
        [("Desired", I, 0), ("Current", I, 0), ("Ready", I, 0), ("Up-to-date", I, 0), ("Available", I, 0),
         ("Node Selector", S, 0), ("Age", S, 0), ("Containers", S, 1), ("Images", S, 1), ("Selector", S, 1)],
        _named(lambda o: _st(o, "desiredNumberScheduled"), lambda o: _st(o, "currentNumberScheduled"),
               lambda o: _st(o, "numberReady"), lambda o: _st(o, "updatedNumberScheduled"),
               lambda o: _st(o, "numberAvailable"),
               lambda o: _sel((((o.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector")),
               _meta_age, lambda o: _containers(o)[0], lambda o: _containers(o)[1],
               lambda o: _label_selector((o.get("spec") or {}).get("selector")))),
    ("apps", "replicasets"): (
        [("Desired", I, 0), ("Current", I, 0), ("Ready", I, 0), ("Age", S, 0), ("Containers", S, 1),
         ("Images", S, 1), ("Selector", S, 1)],
        _named(_replicas, lambda o: _st(o, "replicas"), lambda o: _st(o, "readyReplicas"), _meta_age,
               lambda o: _containers(o)[0], lambda o: _containers(o)[1],
               lambda o: _label_selector((o.get("spec") or {}).get("selector")))),
    ("apiextensions.k8s.io", "customresourcedefinitions"): (
        [("Created At", "date", 0)], _named(lambda o: o["metadata"].get("creationTimestamp", ""))),
}
# cells(obj) return the whole row, name first -- except Events, whose table starts
# with LAST SEEN and has NAME as a wide column, as upstream
NO_NAME_COLUMN = {("", "events")}
