"""No tenant gets out: every way around tenant isolation that the features
built since isolation opened, tried by an ordinary tenant (a ServiceAccount
with `edit` in its own namespace, through impersonation: attack_fixtures)
with real packets, each asserting the secure outcome.  docs/security.md has
the threat model and the principles each test holds Pacific to.

Namespaces: `atk` is the attacker's, `vic` a victim tenant's (another
tenant: namespaces are isolated by default).  Sections below, one per
hole; each test names what it tries.

The IPv6 attacks need a --dual-stack sandbox and live beside the features
they try, in test_dual_stack.py: a spoofed IPv6 source, a rogue router
advertisement and redirect, link-local IPv6 to another tenant, a tenant's
hand-written Endpoints naming another tenant's pod's IPv6, a pod's IPv6 at a
node's host port, IPv6 around an EgressFirewall."""
from __future__ import annotations

import datetime
import ipaddress
import itertools
import os
import re
import subprocess
import sys
import threading
import time

import pytest

import attack_fixtures as af
from controller_fixtures import wait_until
from pacific import contract, egressip, names
from pacific.controller import transit as _transit
from pacific.controller.model import router_mac as _router_mac
from pacific.kube import errors as kerr
from pacific.kube import resources as r
from pacific.sandbox import cnipods

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
ATK, VIC = "atk", "vic"
PORT = 7300


@pytest.fixture(scope="module")
def env(sandbox):
    """The attacker's client, the administrator's, and a victim pod serving
    TCP and UDP on PORT on node2."""
    sb = sandbox
    admin = af.admin_api(sb)
    atk = af.tenant(sb, admin, ATK)
    af.tenant(sb, admin, VIC)
    cnipods.add_pod(sb, VIC, "v1", "node2", api=admin, labels={"app": "victim"})
    af.serve(sb, VIC, "v1", PORT)
    yield sb, admin, atk
    for ns in (ATK, VIC):
        for pod in r.list_(admin, r.PODS, ns)[0]:
            cnipods.delete_pod(sb, ns, pod["metadata"]["name"], api=admin)
        r.delete(admin, r.NAMESPACES, ns)


def service(ns, name, ports, selector=None, type_="ClusterIP", external_ips=()):
    spec = {"type": type_, "ports": ports}
    if selector:
        spec["selector"] = selector
    if external_ips:
        spec["externalIPs"] = list(external_ips)
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": ns},
            "spec": spec}


def tcp_port(port, name="p"):
    return {"name": name, "port": port, "targetPort": PORT, "protocol": "TCP"}


def services_chain(sb) -> dict[str, str]:
    """node -> its host firewall's Service frontends (nft listing)."""
    return {n.name: sb.exec(n.netns, ["nft", "list", "chain", "inet", "pacific", "services"],
                            check=False).stdout for n in sb.nodes}


def programmed_everywhere(sb, text: str) -> bool:
    return all(text in chain for chain in services_chain(sb).values())


def _utc_now() -> str:
    """Now as a creationTimestamp is written (RFC 3339, whole seconds, UTC)."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def service_events(admin, ns, name) -> str:
    return " | ".join(e.get("message") or "" for e in af.events_of(admin, ns, name))


# --- 1. external IPs: denied unless granted, never an infrastructure address ---
def test_1_a_tenant_cannot_claim_an_ungranted_or_infrastructure_address_as_external_ip(env):
    """CVE-2020-8554: the sandbox's administrator grants 203.0.113.0/24 and
    192.168.77.192/27; OVN central's address, the underlay router and any
    other outside address stay unclaimed, on every node.  A multicast group
    (which the API server accepts; it refuses link-local and loopback itself)
    is refused as such, whatever an administrator grants: a node would catch
    every pod's datagrams to it on their way out."""
    sb, admin, atk = env
    wanted = [sb.central_ip, sb.external_ip, "198.18.0.7", "239.1.2.3"]
    r.create(atk, r.SERVICES, service(ATK, "hijack", [tcp_port(80)], {"app": "none"},
                                      external_ips=wanted), ATK)
    # a granted one after it: once every node programs it, each has seen "hijack"
    r.create(atk, r.SERVICES, service(ATK, "fair", [tcp_port(80)], {"app": "none"},
                                      external_ips=["203.0.113.41"]), ATK)
    af.wait_until(lambda: programmed_everywhere(sb, "atk/fair 203.0.113.41"), 60,
                  what="the granted external IP programmed on every node")
    chains = services_chain(sb)
    for ip in wanted:
        assert not any(f"atk/hijack {ip}:" in c for c in chains.values()), (ip, chains)
    text = af.wait_until(lambda: service_events(admin, ATK, "hijack"), 30,
                         what="the refusal reported on the Service")
    assert f"externalIP {sb.central_ip} is an infrastructure address" in text, text
    assert f"externalIP {sb.external_ip} is an infrastructure address" in text, text
    assert "externalIP 198.18.0.7 is outside the ranges external IPs may come from" in text, text
    assert "externalIP 239.1.2.3 is a multicast address, which no Service may take" in text, text


# --- 3. an external IP belongs to one namespace, for every port and protocol ---
def test_3_a_tenant_cannot_share_another_namespace_s_external_ip_on_another_port(env):
    """Claiming the victim's external IP on another protocol/port would give
    the attacker the victim's address as its egress SNAT identity and a way
    in to its own pods through the victim's address."""
    sb, admin, atk = env
    r.create(admin, r.SERVICES, service(VIC, "shop", [tcp_port(80)], {"app": "victim"},
                                        external_ips=["203.0.113.42"]), VIC)
    af.wait_until(lambda: programmed_everywhere(sb, "vic/shop 203.0.113.42"), 60,
                  what="the victim's external IP programmed")
    # the victim's Service is older by its creationTimestamp (whole seconds;
    # Services of one second are ordered by namespace/name, and "atk" < "vic")
    created = r.get(admin, r.SERVICES, "shop", VIC)["metadata"]["creationTimestamp"]
    af.wait_until(lambda: _utc_now() > created, 5, what="a second after the victim's Service")
    r.create(atk, r.SERVICES, service(ATK, "twin", [
        {"name": "dns", "port": 53, "targetPort": PORT, "protocol": "UDP"}], {"app": "none"},
        external_ips=["203.0.113.42"]), ATK)
    r.create(atk, r.SERVICES, service(ATK, "fair3", [tcp_port(80)], {"app": "none"},
                                      external_ips=["203.0.113.43"]), ATK)
    af.wait_until(lambda: programmed_everywhere(sb, "atk/fair3 203.0.113.43"), 60,
                  what="a granted external IP of the attacker programmed")
    assert not any("atk/twin" in c for c in services_chain(sb).values())
    text = af.wait_until(lambda: service_events(admin, ATK, "twin"), 30, what="refusal Event")
    assert "externalIP 203.0.113.42 belongs to another namespace" in text, text
    assert "shop" not in text and "vic" not in text, f"names the victim's Service: {text}"


# --- EgressIP: only an administrator grants an egress address ---
def test_egressip_a_tenant_can_neither_create_nor_join_one_nor_take_its_address(env):
    """EgressIPs are the administrator's: a tenant cannot create one (RBAC),
    cannot get its pods into another namespace's by labelling them like that
    namespace's pods (the namespaceSelector matches Namespace labels), and
    cannot claim an EgressIP's address as a Service external IP (inside the
    granted 192.168.77.192/27 too)."""
    sb, admin, atk = env
    addr = "192.168.77.197"
    body = {"apiVersion": names.API_VERSION, "kind": "EgressIP", "metadata": {"name": "vic-out"},
            "spec": {"egressIPs": [addr], "namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": VIC}}, "podSelector": {"matchLabels": {
                    "app": "victim"}}}}
    with pytest.raises(kerr.ApiError) as refused:
        r.create(atk, r.EGRESSIPS, dict(body, metadata={"name": "mine"}))
    assert refused.value.status == 403, refused.value
    r.create(admin, r.EGRESSIPS, body)
    try:
        r.patch_merge(admin, r.NAMESPACES, VIC, {"metadata": {"labels": {
            "kubernetes.io/metadata.name": VIC}}})   # 1.20 does not label namespaces itself
        af.tenant_pod(sb, atk, admin, ATK, "lookalike", "node1", labels={"app": "victim"})
        with pytest.raises(kerr.ApiError) as refused:
            r.patch_merge(atk, r.NAMESPACES, ATK, {"metadata": {"labels": {
                "kubernetes.io/metadata.name": VIC}}})
        assert refused.value.status == 403, refused.value
        victim_ip = _record(admin, VIC, "v1").ip
        st = af.wait_until(lambda: (lambda s: s if s.get("items") else None)(
            (r.get(admin, r.EGRESSIPS, "vic-out") or {}).get("status") or {}), 30,
            what="the EgressIP granted")
        assert st["items"][0]["pods"] == 1, st
        members = _address_set(sb, egressip.address_set_name(f"vic-out/{addr}"))
        assert members == {victim_ip}, members
        r.create(atk, r.SERVICES, service(ATK, "squat", [tcp_port(80)], {"app": "none"},
                                          external_ips=[addr]), ATK)
        text = af.wait_until(lambda: service_events(admin, ATK, "squat"), 30,
                             what="refusal Event")
        assert f"externalIP {addr} is an infrastructure address" in text, text
        assert not any("atk/squat" in c for c in services_chain(sb).values())
    finally:
        r.delete(admin, r.EGRESSIPS, "vic-out")


def test_egressfirewall_a_tenant_cannot_lift_or_write_its_namespace_s_firewall(env):
    """Who may write an EgressFirewall is the administrator's choice, and no
    role grants it by default: a tenant with `edit` can neither create one nor
    delete the one its administrator wrote."""
    sb, admin, atk = env
    body = {"apiVersion": names.API_VERSION, "kind": "EgressFirewall",
            "metadata": {"name": "default", "namespace": ATK},
            "spec": {"egress": [{"type": "Deny", "to": {"cidrSelector": "0.0.0.0/0"}}]}}
    with pytest.raises(kerr.ApiError) as refused:
        r.create(atk, r.EGRESSFIREWALLS, body, ATK)
    assert refused.value.status == 403, refused.value
    r.create(admin, r.EGRESSFIREWALLS, body, ATK)
    try:
        for attempt in (lambda: r.delete(atk, r.EGRESSFIREWALLS, "default", ATK),
                        lambda: r.patch_merge(atk, r.EGRESSFIREWALLS, "default",
                                              {"spec": {"egress": []}}, ATK)):
            with pytest.raises(kerr.ApiError) as refused:
                attempt()
            assert refused.value.status == 403, refused.value
    finally:
        r.delete(admin, r.EGRESSFIREWALLS, "default", ATK)


