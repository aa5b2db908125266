"""ClusterNetworkPolicy (network-policy-api v1alpha2) with real packets, on the
pods of tests/e2e/test_networkpolicy.py (namespaces x, y, z of one tenant, pods
a, b, c, TCP 80 and 81, UDP 80; the same shared sandbox): every ordered pair and
port checked against a model of each case.  Cases port the shape of the
network-policy-api conformance tests named beside them (their pods and
namespaces are these): Admin rules above NetworkPolicy, Pass down to it,
Baseline below it, priorities and rule order, ingress and egress, inline
networks, port ranges, named ports, node peers; then a cross-tenant exception
and the Enforced status."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from controller_fixtures import wait_until
from pacific import contract, names
from pacific.kube import resources as r
from pacific.sandbox import cnipods as sandboxpods
from np_fixtures import (ALL_IN_X, ING, REVALIDATION, check, cnp, enforced, every,  # noqa: F401
                         np_env, ns_sel, pod_sel, pol, probe, run, tcp, tiers)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")


def test_admin_deny_then_a_higher_accept_ingress_tcp(tiers):
    """~ conformance AdminNetworkPolicyIngressTCP: Deny y -> x on TCP 80 (priority
    20); Accept y/a -> x TCP 80 at priority 10 wins for y/a."""
    run(tiers, [
        cnp("deny-y", "Admin", 20, {"namespaces": ns_sel("x")}, ingress=[
            {"name": "deny-y-80", "action": "Deny", "from": [{"namespaces": ns_sel("y")}],
             "protocols": [tcp(80)]}]),
        cnp("accept-ya", "Admin", 10, {"namespaces": ns_sel("x")}, ingress=[
            {"action": "Accept", "from": [pod_sel("y", "a")], "protocols": [tcp(80)]}])],
        allowed=lambda s, d, pr, pt: not (d[0] == "x" and s[0] == "y" and s[1] != "a"
                                          and (pr, pt) == ("tcp", 80)))
    sb = tiers[0]
    cp_ = subprocess.run([os.path.join(os.path.dirname(sys.executable), "pacific"), "trace",
                          "y/b", "x/a", "--tcp", "80", "--sandbox", sb.name],
                         capture_output=True, text=True, timeout=60)
    assert cp_.returncode == 1 and cp_.stdout.startswith(
        "FAIL: dropped by ClusterNetworkPolicy deny-y ingress rule 0"), cp_.stdout + cp_.stderr


def test_admin_accept_overrides_a_networkpolicy_and_deny_holds_against_one(tiers):
    """~ AdminNetworkPolicyPriorityField / gress rules: NetworkPolicy denies all
    ingress of x; an Admin Accept z -> x still gets in, and an Admin Deny
    y -> z holds although z has a policy allowing everything."""
    run(tiers, [
        cnp("z-in", "Admin", 5, {"namespaces": ns_sel("x")}, ingress=[
            {"action": "Accept", "from": [{"namespaces": ns_sel("z")}]}]),
        cnp("no-y-to-z", "Admin", 6, {"namespaces": ns_sel("z")}, ingress=[
            {"action": "Deny", "from": [{"namespaces": ns_sel("y")}]}])],
        [pol("deny", "x", {**ALL_IN_X, **ING}),
         pol("all", "z", {"podSelector": {}, "ingress": [{}], **ING})],
        allowed=lambda s, d, pr, pt: (s[0] == "z" if d[0] == "x" else
                                      not (d[0] == "z" and s[0] == "y")))


def test_pass_hands_over_to_networkpolicy_and_baseline_decides_where_none_selects(tiers):
    """~ AdminNetworkPolicyPassAction + BaselineAdminNetworkPolicy: Admin Pass
    y -> x (priority 1) above an Admin Deny y -> x (priority 2): the Deny never
    applies.  NetworkPolicy in x allows only y/b; Baseline denies y -> every
    pod, which applies to y and z's pods (no NetworkPolicy selects them), not to x."""
    run(tiers, [
        cnp("pass-y", "Admin", 1, {"namespaces": ns_sel("x")}, ingress=[
            {"action": "Pass", "from": [{"namespaces": ns_sel("y")}]}]),
        cnp("deny-y", "Admin", 2, {"namespaces": ns_sel("x")}, ingress=[
            {"action": "Deny", "from": [{"namespaces": ns_sel("y")}]}]),
        cnp("base-deny-y", "Baseline", 50, {"namespaces": {}}, ingress=[
            {"action": "Deny", "from": [{"namespaces": ns_sel("y")}]}])],
        [pol("only-yb", "x", {**ALL_IN_X, **ING, "ingress": [{"from": [
            {"namespaceSelector": {"matchLabels": {"ns": "y"}},
             "podSelector": {"matchLabels": {"pod": "b"}}}]}]})],
        allowed=lambda s, d, pr, pt: (s == ("y", "b") if d[0] == "x" else s[0] != "y"))


