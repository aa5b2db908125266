"""Audit and dry-run of policies with real packets, on the pods of
tests/e2e/test_networkpolicy.py (namespaces x, y, z of one tenant, pods a, b,
c serving TCP 80 and 81, UDP 80; the same shared sandbox): the records each
node writes (pacific-node --flow-log, read as `pacific flows` does) carry the
verdict, the policy and rule, both pods and ports; a dry-run policy drops
nothing and says what it would deny, and enforcing it takes effect at once;
a tenant's isolation logs its drops when an administrator asks."""
from __future__ import annotations

import glob
import os
import subprocess

import pytest

from controller_fixtures import wait_until
from pacific import names
from pacific.kube import resources as r
from pacific.tools import flows
from np_fixtures import POD_NETNS, apply, np_env, pol, probe  # noqa: F401
from np_fixtures import cnp, enforced, ns_sel, tiers  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture
def audited(tiers):
    """The shared pods, no NetworkPolicy nor ClusterNetworkPolicy before or after."""
    return tiers


def paths(sb) -> list[str]:
    return sorted(glob.glob(os.path.join(sb.dir, "node*", "flows",
                                         os.path.basename(names.FLOW_LOG))))


def records(sb, traffic=None, timeout=20.0, **filters) -> list[dict]:
    """The records passing `filters`, once there is one; `traffic()` makes
    another connection each round (OVN's logging is best effort: a line the
    meter, or a busy ovn-controller, drops is not written)."""
    def found():
        if traffic is not None:
            traffic()
        return flows.read(paths(sb), filters)
    try:
        return wait_until(found, timeout, interval=0.5, what=f"a {filters} record")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{_acl_log(sb)}") from None


def _acl_log(sb) -> str:
    """What OVN logged on each node (for a failure message)."""
    out = []
    for node in ("node1", "node2"):
        path = os.path.join(sb.dir, node, "ovn-controller.log")
        lines = [x for x in open(path).read().splitlines() if "acl_log" in x] \
            if os.path.exists(path) else []
        out.append(f"{node}: {len(lines)} acl_log lines, last: " + " | ".join(
            x.split("|INFO|")[-1][:160] for x in lines[-4:]))
    return "\n".join(out)


def reached(sb, ips, src, dst, port=80, proto="tcp") -> bool:
    return probe(sb, src, ips[dst], proto, port)


def annotate(api, res, name, ns, ann):
    r.patch_merge(api, res, name, {"metadata": {"annotations": ann}}, ns)


def web_from_b(name, ann):
    """x/a takes TCP 80 from x/b only."""
    p = pol(name, "x", {"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [
        {"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}],
         "ports": [{"protocol": "TCP", "port": 80}]}]})
    p["metadata"]["annotations"] = ann
    return p


def test_an_audited_policy_records_what_it_allows_and_denies_in_kubernetes_terms(audited):
    sb, api, ips = audited
    apply(api, web_from_b("audited", {names.ANN_AUDIT: "allow,deny",
                                      names.ANN_AUDIT_SEVERITY: "warning"}))
    wait_until(lambda: not reached(sb, ips, ("x", "c"), ("x", "a")), 15,
               what="the policy in force")
    assert reached(sb, ips, ("x", "b"), ("x", "a"))
    allow = records(sb, lambda: reached(sb, ips, ("x", "b"), ("x", "a")), verdict="allow",
                    policy="x/audited", pod="x/b")[-1]
    deny = records(sb, lambda: reached(sb, ips, ("x", "c"), ("x", "a")), verdict="deny",
                   policy="x/audited", pod="x/c")[-1]
    assert allow["policy"] == {"kind": "NetworkPolicy", "namespace": "x", "name": "audited",
                               "rule": "ingress/0"}
    assert (allow["src"]["pod"], allow["dst"]["pod"], allow["dst"]["ip"], allow["dst"]["port"],
            allow["protocol"], allow["severity"]) == ("x/b", "x/a", ips[("x", "a")], 80, "TCP",
                                                      "warning")
    assert deny["policy"]["rule"] == "ingress" and deny["dst"]["pod"] == "x/a"
    # the node that applied the verdict is the destination's (to-lport ACLs run there)
    assert {allow["node"], deny["node"]} == {"node1"}
    # one record per connection, however many packets it had
    ports = [x["src"]["port"] for x in records(sb, verdict="allow", policy="x/audited", pod="x/b")]
    assert len(ports) == len(set(ports))
    # switched off: no more records
    annotate(api, r.NETWORKPOLICIES, "audited", "x", {names.ANN_AUDIT: "none"})
    wait_until(lambda: not _logging(sb, "np:x/audited"), 15, what="the ACLs no longer logging")