def _address_set(sb, name: str) -> set[str]:
    out = sb.nbctl("--bare", "--columns=addresses", "find", "Address_Set", f"name={name}")
    return set(out.replace('"', "").split())


# --- 2. hand-written Endpoints cannot name another tenant's pod ---
def test_2_a_selectorless_service_with_hand_written_endpoints_does_not_reach_the_victim(env):
    """CVE-2021-25740: a NodePort Service of the attacker with an Endpoints
    object naming the victim's pod.  Through the node port the traffic would
    arrive from the node's join address, which isolation lets in.  A node's
    address is refused too: the attacker runs no host-network pod there."""
    sb, admin, atk = env
    victim_ip = cnipods.load(sb, VIC, "v1").ip
    node = sb.node("node1")
    r.create(atk, r.SERVICES, service(ATK, "steal", [tcp_port(80, "http")], type_="NodePort"),
             ATK)
    r.create(atk, r.ENDPOINTS, {"apiVersion": "v1", "kind": "Endpoints",
                                "metadata": {"name": "steal", "namespace": ATK},
                                "subsets": [{"addresses": [{"ip": victim_ip},
                                                           {"ip": node.underlay_ip}],
                                             "ports": [{"name": "http", "port": PORT,
                                                        "protocol": "TCP"}]}]}, ATK)
    nodeport = r.get(admin, r.SERVICES, "steal", ATK)["spec"]["ports"][0]["nodePort"]
    text = af.wait_until(lambda: service_events(admin, ATK, "steal"), 60,
                         what="the ignored endpoint reported on the Service")
    assert f"endpoint addresses {victim_ip}, {node.underlay_ip} are not pods of namespace " \
        "atk: ignored" in text, text
    af.wait_until(lambda: programmed_everywhere(sb, f"atk/steal node:tcp/{nodeport}"), 60,
                  what="the node port programmed")
    for _ in range(3):
        rc, out = af.ask(sb, sb.external_netns, "tcp", node.underlay_ip, nodeport)
        assert rc != 0 and "v1" not in out, f"reached the victim through the node port: {out}"
    # the victim is still served where it may be reached (its own namespace)
    cnipods.add_pod(sb, VIC, "v2", "node1", api=admin)
    assert af.reach(sb, cnipods.load(sb, VIC, "v2").netns, "tcp", victim_ip, PORT)


# --- 4. a pod uses only the Subnets bound to its namespace ---
def test_4_a_pod_cannot_put_itself_into_another_namespace_s_subnet(env):
    sb, admin, atk = env
    r.create(admin, r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                   "metadata": {"name": "bank"}})
    r.create(admin, r.SUBNETS, {"apiVersion": "pacific.io/v1", "kind": "Subnet",
                                "metadata": {"name": "bank-net"},
                                "spec": {"cidrBlock": "10.77.0.0/24", "namespaces": ["bank"],
                                         "private": True}})
    try:
        r.create(atk, r.PODS, af.pod_body(ATK, "intruder", sb.node("node1").name,
                                          {"pacific.io/logical_switch": "bank-net"}), ATK)
        why = af.allocation_refused(admin, ATK, "intruder")
        assert "subnet 'bank-net'" in why and "is not bound to namespace atk" in why, why
        pod = r.get(admin, r.PODS, "intruder", ATK)
        assert "pacific.io/allocation" not in (pod["metadata"].get("annotations") or {})
        # the default Subnet stays the attacker's: its pods still start
        af.tenant_pod(sb, atk, admin, ATK, "a4", "node1")
    finally:
        r.delete(admin, r.PODS, "intruder", ATK)
        r.delete(admin, r.NAMESPACES, "bank")
        r.delete(admin, r.SUBNETS, "bank-net")


def test_4_an_ipv6_subnet_is_refused_in_a_cluster_without_ipv6(env):
    """The attacks' cluster is IPv4 only: an IPv6 Subnet's pods would have
    IPv6 that no rule of this cluster guards, so it is refused, saying what
    would make the cluster carry IPv6."""
    sb, admin, _ = env
    r.create(admin, r.SUBNETS, {"apiVersion": "pacific.io/v1", "kind": "Subnet",
                                "metadata": {"name": "six"},
                                "spec": {"cidrBlock": "fd00:77::/64", "namespaces": ["nobody"]}})
    try:
        def refused():
            conds = ((r.get(admin, r.SUBNETS, "six") or {}).get("status") or {}).get(
                "conditions") or []
            return next((c["message"] for c in conds if c.get("status") == "False"), None)
        why = af.wait_until(refused, 30, what="the IPv6 Subnet refused")
        assert "IPv6, and this cluster's networks are IPv4 only" in why, why
    finally:
        r.delete(admin, r.SUBNETS, "six")


# --- 6. a refusal never names another tenant's pod ---
def test_6_a_refused_fixed_address_does_not_say_who_holds_it(env):
    sb, admin, atk = env
    victim_ip = cnipods.load(sb, VIC, "v1").ip
    r.create(atk, r.PODS, af.pod_body(ATK, "nosy", sb.node("node1").name,
                                      {"pacific.io/ip_address": victim_ip}), ATK)
    try:
        why = af.allocation_refused(admin, ATK, "nosy")
        assert f"address {victim_ip} in subnet" in why and "already in use" in why, why
        seen = why + " | " + service_events(admin, ATK, "nosy")
        assert "vic" not in seen and "v1" not in seen, f"names the victim: {seen}"
    finally:
        r.delete(admin, r.PODS, "nosy", ATK)



# --- 5. OVN's databases ---
# NB and SB listen on the central's address; a pod's packets to it leave
# through the pod's node (distributed egress).  The central here routes the
# pod's address back to that node, as an underlay that routes pod CIDRs does
# (with natOutgoing the node's own address comes back instead: the same hole).
def _pod_ip(admin, ns, name):
    from pacific import contract
    return contract.own_record(r.get(admin, r.PODS, name, ns)).ip


def test_tools_a_tenant_learns_no_ovn_remote_or_certificate_through_the_cluster(env):
    """The day-two tools find OVN through pacific-config and the controller's
    certificate (decision 0048), with the caller's own credentials: a tenant
    with edit reads neither, is told which right it lacks, and the refusal
    names no remote or address."""
    from types import SimpleNamespace

    from pacific.cli.connect import from_cluster
    sb, admin, atk = env
    for res, name in ((r.CONFIGMAPS, names.CONFIG_MAP), (r.SECRETS, names.OVN_TLS_SECRET)):
        with pytest.raises(kerr.ApiError) as e:
            r.get(atk, res, name, names.PACIFIC_NAMESPACE)
        assert e.value.status == 403
    args = SimpleNamespace(nb=None, sb=None, ssl_key=None, ssl_cert=None, ssl_ca=None)
    with pytest.raises(SystemExit) as e:
        from_cluster(atk, args, need_sb=True)
    msg = str(e.value)
    assert f"needs get on configmap {names.PACIFIC_NAMESPACE}/{names.CONFIG_MAP}" in msg
    assert args.nb is None and args.ssl_key is None
    assert sb.central_ip not in msg and "tcp:" not in msg and "ssl:" not in msg


def test_vswitch_a_tenant_can_neither_take_open_vswitch_off_a_node_nor_restart_it(env):
    """Open vSwitch as pacific-vswitch pods (decision 0049): what would cut a
    node's pods off is an administrator's: the node labels that take
    Open vSwitch or OVN central off a node, the DaemonSet (a changed template
    replaces every node's daemons), exec into its pods (`pacific-vswitch
    --stop`).  A tenant with edit gets none of them."""
    from pacific.sandbox.k8s import rollout
    sb, admin, atk = env
    for label in (names.HOST_OVS_LABEL, names.CENTRAL_ROLE_LABEL):
        with pytest.raises(kerr.ApiError) as e:
            r.patch_merge(atk, r.NODES, "node1", {"metadata": {"labels": {label: "true"}}})
        assert e.value.status == 403, label
    assert names.HOST_OVS_LABEL not in (r.get(admin, r.NODES, "node1")["metadata"].get("labels")
                                        or {})
    ds = r.Resource(*rollout.KINDS["DaemonSet"])
    for act in (lambda: r.get(atk, ds, "pacific-vswitch", names.PACIFIC_NAMESPACE),
                lambda: r.patch_merge(atk, ds, "pacific-vswitch", {"spec": {"template": {
                    "metadata": {"annotations": {"x": "1"}}}}}, namespace=names.PACIFIC_NAMESPACE)):
        with pytest.raises(kerr.ApiError) as e:
            act()
        assert e.value.status == 403
    from pacific.sandbox.k8s import bins
    from pacific.sandbox.k8s import sandbox as k8s
    cp = subprocess.run([bins.path("kubectl"), f"--kubeconfig={k8s.kubeconfig_path(sb)}",
                         f"--as=system:serviceaccount:{ATK}:{af.SA}", "-n",
                         names.PACIFIC_NAMESPACE, "exec", "pacific-vswitch-any", "--",
                         "pacific-vswitch", "--stop"], capture_output=True, text=True)
    assert cp.returncode != 0 and "forbidden" in cp.stderr.lower(), cp.stderr


def test_ovsdb_a_tenant_pod_cannot_talk_to_nb_or_sb(env):
    from pacific import names
    sb, admin, atk = env
    node = sb.node("node1")
    pod = af.tenant_pod(sb, atk, admin, ATK, "ovsdb-1", "node1")
    ip = _pod_ip(admin, ATK, "ovsdb-1")
    sb.exec(sb.central_netns, ["ip", "route", "replace", f"{ip}/32", "via", node.underlay_ip])
    try:
        for n in sb.nodes:                        # the nodes (ovn-controller) still reach them
            assert "OVN_Southbound" in af.ovsdb_dbs(sb, n.netns, sb.central_ip,
                                                    names.OVN_SB_PORT), n.name
        assert "OVN_Northbound" in af.ovsdb_dbs(sb, node.netns, sb.central_ip,
                                                names.OVN_NB_PORT)
        got = af.in_parallel({
            (port, probe.__name__): lambda port=port, probe=probe: probe(
                sb, pod.netns, sb.central_ip, port)
            for port in (names.OVN_NB_PORT, names.OVN_SB_PORT)
            for probe in (af.ovsdb_dbs, af.tcp_connects)})
        assert not any(got.values()), {k: v for k, v in got.items() if v}
    finally:
        sb.exec(sb.central_netns, ["ip", "route", "del", f"{ip}/32"], check=False)


