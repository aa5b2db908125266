"""EgressFirewall with real packets: a namespace's pods reach outside
destinations as its rules say (CIDR, port, rule order, DNS names answered by
dnsmasq, whose answer the test changes), whichever way they leave (their own
node, a centralized gateway); other namespaces and traffic inside the cluster
are untouched; a change applies to running pods; an invalid firewall is
refused in its status and the rules before stay."""
from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
import time

import pytest

import attack_fixtures as af
from controller_fixtures import wait_until
from pacific import contract, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods, controllers

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")
NS, FREE, GWNS = "efw", "efw-free", "efw-gw"
PORT, BLOCKED_PORT = 7494, 7495
NEAR, FAR = "192.168.77.254", "198.51.100.1"   # the outside host's two addresses


def firewall(ns, rules):
    return {"apiVersion": names.API_VERSION, "kind": "EgressFirewall",
            "metadata": {"name": "default", "namespace": ns}, "spec": {"egress": rules}}


def rule(action, cidr=None, dns=None, ports=None):
    out = {"type": action, "to": {"cidrSelector": cidr} if cidr else {"dnsName": dns}}
    if ports:
        out["ports"] = [{"protocol": p, "port": n} for p, n in ports]
    return out


@pytest.fixture(scope="module")
def env(sandbox):
    sb = sandbox
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    for ns in (NS, FREE, GWNS):
        r.create(api, r.NAMESPACES, {"metadata": {"name": ns}})
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": NS},
                              "spec": {"cidrBlock": "10.71.0.0/24", "namespaces": [NS, FREE],
                                       "natOutgoing": True}})
    r.create(api, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                              "metadata": {"name": GWNS},
                              "spec": {"cidrBlock": "10.69.0.0/24", "namespaces": [GWNS],
                                       "natOutgoing": True, "gatewayType": "centralized",
                                       "gatewayNodes": ["node2"]}})
    pods = {}
    for ns, name, node in ((NS, "a", "node1"), (NS, "b", "node3"), (FREE, "f", "node1"),
                           (GWNS, "g", "node3")):
        pods[name] = cnipods.add_pod(sb, ns, name, node, api=api).netns
    cnipods.detach_pod(sb, NS, "b", [sys.executable, NETCHECK, "serve", str(PORT), "b"])
    servers = [subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable,
                                 NETCHECK, "serve", str(port), "outside"],
                                stdout=subprocess.PIPE, text=True)
               for port in (PORT, BLOCKED_PORT)]
    for s in servers:
        assert s.stdout.readline().strip() == "ready"
    hosts = os.path.join(sb.dir, "efw-hosts")
    with open(hosts, "w") as f:
        f.write(f"{FAR} far.pacific.test\n")
    dnsmasq = controllers.serve_dns(sb, hosts)
    yield sb, api, pods, hosts, dnsmasq
    dnsmasq.kill()
    dnsmasq.wait()
    for s in servers:
        s.kill()
        s.wait()
    for ns in (NS, FREE, GWNS):
        for pod in r.list_(api, r.PODS, ns)[0]:
            cnipods.delete_pod(sb, ns, pod["metadata"]["name"], api=api)
        r.delete(api, r.NAMESPACES, ns)
    from gateway_fixtures import remove_gateway_subnet
    try:
        remove_gateway_subnet(sb, api, GWNS)
    finally:        # the next module on this sandbox may use the same CIDR
        r.delete(api, r.SUBNETS, NS)


def reach(sb, netns, ip, port=PORT, proto="tcp", timeout=1.0):
    return af.reach(sb, netns, proto, ip, port, timeout=timeout)


def status(api, ns):
    return ((r.get(api, r.EGRESSFIREWALLS, "default", ns) or {}).get("status") or {})


