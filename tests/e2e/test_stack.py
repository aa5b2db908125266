"""The whole stack in the sandbox: `pacific sandbox up`'s default services (the Kubernetes
control plane, pod runners, two controllers, a pacific-node per node) and pods made
through `pacific sandbox pod add` (the real CNI plugin), checked with real packets.
"""
import itertools
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pacific import contract, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods

from controller_fixtures import wait_until

pytestmark = pytest.mark.e2e

SUBNETS = {"stack-a": ("10.41.0.0/24", "team-a"), "stack-b": ("10.42.0.0/24", "team-b")}
FIXED = "10.42.0.77"


def cli(sb, *args, check=True):
    return subprocess.run([sys.executable, "-m", "pacific.cli.main", *args], check=check,
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def stack(sandbox):
    api = client.load(os.path.join(sandbox.dir, names.SANDBOX_KUBECONFIG))
    for subnet, (cidr, ns) in SUBNETS.items():
        # one tenant: these tests are about subnets and nodes, not isolation
        r.create(api, r.NAMESPACES, {"metadata": {"name": ns,
                                                  "labels": {names.LABEL_TENANT: "stack"}}})
        r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                  "metadata": {"name": subnet},
                                  "spec": {"cidrBlock": cidr, "namespaces": [ns]}})
    yield sandbox, api
    # the session's sandbox as the module found it: its pods, then its Subnets
    for _, ns in SUBNETS.values():
        r.delete(api, r.NAMESPACES, ns)
    wait_until(lambda: not [p for _, ns in SUBNETS.values() for p in r.list_(api, r.PODS, ns)[0]],
               120, what="the module's pods gone with their namespaces")
    for subnet in SUBNETS:
        r.delete(api, r.SUBNETS, subnet)
    wait_until(lambda: not any(r.get(api, r.SUBNETS, s) for s in SUBNETS), 60,
               what="the module's Subnets gone")


def pod_ip(api, ns, name):
    return contract.own_record(r.get(api, r.PODS, name, ns)).ip


def ping(sb, netns, ip):
    return sb.exec(netns, ["ping", "-c1", "-W2", ip], check=False).returncode == 0


def add(sb, ns_name, node, *extra):
    out = cli(sb, "sandbox", "pod", "add", ns_name, "--node", node, "--name", sb.name, *extra,
              check=False)
    assert out.returncode == 0, out.stderr[-2000:]


def pod_netns(sb, ns, name):
    return cnipods.load(sb, ns, name).netns     # pod runner or kubelet nodes alike


def test_pods_on_three_nodes_in_two_subnets_reach_each_other_and_every_node(stack):
    sb, api = stack
    pods = [("team-a", "a1", "node1"), ("team-a", "a2", "node2"), ("team-b", "b1", "node3"),
            ("team-b", "b2", "node1")]
    for ns, name, node in pods:
        add(sb, f"{ns}/{name}", node)
    add(sb, "team-b/fixed", "node2", "--annotation", f"{names.ANN_IP_ADDRESS}={FIXED}")
    pods.append(("team-b", "fixed", "node2"))

    assert pod_ip(api, "team-b", "fixed") == FIXED
    for subnet, (cidr, _) in SUBNETS.items():
        st = r.get(api, r.SUBNETS, subnet)["status"]
        assert st["gateway"] == cidr.replace("0/24", "1")          # the default: first address
        assert [c["status"] for c in st["conditions"] if c["type"] == "Ready"] == ["True"]
    ips = {(ns, n): pod_ip(api, ns, n) for ns, n, _ in pods}
    for (ns, n), ip in ips.items():
        cidr = SUBNETS["stack-a" if ns == "team-a" else "stack-b"][0]
        assert ip.startswith(cidr.rsplit(".", 2)[0]), (ns, n, ip, cidr)
        pod = r.get(api, r.PODS, n, ns)      # reported by the sandbox's "kubelet"
        assert pod["status"]["phase"] == "Running" and pod["status"]["podIP"] == ip

    joins = [r.get(api, r.NODES, n.name)["metadata"]["annotations"][names.ANN_NODE_JOIN_IP]
             .split("/")[0] for n in sb.nodes]
    checks = [(pod_netns(sb, ns, n), ip) for (ns, n), (ns2, n2) in
              itertools.permutations(ips, 2) for ip in [ips[(ns2, n2)]]]
    checks += [(pod_netns(sb, ns, n), j) for (ns, n) in ips for j in joins]      # pod -> ovn0
    checks += [(node.netns, ip) for node in sb.nodes for ip in ips.values()]     # node -> pod
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda c: (c, ping(sb, *c)), checks))
    failed = [c for c, ok in results if not ok]
    assert not failed, f"{len(failed)}/{len(checks)} pings failed: {failed}"