def test_ovsdb_every_node_keeps_pods_from_the_central_also_over_tls(env):
    """The rules name the central's addresses and every OVN port (NB, SB and
    both RAFT ports), whatever the remote's scheme: on every node."""
    import json

    from pacific import names
    sb, _, _ = env
    for n in sb.nodes:
        listing = json.loads(sb.exec(n.netns, ["nft", "-j", "list", "table", "inet",
                                               "pacific"]).stdout)["nftables"]
        sets = {i["set"]["name"]: i["set"].get("elem", []) for i in listing if "set" in i}
        assert sb.central_ip in sets["ovn_central"], n.name
        assert set(names.OVN_CENTRAL_PORTS) <= set(sets["ovn_ports"]), n.name
        comments = {i["rule"]["comment"] for i in listing if "rule" in i}
        assert {"pacific-ovn-central-in", "pacific-ovn-central-fwd"} <= comments, n.name


# --- 7. node HTTP endpoints ---
# The sandbox's pacific-node binds /metrics, /healthz, /readyz to 127.0.0.1
# (the flag's default), which no pod reaches; deploy/ binds the node's own
# address, and `:PORT` binds every address: node2's daemon is restarted
# with `--metrics-address :9477` and every way a pod has to a node is tried.
def test_metrics_a_tenant_pod_reaches_no_node_daemon_endpoint(env):
    from pacific import contract, egressip, names
    from pacific.sandbox import nodedaemons
    sb, admin, atk = env
    port = names.NODE_METRICS_PORT
    node2 = sb.node("node2")
    here = af.tenant_pod(sb, atk, admin, ATK, "metrics-1", "node1")
    there = af.tenant_pod(sb, atk, admin, ATK, "metrics-2", "node2")
    for n in sb.nodes:        # the default binding: loopback only, nothing for a pod
        assert af.http_status(sb, n.netns, "127.0.0.1", port) == 200, n.name
    got = af.in_parallel({n.name: lambda n=n: af.http_status(sb, here.netns, n.underlay_ip, port)
                          for n in sb.nodes})
    assert not any(got.values()), got
    nodedaemons.restart(sb, node2, extra=("--metrics-address", f":{port}"))
    try:
        join_ip = contract.NodeRecord.of(r.get(admin, r.NODES, node2.name)).ip
        # the node itself and its neighbours on the underlay (a scraper) are served
        assert af.http_status(sb, node2.netns, node2.underlay_ip, port) == 200
        assert af.http_status(sb, sb.node("node1").netns, node2.underlay_ip, port) == 200
        got = af.in_parallel({
            (pod.name, ip, probe.__name__): lambda pod=pod, ip=ip, probe=probe: probe(
                sb, pod.netns, ip, port)
            for pod, ip in ((there, node2.underlay_ip), (there, join_ip),    # its own node
                            (here, node2.underlay_ip), (here, join_ip))      # another node
            for probe in (af.http_status, af.tcp_connects)})
        assert not any(got.values()), {k: v for k, v in got.items() if v}
    finally:
        nodedaemons.restart(sb, node2)


# --- underlay spoofing ---
# An underlay neighbour (the sandbox's external host) sends a UDP datagram to
# a node's underlay address with a pod's address as its source.  A listener on
# the node records what arrives; a datagram with the neighbour's own source
# sent after it on the same path says when to look.
SPOOF_PORT = 7399


def _spoof_then_mark(sb, sink, src, dst, tag):
    af.send_spoofed_udp(sb, sb.external_netns, src, dst, sink.port, f"spoofed-{tag}")
    af.send_spoofed_udp(sb, sb.external_netns, sb.external_ip, dst, sink.port, f"marker-{tag}")
    from controller_fixtures import wait_until
    wait_until(lambda: any(line.startswith(f"marker-{tag} ") for line in sink.lines()), 30,
               what=f"the marker datagram {tag} at {dst}")
    return [line for line in sink.lines() if line.startswith(f"spoofed-{tag} ")]


def test_underlay_a_spoofed_pod_source_does_not_enter_a_node(env):
    from pacific import contract
    sb, admin, atk = env
    victim_ip = _pod_ip(admin, VIC, "v1")
    node1 = sb.node("node1")
    rec = contract.NodeRecord.of(r.get(admin, r.NODES, "node2"))
    sink = af.UdpSink(node1.netns, SPOOF_PORT)
    try:
        for i, src in enumerate((victim_ip, rec.ip, rec.service_source)):
            got = _spoof_then_mark(sb, sink, src, node1.underlay_ip, f"node-{i}")
            assert got == [], f"{src} spoofed from the underlay reached node1: {got}"
    finally:
        sink.close()


# --- raw frames, ARP and IPv6 between tenants (issue 22: no frame of any kind
# crosses isolated tenants).  Port security drops a pod's IPv6 and other
# Ethernet types; tenant isolation drops ARP by its sender address ---



RAWFRAME = os.path.join(os.path.dirname(__file__), "rawframe.py")
_tokens = itertools.count(1)


def _record(admin, ns, name):
    return contract.own_record(r.get(admin, r.PODS, name, ns))


def _send(sb, netns, kind, dst, *args):
    sb.exec(netns, [sys.executable, RAWFRAME, "send", "eth0", kind, dst, *args])


