"""OVN's own cost at scale: northd and ovn-controller recomputes, flow counts, NB-change latency.

    .venv/bin/python bench/bench_ovn.py [--pods 1000] [--policies 1000] [--samples 5]
        [--nodes 2] [--subnets 4] [--bind 1.0] [--ovs-prefix DIR ...] [--keep]

For each OVS/OVN installation (--ovs-prefix, repeatable; default: the build of
hack/build-ovs-ovn.sh and Debian's /usr, both in one invocation), a bare sandbox
(OVN central + --nodes nodes, no Kubernetes, no Pacific daemons) is programmed
with the rows Pacific's controller writes, through its own code
(pacific.ovn.ensure / acl / lb, the controller's id and name functions, its
IPAM, policy_model.compile_policy and PolicyFeature._acls, through its batched
NBWriter from 16 threads, as its workers do):

* the cluster router `pacific-cluster`, the `join` switch and --subnets Subnet
  switches, each linked to the router and holding the Services' load balancer
  group;
* --pods pod ports (10 per namespace, namespaces spread over the Subnets;
  addresses from Pacific's IPAM; requested-chassis their node, round robin);
* --policies NetworkPolicies (--policies / namespaces per namespace), each with
  a podSelector of its own (so one port group `np_<hash>` each while there are
  at most 10 per namespace): ingress from pods of a labelled set of namespaces
  (namespaceSelector + podSelector: a shared address set) on TCP 80, and from
  the namespace's own clients (podSelector: a per-namespace set) on TCP
  8000+i; every other policy isolates egress too, to its namespace's servers
  on UDP 53.  ACLs as Pacific writes them: drop 1000, allow-related 1001 per
  rule, the nodes' allow, the egress replies' allow-related at 999.
* a --bind share of the pods bound on their node as pacific-node binds them:
  a veth whose host end (the CNI plugin's name for it) is an OVS port on
  br-int with the Interface external_ids of pacific.node.attachment
  (iface-id, attached-mac, ...); the other end stays in the node's namespace.

Then it measures, each the p50 of --samples:

* ovn-northd full recompute (`inc-engine/recompute`): stopwatch
  `ovn-northd-loop` (the loop iteration that ran it, both versions) and the
  logical-flow build (`build_lflows` in OVN 23.03, engine node `lflow` in
  later versions);
* ovn-controller full recompute on node1: stopwatches `flow-generation`
  (its engine run) and `flow-installation` (ofctrl_put: the diff against
  the installed flows);
* for both recomputes, the daemon's CPU time from the trigger until the
  stopwatches have it (wall-clock stopwatches stretch when other processes
  share the cores; CPU time much less);
* logical flows in SB, OpenFlow flows in node1's br-int (dump-aggregate);
* one NB change: one ACL (a new allow-related rule) added to one group, in
  the transaction that bumps NB_Global.nb_cfg, until ovn-northd has it in SB
  (sb_cfg) and until every chassis has it in its OpenFlow tables (hv_cfg: what
  `ovn-nbctl --wait=hv` waits for); each sample then checks node1's br-int for
  the rule's port on the node of the group's pod (ovn-controller expands a
  port group to its local ports), and counts the full recomputes it caused
  (engine node `lflow` of ovn-northd, node1's lflow_output).

The time to program everything from scratch (first NB write -> hv_cfg) is
printed too.  The sandbox (`bovn<pid>`) goes down in any case (Ctrl-C
included) unless --keep and a part failed.
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pacific import names, ovsinstall  # noqa: E402
from pacific.cni.plugin import host_veth_name  # noqa: E402
from pacific.controller import cluster_router  # noqa: E402
from pacific.controller.nbwriter import NBWriter  # noqa: E402
from pacific.controller.pod import pod_ids  # noqa: E402
from pacific.controller.policy import (KIND_PEER, PolicyFeature, group_ids,  # noqa: E402
                                       group_key, policy_ids)
from pacific.controller.policy_model import PodInfo, World, compile_policy  # noqa: E402
from pacific.controller.subnet import subnet_ids  # noqa: E402
from pacific.ipam.ipam import IPAM  # noqa: E402
from pacific.node.attachment import PodAttachment  # noqa: E402
from pacific.ovn import NorthboundAPI, Owner, acl, ensure, lb  # noqa: E402
from pacific.ovn.ovs import OvsAPI  # noqa: E402
from bench_gateway import add_install_options, down_unless_kept  # noqa: E402
from bench_kube import cpu_seconds  # noqa: E402
from pacific.ovn.query import Query  # noqa: E402
from pacific.sandbox.cluster import Sandbox  # noqa: E402
from pacific.sandbox.daemons import default_install  # noqa: E402
from pacific.sandbox.proc import read_pidfile, wait_for  # noqa: E402

PODS_PER_NS = 10
TEAMS = 3
CPU_TIMEOUT = 900          # seconds: programming 1,000 x 1,000 from scratch on a busy 2-core VM


# ---------------------------------------------------------------- what is written
def plan(pods: int, policies: int, subnets: int, nodes: list[str]) -> SimpleNamespace:
    """The cluster the rows describe: Subnets, pods (with Pacific's IPAM
    addresses), policies compiled by Pacific's policy model into groups."""
    ipam = IPAM(seed=1)
    subs = []
    for s in range(subnets):
        name, cidr = f"bench-{s}", f"10.{40 + s}.0.0/16"
        info = ipam.add_subnet(name, cidr)
        subs.append((name, cidr, info.gateway, int(cidr.split("/")[1])))
    n_ns = max(1, -(-pods // PODS_PER_NS))
    spaces = [f"ns{i}" for i in range(n_ns)]
    ns_labels = {ns: {"team": f"t{i % TEAMS}"} for i, ns in enumerate(spaces)}
    by_ns: dict[str, list[PodInfo]] = {ns: [] for ns in spaces}
    pod_rows = []
    for i in range(pods):
        ns, k = spaces[i // PODS_PER_NS], i % PODS_PER_NS
        subnet = subs[(i // PODS_PER_NS) % subnets][0]
        alloc = ipam.allocate(subnet, f"{ns}/p{k}")
        lsp = names.pod_lsp_name(ns, f"p{k}")
        labels = {"app": f"a{k}", "tier": f"b{k % 5}", "role": "client" if k % 2 else "server"}
        by_ns[ns].append(PodInfo(ns, f"p{k}", labels, alloc.ip, lsp))
        pod_rows.append(SimpleNamespace(ns=ns, name=f"p{k}", lsp=lsp, alloc=alloc,
                                        node=nodes[i % len(nodes)]))
    world = World.indexed(by_ns, ns_labels)
    shim = SimpleNamespace(ctl=SimpleNamespace(cfg=SimpleNamespace(join_cidr=names.JOIN_CIDR)))
    groups: dict[str, dict] = {}
    for j in range(policies):
        ns = spaces[j % n_ns]
        i = j // n_ns                      # the policy's index in its namespace
        spec = {"podSelector": {"matchLabels": {"app": f"a{i % PODS_PER_NS}"}},
                "ingress": [
                    {"from": [{"namespaceSelector": {"matchLabels": {"team": f"t{i % TEAMS}"}},
                               "podSelector": {"matchLabels": {"tier": f"b{i % 5}"}}}],
                     "ports": [{"protocol": "TCP", "port": 80}]},
                    {"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                     "ports": [{"protocol": "TCP", "port": 8000 + i}]}]}
        if j % 2:
            spec["policyTypes"] = ["Ingress", "Egress"]
            spec["egress"] = [{"to": [{"podSelector": {"matchLabels": {"role": "server"}}}],
                               "ports": [{"protocol": "UDP", "port": 53}]}]
        pol = {"metadata": {"namespace": ns, "name": f"np{i}"}, "spec": spec}
        gkey, pkey = group_key(pol), f"{ns}/np{i}"
        g = groups.setdefault(gkey, {"pg": gkey.split("/", 1)[1], "specs": {}, "sets": {},
                                     "ports": set(), "applied": []})
        types, rules, ports = compile_policy(pol, world)
        g["applied"].append(pkey)
        g["ports"] = set(ports)
        for spec_ in PolicyFeature._acls(shim, pkey, g["pg"], types, rules):
            g["specs"].setdefault(spec_.key, spec_)   # as reconcile: shared ACLs name the first
        g["sets"].update(s for r in rules for s in r.address_sets)
    return SimpleNamespace(subnets=subs, pods=pod_rows, groups=groups)


def topology_builders(p) -> list[list]:
    """Submissions of the leader's startup topology and of every Subnet (as
    cluster_router.ensure and subnet.reconcile write them)."""
    ids = cluster_router.join_ids(names.JOIN_SWITCH)
    out = [[lambda api: ensure.EnsureRouter(api, names.CLUSTER_ROUTER, cluster_router.cluster_ids()),
            lambda api: ensure.EnsureSwitch(api, names.JOIN_SWITCH, ids),
            lambda api: lb.AttachLoadBalancerGroup(api, names.JOIN_SWITCH, names.LB_GROUP),
            *cluster_router.router_link_builders(names.JOIN_SWITCH, "100.64.0.1", 16, ids)]]
    for name, _cidr, gateway, prefixlen in p.subnets:
        sids = subnet_ids(name)
        out.append([lambda api, n=name, i=sids: ensure.EnsureSwitch(api, n, i),
                    lambda api, n=name: lb.AttachLoadBalancerGroup(api, n, names.LB_GROUP),
                    *cluster_router.router_link_builders(name, gateway, prefixlen, sids),
                    lambda api, n=name: acl.EnsureACLs(api, n, [], table=ensure.LS)])
    return out


def pod_builders(pod) -> list:
    """pod.reconcile's port (before any policy exists: no group to join)."""
    a = pod.alloc
    addr = f"{a.mac} {a.ip}"
    ids = pod_ids(pod.ns, pod.name, a.subnet)
    opts = {names.LSP_OPT_REQUESTED_CHASSIS: pod.node}
    return [lambda api: ensure.EnsurePort(api, a.subnet, pod.lsp, [addr], [addr], ids, options=opts)]


def group_builders(gkey: str, g: dict, sets_done: set) -> list:
    """policy.reconcile's one transaction for a new group (its peers' sets
    created by the first group naming them, as the replica would show the
    later ones that they exist)."""
    pg = g["pg"]
    out = [lambda api: ensure.EnsurePortGroup(api, pg, group_ids(gkey, g["applied"]))]
    for name, ips in g["sets"].items():
        if name in sets_done:
            continue
        sets_done.add(name)
        ids = {names.EXT_OWNER_KIND: KIND_PEER, names.EXT_OWNER: name,
               names.EXT_CREATED_BY: names.CONTROLLER_NAME}
        out.append(lambda api, n=name, i=ids: ensure.EnsureAddressSet(api, n, i))
        if ips:
            out.append(lambda api, n=name, a=sorted(ips): ensure.AddressSetAddAddresses(api, n, a))
    if g["ports"]:
        out.append(lambda api: ensure.PortGroupAddPorts(api, pg, sorted(g["ports"])))
    specs = list(g["specs"].values())
    out.append(lambda api: acl.EnsurePortGroupACLs(api, pg, specs))
    return out


def submit_all(writer: NBWriter, submissions: list[list], what: str) -> None:
    """Many concurrent writer.run calls, as the controller's 16 pod workers make."""
    with ThreadPoolExecutor(16) as pool:
        for f in [pool.submit(writer.run, s, what) for s in submissions]:
            f.result()


# ---------------------------------------------------------------- NB_Global cfg
def nb_global(nb):
    with nb.ovsdb_connection.lock:
        g = next(iter(nb.tables["NB_Global"].rows.values()))
        return g.uuid, g.nb_cfg, g.sb_cfg, g.hv_cfg


def change_and_wait(nb, writer: NBWriter, builders: list, timeout: float) -> tuple[float, float]:
    """Commit `builders` with nb_cfg bumped in the same transaction; seconds
    until SB has it (sb_cfg) and until every chassis has it in OpenFlow (hv_cfg)."""
    uuid, cfg, _, _ = nb_global(nb)
    target = cfg + 1
    t0 = time.perf_counter()
    writer.run([*builders, lambda api: api.db_set("NB_Global", uuid, ("nb_cfg", target))],
               what="bench change")
    to_sb = None
    deadline = t0 + timeout
    while True:
        _, _, sb_cfg, hv_cfg = nb_global(nb)
        now = time.perf_counter()
        if to_sb is None and sb_cfg >= target:
            to_sb = now - t0
        if hv_cfg >= target:
            return to_sb if to_sb is not None else now - t0, now - t0
        if now > deadline:
            raise SystemExit(f"nb_cfg {target} not on every chassis within {timeout:.0f} s")
        time.sleep(0.002)


# ---------------------------------------------------------------- unixctl figures
_SW = re.compile(r"Total samples: (\d+)\s+Maximum: ([\d.]+) (\w+)")
_UNIT = {"nsec": 1e-6, "usec": 1e-3, "msec": 1.0, "sec": 1e3}


def appctl(sb, ctl: str, *args: str, check: bool = True) -> str:
    return sb.exec(None, [sb.ovs.program("ovn-appctl"), "-t", ctl, *args], timeout=60,
                   check=check).stdout


def stopwatch(sb, ctl: str, name: str) -> tuple[int, float] | None:
    """(samples, maximum in ms) of stopwatch `name`, None if the daemon has none."""
    m = _SW.search(appctl(sb, ctl, "stopwatch/show", name, check=False))
    return (int(m.group(1)), float(m.group(2)) * _UNIT[m.group(3)]) if m else None


def engine_node(sb, ctl: str, *candidates: str) -> str:
    stats = appctl(sb, ctl, "inc-engine/show-stats")
    for c in candidates:
        if f"Node: {c}\n" in stats:
            return c
    raise SystemExit(f"{ctl}: none of the engine nodes {candidates}")


def recomputes(sb, ctl: str, node: str) -> int:
    return int(appctl(sb, ctl, "inc-engine/show-stats", node, "recompute").split()[0])


def timed_recompute(sb, ctl: str, pid: int, node: str, watches: list[str],
                    timeout: float) -> dict:
    """Force a full recompute, wait until engine node `node` has recomputed and
    the stopwatches have taken the loop that did it; {stopwatch: ms} (wall
    clock), and "cpu": the daemon's CPU time from the trigger until then (ms;
    less disturbed by other processes on the cores than the stopwatches)."""
    appctl(sb, ctl, "stopwatch/reset")
    before = recomputes(sb, ctl, node)
    cpu0 = cpu_seconds(pid)
    appctl(sb, ctl, "inc-engine/recompute")
    wait_for(lambda: recomputes(sb, ctl, node) > before, timeout, f"{ctl}: {node} recomputed",
             interval=0.05)
    last = [None]

    def settled():
        # every appctl call is served in a loop iteration of its own, which ends
        # with a sample of the loop stopwatch (watches[0]): samples grown and the
        # maximum unchanged since the previous read = the recompute's iteration
        # is in, and so are the samples it took of the others
        cur = stopwatch(sb, ctl, watches[0])
        prev, last[0] = last[0], cur
        return cur and prev and cur[0] > prev[0] and cur[1] == prev[1] and cur
    out = {watches[0]: wait_for(settled, 60, f"{ctl}: stopwatch {watches[0]} settled",
                                interval=0.05)[1]}
    for w in watches[1:]:
        got = stopwatch(sb, ctl, w)
        if not got or got[0] < 1:
            raise SystemExit(f"{ctl}: stopwatch {w} took no sample in the recompute")
        out[w] = got[1]
    out["cpu"] = (cpu_seconds(pid) - cpu0) * 1000
    return out


# ---------------------------------------------------------------- counts
def lflow_count(sb) -> int:
    with Query(sb.sb_remote, "OVN_Southbound", timeout=60) as q:
        return len(q.select("Logical_Flow", ["_uuid"]))


def openflow_count(sb, node) -> int:
    out = sb.exec(None, [sb.ovs.program("ovs-ofctl"), "dump-aggregate",
                         f"unix:{node.rundir}/br-int.mgmt"], timeout=120).stdout
    return int(re.search(r"flow_count=(\d+)", out).group(1))


def flows_with(sb, node, match: str) -> int:
    out = sb.exec(None, [sb.ovs.program("ovs-ofctl"), "dump-flows",
                         f"unix:{node.rundir}/br-int.mgmt", match], timeout=120).stdout
    return sum(1 for ln in out.splitlines() if "actions=" in ln)


# ---------------------------------------------------------------- binding
def bind(sb, p, share: float, timeout: float) -> int:
    """Bind `share` of the pods on their nodes as pacific-node does; wait until
    every one is `ovn-installed`.  Returns how many."""
    chosen = p.pods[:int(round(len(p.pods) * share))]
    apis = []
    try:
        for node in sb.nodes:
            mine = [pod for pod in chosen if pod.node == node.name]
            if not mine:
                continue
            atts = [PodAttachment(container_id=f"bench{pod.lsp}", ifname="eth0",
                                  netns=f"/var/run/netns/{node.netns}",
                                  pod=f"{pod.ns}/{pod.name}", lsp=pod.lsp, mac=pod.alloc.mac,
                                  ip_cidr=pod.alloc.ip_with_prefix, gateway=pod.alloc.gateway,
                                  mtu=node.mtu) for pod in mine]
            for a in atts:
                a.host = host_veth_name(a.container_id, a.ifname)
            script = "".join(f"link add {a.host} mtu {a.mtu} type veth peer name "
                             f"{a.host[:-2]}_p mtu {a.mtu}\nlink set {a.host} up\n"
                             f"link set {a.host[:-2]}_p up\n" for a in atts)
            sb.exec(None, ["ip", "-n", node.netns, "-batch", "-"], input=script, timeout=300)
            ovs = OvsAPI(node.ovs_remote, timeout=120)
            apis.append((ovs, atts))
            for start in range(0, len(atts), 100):
                with ovs.transaction(wait_vswitchd=False) as txn:
                    for a in atts[start:start + 100]:
                        txn.add(ovs.add_interface_port(
                            names.INTEGRATION_BRIDGE, a.host, external_ids=a.ovs_external_ids(),
                            owner=Owner(names.OWNER_KIND_POD, a.pod)))
        for ovs, atts in apis:
            wait_for(lambda ovs=ovs, atts=atts: all(ovs.is_ovn_installed(a.host) for a in atts),
                     timeout, f"{len(atts)} ports ovn-installed")
    finally:
        for ovs, _ in apis:
            ovs.close()
    return len(chosen)


# ---------------------------------------------------------------- one installation
def version_of(sb) -> str:
    ovs = sb.exec(None, [sb.ovs.program("ovs-vswitchd"), "--version"]).stdout.split()[3]
    ovn = sb.exec(None, [sb.ovs.program("ovn-northd"), "--version"]).stdout.split()[1]
    return f"OVS {ovs} / OVN {ovn}"


def bench(args, prefix: str) -> dict:
    sb = Sandbox(f"bovn{os.getpid() % 100000}", nodes=args.nodes, ovs_prefix=prefix)
    version = version_of(sb)
    print(f"\n== {version} ({prefix}): sandbox {sb.name}, {args.nodes} nodes", flush=True)
    res: dict = {"version": version, "prefix": prefix}
    nb = writer = None
    failed = True
    try:
        sb.up(services=())
        node1 = sb.nodes[0]
        northd_ctl = os.path.join(sb.central_dir, "northd.ctl")
        ctrl_ctl = node1.controller_ctl
        p = plan(args.pods, args.policies, args.subnets, [n.name for n in sb.nodes])
        res["groups"] = len(p.groups)
        res["acls"] = sum(len(g["specs"]) for g in p.groups.values())
        res["sets"] = len({s for g in p.groups.values() for s in g["sets"]})
        nb = NorthboundAPI(sb.nb_remote, timeout=120)
        writer = NBWriter(nb, max_batch=500, txn_timeout=300).start()

        t0 = time.perf_counter()
        submit_all(writer, topology_builders(p), "topology")
        submit_all(writer, [pod_builders(pod) for pod in p.pods], "pod ports")
        t_ports = time.perf_counter() - t0
        sets_done: set = set()
        submit_all(writer, [group_builders(k, g, sets_done) for k, g in p.groups.items()],
                   "policy groups")
        t_nb = time.perf_counter() - t0
        print(f"  NB: {len(p.subnets)} Subnets, {len(p.pods)} pod ports ({t_ports:.1f} s), "
              f"{args.policies} policies in {res['groups']} port groups, {res['acls']} ACLs, "
              f"{res['sets']} address sets: written in {t_nb:.1f} s", flush=True)
        _, to_hv = change_and_wait(nb, writer, [], CPU_TIMEOUT)
        res["scratch"] = time.perf_counter() - t0
        print(f"  every chassis caught up (hv_cfg) {res['scratch']:.1f} s after the first "
              f"write", flush=True)
        t1 = time.perf_counter()
        res["bound"] = bind(sb, p, args.bind, CPU_TIMEOUT)
        change_and_wait(nb, writer, [], CPU_TIMEOUT)
        print(f"  {res['bound']} pods bound on their nodes, ovn-installed, synced: "
              f"{time.perf_counter() - t1:.1f} s", flush=True)

        res["lflows"] = lflow_count(sb)
        res["openflows"] = openflow_count(sb, node1)
        print(f"  logical flows {res['lflows']}, OpenFlow flows on node1 {res['openflows']}",
              flush=True)

        # ovn-northd full recompute
        lflow_watch = "build_lflows" if stopwatch(sb, northd_ctl, "build_lflows") else "lflow"
        watches = ["ovn-northd-loop", lflow_watch]
        northd_pid = read_pidfile(os.path.join(sb.central_dir, "northd.pid"))
        northd = [timed_recompute(sb, northd_ctl, northd_pid, "lflow", watches, CPU_TIMEOUT)
                  for _ in range(args.samples)]
        res["northd_loop"] = [s["ovn-northd-loop"] for s in northd]
        res["northd_lflow"] = [s[lflow_watch] for s in northd]
        res["northd_cpu"] = [s["cpu"] for s in northd]
        print(f"  ovn-northd recompute: loop {fmt(res['northd_loop'])} ms, {lflow_watch} "
              f"{fmt(res['northd_lflow'])} ms, CPU {fmt(res['northd_cpu'])} ms", flush=True)

        # ovn-controller full recompute on node1
        cnode = engine_node(sb, ctrl_ctl, "lflow_output", "logical_flow_output")
        ctrl_pid = read_pidfile(os.path.join(node1.rundir, "ovn-controller.pid"))
        ctrl = [timed_recompute(sb, ctrl_ctl, ctrl_pid, cnode,
                                ["flow-generation", "flow-installation"], CPU_TIMEOUT)
                for _ in range(args.samples)]
        res["ctrl_gen"] = [s["flow-generation"] for s in ctrl]
        res["ctrl_inst"] = [s["flow-installation"] for s in ctrl]
        res["ctrl_cpu"] = [s["cpu"] for s in ctrl]
        print(f"  ovn-controller recompute (node1): flow-generation {fmt(res['ctrl_gen'])} ms, "
              f"flow-installation {fmt(res['ctrl_inst'])} ms, CPU {fmt(res['ctrl_cpu'])} ms",
              flush=True)

        # one ACL added to one group -> SB -> every chassis's OpenFlow
        keys = sorted(g for g in p.groups if p.groups[g]["ports"])
        node_of = {pod.lsp: sb.node(pod.node) for pod in p.pods}
        to_sb, to_hv, n_recomputes, c_recomputes = [], [], [], []
        for i in range(args.samples):
            g = p.groups[keys[(i * 7919) % len(keys)]]
            pg, port = g["pg"], 40000 + i
            pkey = g["applied"][0]
            new = acl.AclSpec("to-lport", names.PRIO_ACL_NP_ALLOW,
                              f"outport == @{pg} && ip4 && ((tcp.dst == {port}))",
                              "allow-related", name=f"np:{pkey}:ingress/9"[:63],
                              external_ids=policy_ids(pkey, **{names.EXT_RULE: "ingress/9"}))
            specs = [*g["specs"].values(), new]
            r0, c0 = recomputes(sb, northd_ctl, "lflow"), recomputes(sb, ctrl_ctl, cnode)
            s, h = change_and_wait(nb, writer, [lambda api, pg=pg, specs=specs:
                                                acl.EnsurePortGroupACLs(api, pg, specs)],
                                   CPU_TIMEOUT)
            # ovn-controller expands @pg to the group's local ports: the flow is
            # on the node of the group's pod
            where = node_of[sorted(g["ports"])[0]]
            if not flows_with(sb, where, f"tcp,tp_dst={port}"):
                raise SystemExit(f"hv_cfg reached but no flow for tcp.dst == {port} on "
                                 f"{where.name}")
            n_recomputes.append(recomputes(sb, northd_ctl, "lflow") - r0)
            c_recomputes.append(recomputes(sb, ctrl_ctl, cnode) - c0)
            g["specs"][new.key] = new
            to_sb.append(s * 1000)
            to_hv.append(h * 1000)
        res["acl_sb"], res["acl_hv"] = to_sb, to_hv
        res["acl_northd_rc"], res["acl_ctrl_rc"] = n_recomputes, c_recomputes
        print(f"  one ACL added: in SB {fmt(to_sb)} ms, in every chassis's OpenFlow "
              f"{fmt(to_hv)} ms; full recomputes it caused: ovn-northd's lflow "
              f"{fmt(n_recomputes)}, node1's {cnode} {fmt(c_recomputes)}", flush=True)
        failed = False
    finally:
        if writer:
            writer.stop()
        if nb:
            nb.close()
        down_unless_kept(sb, failed and args.keep)
    return res


def fmt(values: list[float]) -> str:
    return "/".join(f"{v:.0f}" for v in values)


def p50(values) -> float:
    return statistics.median(values) if values else float("nan")


ROWS = [("ovn-northd recompute: loop, p50", "northd_loop", "ms"),
        ("ovn-northd recompute: lflow build, p50", "northd_lflow", "ms"),
        ("ovn-northd recompute: CPU, p50", "northd_cpu", "ms"),
        ("ovn-controller recompute (node1): flow-generation, p50", "ctrl_gen", "ms"),
        ("ovn-controller recompute (node1): flow-installation, p50", "ctrl_inst", "ms"),
        ("ovn-controller recompute (node1): CPU, p50", "ctrl_cpu", "ms"),
        ("logical flows (SB)", "lflows", ""),
        ("OpenFlow flows (node1 br-int)", "openflows", ""),
        ("one ACL added -> in SB (sb_cfg), p50", "acl_sb", "ms"),
        ("one ACL added -> every chassis's OpenFlow (hv_cfg), p50", "acl_hv", "ms"),
        ("one ACL added: ovn-northd lflow recomputes, p50", "acl_northd_rc", ""),
        ("one ACL added: node1 ovn-controller lflow recomputes, p50", "acl_ctrl_rc", ""),
        ("everything from scratch -> every chassis", "scratch", "s")]


def value(res: dict, key: str) -> float:
    v = res.get(key, float("nan"))
    return p50(v) if isinstance(v, list) else float(v)


def table(results: list[dict]) -> str:
    lines = ["| | " + " | ".join(r["version"] for r in results)
             + (" | ratio (last / first)" if len(results) > 1 else "") + " |",
             "|---|" + "---:|" * (len(results) + (len(results) > 1))]
    for label, key, unit in ROWS:
        vals = [value(r, key) for r in results]
        cells = [f"{v:,.0f}" + (f" {unit}" if unit else "") if key != "scratch"
                 else f"{v:,.1f} {unit}" for v in vals]
        ratio = ""
        if len(results) > 1:
            ratio = f" | {vals[-1] / vals[0]:.2f}x" if vals[0] else " | -"
        lines.append(f"| {label} | " + " | ".join(cells) + ratio + " |")
    return "\n".join(lines)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=1000, help="pod ports (10 per namespace)")
    ap.add_argument("--policies", type=int, default=1000,
                    help="NetworkPolicies, spread over the namespaces")
    ap.add_argument("--samples", type=int, default=5, help="samples per figure (p50 reported)")
    ap.add_argument("--nodes", type=int, default=2, help="sandbox nodes (figures from node1)")
    ap.add_argument("--subnets", type=int, default=4, help="Subnet switches")
    ap.add_argument("--bind", type=float, default=1.0,
                    help="share of the pods bound on their node (0-1)")
    add_install_options(ap)
    args = ap.parse_args()
    if not 0 <= args.bind <= 1:
        ap.error("--bind is a share, 0 to 1")
    # SIGTERM as Ctrl-C: the finally clauses take the sandbox down
    signal.signal(signal.SIGTERM, _interrupt)
    prefixes = args.ovs_prefix or list(dict.fromkeys(
        [default_install().prefix, ovsinstall.SYSTEM_PREFIX]))
    results = [bench(args, p) for p in prefixes]
    print(f"\n{args.pods} pods, {args.policies} policies, {args.nodes} nodes, "
          f"p50 of {args.samples} samples:\n")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