def test_rules_in_order_by_cidr_and_port_for_running_pods_only_outside_the_cluster(env):
    sb, api, pods, _, _ = env
    a = pods["a"]
    assert reach(sb, a, FAR) and reach(sb, a, NEAR, BLOCKED_PORT)
    r.create(api, r.EGRESSFIREWALLS, firewall(NS, [
        rule("Deny", f"{NEAR}/32", ports=[("TCP", BLOCKED_PORT)]),
        rule("Allow", "192.168.77.0/24"),
        rule("Deny", "0.0.0.0/0")]), NS)
    wait_until(lambda: not reach(sb, a, FAR), 20, interval=0.2, what="the far host denied")
    assert status(api, NS).get("status") == "programmed"
    assert reach(sb, a, NEAR)                                   # rule 2, before rule 3
    assert not reach(sb, a, NEAR, BLOCKED_PORT)                 # rule 1: TCP on that port
    assert reach(sb, a, NEAR, BLOCKED_PORT, "udp")              # ... and only TCP
    # inside the cluster nothing is matched, even by 0.0.0.0/0
    b_ip = contract.PodRecord.of(r.get(api, r.PODS, "b", NS)).ip
    assert reach(sb, a, b_ip)
    # another namespace is untouched
    assert reach(sb, pods["f"], FAR) and reach(sb, pods["f"], NEAR, BLOCKED_PORT)
    # a change applies to the running pod
    r.patch_merge(api, r.EGRESSFIREWALLS, "default", {"spec": {"egress": [
        rule("Deny", "0.0.0.0/0")]}}, NS)
    wait_until(lambda: not reach(sb, a, NEAR), 20, interval=0.2, what="the near host denied")
    assert not reach(sb, pods["b"], NEAR)                       # the namespace's pod on node3
    # `pacific trace` names the rule that dropped it
    cp = subprocess.run([sys.executable, "-m", "pacific.cli.main", "trace", f"{NS}/a", NEAR,
                         "--tcp", str(PORT), "--sandbox", sb.name],
                        capture_output=True, text=True, timeout=120)
    assert f"EgressFirewall {NS}/default rule 0" in cp.stdout, cp.stdout + cp.stderr
    r.delete(api, r.EGRESSFIREWALLS, "default", NS)
    wait_until(lambda: reach(sb, a, FAR) and reach(sb, a, NEAR), 20, interval=0.2,
               what="everything reachable again")


def test_enforced_in_status_means_in_force(env):
    """status.enforced turns True once every chassis applied the firewall
    (the nb_cfg/hv_cfg barrier): one probe right then is already denied."""
    sb, api, pods, _, _ = env
    a = pods["a"]
    assert reach(sb, a, FAR)
    r.create(api, r.EGRESSFIREWALLS, firewall(NS, [rule("Deny", f"{FAR}/32")]), NS)
    try:
        st = wait_until(lambda: (lambda s: s if s.get("enforced") == "True" else None)(
            status(api, NS)), 20, interval=0.01, what="status.enforced True")
        assert not reach(sb, a, FAR), "enforced, yet the far host still answered"
        assert "every chassis applied it" in st["enforcedMessage"]
    finally:
        r.delete(api, r.EGRESSFIREWALLS, "default", NS)
    wait_until(lambda: reach(sb, a, FAR), 20, interval=0.2, what="the far host again")


def test_an_invalid_firewall_is_refused_and_the_rules_before_stay(env):
    sb, api, pods, _, _ = env
    a = pods["a"]
    r.create(api, r.EGRESSFIREWALLS, firewall(NS, [rule("Deny", f"{FAR}/32")]), NS)
    wait_until(lambda: not reach(sb, a, FAR), 20, interval=0.2, what="the far host denied")
    r.patch_merge(api, r.EGRESSFIREWALLS, "default", {"spec": {"egress": [
        rule("Deny", "300.1.2.0/24")]}}, NS)
    st = wait_until(lambda: (lambda s: s if s.get("status") == "refused" else None)(
        status(api, NS)), 20, what="the refusal in status")
    assert "300.1.2.0/24" in st["messages"][0] and "stay" in st["messages"][0]
    assert not reach(sb, a, FAR)
    r.delete(api, r.EGRESSFIREWALLS, "default", NS)
    wait_until(lambda: reach(sb, a, FAR), 20, interval=0.2, what="reachable again")