def frames_received(sb, listener_netns, watch, attacks, control):
    """Frames the pod of `listener_netns` received from the MACs or with the
    payload words of `watch` while `attacks` [(netns, kind, dst, *args)] were
    sent, in rounds, each round followed by a control frame of the listener's
    own tenant `control` = (netns, listener MAC, an unused address): an ARP
    request (port security drops other Ethernet types of a pod, whoever gets
    them), unicast to the listener.  The listener ends on the control frame of
    the second round, so every attack frame went out before a frame that
    arrived.  Lines as rawframe.py prints them."""
    token = f"ctl{next(_tokens)}"
    p = subprocess.Popen(["ip", "netns", "exec", listener_netns, sys.executable, RAWFRAME,
                          "listen", "eth0", ",".join(watch), f"{token}-go"],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        for rnd in range(1, 40):       # a lost control frame: the next round sends another
            for netns, kind, dst, *args in attacks:
                _send(sb, netns, kind, dst, *args)
            _send(sb, control[0], "arp", control[1], control[2],
                  f"{token}-{'go' if rnd >= 2 else 'wait'}")
            if p.poll() is not None:
                break
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = out.splitlines()
    assert lines and lines[-1].startswith("stop"), \
        "the control frames of the listener's own tenant never arrived"
    return lines[:-1]


@pytest.fixture(scope="module")
def l2(env):
    """Two attacker pods (on the victim's node2 and on node1) and a pod of the
    victim's own tenant on node1 that sends the control frames."""
    sb, admin, atk = env
    near = af.tenant_pod(sb, atk, admin, ATK, "l2-near", "node2")
    far = af.tenant_pod(sb, atk, admin, ATK, "l2-far", "node1")
    friend = cnipods.add_pod(sb, VIC, "l2-friend", "node1", api=admin)
    v1 = cnipods.load(sb, VIC, "v1")
    recs = {k: _record(admin, ns, n) for k, (ns, n) in
            {"near": (ATK, "l2-near"), "far": (ATK, "l2-far"), "friend": (VIC, "l2-friend"),
             "v1": (VIC, "v1")}.items()}
    yield sb, admin, {"near": near, "far": far, "friend": friend, "v1": v1}, recs
    for ns, name in ((ATK, "l2-near"), (ATK, "l2-far"), (VIC, "l2-friend")):
        cnipods.delete_pod(sb, ns, name, api=admin)


def _unused(rec):
    """An address of the pod's Subnet nobody holds: an ARP request for it is flooded."""
    return str(ipaddress.ip_network(rec.cidr).broadcast_address - 5)


def _attacks(pods, recs, victim):
    """Every kind of frame, from both attacker pods, to the victim pod."""
    vmac, out = recs[victim].mac, []
    unused = _unused(recs[victim])
    for a in ("near", "far"):
        ns = pods[a].netns
        out += [(ns, "raw", vmac, "0x88b5", f"ATK-raw-unicast-{a}"),
                (ns, "raw", "ff:ff:ff:ff:ff:ff", "0x88b5", f"ATK-raw-broadcast-{a}"),
                (ns, "raw", vmac, "0x9000", f"ATK-loopback-type-{a}"),
                (ns, "arp", "ff:ff:ff:ff:ff:ff", unused),
                (ns, "arp", vmac, unused),
                (ns, "ip6", "33:33:00:00:00:01", "ll", "ff02::1", f"ATK-ip6-allnodes-{a}"),
                (ns, "ip6", vmac, "ll", "fe80::1", f"ATK-ip6-linklocal-{a}"),
                (ns, "ip6", vmac, "2001:db8::66", "2001:db8::1", f"ATK-ip6-spoofed-{a}"),
                (ns, "ra", "33:33:00:00:00:01"),
                # another MAC as the source (the victim's own tenant's): port security
                (ns, "raw", vmac, "0x88b5", f"ATK-spoofed-mac-{a}", "--src", recs["friend"].mac)]
    return out


def test_no_raw_frame_arp_or_ipv6_of_another_tenant_reaches_a_pod_on_its_node_or_another(l2):
    sb, admin, pods, recs = l2
    watch = [recs["near"].mac, recs["far"].mac, "ATK"]
    got = frames_received(sb, pods["v1"].netns, watch, _attacks(pods, recs, "v1"),
                          (pods["friend"].netns, recs["v1"].mac, _unused(recs["v1"])))
    assert not got, "frames of another tenant reached the victim:\n" + "\n".join(got)


def test_frames_within_a_tenant_and_arp_to_the_gateway_still_work(l2):
    sb, admin, pods, recs = l2
    # the control frames of frames_received are ARP within one tenant; here
    # the attacker's own two pods: ARP unicast and broadcast, and IPv4 as
    # before, also with a NetworkPolicy (stateful ACLs on the switch) on them
    pol = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": "l2-own", "namespace": ATK},
           "spec": {"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}}
    r.create(admin, r.NETWORKPOLICIES, pol, namespace=ATK)
    try:
        got = frames_received(
            sb, pods["near"].netns, [recs["far"].mac],
            [(pods["far"].netns, "arp", recs["near"].mac, _unused(recs["near"]), "own-tenant"),
             (pods["far"].netns, "arp", "ff:ff:ff:ff:ff:ff", _unused(recs["near"]), "own-bcast")],
            (pods["far"].netns, recs["near"].mac, _unused(recs["near"])))
        assert any("own-tenant" in g for g in got) and any("own-bcast" in g for g in got), got
        wait_until(lambda: af.pinged(sb, pods["far"].netns, recs["near"].ip), 30,
                   what="IPv4 within the tenant under its policy")
    finally:
        r.delete(admin, r.NETWORKPOLICIES, "l2-own", ATK)
    assert af.pinged(sb, pods["friend"].netns, recs["v1"].ip)
    # ARP of the gateway (the router port) answers every tenant's pods
    for p in ("near", "far", "friend"):
        assert af.pinged(sb, pods[p].netns, recs[p].gateway), f"{p} cannot reach its gateway"


# --- IPv6 from a pod (issue 22): a pod's port admits IPv4 only (its port
# security lists one IPv4 address), so no IPv6 packet of a pod reaches any
# other pod, not even of its own tenant: link-local, spoofed global, router
# advertisements.  (Dual stack is a later issue.) ---


def test_ipv6_from_a_pod_reaches_no_pod_not_even_of_its_own_tenant(l2):
    sb, admin, pods, recs = l2
    far = pods["far"].netns
    v6 = [(far, "ip6", recs["near"].mac, "ll", "fe80::1", "ATK-own-ip6-ll"),
          (far, "ip6", "33:33:00:00:00:01", "ll", "ff02::1", "ATK-own-ip6-mc"),
          (far, "ip6", recs["near"].mac, "2001:db8::66", "2001:db8::1", "ATK-own-ip6-global"),
          (far, "ra", "33:33:00:00:00:01")]
    got = frames_received(sb, pods["near"].netns, ["ATK", recs["far"].mac], v6,
                          (far, recs["near"].mac, _unused(recs["near"])))
    assert not [g for g in got if g.startswith("ip6")], got


# --- a MAC or address of the infrastructure asked for by a tenant's pod
# (issue 22: infrastructure addresses and identities can never be claimed) ---


def _refusal(sb, admin, atk, name, ann):
    r.create(atk, r.PODS, af.pod_body(ATK, name, sb.node("node1").name, ann), namespace=ATK)
    return af.allocation_refused(admin, ATK, name)


def test_a_pod_cannot_take_a_router_gateway_transit_or_node_mac(env):
    sb, admin, atk = env
    node = r.get(admin, r.NODES, sb.node("node1").name)["metadata"]["annotations"]
    v1 = _record(admin, VIC, "v1")
    claims = {"mac-router": _router_mac(v1.gateway),          # the Subnet's router port
              "mac-ovn0": node[names.ANN_NODE_JOIN_MAC],      # node1's management port
              "mac-transit": _transit.transit(0)[2],          # a gateway's transit port
              "mac-egress": names.EGRESS_PORT_MAC,             # every node's pegress0
              "mac-victim": v1.mac}                           # another tenant's pod
    try:
        for name, mac in claims.items():
            msg = _refusal(sb, admin, atk, name, {names.ANN_MAC_ADDRESS: mac})
            assert mac in msg and "v1" not in msg and f"{VIC}/" not in msg, msg
            if name != "mac-victim":
                assert "reserved" in msg, msg
            evs = af.events_of(admin, ATK, name)
            assert evs and not any("v1" in e["message"] or f"{VIC}/" in e["message"]
                                   for e in evs), evs
        # nothing that works breaks: the victim's tenant still reaches it, and a
        # pod of the attacker asking for an ordinary MAC gets it
        friend = cnipods.add_pod(sb, VIC, "mac-friend", "node1", api=admin)
        wait_until(lambda: af.pinged(sb, friend.netns, v1.ip), 30, what="v1 from its own tenant")
        ok = af.tenant_pod(sb, atk, admin, ATK, "mac-ordinary", "node1",
                           annotations={names.ANN_MAC_ADDRESS: "0a:00:00:00:22:01"})
        assert _record(admin, ATK, "mac-ordinary").mac == "0a:00:00:00:22:01"
        assert af.pinged(sb, ok.netns, v1.gateway)
    finally:
        for name in (*claims, "mac-ordinary"):
            cnipods.delete_pod(sb, ATK, name, api=admin)
        cnipods.delete_pod(sb, VIC, "mac-friend", api=admin)


def test_a_pod_cannot_take_the_gateway_or_a_join_or_transit_address(env):
    sb, admin, atk = env
    v1 = _record(admin, VIC, "v1")
    node = r.get(admin, r.NODES, sb.node("node1").name)["metadata"]["annotations"]
    claims = {"ip-gateway": ({names.ANN_IP_ADDRESS: v1.gateway}, "gateway"),
              "ip-ovn0": ({names.ANN_IP_ADDRESS: node[names.ANN_NODE_JOIN_IP].split("/")[0]},
                          "outside"),
              "ip-transit": ({names.ANN_IP_ADDRESS: "100.65.0.1"}, "outside"),
              "ip-join-switch": ({names.ANN_LOGICAL_SWITCH: names.JOIN_SWITCH,
                                  names.ANN_IP_ADDRESS: "100.64.0.200"}, "")}
    try:
        for name, (ann, word) in claims.items():
            msg = _refusal(sb, admin, atk, name, ann)
            assert word in msg, msg
    finally:
        for name in claims:
            cnipods.delete_pod(sb, ATK, name, api=admin)


# --- a namespace named like another tenant or `global` (issue 22: a
# namespace's name grants nothing; only the label and --global-namespaces do) ---


def test_a_namespace_named_global_or_like_a_tenant_label_joins_nothing(env):
    sb, admin, atk = env
    r.create(admin, r.NAMESPACES, {"metadata": {"name": "acme-db",
                                                "labels": {names.LABEL_TENANT: "acme"}}})
    made = ["acme-db"]
    try:
        cnipods.add_pod(sb, "acme-db", "db", "node2", api=admin)
        af.serve(sb, "acme-db", "db", PORT)
        db = _record(admin, "acme-db", "db")
        for ns in ("acme", "global"):
            api = af.tenant(sb, admin, ns)
            made.append(ns)
            pod = af.tenant_pod(sb, api, admin, ns, "p", "node1")
            gw = _record(admin, ns, "p").gateway
            # the pod's network works (its gateway answers) before the verdicts
            wait_until(lambda: af.pinged(sb, pod.netns, gw), 30, what=f"{ns}/p's gateway")
            assert not af.reach(sb, pod.netns, "tcp", db.ip, PORT), f"{ns} reached acme's pod"
            assert not af.reach(sb, pod.netns, "tcp", _record(admin, VIC, "v1").ip, PORT), \
                f"{ns} reached the victim"
        # the labelled tenant itself still works: a second namespace labelled acme
        r.create(admin, r.NAMESPACES, {"metadata": {"name": "acme-web",
                                                    "labels": {names.LABEL_TENANT: "acme"}}})
        made.append("acme-web")
        web = cnipods.add_pod(sb, "acme-web", "w", "node1", api=admin)
        wait_until(lambda: af.reach(sb, web.netns, "tcp", db.ip, PORT), 30, what="acme's own pods")
    finally:
        for ns in made:
            for p in r.list_(admin, r.PODS, ns)[0]:
                cnipods.delete_pod(sb, ns, p["metadata"]["name"], api=admin)
            r.delete(admin, r.NAMESPACES, ns)


# --- 8. mirror0 shows only mirrored pods ---
# Whoever may read a node's mirror0 (root or CAP_NET_RAW in the node's host
# network namespace: host-network pods with NET_RAW, node admins) must see the
# traffic of the pods mirrored there and of no other pod: a tenant that mirrors
# its own pod must not make another tenant's traffic readable on that node.

def test_8_mirror0_shows_the_tenant_s_mirrored_pod_and_never_another_pod_of_its_node(env):
    """The tenant mirrors its own pod `mir` on node1 (annotation at creation,
    while the capture runs); `quiet`, a pod of the victim tenant on node1 that
    is not mirrored, talks with the victim's v1 on node2 before, while and
    after the mirror is switched on (ICMP both ways, TCP, UDP): no frame of
    `quiet` (its IP or its MAC) reaches mirror0, while the traffic of `mir`
    with its own pod on node2 does."""
    sb, admin, atk = env
    made = [(VIC, "quiet"), (ATK, "mirpeer"), (ATK, "mir")]
    quiet = cnipods.add_pod(sb, VIC, "quiet", "node1", api=admin)
    try:
        v1 = cnipods.load(sb, VIC, "v1", api=admin)
        peer = af.tenant_pod(sb, atk, admin, ATK, "mirpeer", "node2")
        q_ip = quiet.ip
        q_mac = contract.own_record(r.get(admin, r.PODS, "quiet", VIC)).mac
        cap = af.MirrorCapture(sb, "node1")
        stop = threading.Event()

        def victim_pings():        # the victim's traffic never stops while mirroring starts
            while not stop.is_set():
                sb.exec(quiet.netns, ["ping", "-c1", "-W1", v1.ip], check=False)
        bg = threading.Thread(target=victim_pings, daemon=True)
        bg.start()
        try:
            mir = af.tenant_pod(sb, atk, admin, ATK, "mir", "node1",
                                annotations={"pacific.io/mirror": "true"})
            m_ip = mir.ip
            # the tenant's own traffic shows: the capture works, the mirror is on
            af.wait_until(lambda: af.pinged(sb, mir.netns, peer.ip)
                          and cap.saw(f"{m_ip} > {peer.ip}: ICMP echo request")
                          and cap.saw(f"{peer.ip} > {m_ip}: ICMP echo reply"),
                          60, what="mir's own pings on mirror0")
            pinger = subprocess.Popen(["ip", "netns", "exec", mir.netns, "ping", "-q", "-i",
                                       "0.05", peer.ip], stdout=subprocess.DEVNULL)
            try:
                # the victim on node1 with v1 on node2: 20 pings each way, TCP and UDP
                for src, dst in ((quiet.netns, v1.ip), (v1.netns, q_ip)):
                    out = sb.exec(src, ["ping", "-c20", "-i", "0.05", "-W2", dst], check=False)
                    assert out.returncode == 0, out.stdout
                for _ in range(5):
                    assert af.reach(sb, quiet.netns, "tcp", v1.ip, PORT)
                    assert af.reach(sb, quiet.netns, "udp", v1.ip, PORT)
            finally:
                pinger.terminate()
                pinger.wait(10)
            stop.set()
            bg.join(30)
            # a last ping of mir's with a size of its own: once its reply shows,
            # every frame sent before it has reached the capture
            af.wait_until(lambda: af.pinged_sized(sb, mir.netns, peer.ip, 1111)
                          and cap.saw(f"{peer.ip} > {m_ip}: ICMP echo reply", "length 1119"),
                          60, what="mir's last ping on mirror0")
        finally:
            stop.set()
            seen = cap.stop()
        leaked = [line for line in seen if af.names_host(line, q_ip, q_mac)]
        assert not leaked, (f"{len(leaked)} of {len(seen)} frames on node1's mirror0 are of "
                            f"the unmirrored pod {VIC}/quiet ({q_ip}, {q_mac}):\n"
                            + "\n".join(leaked[:20]))
        assert any(f"{m_ip} > {peer.ip}: ICMP echo request" in line for line in seen)
    finally:
        for ns, name in made:
            cnipods.delete_pod(sb, ns, name, api=admin)


# --- resource fairness: a tenant's flood of refusals spends its own Event budget ---
# (last in the module: it leaves the attacker's namespace over its Event budget)
def test_a_flood_of_refused_pods_does_not_silence_another_tenant_s_events(env):
    """The controller writes at most --event-burst (20) Events about one
    namespace at once: the attacker's 40 refused pods spend the attacker's
    budget (each pod still carries its refusal), never the victim's, whose
    own refusal is reported with an Event; and the Events over budget that wait
    for it, the latest per object, cannot push the victim's out."""
    sb, admin, atk = env
    node = sb.node("node1").name
    flood = [f"flood{i}" for i in range(40)]
    victim_over = [f"over{i}" for i in range(22)]       # its burst (20) and then some
    try:
        for name in flood:
            r.create(atk, r.PODS, af.pod_body(ATK, name, node, {"pacific.io/ip_address":
                                                                "192.0.2.9"}), ATK)
        for name in flood:                  # every refusal is on its pod, over budget or not
            assert "192.0.2.9" in af.allocation_refused(admin, ATK, name)
        silenced = [n for n in flood if not af.events_of(admin, ATK, n)]
        assert silenced, "40 refusals at once, and none over the attacker's Event budget"
        r.create(admin, r.PODS, af.pod_body(VIC, "own", node, {"pacific.io/ip_address":
                                                               "192.0.2.10"}), VIC)
        assert "192.0.2.10" in af.allocation_refused(admin, VIC, "own")
        wait_until(lambda: af.events_of(admin, VIC, "own"), 30,
                   what="the victim's own refusal Event")
        # the victim over its own budget too: its Events are deferred beside the
        # attacker's, in one pool, and every one is written as its budget refills
        for name in victim_over:
            r.create(admin, r.PODS, af.pod_body(VIC, name, node, {"pacific.io/ip_address":
                                                                  "192.0.2.10"}), VIC)
        wait_until(lambda: all(af.events_of(admin, VIC, n) for n in victim_over), 90,
                   what="every one of the victim's refusal Events, over its budget")
    finally:
        for ns, name in [(ATK, n) for n in flood] + [(VIC, n) for n in ["own", *victim_over]]:
            r.delete(admin, r.PODS, name, ns, grace_period=0)


# --- multicast: groups stay inside a tenant's enabled namespaces ---
# Only an administrator enables multicast on a namespace (the Namespace object:
# `edit` cannot write it).  A tenant whose namespace is enabled too, or not,
# must neither receive another tenant's group (joining it, or asking for it
# with a rogue IGMP query) nor send into it.

def test_multicast_a_tenant_can_neither_enable_it_nor_reach_another_tenant_s_group(env):
    import mcast_fixtures as mf
    sb, admin, atk = env
    group, port = "239.8.8.8", 5008

    def set_multicast(ns, value):
        r.patch_merge(admin, r.NAMESPACES, ns,
                      {"metadata": {"annotations": {names.ANN_MULTICAST: value}}})
    with pytest.raises(kerr.ApiError) as refused:
        r.patch_merge(atk, r.NAMESPACES, ATK,
                      {"metadata": {"annotations": {names.ANN_MULTICAST: "true"}}})
    assert refused.value.status == 403, refused.value
    set_multicast(VIC, "true")
    try:
        sender = cnipods.add_pod(sb, VIC, "msend", "node1", api=admin)
        mine = af.tenant_pod(sb, atk, admin, ATK, "mrecv", "node1")
        victim = mf.Receiver(sb, cnipods.load(sb, VIC, "v1").netns, group, port, name="victim")
        rxs = [victim]
        try:
            for enabled in (False, True):         # the attacker's namespace off, then on
                if enabled:
                    set_multicast(ATK, "true")
                thief = mf.Receiver(sb, mine.netns, group, port, name=f"attacker-{enabled}")
                rxs.append(thief)
                sb.exec(mine.netns, [sys.executable, mf.MCASTCHECK, "query"])   # rogue querier
                sb.exec(mine.netns, [sys.executable, mf.MCASTCHECK, "query", group])
                tag = mf.deliver(sb, sender.netns, group, port, [victim])
                assert not thief.wire(tag), f"the attacker received the victim's group ({enabled})"
                # the victim's own group's datagrams after, the control
                tag = mf.deliver(sb, mine.netns, group, port, [],
                                 control=(sender.netns, [victim]))
                assert not victim.wire(tag), f"the attacker sent into the victim's group ({enabled})"
        finally:
            for rx in rxs:
                rx.close()
    finally:
        set_multicast(ATK, None)
        set_multicast(VIC, None)


# --- ClusterNetworkPolicy: the administrators' tier stays theirs ---
# Only administrators write ClusterNetworkPolicies (no role grants them); an
# Admin-tier Deny holds against anything the tenant writes: a NetworkPolicy
# allowing everything, its pods relabelled.

def test_clusternetworkpolicy_a_tenant_can_neither_write_one_nor_lift_an_admin_deny(env):
    from pacific import clusterpolicy
    sb, admin, atk = env
    body = {"apiVersion": f"{clusterpolicy.GROUP}/{clusterpolicy.VERSION}",
            "kind": clusterpolicy.KIND, "metadata": {"name": "atk-no-port"},
            "spec": {"tier": "Admin", "priority": 7,
                     "subject": {"namespaces": {"matchLabels": {"attack-test": ATK}}},
                     "ingress": [{"action": "Deny",
                                  "from": [{"namespaces": {"matchLabels": {"attack-test": ATK}}}],
                                  "protocols": [{"tcp": {"destinationPort": {"number": PORT}}}]}]}}
    with pytest.raises(kerr.ApiError) as refused:
        r.create(atk, r.CLUSTERNETWORKPOLICIES, body)
    assert refused.value.status == 403, refused.value
    r.patch_merge(admin, r.NAMESPACES, ATK, {"metadata": {"labels": {"attack-test": ATK}}})
    r.create(admin, r.CLUSTERNETWORKPOLICIES, body)
    try:
        for attempt in (lambda: r.delete(atk, r.CLUSTERNETWORKPOLICIES, "atk-no-port"),
                        lambda: r.patch_merge(atk, r.CLUSTERNETWORKPOLICIES, "atk-no-port",
                                              {"spec": {"priority": 999}})):
            with pytest.raises(kerr.ApiError) as refused:
                attempt()
            assert refused.value.status == 403, refused.value
        client_pod = af.tenant_pod(sb, atk, admin, ATK, "cnp-client", "node1")
        af.tenant_pod(sb, atk, admin, ATK, "cnp-server", "node2", labels={"app": "server"})
        af.serve(sb, ATK, "cnp-server", PORT)
        server_ip = _pod_ip(admin, ATK, "cnp-server")
        wait_until(lambda: af.reach(sb, client_pod.netns, "udp", server_ip, PORT), 30,
                   what="UDP to the tenant's own server (the Deny is TCP only)")
        r.create(atk, r.NETWORKPOLICIES, {
            "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "allow-everything", "namespace": ATK},
            "spec": {"podSelector": {}, "ingress": [{}], "policyTypes": ["Ingress"]}}, ATK)
        r.patch_merge(atk, r.PODS, "cnp-server", {"metadata": {"labels": {"app": "escaped"}}},
                      ATK)
        # the tenant's policy written by the controller, then applied on every chassis
        wait_until(lambda: _acls_owned(sb, names.OWNER_KIND_POLICY, f"{ATK}/allow-everything")
                   > 0, 30, what="the tenant's allow-everything ACLs in NB")
        sb.nbctl("--wait=hv", "sync")
        assert not af.reach(sb, client_pod.netns, "tcp", server_ip, PORT), \
            "the tenant's NetworkPolicy or relabel lifted an Admin-tier Deny"
        assert af.reach(sb, client_pod.netns, "udp", server_ip, PORT)
    finally:
        r.delete(admin, r.CLUSTERNETWORKPOLICIES, "atk-no-port")
        r.delete(admin, r.NETWORKPOLICIES, "allow-everything", ATK)


def test_clusternetworkpolicy_an_admin_egress_deny_holds_through_a_service_cluster_ip(env):
    """The tenant reaches the pods an Admin-tier egress Deny forbids through a
    Service of its own selecting them: the Deny judges the endpoint, not the
    cluster IP (decision 0042: egress ACLs after load balancing).  Before, a
    connection's first packet still carried the cluster IP when the Deny was
    evaluated and matched no peer: a UDP query and its answer went through."""
    from pacific import clusterpolicy
    sb, admin, atk = env
    r.patch_merge(admin, r.NAMESPACES, ATK, {"metadata": {"labels": {"attack-test": ATK}}})
    client_pod = af.tenant_pod(sb, atk, admin, ATK, "lb-client", "node1")
    af.tenant_pod(sb, atk, admin, ATK, "lb-guarded", "node2", labels={"app": "guarded"})
    af.serve(sb, ATK, "lb-guarded", PORT)
    guarded = _pod_ip(admin, ATK, "lb-guarded")
    svc = r.create(atk, r.SERVICES, service(ATK, "to-guarded", [
        tcp_port(80, "t"), {"name": "u", "port": 80, "targetPort": PORT, "protocol": "UDP"}],
        selector={"app": "guarded"}), ATK)
    cip = svc["spec"]["clusterIP"]
    for proto in ("tcp", "udp"):
        wait_until(lambda proto=proto: af.reach(sb, client_pod.netns, proto, cip, 80), 30,
                   what=f"the guarded pod through the tenant's Service ({proto}), before the Deny")
    body = {"apiVersion": f"{clusterpolicy.GROUP}/{clusterpolicy.VERSION}",
            "kind": clusterpolicy.KIND, "metadata": {"name": "atk-no-guarded"},
            "spec": {"tier": "Admin", "priority": 8,
                     "subject": {"namespaces": {"matchLabels": {"attack-test": ATK}}},
                     "egress": [{"action": "Deny", "to": [{"pods": {
                         "namespaceSelector": {"matchLabels": {"attack-test": ATK}},
                         "podSelector": {"matchLabels": {"app": "guarded"}}}}],
                         "protocols": [{"tcp": {"destinationPort": {"number": PORT}}},
                                       {"udp": {"destinationPort": {"number": PORT}}}]}]}}
    r.create(admin, r.CLUSTERNETWORKPOLICIES, body)
    try:
        # the Deny applied (one write holds all its ACLs): the pod's own address fails
        wait_until(lambda: not af.reach(sb, client_pod.netns, "udp", guarded, PORT), 30,
                   what="the Admin-tier Deny on the guarded pod's address")
        for proto in ("tcp", "udp"):
            assert not af.reach(sb, client_pod.netns, proto, cip, 80), \
                f"a Service's cluster IP led past an Admin-tier egress Deny ({proto})"
        # the Deny was the reason: gone, the Service leads to the pod again
        r.delete(admin, r.CLUSTERNETWORKPOLICIES, "atk-no-guarded")
        wait_until(lambda: af.reach(sb, client_pod.netns, "udp", cip, 80), 30,
                   what="the guarded pod through the Service, the Deny gone")
    finally:
        r.delete(admin, r.CLUSTERNETWORKPOLICIES, "atk-no-guarded")
        r.delete(admin, r.SERVICES, "to-guarded", ATK)


def _acls_owned(sb, kind: str, owner: str) -> int:
    """How many ACLs in NB carry owner `kind`/`owner` in their external_ids."""
    from pacific.ovn.nb import NorthboundAPI
    nb = NorthboundAPI(sb.nb_remote)
    try:
        return sum(1 for row in nb.tables["ACL"].rows.values()
                   if row.external_ids.get(names.EXT_OWNER_KIND) == kind
                   and row.external_ids.get(names.EXT_OWNER) == owner)
    finally:
        nb.close()


def _dry_run_observers(sb, owner: str) -> int:
    return _acls_owned(sb, names.OWNER_KIND_DRY_RUN, owner)


def test_audit_a_tenant_can_neither_audit_isolation_nor_open_anything_with_a_dry_run(env):
    sb, admin, atk = env
    # tenant isolation's records are the administrator's to ask for
    with pytest.raises(kerr.ApiError) as refused:
        r.patch_merge(atk, r.NAMESPACES, ATK,
                      {"metadata": {"annotations": {names.ANN_AUDIT: "deny"}}})
    assert refused.value.status == 403, refused.value
    client = af.tenant_pod(sb, atk, admin, ATK, "dry-client", "node1", labels={"app": "dry-client"})
    af.tenant_pod(sb, atk, admin, ATK, "dry-server", "node2", labels={"app": "dry-server"})
    af.serve(sb, ATK, "dry-server", PORT)
    own, victim = _pod_ip(admin, ATK, "dry-server"), _pod_ip(admin, VIC, "v1")
    np = lambda name, ann, spec: {  # noqa: E731
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": ATK, "annotations": ann}, "spec": spec}
    # its own enforced egress deny-all, then a dry-run policy that would allow everything
    r.create(atk, r.NETWORKPOLICIES, np("deny-egress", {}, {
        "podSelector": {"matchLabels": {"app": "dry-client"}},
        "policyTypes": ["Egress"]}), ATK)
    r.create(atk, r.NETWORKPOLICIES, np("dry-open", {names.ANN_ENFORCEMENT: "dry-run",
                                                     names.ANN_AUDIT: "all"}, {
        "podSelector": {}, "ingress": [{}], "egress": [{}],
        "policyTypes": ["Ingress", "Egress"]}), ATK)
    try:
        wait_until(lambda: _dry_run_observers(sb, f"np:{ATK}/dry-open") > 0, 30,
                   what="the dry-run policy's observers in NB")
        for ip in (own, victim):
            assert not af.reach(sb, client.netns, "tcp", ip, PORT), \
                f"a dry-run allow-all opened {ip} past an enforced deny or tenant isolation"
        r.delete(atk, r.NETWORKPOLICIES, "deny-egress", ATK)
        wait_until(lambda: af.reach(sb, client.netns, "tcp", own, PORT), 30,
                   what="the tenant's own server, its deny gone")
        assert not af.reach(sb, client.netns, "tcp", victim, PORT), \
            "a dry-run allow-all opened another tenant's pod"
    finally:
        for name in ("deny-egress", "dry-open"):
            r.delete(admin, r.NETWORKPOLICIES, name, ATK)


# --- issue 51: pods never reach the underlay's tunnel ports ---
# A pod writes a Geneve header into an ordinary UDP datagram to another node's
# Geneve port: OVN's metadata option with the victim switch's datapath key and
# the victim port's key, around a frame forged as another pod of the victim's
# tenant.  Leaving masqueraded as its node, it would be decapsulated by the
# receiving chassis as its peer's own and delivered past isolation and policy.
# The same datagram from node1's host (a chassis: its Geneve is the real
# thing) is the positive control, sent after each attack on the same path.
TUNNEL_SINK_PORT = 7351
_GENEVE = r'''
import socket, struct, sys
(dst, vni, inport, outport, mac_dst, mac_src, src, ip_dst, port, payload) = sys.argv[1:]
data = payload.encode()
udp = struct.pack("!HHHH", 40001, int(port), 8 + len(data), 0) + data
hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                  socket.inet_aton(src), socket.inet_aton(ip_dst))
s = sum((hdr[i] << 8) + hdr[i + 1] for i in range(0, 20, 2))
while s >> 16:
    s = (s & 0xFFFF) + (s >> 16)
hdr = hdr[:10] + struct.pack("!H", ~s & 0xFFFF) + hdr[12:]
frame = (bytes.fromhex(mac_dst.replace(":", "")) + bytes.fromhex(mac_src.replace(":", ""))
         + b"\x08\x00" + hdr + udp)
# Geneve: 2 words of options, C (a critical option), Transparent Ethernet Bridging,
# the VNI (OVN: the datapath's key); option class 0x0102 type 0x80 (OVN's metadata):
# the logical ingress port's key (15 bits) and egress port's key (16 bits)
geneve = (struct.pack("!BBHI", 2, 0x40, 0x6558, int(vni) << 8)
          + struct.pack("!HBBI", 0x0102, 0x80, 1, (int(inport) & 0x7FFF) << 16 | int(outport)))
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
    sock.sendto(geneve + frame, (dst, 6081))
'''


def _tunnel_keys(sb, port: str) -> tuple[str, str]:
    """(the datapath's tunnel key, the port's) of logical port `port` in SB."""
    out = sb.sbctl("--bare", "--columns=datapath,tunnel_key", "find", "Port_Binding",
                   f'logical_port="{port}"').split()
    return sb.sbctl("get", "Datapath_Binding", out[0], "tunnel_key").strip(), out[1]


def test_tunnel_a_pod_s_forged_geneve_reaches_no_pod_through_another_node(env):
    """From the attacker's pod on node1 to node2's underlay address, Geneve
    port: a frame forged as victim pod v1 to victim pod `sink` on node2 (same
    tenant, so isolation would let it pass once decapsulated).  The control
    from node1's host is delivered every round; the attack never is."""
    sb, admin, atk = env
    target = cnipods.add_pod(sb, VIC, "tsink", "node2", api=admin)
    forger = af.tenant_pod(sb, atk, admin, ATK, "forger", "node1")
    try:
        source, sink_rec = _record(admin, VIC, "v1"), _record(admin, VIC, "tsink")
        vni, out_key = _tunnel_keys(sb, sink_rec.port)
        _, in_key = _tunnel_keys(sb, source.port)
        node2 = sb.node("node2")
        sink = af.UdpSink(target.netns, TUNNEL_SINK_PORT)
        try:
            for rnd in range(3):
                for who, netns in ((f"attack-{rnd}", forger.netns),
                                   (f"control-{rnd}", sb.node("node1").netns)):
                    sb.exec(netns, [sys.executable, "-c", _GENEVE, node2.underlay_ip, vni,
                                    in_key, out_key, sink_rec.mac, source.mac, source.ip,
                                    sink_rec.ip, str(TUNNEL_SINK_PORT), who], timeout=30)
                af.wait_until(lambda rnd=rnd: any(line.startswith(f"control-{rnd} ")
                                                  for line in sink.lines()), 30,
                              what=f"node1's own Geneve datagram {rnd} at the sink")
            got = [line for line in sink.lines() if line.startswith("attack-")]
            assert got == [], f"a pod's forged Geneve reached another tenant's pod: {got}"
        finally:
            sink.close()
    finally:
        cnipods.delete_pod(sb, ATK, "forger", api=admin)
        cnipods.delete_pod(sb, VIC, "tsink", api=admin)


# --- issue 51: shared pools are fair ---
POOL_IP, POOL_PORTS, POOL_OUT_PORT = "203.0.113.60", 256, 7351


def _svc_gateways(sb, ns: str) -> list[str]:
    """The egress SNAT gateway ports of `ns`'s Services in NB: one transit network each."""
    prefix = names.router_port_name(names.egress_switch_name(f"{names.SNAT_GATEWAY_PREFIX}{ns}/"))
    return [p for p in sb.nbctl("--bare", "--columns=name", "list",
                                "Logical_Router_Port").split() if p.startswith(prefix)]


def test_pool_a_tenant_s_services_cannot_take_the_transit_network_of_an_admin_s_subnet(env):
    """Issue 51, item 3: with one granted external IP a tenant's 256 Services on
    256 ports took all 256 transit networks and an administrator's centralized
    Subnet then had no gateway.  Now Services sharing an address share one
    gateway, the namespace holds at most --transit-networks-per-namespace (4:
    its fifth address is refused with an Event naming no one else, and that
    pod's traffic to the outside is dropped, never sent through its node,
    while a pod behind no such Service still gets out), and the Subnet gets
    its transit network."""
    sb, admin, atk = env
    pods = {i: af.tenant_pod(sb, atk, admin, ATK, f"pool{i}", "node1", labels={"pool": str(i)})
            for i in ("0", "1", "2", "3", "4", "free")}
    ips = {i: _pod_ip(admin, ATK, f"pool{i}") for i in ("4", "free")}
    for ip in ips.values():      # the outside routes them back (ovn-default may not masquerade)
        sb.exec(sb.external_netns, ["ip", "route", "replace", f"{ip}/32", "via",
                                    sb.node("node1").underlay_ip])
    server = subprocess.Popen(["ip", "netns", "exec", sb.external_netns, sys.executable,
                               af.NETCHECK, "serve", str(POOL_OUT_PORT), "outside"],
                              stdout=subprocess.PIPE, text=True)
    made, subnet = [], "pool-admin"
    try:
        assert server.stdout.readline().strip() == "ready"
        for i in range(POOL_PORTS):          # the attack: one address, a Service per port
            r.create(atk, r.SERVICES, service(ATK, f"pool-{i}", [tcp_port(10000 + i)],
                                              {"pool": "0"}, external_ips=[POOL_IP]), ATK)
            made.append(f"pool-{i}")
        for i in range(1, 5):                # four more addresses: the fifth gateway is refused
            r.create(atk, r.SERVICES, service(ATK, f"solo-{i}", [tcp_port(80)], {"pool": str(i)},
                                              external_ips=[f"203.0.113.6{i}"]), ATK)
            made.append(f"solo-{i}")
        text = wait_until(lambda: service_events(admin, ATK, "solo-4"), 120, interval=1,
                          what="the refused Service told")
        assert "--transit-networks-per-namespace" in text, text
        assert not _names(text, VIC, "v1"), f"names another tenant: {text}"
        wait_until(lambda: len(_svc_gateways(sb, ATK)) == 4, 120, interval=1,
                   what="the tenant's Services holding 4 transit networks")
        # the refused address's pod fails closed; a pod behind no such Service gets out
        wait_until(lambda: af.reach(sb, pods["free"].netns, "tcp", sb.external_remote_ip,
                                    POOL_OUT_PORT), 30, what="the control pod reaching outside")
        assert not af.reach(sb, pods["4"].netns, "tcp", sb.external_remote_ip, POOL_OUT_PORT), \
            "the refused Service's endpoint left the cluster another way"
        r.create(admin, r.SUBNETS, {"apiVersion": names.API_VERSION, "kind": "Subnet",
                                    "metadata": {"name": subnet},
                                    "spec": {"cidrBlock": "10.68.250.0/24",
                                             "gatewayType": "centralized",
                                             "gatewayNodes": ["node1"]}})
        status = wait_until(lambda: ((r.get(admin, r.SUBNETS, subnet) or {}).get("status") or {})
                            .get(names.STATUS_EGRESS, {}).get("transit"), 60, interval=0.5,
                            what="the administrator's Subnet's transit network")
        assert status.startswith("100.65."), status
        assert len(_svc_gateways(sb, ATK)) == 4, _svc_gateways(sb, ATK)
    finally:
        server.kill()
        server.wait()
        for ip in ips.values():
            sb.exec(sb.external_netns, ["ip", "route", "del", f"{ip}/32"], check=False)
        for name in made:
            r.delete(admin, r.SERVICES, name, ATK)
        if r.get(admin, r.SUBNETS, subnet) is not None:
            r.delete(admin, r.SUBNETS, subnet)
        # the shared sandbox left as found: no gateway of these Services or of
        # the Subnet stays for the modules after this one
        wait_until(lambda: not _svc_gateways(sb, ATK) and r.get(admin, r.SUBNETS, subnet) is None,
                   120, interval=1, what="the tenant's Service gateways and the Subnet removed")


# --- issue 51: no tenant takes every external IP an administrator granted ---
def test_pool_a_tenant_holds_at_most_its_bound_of_granted_external_ips(env):
    """A fresh tenant asks for one more granted external IP than a namespace
    may hold (names.EXTERNAL_IPS_PER_NAMESPACE, the sandbox's default): its
    youngest Service is refused on every node with an Event naming only the
    setting, while a Service of another namespace, created after all of them,
    still gets its address."""
    sb, admin, _ = env
    bound, ns = names.EXTERNAL_IPS_PER_NAMESPACE, "greedy"
    greedy = af.tenant(sb, admin, ns)
    try:
        for i in range(bound + 1):
            r.create(greedy, r.SERVICES, service(ns, f"ip-{i:02d}", [tcp_port(80)], {"app": "none"},
                                                 external_ips=[f"203.0.113.{100 + i}"]), ns)
        r.create(admin, r.SERVICES, service(VIC, "after-greedy", [tcp_port(80)], {"app": "none"},
                                            external_ips=["203.0.113.99"]), VIC)
        af.wait_until(lambda: programmed_everywhere(sb, f"{VIC}/after-greedy 203.0.113.99")
                      and programmed_everywhere(sb, f"{ns}/ip-{bound - 1:02d} "), 60,
                      what="the other namespace's and the bound's last external IP on every node")
        refused = f"{ns}/ip-{bound:02d} 203.0.113.{100 + bound}"
        assert not any(refused in c for c in services_chain(sb).values()), refused
        text = af.wait_until(lambda: service_events(admin, ns, f"ip-{bound:02d}"), 30,
                             what="the refusal reported on the youngest Service")
        assert (f"externalIP 203.0.113.{100 + bound}: the namespace holds its {bound} external "
                "IPs already") in text, text
        assert VIC not in text and "after-greedy" not in text, text
    finally:
        r.delete(admin, r.SERVICES, "after-greedy", VIC)
        r.delete(admin, r.NAMESPACES, ns)


# --- issue 51: audit bounded per tenant ---
FLOOD_RULES, FLOOD_RATE, FLOOD_SECONDS = 400, 5000, 10.0


def _policy(ns, name, ann, spec):
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": ns, "annotations": ann}, "spec": spec}


def _flood_policy():
    """The attacker's server takes UDP from its client on FLOOD_RULES ports,
    a rule (an ACL) each, every allow logged: with one bucket per ACL, 400
    times the rate (issue 51)."""
    return _policy(ATK, "flood", {names.ANN_AUDIT: "allow"}, {
        "podSelector": {"matchLabels": {"app": "flood-server"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "flood-client"}}}],
                     "ports": [{"protocol": "UDP", "port": 20000 + i}]}
                    for i in range(FLOOD_RULES)]})