def _acls(sb):
    from pacific.ovn.query import Query
    with Query(sb.nb_remote, "OVN_Northbound") as q:
        return q.select("ACL", ["name", "log", "external_ids"])


def _logging(sb, prefix: str) -> bool:
    return any(row["log"] for row in _acls(sb) if str(row["name"]).startswith(prefix))


def _observing(sb, owner: str) -> bool:
    return any(row["external_ids"].get(names.EXT_OWNER) == owner and row["log"]
               for row in _acls(sb))


def test_a_dry_run_policy_drops_nothing_says_what_it_would_deny_and_enforces_at_once(audited):
    sb, api, ips = audited
    apply(api, web_from_b("trial", {names.ANN_ENFORCEMENT: "dry-run"}))
    # observed, not enforced: everything reaches x/a (once the previous test's
    # policy, deleted without waiting, is gone from the nodes: a wait, not an assert)
    wait_until(lambda: _observing(sb, "np:x/trial"), 20, what="the observers in NB")
    wait_until(lambda: reached(sb, ips, ("y", "c"), ("x", "a"))
               and reached(sb, ips, ("x", "c"), ("x", "a")), 20,
               what="x/a reached by y/c and x/c under the dry-run policy")
    assert reached(sb, ips, ("x", "b"), ("x", "a"))
    would = records(sb, lambda: reached(sb, ips, ("y", "c"), ("x", "a")), verdict="would-deny",
                    policy="x/trial", pod="y/c")[-1]
    assert would["dst"]["pod"] == "x/a" and would["dst"]["port"] == 80
    assert would["policy"]["rule"] == "ingress"
    assert would["node"] == "node2"          # seen where the connection starts (y/c's node)
    assert not flows.read(paths(sb), {"verdict": "would-deny", "policy": "x/trial", "pod": "x/b"}), \
        "x/b is allowed by the policy: nothing to say"
    annotate(api, r.NETWORKPOLICIES, "trial", "x", {names.ANN_ENFORCEMENT: "enforce"})
    wait_until(lambda: not reached(sb, ips, ("y", "c"), ("x", "a")), 15, what="enforced")
    assert reached(sb, ips, ("x", "b"), ("x", "a"))


def test_a_dry_run_admin_deny_observes_above_a_networkpolicy_that_allows(audited):
    sb, api, ips = audited
    apply(api, pol("allow-all", "x", {"podSelector": {}, "ingress": [{}]}))
    c = cnp("trial-deny", "Admin", 20, {"namespaces": ns_sel("x")},
            ingress=[{"action": "Deny", "from": [{"namespaces": ns_sel("z")}]}])
    c["metadata"]["annotations"] = {names.ANN_ENFORCEMENT: "dry-run"}
    r.create(api, r.CLUSTERNETWORKPOLICIES, c)
    status = enforced(api, "trial-deny")
    assert "dry-run" in status["Accepted"]["message"]
    wait_until(lambda: _observing(sb, "cnp:trial-deny"), 20, what="the observers in NB")
    assert reached(sb, ips, ("z", "b"), ("x", "b"))
    rec = records(sb, lambda: reached(sb, ips, ("z", "b"), ("x", "b")), verdict="would-deny",
                  policy="trial-deny")[-1]
    assert rec["policy"]["kind"] == "ClusterNetworkPolicy" and rec["src"]["pod"] == "z/b"
    assert not flows.read(paths(sb), {"verdict": "would-deny", "policy": "trial-deny",
                                      "namespace": "y"})


def forget_neighbours(sb, pod) -> None:
    """The pod's ARP cache emptied: its next connection asks for the address first."""
    subprocess.run(["ip", "netns", "exec", POD_NETNS[(sb.name, *pod)], "ip", "neigh", "flush",
                    "dev", "eth0", "nud", "all"], check=True)