def test_baseline_accept_above_baseline_deny_and_a_networkpolicy_overrides_both(tiers):
    """~ BaselineAdminNetworkPolicyIngressTCP: Baseline Accept z/a -> y TCP 80
    (priority 1) above a Baseline Deny of everything into y (priority 2)."""
    run(tiers, [
        cnp("base-za", "Baseline", 1, {"namespaces": ns_sel("y")}, ingress=[
            {"action": "Accept", "from": [pod_sel("z", "a")], "protocols": [tcp(80)]}]),
        cnp("base-deny", "Baseline", 2, {"namespaces": ns_sel("y")}, ingress=[
            {"action": "Deny", "from": [{"namespaces": {}}]}])],
        allowed=lambda s, d, pr, pt: d[0] != "y" or (s == ("z", "a") and (pr, pt) == ("tcp", 80)))


def test_priorities_across_policies_and_rule_order_within_one(tiers):
    """~ AdminNetworkPolicyPriorityField / rule ordering: an Admin Deny z -> x
    (priority 50) under an Accept z/c -> x (priority 40); in one policy of
    priority 45 an Accept z/b written before a Deny z: z/b and z/c get in."""
    run(tiers, [
        cnp("deny-z", "Admin", 50, {"namespaces": ns_sel("x")}, ingress=[
            {"action": "Deny", "from": [{"namespaces": ns_sel("z")}]}]),
        cnp("accept-zc", "Admin", 40, {"namespaces": ns_sel("x")}, ingress=[
            {"action": "Accept", "from": [pod_sel("z", "c")]}]),
        cnp("ordered", "Admin", 45, {"namespaces": ns_sel("x")}, ingress=[
            {"action": "Accept", "from": [pod_sel("z", "b")]},
            {"action": "Deny", "from": [{"namespaces": ns_sel("z")}]}])],
        allowed=lambda s, d, pr, pt: not (d[0] == "x" and s == ("z", "a")))


def test_baseline_egress_deny_where_a_networkpolicy_selects_nothing(tiers):
    """~ BaselineAdminNetworkPolicyEgressTCP/UDP: Baseline denies y's egress to
    z; a NetworkPolicy selecting y/a for egress (to z only) decides for y/a."""
    run(tiers, [
        cnp("base-y-not-z", "Baseline", 10, {"namespaces": ns_sel("y")}, egress=[
            {"action": "Deny", "to": [{"namespaces": ns_sel("z")}]}])],
        [pol("ya-to-z", "y", {"podSelector": {"matchLabels": {"pod": "a"}},
                              "policyTypes": ["Egress"],
                              "egress": [{"to": [{"namespaceSelector": {
                                  "matchLabels": {"ns": "z"}}}]}]})],
        allowed=lambda s, d, pr, pt: (d[0] == "z" if s == ("y", "a") else
                                      not (s[0] == "y" and d[0] == "z")))


def test_egress_networks_port_ranges_and_named_ports(tiers):
    """~ AdminNetworkPolicyEgressInlineCIDRPeers, port ranges, named ports:
    x/a may not reach y/b's address (a /32 network) at all; z's pods may not
    send TCP 80-81 anywhere; x may not reach port `serve-81` (a named port) of y."""
    sb, api, ips = tiers
    run(tiers, [
        cnp("cidr", "Admin", 30, {"pods": {"namespaceSelector": ns_sel("x"),
                                           "podSelector": {"matchLabels": {"pod": "a"}}}},
            egress=[{"action": "Deny", "to": [{"networks": [f"{ips[('y', 'b')]}/32"]}]}]),
        cnp("range", "Admin", 31, {"namespaces": ns_sel("z")}, egress=[
            {"action": "Deny", "to": [{"namespaces": {}}],
             "protocols": [{"tcp": {"destinationPort": {"range": {"start": 80, "end": 81}}}}]}]),
        cnp("named", "Admin", 32, {"namespaces": ns_sel("x")}, egress=[
            {"action": "Deny", "to": [{"namespaces": ns_sel("y")}],
             "protocols": [{"destinationNamedPort": "serve-81"}]}])],
        allowed=lambda s, d, pr, pt: not (
            (s == ("x", "a") and d == ("y", "b"))
            or (s[0] == "z" and pr == "tcp")
            or (s[0] == "x" and d[0] == "y" and (pr, pt) == ("tcp", 81))))


def test_node_peers_and_enforced_means_enforced(tiers):
    """~ AdminNetworkPolicyEgressNodePeers: x's pods may not reach any node.
    Once Enforced is True, a probe sees it within one datapath revalidation
    round: every chassis's OpenFlow tables hold the rule then, and OVS
    revalidates the flows its datapath cached from the pings before right
    after (its barrier, which hv_cfg stands on, does not wait for that)."""
    sb, api, ips = tiers
    node = r.get(api, r.NODES, "node1")
    node_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    from np_fixtures import POD_NETNS
    netns = POD_NETNS[(sb.name, "x", "a")]

    def pings():
        return sb.exec(netns, ["ping", "-c1", "-W1", node_ip], check=False).returncode == 0
    wait_until(pings, 20, what="x/a pings node1 before the policy")
    r.create(api, r.CLUSTERNETWORKPOLICIES, cnp("no-nodes", "Admin", 40, {"namespaces": ns_sel("x")},
                                               egress=[{"action": "Deny", "to": [{"nodes": {}}]}]))
    conds = enforced(api, "no-nodes")
    wait_until(lambda: not pings(), REVALIDATION, interval=0,
               what="the drop, one revalidation round after Enforced said True")
    assert conds["Accepted"]["status"] == "True" and "every chassis" in conds["Enforced"]["message"]
    assert probe(sb, ("x", "a"), ips[("y", "a")], "tcp", 80)     # pods are no nodes