def _audit_records(sb, policy: str) -> list[dict]:
    import glob
    from pacific.tools import flows
    paths = sorted(glob.glob(os.path.join(sb.dir, "node*", "flows",
                                          os.path.basename(names.FLOW_LOG))))
    return flows.read(paths, {"policy": policy})


def _enforced(api, ns, name) -> bool:
    ann = (r.get(api, r.NETWORKPOLICIES, name, ns) or {}).get("metadata", {}).get("annotations")
    return (ann or {}).get(names.ANN_ENFORCED) == "True"


def test_audit_a_tenant_s_flood_neither_hides_another_tenant_s_records_nor_stalls_its_pods(env):
    """The attacker floods its own 400-rule audited policy on node2; the
    victim's audited deny on node2 still records each of its prober's ten
    connections (its own bucket), a victim pod started on node2 meanwhile
    comes up and resolves its neighbours, and the attacker's records stay
    within its namespace's one bucket (decision 0050)."""
    sb, admin, atk = env
    client = af.tenant_pod(sb, atk, admin, ATK, "flood-client", "node2",
                           labels={"app": "flood-client"})
    af.tenant_pod(sb, atk, admin, ATK, "flood-server", "node2", labels={"app": "flood-server"})
    prober = af.tenant_pod(sb, admin, admin, VIC, "prober", "node1", labels={"app": "prober"})
    server, victim = _pod_ip(admin, ATK, "flood-server"), _pod_ip(admin, VIC, "v1")
    r.create(atk, r.NETWORKPOLICIES, _flood_policy(), ATK)
    r.create(admin, r.NETWORKPOLICIES, _policy(VIC, "guard", {names.ANN_AUDIT: "deny"}, {
        "podSelector": {"matchLabels": {"app": "victim"}}, "policyTypes": ["Ingress"]}), VIC)
    flood = None
    try:
        wait_until(lambda: _enforced(admin, ATK, "flood") and _enforced(admin, VIC, "guard"), 60,
                   what="both audited policies enforced")
        flood = subprocess.Popen(["ip", "netns", "exec", client.netns, sys.executable, af.NETCHECK,
                                  "flood", server, str(FLOOD_RATE), str(FLOOD_SECONDS),
                                  str(FLOOD_RULES)], stdout=subprocess.PIPE, text=True)
        # the flood is being logged: its namespace's bucket is in play from here on
        wait_until(lambda: _audit_records(sb, f"{ATK}/flood"), 30, interval=0.2,
                   what="the attacker's flood recorded")
        t0 = time.monotonic()
        late = af.tenant_pod(sb, admin, admin, VIC, "late", "node2", timeout=60)
        started = time.monotonic() - t0
        tried = 0
        for _ in range(10):                  # the victim's own connections, dropped at v1
            assert not af.reach(sb, prober.netns, "tcp", victim, PORT, timeout=0.3)
            tried += 1
        assert af.pinged(sb, late.netns, _pod_ip(admin, VIC, "prober")), \
            "a pod started on the flooded node does not reach its own tenant's pod"
        sent = int(flood.communicate(timeout=FLOOD_SECONDS + 30)[0].split()[0])
        ports = lambda: {x["src"]["port"] for x in _audit_records(sb, f"{VIC}/guard")}  # noqa: E731
        wait_until(lambda: len(ports()) >= tried, 30, interval=0.5,
                   what=f"each of the victim's {tried} connections recorded under the flood")
        flooded = len(_audit_records(sb, f"{ATK}/flood"))
        assert sent > FLOOD_RATE * FLOOD_SECONDS / 2, f"the flood sent only {sent} datagrams"
        # one bucket for the namespace, however many ACLs: rate x time + burst (and a second)
        bound = names.AUDIT_RATE * (FLOOD_SECONDS + 1) + names.AUDIT_BURST
        assert flooded <= bound, f"{flooded} records of the attacker's flood (bound {bound})"
        assert started < 60
    finally:
        if flood is not None and flood.poll() is None:
            flood.kill()
            flood.wait()
        r.delete(admin, r.NETWORKPOLICIES, "flood", ATK)
        r.delete(admin, r.NETWORKPOLICIES, "guard", VIC)
        for ns, name in ((ATK, "flood-client"), (ATK, "flood-server"), (VIC, "prober"),
                         (VIC, "late")):
            r.delete(admin, r.PODS, name, ns, grace_period=0)


