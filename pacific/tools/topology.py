"""`pacific topology`: the logical network read from NB, named from Kubernetes,
and `--check`: what NB lacks or holds beyond what Kubernetes says should exist.

    topo = read(kube, nb)              # a plain dict (also the --format json)
    problems = check(topo)             # ["missing: ...", "stale: ..."]

NB is read with one-shot selects (pacific.ovn.query); Kubernetes with
lists.  Only rows Pacific owns (external_ids owner-kind) are judged.
"""
from __future__ import annotations

from collections import defaultdict

from pacific import contract, names
from pacific.kube import resources as r
from pacific.ovn.query import Query, as_list
from pacific.tenancy import GLOBAL, tenant_of


def _kind(row) -> str | None:
    return row["external_ids"].get(names.EXT_OWNER_KIND)


def _owner(row) -> str | None:
    return row["external_ids"].get(names.EXT_OWNER)


def read(kube, nb: Query, global_namespaces=frozenset()) -> dict:
    switches = nb.select("Logical_Switch", ["_uuid", "name", "ports", "external_ids"])
    lsps = {p["_uuid"]: p for p in nb.select(
        "Logical_Switch_Port", ["_uuid", "name", "addresses", "options", "external_ids", "type"])}
    lrps = {p["name"]: p for p in nb.select("Logical_Router_Port", ["name", "mac", "networks"])}
    lbs = nb.select("Load_Balancer", ["name", "external_ids"])
    routers = [x["name"] for x in nb.select("Logical_Router", ["name"])]

    subnets = {s["metadata"]["name"]: s for s in r.list_(kube, r.SUBNETS)[0]}
    nodes = {n["metadata"]["name"]: n for n in r.list_(kube, r.NODES)[0]}
    namespaces = {n["metadata"]["name"]: n for n in r.list_(kube, r.NAMESPACES)[0]}
    pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p
            for p in r.list_(kube, r.PODS)[0]}
    services = r.list_(kube, r.SERVICES)[0]
    ip_objects = {i["metadata"]["name"] for i in r.list_(kube, r.IPS)[0]}

    def tenant(ns):
        return tenant_of(namespaces.get(ns), ns, frozenset(global_namespaces))[0]

    out_switches = []
    for ls in sorted(switches, key=lambda s: (s["name"] != names.JOIN_SWITCH, s["name"])):
        sub = subnets.get(ls["name"]) or {}
        lrp = lrps.get(names.router_port_name(ls["name"]))
        ports = []
        for u in as_list(ls["ports"]):
            p = lsps.get(u)
            if p is None or p["type"] == "router":
                continue
            addr = (as_list(p["addresses"]) or [""])[0].split()
            kind, owner = _kind(p), _owner(p)
            node = p["options"].get(names.LSP_OPT_REQUESTED_CHASSIS)
            entry = {"port": p["name"], "kind": (kind or "other").lower(), "owner": owner,
                     "mac": addr[0] if addr else None, "ip": addr[1] if len(addr) > 1 else None,
                     "ips": addr[1:], "node": node}      # every address (dual-stack: IPv4 first)
            if kind == names.OWNER_KIND_POD and owner:
                pod = pods.get(owner)
                entry["node"] = (pod or {}).get("spec", {}).get("nodeName") or node
                entry["tenant"] = tenant(owner.split("/", 1)[0])
            elif kind == names.OWNER_KIND_NODE:
                entry["node"] = owner
            ports.append(entry)
        out_switches.append({
            "name": ls["name"], "owner_kind": _kind(ls),
            "cidr": (sub.get("spec") or {}).get("cidrBlock")
            or (names.JOIN_CIDR if ls["name"] == names.JOIN_SWITCH else None),
            "gateway": as_list(lrp["networks"])[0] if lrp and lrp["networks"] else None,
            "router_mac": (lrp or {}).get("mac"),
            "namespaces": list((sub.get("spec") or {}).get("namespaces") or []),
            "default": bool((sub.get("spec") or {}).get("default")),
            "ports": sorted(ports, key=lambda p: (p["node"] or "", p["owner"] or p["port"]))})
    tenants = defaultdict(list)
    for ns in sorted(namespaces):
        tenants[tenant(ns)].append(ns)
    return {
        "routers": routers, "switches": out_switches,
        "load_balancers": len(lbs),
        "services_with_lb": len({_owner(b) for b in lbs if _kind(b) == names.OWNER_KIND_SERVICE}),
        "tenants": {t: v for t, v in sorted(tenants.items())},
        "global_tenant": GLOBAL,
        # what Kubernetes says should exist, for check()
        "_want": {
            "subnets": sorted(n for n, s in subnets.items()
                              if not s["metadata"].get("deletionTimestamp")),
            "nodes": sorted(nodes),
            "pods": {k: (rec.port, rec.subnet, " ".join((rec.mac, *rec.addresses)))
                     for k, p in pods.items()
                     if (rec := contract.own_record(p)) and not p["metadata"].get("deletionTimestamp")},
            "kept_ips": sorted(ip_objects),
            "services": sorted(f"{s['metadata']['namespace']}/{s['metadata']['name']}"
                               for s in services
                               if (s.get("spec") or {}).get("clusterIP") not in (None, "", "None")
                               and (s.get("spec") or {}).get("ports")),
            "lb_owners": sorted({_owner(b) for b in lbs if _kind(b) == names.OWNER_KIND_SERVICE}),
        },
    }


