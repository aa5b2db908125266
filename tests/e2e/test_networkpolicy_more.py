"""NetworkPolicy reachability, second half of the cases (test_networkpolicy.py
has the set-up and the first half), on a sandbox of this module's own."""
from __future__ import annotations


import pytest

from np_fixtures import CASES, FIRST, check, cluster, np_env, run_case  # noqa: F401 (fixtures)
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from controller_fixtures import wait_until
from pacific import contract, names
from pacific.kube import resources as r
from pacific.sandbox import cnipods as sandboxpods
from np_fixtures import ALL_IN_X, NETCHECK, apply, every, pol, probe

# check() waits up to 15 s for the matrix to converge (the controller and
# ovn-controller apply a policy change asynchronously), probing every pair each round.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


@pytest.mark.parametrize("case", [c for c in CASES if c not in FIRST and "dropped" not in c])
def test_reachability_more(cluster, case):
    run_case(cluster, case)


def test_ip_block_with_except(cluster):
    sb, api, ips = cluster
    yb = ips[("y", "b")]
    apply(api, pol("block", "x", {**ALL_IN_X, "ingress": [{"from": [{"ipBlock": {
        "cidr": "10.16.0.0/16", "except": [f"{yb}/32"]}}]}]}))
    check(sb, ips, lambda s, d, pr, pt: d[0] != "x" or s != ("y", "b"))


def test_changes_apply_to_running_pods(cluster):
    """A policy edited, a pod relabelled, a namespace relabelled: applied
    without restarting anything; the policy deleted: all open again."""
    sb, api, ips = cluster
    apply(api, pol("from-y", "x", {**ALL_IN_X, "ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"team": "blue"}}}]}]}))
    check(sb, ips, lambda s, d, pr, pt: d[0] != "x")
    r.patch_merge(api, r.NAMESPACES, "y", {"metadata": {"labels": {"team": "blue"}}})
    try:
        check(sb, ips, lambda s, d, pr, pt: d[0] != "x" or s[0] == "y")
        r.patch_merge(api, r.NETWORKPOLICIES, "from-y", {"spec": {"podSelector": {
            "matchLabels": {"pod": "a"}}}}, "x")
        check(sb, ips, lambda s, d, pr, pt: d != ("x", "a") or s[0] == "y")
        r.patch_merge(api, r.PODS, "b", {"metadata": {"labels": {"pod": "a"}}}, "x")   # x/b selected now
        try:
            check(sb, ips, lambda s, d, pr, pt: d[0] != "x" or d[1] == "c" or s[0] == "y")
        finally:
            r.patch_merge(api, r.PODS, "b", {"metadata": {"labels": {"pod": "b"}}}, "x")
    finally:
        r.patch_merge(api, r.NAMESPACES, "y", {"metadata": {"labels": {"team": None}}})
    r.delete(api, r.NETWORKPOLICIES, "from-y", "x")
    check(sb, ips, every)


def test_a_new_pod_selected_by_a_deny_policy_never_receives_a_packet(cluster):
    sb, api, ips = cluster
    apply(api, pol("deny-new", "x", {"podSelector": {"matchLabels": {"pod": "new"}}}))
    # the policy's rows in NB and on every chassis before the pod exists
    wait_until(lambda: sb.nbctl("--bare", "--columns=_uuid", "find", "ACL",
                                f'external_ids:"{names.EXT_OWNER}"="x/deny-new"').strip(), 30,
               what="the deny policy's ACLs in NB")
    sb.nbctl("--wait=hv", "sync")
    added = sandboxpods.add_pod(sb, "x", "new", "node1", api=api, labels={"pod": "new"})
    try:
        new_ip = contract.own_record(r.get(api, r.PODS, "new", "x")).ip
        ns = added.netns
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, NETCHECK, "serve", "80"],
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "ready"
        try:
            with ThreadPoolExecutor(9) as pool:
                got = list(pool.map(lambda s: probe(sb, s, new_ip, "tcp", 80), ips))
            assert not any(got), "a pod selected by a deny policy received traffic"
        finally:
            server.kill()
            server.wait()
    finally:
        sandboxpods.delete_pod(sb, "x", "new", api=api)
