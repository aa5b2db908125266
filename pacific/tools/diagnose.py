"""`pacific diagnose`: check a cluster's network and list what is wrong.

    findings = run(kube, nb_remote, sb_remote, sync_timeout=5)
    for f in findings: print(f)          # "FAIL chassis: node3 ..."

Checks, each a function returning Findings:
  databases   NB and SB answer
  chassis     every Node has an OVN chassis, every chassis a Node
  sync        a change to NB reaches every chassis (NB_Global.nb_cfg is bumped,
              as `ovn-nbctl --wait=hv sync` does, and each Chassis_Private's
              nb_cfg must catch up within sync_timeout): a dead ovn-northd or
              ovn-controller shows here; --no-sync only compares what is there
  controller  the leader's Lease is held and renewed
  nodes       every node daemon's health report (Lease pacific-node-<node>,
              pacific.node.health) is fresh, ready, and sees its tunnels up
  subnets     Subnets 90 % full or more (a dual-stack one in either family: a
              pod needs an address of each), Subnets not Ready
  multicast   the groups joined on each Subnet and their member ports (IGMP
              snooping's table in SB); a Subnet whose switch does not snoop
              while the multicast gate exists
  rows        NB rows missing or stale (pacific.tools.topology.check)
"""
from __future__ import annotations

import calendar
import json
import time
from dataclasses import dataclass

from pacific import names
from pacific.kube import resources as r
from pacific.tools import topology
from pacific.ovn.query import Query, QueryError, as_list

FULL = 0.9


@dataclass
class Finding:
    level: str        # ok | warn | fail
    area: str
    message: str

    def __str__(self):
        return f"{self.level.upper():4} {self.area}: {self.message}"


def _age(ts: str | None) -> float | None:
    if not ts:
        return None
    t = calendar.timegm(time.strptime(ts.split(".")[0].rstrip("Z"), "%Y-%m-%dT%H:%M:%S"))
    return time.time() - t


def check_chassis(nodes: list[str], sb: Query) -> list[Finding]:
    chassis = {c["name"]: c for c in sb.select("Chassis", ["name", "hostname"])}
    out = [Finding("fail", "chassis", f"node {n} has no OVN chassis: its ovn-controller never "
                   "registered (not running, or cannot reach SB)") for n in nodes if n not in chassis]
    out += [Finding("warn", "chassis", f"chassis {c} belongs to no Node (a removed node: "
                    f"`ovn-sbctl chassis-del {c}`)") for c in sorted(chassis) if c not in nodes]
    if not out:
        out.append(Finding("ok", "chassis", f"{len(nodes)} nodes, each with its chassis"))
    return out


def check_sync(nb: Query, sb: Query, timeout: float, bump: bool) -> list[Finding]:
    if bump:
        res = nb.transact({"op": "mutate", "table": "NB_Global", "where": [],
                           "mutations": [["nb_cfg", "+=", 1]]},
                          {"op": "select", "table": "NB_Global", "where": [],
                           "columns": ["nb_cfg"]})
        target = res[1]["rows"][0]["nb_cfg"]
    else:
        target = nb.select("NB_Global", ["nb_cfg"])[0]["nb_cfg"]
    deadline = time.monotonic() + timeout
    while True:
        g = nb.select("NB_Global", ["sb_cfg", "hv_cfg"])[0]
        lag = {c["name"]: c["nb_cfg"] for c in sb.select("Chassis_Private", ["name", "nb_cfg"])
               if c["nb_cfg"] < target}
        if (g["sb_cfg"] >= target and not lag) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    out = []
    if g["sb_cfg"] < target:
        out.append(Finding("fail", "sync", f"ovn-northd has not carried NB change {target} to "
                           f"SB within {timeout:g} s (at {g['sb_cfg']}): is ovn-northd running?"))
    out += [Finding("fail", "sync", f"chassis {c} has not applied NB change {target} within "
                    f"{timeout:g} s (it is at {v}): is its ovn-controller running and "
                    "connected?") for c, v in sorted(lag.items())]
    if not out:
        out.append(Finding("ok", "sync", f"every chassis applied NB change {target}"))
    return out