def check(topo: dict) -> list[str]:
    """Rows NB lacks ("missing: ...") or holds for nothing ("stale: ...")."""
    want = topo["_want"]
    problems = []
    have_switches = {s["name"]: s for s in topo["switches"]}
    for name in want["subnets"]:
        if name not in have_switches:
            problems.append(f"missing: logical switch {name} of Subnet {name}")
        elif not have_switches[name]["gateway"]:
            problems.append(f"missing: the cluster router's port on switch {name}")
    for name, sw in have_switches.items():
        if sw["owner_kind"] == names.OWNER_KIND_SUBNET and name not in want["subnets"]:
            problems.append(f"stale: logical switch {name}: no Subnet {name}")
    ports = {p["port"]: (sw["name"], p) for sw in topo["switches"] for p in sw["ports"]}
    for key, (port, subnet, addr) in sorted(want["pods"].items()):
        got = ports.get(port)
        if got is None:
            problems.append(f"missing: port {port} of pod {key} (switch {subnet})")
        elif got[0] != subnet or " ".join((got[1]["mac"], *got[1]["ips"])) != addr:
            problems.append(f"wrong: port {port} of pod {key} is on {got[0]} with "
                            f"{' '.join((got[1]['mac'], *got[1]['ips']))}; the record says "
                            f"{subnet}, {addr}")
    kept = set(want["kept_ips"])
    for port, (sw, p) in sorted(ports.items()):
        if p["kind"] == "pod" and p["owner"] not in want["pods"] \
                and ".".join(reversed((p["owner"] or "/").split("/", 1))) not in kept:
            problems.append(f"stale: port {port} on {sw}: no pod {p['owner']} holds it")
        if p["kind"] == "node" and p["owner"] not in want["nodes"]:
            problems.append(f"stale: port {port} on {sw}: no node {p['owner']}")
    node_ports = {p["owner"] for _, p in ports.values() if p["kind"] == "node"}
    problems += [f"missing: management port of node {n} on switch {names.JOIN_SWITCH}"
                 for n in want["nodes"] if n not in node_ports]
    lb_owners = set(want["lb_owners"])
    problems += [f"missing: load balancer of Service {s}" for s in want["services"]
                 if s not in lb_owners]
    problems += [f"stale: load balancer of Service {s}: the Service is gone"
                 for s in sorted(lb_owners - set(want["services"]))]
    return problems