def test_an_invalid_policy_says_why_and_changes_nothing(tiers):
    sb, api, ips = tiers
    body = cnp("bad", "Admin", 3, {"namespaces": ns_sel("x")}, ingress=[
        {"action": "Deny", "from": [{"namespaces": ns_sel("y")}],
         "protocols": [{"tcp": {"destinationPort": {"range": {"start": 90, "end": 80}}}}]}])
    r.create(api, r.CLUSTERNETWORKPOLICIES, body)

    def refused():
        o = r.get(api, r.CLUSTERNETWORKPOLICIES, "bad") or {}
        c = {x["type"]: x for x in (o.get("status") or {}).get("conditions") or []}
        return c.get("Accepted") if c.get("Accepted", {}).get("status") == "False" else None
    acc = wait_until(refused, 30, what="Accepted False")
    assert acc["reason"] == "InvalidSpec" and "start (90) must be less than end (80)" in acc["message"]
    check(sb, ips, every)


def test_an_admin_accept_opens_one_cross_tenant_flow_and_nothing_else(tiers):
    """Tenant isolation is the lowest Admin rule: a monitoring namespace of its
    own tenant scrapes x on TCP 80 only; everything else between them stays
    isolated, in both directions."""
    sb, api, ips = tiers
    r.create(api, r.NAMESPACES, {"metadata": {"name": "mon", "labels": {"ns": "mon"}}})
    try:
        sandboxpods.add_pod(sb, "mon", "scraper", "node2", api=api)
        mon = sandboxpods.load(sb, "mon", "scraper").netns
        mon_ip = contract.own_record(r.get(api, r.PODS, "scraper", "mon")).ip
        p = subprocess.Popen(["ip", "netns", "exec", mon, sys.executable, NETCHECK, "serve", "80"],
                             stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        try:
            def reaches(port, proto="tcp"):
                cp = sb.exec(mon, [sys.executable, NETCHECK, "probe", proto, ips[("x", "a")],
                                   str(port), "1"], check=False)
                return cp.returncode == 0
            assert not reaches(80)           # isolated tenants
            r.create(api, r.CLUSTERNETWORKPOLICIES, cnp(
                "scrape", "Admin", 100, {"namespaces": {"matchLabels": {names.LABEL_TENANT: "np"}}},
                ingress=[{"name": "monitoring", "action": "Accept",
                          "from": [{"namespaces": ns_sel("mon")}], "protocols": [tcp(80)]}]))
            enforced(api, "scrape")
            # enforced (every chassis applied it) and the allowed flow through:
            # what must stay blocked is meaningful now
            assert wait_until(lambda: reaches(80), 10, what="mon scrapes x/a:80")
            assert not reaches(81) and not reaches(80, "udp")
            assert not probe(sb, ("x", "a"), mon_ip, "tcp", 80), "x reached mon: isolation opened"
        finally:
            p.kill()
            p.wait()
    finally:
        for o in r.list_(api, r.PODS, "mon")[0]:
            sandboxpods.delete_pod(sb, "mon", o["metadata"]["name"], api=api)
        r.delete(api, r.NAMESPACES, "mon")


def test_an_egress_allowlist_of_domain_names_above_a_deny(tiers):
    """~ AdminNetworkPolicyEgressDomainNames (experimental): x may reach only
    what `yb.pacific.test` resolves to (y/b, answered by the sandbox's dnsmasq
    through the controllers' --dns-servers); every other pod is denied by a
    lower-precedence Admin Deny."""
    from pacific.sandbox import controllers
    sb, api, ips = tiers
    hosts = os.path.join(sb.dir, "cnp-hosts")     # dnsmasq (another user) reads it there
    with open(hosts, "w") as f:
        f.write(f"{ips[('y', 'b')]} yb.pacific.test\n")
    dnsmasq = controllers.serve_dns(sb, hosts)
    try:
        run(tiers, [
            cnp("allow-yb", "Admin", 1, {"namespaces": ns_sel("x")}, egress=[
                {"action": "Accept", "to": [{"domainNames": ["yb.pacific.test"]}]}]),
            cnp("deny-pods", "Admin", 2, {"namespaces": ns_sel("x")}, egress=[
                {"action": "Deny", "to": [{"namespaces": {}}]}])],
            allowed=lambda s, d, pr, pt: s[0] != "x" or d == ("y", "b"))
    finally:
        dnsmasq.kill()
        dnsmasq.wait()