# --- issue 51: an address's new holder inherits nothing ---
# The attacker's selector-less NodePort Service names its own pod a1 in
# hand-written Endpoints or an EndpointSlice: confined to its namespace's
# pods, it reaches a1.  The attacker deletes a1 and the victim asks for a1's
# freed address for a new pod.  Were confinement decided only when the
# Service or its slices change, the victim's pod would become the attacker's
# backend, reached through the node port from the node's service source that
# every ingress policy's node rule admits.  Instead the address is quarantined
# (refused, saying so without naming who held it), and when the victim gets it
# the attacker's Service no longer lists it, with an Event that names neither
# the victim nor its pod.  The controllers run these tests with a short
# quarantine (the default's wait would be a minute per test).
REUSE_QUARANTINE = 5        # s, the controllers' --address-quarantine in this section


@pytest.fixture
def short_quarantine(env):
    """`env`, both controller replicas restarted with --address-quarantine
    REUSE_QUARANTINE for the test, and as the sandbox started them after it
    (whatever tests follow)."""
    from pacific.sandbox import controllers
    sb = env[0]

    def restart(*extra):
        for i in (1, 2):
            sb.stop(controllers.controller_tag(i))
        controllers.start_for_sandbox(sb, controllers.kubeconfig_path(sb), extra_args=extra)
    restart("--address-quarantine", str(REUSE_QUARANTINE))
    try:
        yield env
    finally:
        restart()


