"""The NetworkPolicy reachability matrix over IPv6 (issue 27): cases of
test_networkpolicy.py (the same CASES and model, not copies) between the pods
of an --ipv6-only sandbox (its default Subnet, join network, service CIDR and
Nodes IPv6 only); plus an IPv6 ipBlock with its except.  The IPv4 half of a dual-stack
pod is the code the IPv4 matrix tests already.

Which cases: every kind of peer, port and direction once (the first half of
the IPv4 cases, egress, and the ipBlock); the others combine these, and the
compiler writes each rule's IPv6 twin in the same loop as the IPv4 rule, so
they would spend CI's minutes on what the IPv4 matrix shows."""
from __future__ import annotations

import itertools
import os

import pytest

from pacific import contract, names
from pacific.kube import client
from pacific.kube import resources as r
from np_fixtures import (FIRST, NSS, PODS, apply, check, clean, pol, run_case,
                                serving_pod)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
SANDBOX_PROFILE = "ipv6-only"      # shared with the other modules' IPv6-only cases


@pytest.fixture(scope="module")
def np_env6(profile_sandbox):
    """The --ipv6-only profile's sandbox with the 9 pods (on two of its nodes)
    and their servers; `ips` are their (only) IPv6 addresses."""
    sb = profile_sandbox(SANDBOX_PROFILE)
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    for ns in NSS:
        r.create(api, r.NAMESPACES, {"metadata": {"name": ns, "labels": {
            "ns": ns, names.LABEL_TENANT: "np"}}})
    servers: list = []
    try:
        for i, (ns, pod) in enumerate(itertools.product(NSS, PODS)):
            serving_pod(sb, api, ns, pod, ("node1", "node2")[i % 2], servers)
        ips = {(ns, pod): contract.own_record(r.get(api, r.PODS, pod, ns)).ip
               for ns, pod in itertools.product(NSS, PODS)}
        assert all(":" in ip for ip in ips.values()), ips
        yield sb, api, ips
    finally:
        for p in servers:
            p.kill()
            p.wait()
        for ns in NSS:   # the shared sandbox as the module found it (its pods go with them)
            r.delete(api, r.NAMESPACES, ns)


@pytest.fixture
def cluster6(np_env6):
    sb, api, ips = np_env6
    clean(api)
    yield sb, api, ips
    clean(api)


V6_CASES = [*FIRST, "deny all egress from x", "x egress to y on TCP 80 only",
            "z from pods NotIn {a} (matchExpressions)"]


@pytest.mark.parametrize("case", V6_CASES)
def test_reachability_over_ipv6(cluster6, case):
    run_case(cluster6, case)


def test_an_ipv6_ip_block_with_except(cluster6):
    sb, api, ips = cluster6
    yb = ips[("y", "b")]
    apply(api, pol("block6", "x", {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {
        "cidr": names.SANDBOX_DEFAULT_CIDR6, "except": [f"{yb}/128"]}}]}]}))
    check(sb, ips, lambda s, d, pr, pt: d[0] != "x" or s != ("y", "b"))