def wait_running(api, ns, name, node=None, uid_not=None, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = r.get(api, r.PODS, name, ns)
        st = (pod or {}).get("status") or {}
        if (pod and st.get("phase") == "Running" and st.get("podIP")
                and not pod["metadata"].get("deletionTimestamp")
                and (node is None or pod["spec"].get("nodeName") == node)
                and pod["metadata"]["uid"] != uid_not):
            return pod
        time.sleep(0.1)
    raise AssertionError(f"{ns}/{name} not Running{' on ' + node if node else ''} in {timeout} s")


def test_statefulset_pod_keeps_its_address_on_another_node(stack):
    """The real StatefulSet controller makes db-0 and re-creates it after the
    template moves it to another node: it keeps its address.  Grace period 0
    deletes the old pod object at once, so node1 tears the old pod down while
    node3 plumbs the new one; and a port node1 never tore down (a failed
    kubelet) cannot take the address back: only node3 may bind the port."""
    sb, api = stack
    def sts(node):
        return {"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "db", "namespace": "team-a"},
                "spec": {"replicas": 1, "serviceName": "db",
                         "selector": {"matchLabels": {"app": "db"}},
                         "template": {"metadata": {"labels": {"app": "db"}},
                                      "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                               "terminationGracePeriodSeconds": 0,
                                               "containers": [{"name": "db",
                                                               "image": "localhost/busybox:latest"}]}}}}
    r.create(api, r.STATEFULSETS, sts("node1"), namespace="team-a")
    first_pod = wait_running(api, "team-a", "db-0", "node1")
    add(sb, "team-a/client", "node2")
    first = pod_ip(api, "team-a", "db-0")
    assert first_pod["status"]["podIP"] == first
    client_ns = pod_netns(sb, "team-a", "client")
    assert ping(sb, client_ns, first)

    # a new template (node3): the controller deletes db-0 and creates it again there
    r.patch_merge(api, r.STATEFULSETS, "db", {"spec": sts("node3")["spec"]}, "team-a")
    wait_running(api, "team-a", "db-0", "node3", uid_not=first_pod["metadata"]["uid"])
    assert pod_ip(api, "team-a", "db-0") == first
    # the client's chassis learns the port's new location from the SB a moment
    # after node3 installed it: up to 3 pings within 5 s
    assert sb.exec(client_ns, ["ping", "-c1", "-w5", "-i0.2", first],
                   check=False).returncode == 0
    assert ping(sb, sb.node("node1").netns, first)

    # a stale OVS port on node1 with db-0's iface-id, its device up
    lsp = names.pod_lsp_name("team-a", "db-0")
    node1 = sb.node("node1")
    node1.exec(["ip", "link", "add", "stale-db0", "type", "veth", "peer", "name", "stale-db0p"])
    try:
        node1.exec(["ip", "link", "set", "stale-db0", "up"])
        node1.exec(["ip", "link", "set", "stale-db0p", "up"])
        node1.vsctl("add-port", "br-int", "stale-db0", "--", "set", "Interface", "stale-db0",
                    f"external_ids:iface-id=\"{lsp}\"")
        # node1's ovn-controller has seen the port (it reports it in its
        # interface's ofport and its own state) while the client keeps talking
        wait_until(lambda: node1.vsctl("get", "Interface", "stale-db0", "ofport").strip()
                   not in ("[]", "-1"), 10, what="the stale port in OVS")
        out = sb.exec(client_ns, ["ping", "-c15", "-i0.2", "-W1", first], check=False)
        assert " 0% packet loss" in out.stdout, out.stdout
        bound = sb.sbctl("--bare", "--columns=chassis", "find", "Port_Binding",
                         f"logical_port=\"{lsp}\"").strip()
        assert bound == sb.sbctl("--bare", "--columns=_uuid", "find", "Chassis",
                                 "name=node3").strip()
        assert "ovn-installed" not in node1.vsctl("get", "Interface", "stale-db0",
                                                  "external_ids")
    finally:
        node1.vsctl("--if-exists", "del-port", "br-int", "stale-db0")
        node1.exec(["ip", "link", "del", "stale-db0"], check=False)