def _lb_vips(sb, svc: str) -> str:
    return sb.nbctl("--bare", "--columns=vips", "find", "Load_Balancer",
                    f'name="{names.service_lb_name(ATK, svc, "tcp")}"')


def _names(text: str, *words: str) -> list[str]:
    """Those of `words` that `text` names as words ("vic" is in "Service")."""
    return [w for w in words if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)]


def _running_at(sb, admin, ns: str, name: str, ip: str):
    """The pod's record once it runs with address `ip` (its kubelet retries the
    sandbox a refused allocation failed: FailedCreatePodSandBox is expected)."""
    pod = r.get(admin, r.PODS, name, ns)
    rec = cnipods.load(sb, ns, name, admin)
    return ((pod or {}).get("status") or {}).get("phase") == "Running" and rec is not None \
        and rec.ip == ip and rec


def _the_freed_address_s_new_holder_is_not_reached(env, svc: str, write_endpoints) -> None:
    """The attack of this section; `write_endpoints(ip)` writes the attacker's
    hand-written endpoints of Service `svc` naming its pod a1's address."""
    from pacific import exposure
    sb, admin, atk = env
    vic = af.tenant(sb, admin, VIC)
    node1 = sb.node("node1")
    r.create(atk, r.SERVICES, service(ATK, svc, [tcp_port(80, "http")], type_="NodePort"),
             ATK)
    try:
        a1 = af.tenant_pod(sb, atk, admin, ATK, "a1", "node1")
        client = af.tenant_pod(sb, atk, admin, ATK, "a-client", "node3")
        af.serve(sb, ATK, "a1", PORT)
        ip, backend = a1.ip, exposure.host_port(a1.ip, PORT)
        write_endpoints(ip)
        spec = r.get(admin, r.SERVICES, svc, ATK)["spec"]
        vip, nodeport = spec["clusterIP"], spec["ports"][0]["nodePort"]
        # positive control: its own pod, a1 is the Service's backend, both ways
        af.wait_until(lambda: backend in _lb_vips(sb, svc), 60,
                      what=f"a1's {backend} in the balancer of atk/{svc}")
        af.wait_until(lambda: programmed_everywhere(sb, f"atk/{svc} node:tcp/{nodeport}"), 60,
                      what="the node port programmed")
        for netns, dst, port in ((client.netns, vip, 80),
                                 (sb.external_netns, node1.underlay_ip, nodeport)):
            af.wait_until(lambda netns=netns, dst=dst, port=port: af.ask(
                sb, netns, "tcp", dst, port)[1].startswith("a1 "), 30,
                what=f"a1 answering at {dst}:{port}")
        # the victim asks for a1's address: refused while a1 holds it, and tried
        # again when a1's release frees it, so into the quarantine however slow
        # the machine (a request made after the release may come after it too)
        r.create(vic, r.PODS, af.pod_body(VIC, "heir", sb.node("node2").name,
                                          {names.ANN_IP_ADDRESS: ip}), VIC)

        def refused(reason):
            return " | ".join(e.get("message") or "" for e in af.events_of(admin, VIC, "heir")
                              if e.get("reason") == reason)
        af.wait_until(lambda: refused("AddressInUse"), 30, interval=0.2,
                      what="the victim's request for a1's address refused while a1 holds it")
        cnipods.delete_pod(sb, ATK, "a1", api=atk)          # the attacker frees the address
        why = af.wait_until(lambda: refused("AddressQuarantined"), 30, interval=0.2,
                            what="the victim's request for the freed address refused as "
                            "quarantined")
        assert f"address {ip} in subnet" in why and "was released recently and is " \
            "quarantined until" in why, why
        # the quarantine over, the victim's pod runs with the address; the
        # attacker's balancer no longer lists it, also on every chassis
        af.wait_until(lambda: _running_at(sb, admin, VIC, "heir", ip), 120, interval=0.2,
                      what=f"the victim's pod running with {ip}")
        told = service_events(admin, VIC, "heir")       # the refusal, the kubelet's retries
        assert not _names(told, ATK, "a1", svc), f"the victim is told who held it: {told}"
        af.serve(sb, VIC, "heir", PORT)
        # the victim's pod is served where it may be reached: its own namespace
        v1 = cnipods.load(sb, VIC, "v1").netns
        af.wait_until(lambda: af.ask(sb, v1, "tcp", ip, PORT)[1].startswith("heir "), 30,
                      what="the victim's pod answering its own namespace")
        af.wait_until(lambda: backend not in _lb_vips(sb, svc), 30,
                      what=f"{backend} out of the balancer of atk/{svc}")
        sb.nbctl("--wait=hv", "sync")
        for netns, dst, port in ((client.netns, vip, 80),
                                 (sb.external_netns, node1.underlay_ip, nodeport)):
            rc, out = af.ask(sb, netns, "tcp", dst, port)
            assert rc != 0 and "heir" not in out, \
                f"the attacker's Service at {dst}:{port} reached the address's new holder: {out}"
        text = af.wait_until(lambda: (t := service_events(admin, ATK, svc)) and
                             f"endpoint address {ip} is no longer a pod of this namespace" in t
                             and t, 30, interval=0.2, what="the lost endpoint told on the Service")
        assert not _names(text, VIC, "heir"), f"the Event names the new holder: {text}"
    finally:
        r.delete(admin, r.SERVICES, svc, ATK)
        for ns, pod in ((VIC, "heir"), (ATK, "a-client"), (ATK, "a1")):
            cnipods.delete_pod(sb, ns, pod, api=admin)