def test_an_administrator_audits_a_tenant_s_isolation_on_its_node_and_across(audited):
    """Only the victim's namespace x is audited (tenant np); z leaves np for
    tenant other.  z/a (node1) asks for x/a (node1) and x/b (node2): the
    switch answers for them (OVN's ARP responder), the answer is dropped at
    z/a's port, and np's audit says so (issue 51: the drop was the asker's
    tenant's, unaudited, and nothing was recorded); a probe with the address
    known (its MAC in z/a's cache) is dropped at x/b's port, recorded by np."""
    sb, api, ips = audited
    annotate(api, r.NAMESPACES, "x", None, {names.ANN_AUDIT: "deny"})
    r.patch_merge(api, r.NAMESPACES, "z", {"metadata": {"labels": {names.LABEL_TENANT: "other"}}})
    attacker = ("z", "a")
    try:
        wait_until(lambda: not reached(sb, ips, attacker, ("x", "b")), 20,
                   what="z/a isolated from x/b")
        wait_until(lambda: _logging(sb, "tenant:np"), 20, what="np's drops logging")
        assert not _logging(sb, "tenant:other"), "only the administrator's x asked"
        for victim in (("x", "a"), ("x", "b")):          # on z/a's node, on the other
            def tried(victim=victim):
                forget_neighbours(sb, attacker)
                reached(sb, ips, attacker, victim)
            rec = records(sb, tried, pod="x/" + victim[1], verdict="deny", policy="np")[-1]
            assert (rec["policy"]["kind"], rec["policy"]["rule"], rec["protocol"]) == (
                "Tenant", "isolation", "ARP")
            assert (rec["src"]["pod"], rec["dst"]["pod"], rec["node"]) == (
                "z/a", "x/" + victim[1], "node1")
        # the address known: z/a's TCP itself reaches x/b's port, and is dropped there
        mac = next(row for row in r.list_(api, r.IPS)[0]
                   if row["spec"].get("ipAddress") == ips[("x", "b")])["spec"]["macAddress"]
        subprocess.run(["ip", "netns", "exec", POD_NETNS[(sb.name, *attacker)], "ip", "neigh",
                        "replace", ips[("x", "b")], "lladdr", mac, "dev", "eth0"], check=True)
        def tcp_recorded():
            reached(sb, ips, attacker, ("x", "b"))
            return [x for x in flows.read(paths(sb), {"pod": "x/b", "verdict": "deny",
                                                      "policy": "np"})
                    if x["protocol"] == "TCP" and x["src"]["pod"] == "z/a"]
        rec = wait_until(tcp_recorded, 20, interval=0.5, what="z/a's TCP at x/b recorded")[-1]
        assert rec["node"] == "node2" and rec["dst"]["port"] == 80
    finally:
        forget_neighbours(sb, attacker)
        r.patch_merge(api, r.NAMESPACES, "z", {"metadata": {"labels": {names.LABEL_TENANT: "np"}}})
        annotate(api, r.NAMESPACES, "x", None, {names.ANN_AUDIT: None})
    wait_until(lambda: reached(sb, ips, attacker, ("x", "b")), 20, what="z back in tenant np")


def test_a_networkpolicy_says_when_every_chassis_enforces_it_and_then_it_does(audited):
    sb, api, ips = audited
    apply(api, web_from_b("told", {}))

    def said():
        ann = (r.get(api, r.NETWORKPOLICIES, "told", "x") or {}).get("metadata", {}) \
            .get("annotations") or {}
        return ann if ann.get(names.ANN_ENFORCED) == "True" else None
    ann = wait_until(said, 20, what="pacific.io/enforced=True on the NetworkPolicy")
    # one probe each, right away: no retry, the annotation is the promise
    assert not reached(sb, ips, ("x", "c"), ("x", "a"))
    assert reached(sb, ips, ("x", "b"), ("x", "a"))
    assert "every chassis applied it" in ann[names.ANN_ENFORCED_MESSAGE]
    events = [e for e in r.list_(api, r.EVENTS, "x")[0]
              if e["involvedObject"].get("name") == "told" and e["reason"] == "Enforced"]
    assert events and events[0]["type"] == "Normal"
    # a new version (here: dry-run) is told again
    annotate(api, r.NETWORKPOLICIES, "told", "x", {names.ANN_ENFORCEMENT: "dry-run"})
    wait_until(lambda: (r.get(api, r.NETWORKPOLICIES, "told", "x")["metadata"]["annotations"]
                        .get(names.ANN_ENFORCED) == "False"), 20, what="enforced=False (dry-run)")
    wait_until(lambda: reached(sb, ips, ("x", "c"), ("x", "a")), 20, what="dry-run lifts it")