def test_bad_fixed_address_is_refused_and_nothing_else_breaks(stack):
    sb, api = stack
    out = cli(sb, "sandbox", "pod", "add", "team-a/outside", "--node", "node1", "--name",
              sb.name, "--annotation", f"{names.ANN_IP_ADDRESS}=192.0.2.9", check=False)
    assert out.returncode != 0
    assert "192.0.2.9" in out.stderr + out.stdout
    assert r.get(api, r.PODS, "outside", "team-a") is None   # rolled back
    # the cluster still serves: a new pod gets an address and talks
    add(sb, "team-a/after", "node3")
    assert ping(sb, pod_netns(sb, "team-a", "after"), pod_ip(api, "team-a", "a1"))


def events(api, ns, name) -> list[str]:
    items, _ = r.list_(api, r.EVENTS, ns)
    return [f"{e.get('reason')}: {e.get('message')}" for e in items
            if (e.get("involvedObject") or {}).get("name") == name]


def victim_annotations(api, ns, name) -> dict:
    """What `kubectl get -o yaml` of the victim shows, plus the keys the record
    used to be (a copy from an old backup)."""
    rec = contract.own_record(r.get(api, r.PODS, name, ns))
    ann = dict(r.get(api, r.PODS, name, ns)["metadata"]["annotations"])
    ann.update({names.ANN_IP_ADDRESS: rec.ip, names.ANN_MAC_ADDRESS: rec.mac,
                "pacific.io/allocated": "true", "pacific.io/cidr": rec.cidr,
                "pacific.io/gateway": rec.gateway, "pacific.io/logical_switch_port": rec.port})
    return ann


@pytest.mark.parametrize("thief_node", ["node1", "node3"])
def test_a_pod_with_another_pods_copied_annotations_does_not_take_its_network(stack, thief_node):
    """Security: a pod created with the victim's annotations (record, address,
    MAC, port) gets no network; the victim keeps its port and keeps talking,
    whether the forged pod lands on the victim's node or another one."""
    from pacific.sandbox import cnipods as sandboxpods
    sb, api = stack
    victim, thief = f"victim-{thief_node}", f"thief-{thief_node}"
    add(sb, f"team-a/{victim}", "node1")
    add(sb, f"team-a/peer-{thief_node}", "node2")
    vip = pod_ip(api, "team-a", victim)
    def victim_port():
        return sb.node("node1").vsctl("--columns=name,external_ids", "find", "Interface",
                                      f"external_ids:{names.OVS_POD}=team-a/{victim}")
    port_before = victim_port()
    with pytest.raises(sandboxpods.PodError) as err:
        sandboxpods.add_pod(sb, "team-a", thief, thief_node, api=api,
                            annotations=victim_annotations(api, "team-a", victim))
    assert "refused" in str(err.value) and vip in str(err.value), err.value
    assert any(e.startswith(("AddressTaken", "AddressInUse", "IPInUse")) or vip in e
               for e in events(api, "team-a", thief)), events(api, "team-a", thief)
    assert victim_port() == port_before and port_before.strip()
    assert pod_ip(api, "team-a", victim) == vip
    assert ping(sb, pod_netns(sb, "team-a", f"peer-{thief_node}"), vip)
    assert ping(sb, sb.node("node3").netns, vip)


def test_a_copied_record_alone_is_replaced_by_the_pods_own(stack):
    """A pod restored from a backup carries an old record (another UID): the
    controller replaces it with the pod's own allocation and says so; the pod
    whose record it was keeps its address and keeps talking."""
    sb, api = stack
    add(sb, "team-b/orig", "node1")
    orig = r.get(api, r.PODS, "orig", "team-b")["metadata"]["annotations"]
    add(sb, "team-b/restored", "node3", "--annotation",
        f"{names.ANN_ALLOCATION}={orig[names.ANN_ALLOCATION]}")
    mine = contract.own_record(r.get(api, r.PODS, "restored", "team-b"))
    assert mine.ip != pod_ip(api, "team-b", "orig")
    assert mine.port == names.pod_lsp_name("team-b", "restored")
    assert any(e.startswith("ForeignAllocationRecord") for e in events(api, "team-b", "restored"))
    assert ping(sb, pod_netns(sb, "team-b", "restored"), pod_ip(api, "team-b", "orig"))
    assert ping(sb, sb.node("node2").netns, pod_ip(api, "team-b", "orig"))