def check_controller(kube) -> list[Finding]:
    lease = r.get(kube, r.LEASES, names.CONTROLLER_NAME, names.CONTROLLER_LEASE_NAMESPACE)
    spec = (lease or {}).get("spec") or {}
    if not spec.get("holderIdentity"):
        return [Finding("fail", "controller", "no pacific-controller holds the leader Lease "
                        f"{names.CONTROLLER_LEASE_NAMESPACE}/{names.CONTROLLER_NAME}: pods get "
                        "no addresses")]
    age, ttl = _age(spec.get("renewTime")), spec.get("leaseDurationSeconds") or 15
    if age is None or age > ttl:
        return [Finding("fail", "controller", f"the leader {spec['holderIdentity']} last renewed "
                        f"{age or 0:.0f} s ago (lease {ttl} s): it is gone or cut off")]
    return [Finding("ok", "controller", f"leader {spec['holderIdentity']} (renewed "
                    f"{age:.0f} s ago)")]


def check_nodes(kube, nodes: list[str]) -> list[Finding]:
    leases = {x["metadata"]["name"]: x for x in
              r.list_(kube, r.LEASES, names.NODE_HEALTH_NAMESPACE)[0]}
    out = []
    for n in nodes:
        lease = leases.get(f"{names.NODE_HEALTH_LEASE_PREFIX}{n}")
        if lease is None:
            out.append(Finding("fail", "nodes", f"node {n}: no health report from pacific-node "
                               "(not running, or --health-interval 0)"))
            continue
        spec, ann = lease.get("spec") or {}, lease["metadata"].get("annotations") or {}
        age, ttl = _age(spec.get("renewTime")), spec.get("leaseDurationSeconds") or 30
        if age is None or age > ttl:
            out.append(Finding("fail", "nodes", f"node {n}: pacific-node's last report is "
                               f"{age or 0:.0f} s old (expected every {ttl / 3:g} s): is it "
                               "running?"))
            continue
        if ann.get(names.ANN_HEALTH_READY) != "true":
            out.append(Finding("fail", "nodes", f"node {n}: not ready: "
                               f"{ann.get(names.ANN_HEALTH_READY)}"))
        try:
            tunnels = json.loads(ann.get(names.ANN_HEALTH_TUNNELS) or "{}")
        except ValueError:
            tunnels = {}
        out += [Finding("fail", "tunnels", f"{n} -> {peer}: down (the underlay does not carry "
                        "probes to its tunnel endpoint)") for peer, st in sorted(tunnels.items())
                if st != "up"]
        out += [Finding("warn", "tunnels", f"{n} has no tunnel to {peer} (ovn-controller on {n} "
                        "has not made it yet)") for peer in nodes
                if peer != n and peer not in tunnels]
    if not out:
        out.append(Finding("ok", "nodes", f"{len(nodes)} node daemons ready, every tunnel up"))
    return out


def check_subnets(kube) -> list[Finding]:
    return subnet_findings(r.list_(kube, r.SUBNETS)[0])


def subnet_findings(subnets: list[dict]) -> list[Finding]:
    out = []
    for s in subnets:
        name, st = s["metadata"]["name"], s.get("status") or {}
        ready = [c for c in st.get("conditions") or [] if c.get("type") == "Ready"]
        if ready and ready[0].get("status") != "True":
            out.append(Finding("fail", "subnets", f"Subnet {name} is not Ready: "
                               f"{ready[0].get('message')}"))
        used = st.get("usedIPs") or 0
        # a dual-stack or IPv6 Subnet counts each family (v4/v6availableIPs)
        per_family = [(f" in IPv{v}", st[f"v{v}availableIPs"]) for v in (4, 6)
                      if isinstance(st.get(f"v{v}availableIPs"), (int, float))]
        for family, avail in per_family or [("", st.get("availableIPs") or 0)]:
            if used + avail and used / (used + avail) >= FULL:
                out.append(Finding("warn", "subnets", f"Subnet {name} is "
                                   f"{used / (used + avail):.0%} full{family} ({int(avail)} "
                                   "addresses left)"))
    return out or [Finding("ok", "subnets", "every Subnet Ready, none 90 % full")]