def test_a_dns_name_follows_its_answer_within_the_ttl(env):
    sb, api, pods, hosts, dnsmasq = env
    a = pods["a"]
    r.create(api, r.EGRESSFIREWALLS, firewall(NS, [
        rule("Allow", dns="far.pacific.test"), rule("Allow", dns="nowhere.pacific.test"),
        rule("Deny", "0.0.0.0/0")]), NS)
    wait_until(lambda: reach(sb, a, FAR) and not reach(sb, a, NEAR), 20, interval=0.2,
               what="the name's address allowed, the rest denied")
    msgs = wait_until(lambda: (lambda m: m if any("nowhere" in x for x in m) else None)(
        status(api, NS).get("messages") or []), 20, what="the unresolvable name in status")
    assert any("nowhere.pacific.test" in m and "matches nothing" in m for m in msgs), msgs
    with open(hosts, "w") as f:
        f.write(f"{NEAR} far.pacific.test\n")
    dnsmasq.send_signal(signal.SIGHUP)            # re-reads the hosts file
    t0 = time.monotonic()
    wait_until(lambda: reach(sb, a, NEAR, timeout=0.3) and not reach(sb, a, FAR), 20,
               interval=0.1, what="the rule following the new answer")
    took = time.monotonic() - t0
    print(f"DNS answer changed -> rule followed in {took:.2f} s (TTL 1 s)")
    assert took <= 1 + 1 + 2.5, took        # TTL + 1 s, and the probes' own timeouts
    r.delete(api, r.EGRESSFIREWALLS, "default", NS)


def test_the_firewall_holds_through_a_centralized_gateway(env):
    sb, api, pods, _, _ = env
    g = pods["g"]
    wait_until(lambda: reach(sb, g, FAR), 30, interval=0.3, what="the gateway pod reaching out")
    r.create(api, r.EGRESSFIREWALLS, firewall(GWNS, [rule("Deny", "198.51.100.0/24")]), GWNS)
    wait_until(lambda: not reach(sb, g, FAR), 20, interval=0.2, what="denied at the gateway")
    assert reach(sb, g, NEAR)
    r.delete(api, r.EGRESSFIREWALLS, "default", GWNS)


def test_only_the_gateway_interface_answers_arp_for_its_transit_host(env):
    """On the gateway node the transit segment has two host ports: `pegress0`
    (the transit host address) and the bridge's own `br-egress`.  An ARP
    request for the host address from the router's side is answered by
    `pegress0` alone: a router that learnt `br-egress`'s MAC sent the Subnet's
    traffic where the host firewall does not mark it, and the replies were
    dropped (decision 0052).  Each request's answer from `pegress0` is the
    control; the later requests make sure an earlier one's second answer had
    its time."""
    import socket
    sb, api, _, _, _ = env
    rec = (r.get(api, r.SUBNETS, GWNS).get("status") or {}).get(names.STATUS_EGRESS) or {}
    router = rec["transit"].split("/")[0]
    host = str(ipaddress.ip_address(router) + 1)
    node = sb.node(rec["active"])
    patch = f"patch-{names.egress_localnet_name(GWNS)}-to-br-int"
    ofport = node.vsctl("get", "Interface", patch, "ofport").strip()
    src = bytes.fromhex("0e0064410001")
    frame = (b"\xff" * 6 + src + b"\x08\x06" + bytes.fromhex("0001080006040001") + src
             + socket.inet_aton(router) + b"\x00" * 6 + socket.inet_aton(host)).hex()
    cap = subprocess.Popen(["ip", "netns", "exec", node.netns, "tcpdump", "-enli", "any",
                            "-Q", "out", f"arp[6:2] == 2 and arp[14:4] == {_u32(host)}"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    answers = []
    try:
        wait_until(lambda: "listening" in cap.stderr.readline(), 10, what="tcpdump ready")
        for _ in range(3):
            sb.exec(node.netns, ["ovs-ofctl", "packet-out",
                                 f"unix:{os.path.join(node.rundir, 'br-egress.mgmt')}",
                                 f"in_port={ofport} packet={frame} actions=NORMAL"])
            while True:                      # until pegress0 answered this request
                line = cap.stdout.readline()
                assert line, "tcpdump ended"
                answers.append(line)
                if names.EGRESS_PORT_MAC in line.split(" ethertype")[0]:
                    break
    finally:
        cap.kill()
        cap.wait()
    assert all(names.EGRESS_PORT_MAC in a.split(" ethertype")[0] for a in answers), answers


def _u32(ip: str) -> int:
    return int(ipaddress.ip_address(ip))