def test_reuse_hand_written_endpoints_do_not_reach_the_freed_address_s_new_holder(
        short_quarantine):
    sb, admin, atk = short_quarantine
    svc = "reuse-ep"

    def endpoints(ip):
        r.create(atk, r.ENDPOINTS, {"apiVersion": "v1", "kind": "Endpoints",
                                    "metadata": {"name": svc, "namespace": ATK},
                                    "subsets": [{"addresses": [{"ip": ip}],
                                                 "ports": [{"name": "http", "port": PORT,
                                                            "protocol": "TCP"}]}]}, ATK)
    try:
        _the_freed_address_s_new_holder_is_not_reached(short_quarantine, svc, endpoints)
    finally:
        r.delete(admin, r.ENDPOINTS, svc, ATK)


def test_reuse_a_hand_written_endpointslice_does_not_reach_the_freed_address_s_new_holder(
        short_quarantine):
    """`edit` writes no EndpointSlices (no aggregated role of any Kubernetes
    release does): the administrator grants the tenant that in its own
    namespace, as a cluster whose tenants write their own slices does."""
    from pacific.kube import versions
    sb, admin, atk = short_quarantine
    svc, res = "reuse-slice", versions.endpointslices(admin)
    rbac, grant = "rbac.authorization.k8s.io", "tenant-endpointslices"

    def endpointslice(ip):
        r.create(atk, res, {"apiVersion": res.api_version, "kind": "EndpointSlice",
                            "metadata": {"name": f"{svc}-1", "namespace": ATK,
                                         "labels": {"kubernetes.io/service-name": svc}},
                            "addressType": "IPv4",
                            "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
                            "ports": [{"name": "http", "port": PORT, "protocol": "TCP"}]}, ATK)
    try:
        r.create(admin, r.ROLES, {
            "apiVersion": f"{rbac}/v1", "kind": "Role",
            "metadata": {"name": grant, "namespace": ATK},
            "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                       "verbs": ["*"]}]}, ATK)
        r.create(admin, r.ROLEBINDINGS, {
            "apiVersion": f"{rbac}/v1", "kind": "RoleBinding",
            "metadata": {"name": grant, "namespace": ATK},
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": grant},
            "subjects": [{"kind": "ServiceAccount", "name": af.SA, "namespace": ATK}]}, ATK)
        _the_freed_address_s_new_holder_is_not_reached(short_quarantine, svc, endpointslice)
    finally:
        r.delete(admin, res, f"{svc}-1", ATK)
        r.delete(admin, r.ROLEBINDINGS, grant, ATK)
        r.delete(admin, r.ROLES, grant, ATK)