def multicast_groups(sb: Query) -> dict[tuple[str, str], dict[str, list[str]]]:
    """(switch, group address) -> chassis name -> member port names, from the
    IGMP snooping table every chassis writes (OVN's own "mrouters" rows left out)."""
    rows = [g for g in sb.select("IGMP_Group", ["address", "datapath", "chassis", "ports"])
            if g["address"] != "mrouters"]
    if not rows:
        return {}
    switches = {d["_uuid"]: (d["external_ids"] or {}).get("name", d["_uuid"])
                for d in sb.select("Datapath_Binding", ["_uuid", "external_ids"])}
    chassis = {c["_uuid"]: c["name"] for c in sb.select("Chassis", ["_uuid", "name"])}
    ports = {}
    for dp in {g["datapath"] for g in rows}:
        ports.update({p["_uuid"]: p["logical_port"] for p in sb.select(
            "Port_Binding", ["_uuid", "logical_port"], [["datapath", "==", ["uuid", dp]]])})
    out: dict[tuple[str, str], dict[str, list[str]]] = {}
    for g in rows:
        members = sorted(ports.get(u, u) for u in as_list(g["ports"]))
        where = chassis.get(g["chassis"], "?") if g["chassis"] else "?"
        out.setdefault((switches.get(g["datapath"], "?"), g["address"]), {})[where] = members
    return out


def check_multicast(nb: Query, sb: Query) -> list[Finding]:
    out = []
    if nb.one("Port_Group", ["name"], [["name", "==", names.PG_MCAST]]):
        for sw in nb.select("Logical_Switch", ["name", "other_config", "external_ids"]):
            if (sw["external_ids"] or {}).get(names.EXT_OWNER_KIND) == names.OWNER_KIND_SUBNET \
                    and (sw["other_config"] or {}).get("mcast_snoop") != "true":
                out.append(Finding("warn", "multicast", f"Subnet {sw['name']}: its switch does not "
                                   "snoop IGMP: groups flood it like broadcast (the Subnet "
                                   "feature has not written it yet, or --no-multicast)"))
    for (switch, group), by_chassis in sorted(multicast_groups(sb).items()):
        members = ", ".join(f"{p} ({c})" for c, ps in sorted(by_chassis.items()) for p in ps)
        out.append(Finding("ok", "multicast", f"Subnet {switch}, group {group}: {members or '-'}"))
    return out or [Finding("ok", "multicast", "no multicast group joined")]


def run(kube, nb_remote: str, sb_remote: str, sync_timeout: float = 5.0, bump: bool = True,
        global_namespaces=frozenset()) -> list[Finding]:
    try:
        nb = Query(nb_remote, "OVN_Northbound")
        sb = Query(sb_remote, "OVN_Southbound")
    except QueryError as e:
        return [Finding("fail", "databases", str(e))]
    with nb, sb:
        nodes = sorted(n["metadata"]["name"] for n in r.list_(kube, r.NODES)[0])
        out = [Finding("ok", "databases", "NB and SB answer")]
        out += check_chassis(nodes, sb)
        out += check_sync(nb, sb, sync_timeout, bump)
        out += check_controller(kube)
        out += check_nodes(kube, nodes)
        out += check_subnets(kube)
        out += check_multicast(nb, sb)
        problems = topology.check(topology.read(kube, nb, global_namespaces))
        out += [Finding("warn", "rows", p) for p in problems] or \
            [Finding("ok", "rows", "NB holds what Kubernetes asks for")]
    return out
