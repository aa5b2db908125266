"""The RBAC in deploy/ is exactly what the code calls: every (group, resource,
verb) the controller and node daemon use (read from their source by
deploy_apiscan) is granted to their ServiceAccount, and nothing else is."""
import itertools

import pytest

from deploy_apiscan import ROOT, Scan, _module_name, scan
from deploy_fixtures import NAMESPACE, command_line, find, manifests, pod_spec
from pacific import names
from pacific.controller import main as controller_main

COMPONENTS = ["controller", "node", "central"]
# Sandbox launchers: they start the components inside the single-machine
# sandbox (with its admin kubeconfig) and never run in a cluster.
SANDBOX_ONLY = {"launch.py"}

# Called by the code but deliberately not granted, with the reason.
NOT_GRANTED = {
    ("controller", "", "namespaces", "create"):
        "controller/main.py creates the Lease namespace only when it is missing (a bare API "
        "server); the manifests create pacific-system, and a refused create is logged, "
        "not fatal",
}


def component_modules(pkg: str) -> list[str]:
    return [_module_name(p) for p in sorted((ROOT / "pacific" / pkg).glob("*.py"))
            if p.name not in SANDBOX_ONLY]


@pytest.fixture(scope="module")
def scans() -> dict[str, Scan]:
    return {"controller": scan(component_modules("controller")),
            "node": scan(component_modules("node")),
            "central": scan(component_modules("central"))}


def workload(component: str) -> dict:
    if component == "controller":
        return find("Deployment", names.CONTROLLER_NAME)
    return find("DaemonSet", f"pacific-{component}")


def grants(service_account: str, docs: list[dict]) -> list[tuple[str | None, dict]]:
    """(namespace the rule applies in, or None for cluster-wide; rule) for every
    rule bound to system:serviceaccount:<NAMESPACE>:<service_account>."""
    out = []
    for b in docs:
        if b["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == service_account
                   and s.get("namespace") == NAMESPACE for s in b.get("subjects") or []):
            continue
        ref = b["roleRef"]
        role = find(ref["kind"], ref["name"], docs) if ref["kind"] == "ClusterRole" else \
            [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == ref["name"]
             and d["metadata"]["namespace"] == b["metadata"]["namespace"]][0]
        scope = None if b["kind"] == "ClusterRoleBinding" else b["metadata"]["namespace"]
        out.extend((scope, rule) for rule in role.get("rules") or [])
    return out


def covers(rule: dict, group: str, resource: str, verb: str, name: str | None) -> bool:
    if group not in rule.get("apiGroups", []) or resource not in rule.get("resources", []) \
            or verb not in rule.get("verbs", []):
        return False
    allowed = rule.get("resourceNames")
    # create, list and watch requests carry no name: a named rule never covers them
    return not allowed or (name is not None and name in allowed)


def fixed_objects(component: str, monkeypatch) -> dict[tuple[str, str], tuple[str, str]]:
    """Objects the component uses by a fixed namespace/name from its flags:
    (group, resource) -> (namespace, name)."""
    if component == "node":        # the health reports: Leases of their own namespace
        return {("coordination.k8s.io", "leases"): (names.NODE_HEALTH_NAMESPACE, None)}
    if component == "central":     # labels on its own pod (central/leaderlabel.py)
        return {("", "pods"): (NAMESPACE, None)}
    if component != "controller":
        return {}
    argv, env = command_line(workload("controller"), "controller")
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    args = controller_main.build_parser().parse_args(argv[1:])
    return {("coordination.k8s.io", "leases"): (args.lease_namespace, args.lease_name)}


@pytest.mark.parametrize("component", COMPONENTS)
def test_scan_resolved_every_api_call(scans, component):
    assert not scans[component].unresolved, \
        "API calls whose resource/verb cannot be read from the source: " \
        + "; ".join(scans[component].unresolved)
    assert scans[component].pairs(), "the scan found no API call at all"


@pytest.mark.parametrize("component", COMPONENTS)
def test_rbac_grants_everything_the_code_calls(scans, component, monkeypatch):
    docs = manifests()
    sa = pod_spec(workload(component))["serviceAccountName"]
    find("ServiceAccount", sa, docs)
    rules = grants(sa, docs)
    fixed = fixed_objects(component, monkeypatch)
    missing = []
    for group, resource, verb in sorted(scans[component].pairs()):
        if (component, group, resource, verb) in NOT_GRANTED:
            continue
        ns, name = fixed.get((group, resource), (None, None))
        named = name if verb not in ("create", "list", "watch") else None
        ok = any(covers(rule, group, resource, verb, named)
                 and (scope is None or scope == ns) for scope, rule in rules)
        if not ok:
            where = ", ".join(scans[component].where(group, resource, verb))
            missing.append(f"{verb} {group or 'core'}/{resource}"
                           + (f" ({ns}/{name})" if ns else "") + f" used at {where}")
    assert not missing, f"{sa} lacks: " + "; ".join(missing)


@pytest.mark.parametrize("component", COMPONENTS)
def test_rbac_grants_nothing_the_code_does_not_call(scans, component):
    docs = manifests()
    sa = pod_spec(workload(component))["serviceAccountName"]
    used = scans[component].pairs()
    extra = []
    for scope, rule in grants(sa, docs):
        for field in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(field, []), f"{sa}: wildcard {field} in {rule}"
        for g, r, v in itertools.product(rule["apiGroups"], rule["resources"], rule["verbs"]):
            if (g, r, v) not in used:
                extra.append(f"{v} {g or 'core'}/{r}" + (f" in {scope}" if scope else ""))
    assert not extra, f"{sa} is granted what no code calls: " + "; ".join(extra)


def test_deliberate_omissions_are_still_real(scans):
    for (component, group, resource, verb), why in NOT_GRANTED.items():
        assert (group, resource, verb) in scans[component].pairs(), \
            f"NOT_GRANTED lists {verb} {resource} for {component}, which the code no longer " \
            f"calls; remove the entry ({why})"


def test_node_daemon_only_reads(scans):
    """A node is the easiest place to break into: its credentials change nothing
    but the health reports, which nothing acts on (a namespace of their own)."""
    s = scans["node"]
    writes = {(g, r, v) for g, r, v in s.pairs() if v not in ("get", "list", "watch")}
    assert writes <= {("coordination.k8s.io", "leases", v) for v in ("create", "update")}
    rules = grants(pod_spec(workload("node"))["serviceAccountName"], manifests())
    assert [scope for scope, rule in rules if "leases" in rule["resources"]] == \
        [names.NODE_HEALTH_NAMESPACE]