def node_routes(sb, node) -> set[str]:
    out = sb.exec(sb.node(node).netns, ["ip", "-4", "route", "show", "dev", names.MGMT_PORT]).stdout
    return {line.split()[0] for line in out.splitlines() if line and "via" in line}


def test_nodes_route_only_subnets_the_controller_applied(stack):
    """A refused Subnet (overlapping an applied one) is not routed into ovn0,
    nor one whose CIDR covers the node's own network; an applied one is, and
    its route goes when it is deleted."""
    sb, api = stack
    subnet = lambda name, cidr: r.create(api, r.SUBNETS, {   # noqa: E731
        "apiVersion": names.API_VERSION, "kind": "Subnet", "metadata": {"name": name},
        "spec": {"cidrBlock": cidr}})

    def ready(name):
        st = (r.get(api, r.SUBNETS, name) or {}).get("status") or {}
        return [c["status"] for c in st.get("conditions") or [] if c["type"] == "Ready"]

    def wait(pred, what):
        deadline = time.monotonic() + 30
        while not pred():
            assert time.monotonic() < deadline, what() if callable(what) else what
            time.sleep(0.05)

    subnet("overlap", "10.41.0.0/25")                    # inside stack-a's 10.41.0.0/24
    subnet("underlay", names.SANDBOX_UNDERLAY_CIDR)      # the nodes' own network
    subnet("fresh", "10.43.0.0/24")
    try:
        wait(lambda: ready("overlap") == ["False"] and ready("fresh") == ["True"],
             lambda: f"subnets settled: {[(n, ready(n)) for n in ('overlap', 'underlay', 'fresh')]}")
        wait(lambda: "10.43.0.0/24" in node_routes(sb, "node1"), "route of the applied subnet")
        for node in ("node1", "node2", "node3"):
            routes = node_routes(sb, node)
            assert "10.41.0.0/25" not in routes and "10.41.0.0/24" in routes, routes
            assert names.SANDBOX_UNDERLAY_CIDR not in routes, routes
        assert (r.get(api, r.SUBNETS, "overlap").get("status") or {}).get("cidrBlock") is None
        # the nodes keep talking to each other and to pods (nothing hijacked)
        assert ping(sb, sb.node("node1").netns, sb.node("node2").underlay_ip)
    finally:
        for name in ("overlap", "underlay", "fresh"):
            r.delete(api, r.SUBNETS, name)
    wait(lambda: "10.43.0.0/24" not in node_routes(sb, "node1"), "route removed with the subnet")


def test_a_namespace_moved_to_another_subnet_keeps_its_running_pods(stack):
    """Re-binding: the Subnets' `namespaces` edited so namespace rb moves from
    rb-one to rb-two.  Running pods keep their addresses and keep talking; pods
    created afterwards get addresses of rb-two."""
    sb, api = stack
    r.create(api, r.NAMESPACES, {"metadata": {"name": "rb", "labels": {names.LABEL_TENANT: "stack"}}})
    for name, cidr, nss in (("rb-one", "10.44.0.0/24", ["rb"]), ("rb-two", "10.45.0.0/24", [])):
        r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                  "metadata": {"name": name},
                                  "spec": {"cidrBlock": cidr, "namespaces": nss}})
    try:
        add(sb, "rb/old", "node1")
        add(sb, "rb/peer-old", "node3")
        old = pod_ip(api, "rb", "old")
        assert old.startswith("10.44.0.")
        r.patch_merge(api, r.SUBNETS, "rb-one", {"spec": {"namespaces": []}})
        r.patch_merge(api, r.SUBNETS, "rb-two", {"spec": {"namespaces": ["rb"]}})
        deadline = time.monotonic() + 30
        while not ((r.get(api, r.SUBNETS, "rb-two").get("status") or {}).get("cidrBlock")):
            assert time.monotonic() < deadline, "rb-two not applied"
            time.sleep(0.05)
        add(sb, "rb/new", "node2")
        new = pod_ip(api, "rb", "new")
        assert new.startswith("10.45.0."), new
        assert pod_ip(api, "rb", "old") == old
        for src, dst in (("old", new), ("new", old), ("peer-old", old), ("old", pod_ip(api, "rb", "peer-old"))):
            assert ping(sb, pod_netns(sb, "rb", src), dst), (src, dst)
    finally:
        from pacific.sandbox import cnipods as sandboxpods
        for name in ("old", "peer-old", "new"):
            sandboxpods.delete_pod(sb, "rb", name, api=api)
        for name in ("rb-one", "rb-two"):
            r.delete(api, r.SUBNETS, name)
