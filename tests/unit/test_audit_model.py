"""Audit and dry-run (pacific/audit.py): what the annotations ask for, the
logged and observing ACLs, ovn-controller's log lines into records, the node's
flow log on a real file, and the features on the controller fakes."""
from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from controller_fakes import drain, events, make_controller
from pacific import audit, names
from pacific.controller import audit as audit_feature
from pacific.kube import resources as r
from pacific.node.feature import NodeContext
from pacific.node.flowlog import FlowLog
from pacific.ovn import acl, ensure
from pacific.ovn.acl import AclSpec
from pacific.tools import flows

LINE = ('2026-11-27T05:37:51.530Z|00012|acl_log(ovn_pinctrl0)|INFO|name="np:default/web:ingress", '
        'verdict=drop, severity=warning, direction=to-lport: tcp,vlan_tci=0x0000,'
        'dl_src=0a:58:0a:10:00:03,dl_dst=0a:58:0a:10:00:04,nw_src=10.16.0.3,nw_dst=10.16.0.4,'
        'nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=36150,tp_dst=80,tcp_flags=syn')


def _obj(**ann):
    return {"metadata": {"name": "p", "annotations": ann}}


@pytest.mark.parametrize("value, allow, deny", [
    ("allow", True, False), ("deny", False, True), ("allow,deny", True, True),
    ("all", True, True), (" deny , allow ", True, True), ("none", False, False)])
def test_the_audit_annotation_asks_for_verdicts(value, allow, deny):
    mode, problems = audit.of(_obj(**{names.ANN_AUDIT: value}))
    assert (mode.allow, mode.deny, mode.dry_run, problems) == (allow, deny, False, [])


def test_bad_values_audit_nothing_and_enforce_and_say_which():
    mode, problems = audit.of(_obj(**{names.ANN_AUDIT: "denied", names.ANN_AUDIT_SEVERITY: "loud",
                                      names.ANN_ENFORCEMENT: "dryrun"}))
    assert mode == audit.Audit()            # nothing logged, enforced, info
    assert len(problems) == 3
    assert 'pacific.io/audit="denied"' in problems[0] and "auditing nothing" in problems[0]
    assert "loud" in problems[1] and "dryrun" in problems[2] and "enforcing" in problems[2]
    # a Namespace or an EgressFirewall has no dry-run
    mode, _ = audit.of(_obj(**{names.ANN_ENFORCEMENT: "dry-run"}), policy=False)
    assert not mode.dry_run
    assert audit.of(_obj(**{names.ANN_ENFORCEMENT: "dry-run"}))[0].dry_run


def test_logged_marks_only_the_verdicts_asked_for():
    allow = AclSpec("to-lport", 1001, "outport == @g && ip4", "allow-related", name="np:a/b:ingress/0")
    drop = AclSpec("to-lport", 1000, "outport == @g && ip4", "drop", name="np:a/b:ingress")
    deny_only = audit.Audit(deny=True, severity="alert")
    meter = audit.meter_name("ns", "a")
    assert audit.logged(allow, deny_only, meter) == allow
    assert not audit.logged(allow, deny_only, meter).log
    d = audit.logged(drop, deny_only, meter)
    assert (d.log, d.severity, d.meter) == (True, "alert", "pacific-audit:ns:a")
    assert d.key == drop.key                 # the same ACL, now logging


def test_each_scope_has_its_meter_and_all_of_them_share_the_node_cap():
    assert audit.meter_of("np:a/web") == audit.meter_name("ns", "a") == "pacific-audit:ns:a"
    assert audit.meter_of("cnp:deny-all") == "pacific-audit:cnp:deny-all"
    # a meter of its own until the cap is shared: the sum stays at or below it
    assert audit.meter_band(1, 20, 40, 200) == (20, 40)
    assert audit.meter_band(10, 20, 40, 200) == (20, 40)
    assert audit.meter_band(40, 20, 40, 200) == (5, 10)
    for n in (1, 7, 11, 199, 200):
        rate, burst = audit.meter_band(n, 20, 40, 200)
        assert n * rate <= 200 and 1 <= burst <= 40
    assert audit.meter_band(1000, 20, 40, 200) == (1, 2)     # OVN's rates are whole packets


def test_an_observer_matches_first_packets_before_load_balancing_and_decides_nothing():
    mode = audit.Audit(dry_run=True, severity="notice")
    drop = AclSpec("to-lport", 1000, "outport == @np_x && ip4", "drop", name="np:a/b:ingress",
                   external_ids={names.EXT_RULE: "ingress/deny"}, tier=1)
    allow = AclSpec("from-lport", 1001, "inport == @np_x && ip4 && ip4.dst == 1.2.3.4",
                    "allow-related", name="np:a/b:egress/0", tier=1, after_lb=True)
    pas = AclSpec("to-lport", 3200, "outport == @cnp_y && ip4", "pass", name="cnp:y:ingress/0")
    arp = AclSpec("to-lport", 3200, "arp && arp.spa == $x", "allow", name="cnp:y:ingress/0/arp")
    o_drop, o_allow, o_pass = audit.observers([drop, allow, pas, arp], mode, "np:a/b")
    assert o_drop.match == "ct.new && ip4.dst == $np_x_ip4 && ip4"
    assert (o_drop.direction, o_drop.action, o_drop.after_lb, o_drop.tier) == (
        "from-lport", "allow-related", False, 1)      # the stage no enforcing ACL is in
    assert (o_drop.log, o_drop.severity, o_drop.name) == (True, "notice", "dry-np:a/b:ingress")
    assert o_drop.external_ids[names.EXT_OWNER_KIND] == names.OWNER_KIND_DRY_RUN
    assert o_drop.external_ids[names.EXT_RULE] == "ingress/deny"
    assert o_allow.match == "ct.new && inport == @np_x && ip4 && ip4.dst == 1.2.3.4"
    assert o_allow.action == "allow-related" and not o_allow.log and not o_allow.after_lb
    assert o_pass.action == "pass" and not o_pass.log


def test_a_log_line_becomes_a_record_in_kubernetes_terms():
    entry = audit.parse_line(LINE)
    assert entry["protocol"] == "TCP" and (entry["src"], entry["dport"]) == ("10.16.0.3", 80)
    pods = {"10.16.0.3": "default/b", "10.16.0.4": "default/c"}
    rec = audit.record(entry, "node2", pods.get)
    assert rec == {"time": "2026-11-27T05:37:51.530Z", "node": "node2", "verdict": "deny",
                   "severity": "warning", "protocol": "TCP",
                   "policy": {"kind": "NetworkPolicy", "namespace": "default", "name": "web",
                              "rule": "ingress"},
                   "src": {"ip": "10.16.0.3", "pod": "default/b", "port": 36150},
                   "dst": {"ip": "10.16.0.4", "pod": "default/c", "port": 80}}
    assert audit.parse_line("2026-11-27T05:37:51.530Z|00012|binding|INFO|Claiming lport") is None
    dry = audit.record(audit.parse_line(LINE.replace('name="np:', 'name="dry-np:')
                                        .replace("verdict=drop", "verdict=allow")), "n", pods.get)
    assert dry["verdict"] == "would-deny" and dry["policy"]["name"] == "web"


def test_an_arp_line_names_who_asked_for_whom():
    line = ('2026-11-27T06:17:32.000Z|00020|acl_log(ovn_pinctrl0)|INFO|name="tenant:other", '
            'verdict=drop, severity=info, direction=to-lport: arp,vlan_tci=0x0000,'
            'dl_src=0a:58:0a:10:00:03,dl_dst=0a:58:0a:10:00:08,arp_spa=10.16.0.3,'
            'arp_tpa=10.16.0.8,arp_op=1,arp_sha=0a:58:0a:10:00:03,arp_tha=0a:58:0a:10:00:08')
    rec = audit.record(audit.parse_line(line), "n", {"10.16.0.8": "z/a"}.get)
    assert (rec["protocol"], rec["src"]["ip"], rec["dst"]["pod"]) == ("ARP", "10.16.0.3", "z/a")
    assert rec["policy"]["kind"] == "Tenant" and rec["policy"]["name"] == "other"
    # an answer (the switch's, for the pod asked for) is the question it answers
    rec = audit.record(audit.parse_line(line.replace("arp_op=1", "arp_op=2")), "n",
                       {"10.16.0.8": "z/a"}.get)
    assert (rec["src"]["pod"], rec["src"]["ip"], rec["dst"]["ip"]) == ("z/a", "10.16.0.8",
                                                                       "10.16.0.3")


def test_an_audited_tenant_also_drops_and_logs_the_switch_s_answers_for_its_pods():
    from pacific.controller.tenant import isolation_acls, isolation_answer_match
    from pacific.tenancy import group_name
    assert len(isolation_acls("blue")) == 2          # not audited: the two drops
    specs = isolation_acls("blue", audit.Audit(deny=True))
    pg = group_name("blue")
    assert [(s.priority, s.match, s.action) for s in specs][2:] == [
        (names.PRIO_ACL_ISOLATION_ANSWER, isolation_answer_match("blue"), "drop"),
        (names.PRIO_ACL_ISOLATION_OWN_ANSWER, isolation_answer_match("blue", own=True), "allow")]
    assert isolation_answer_match("blue") == (
        f"outport == @pacific_isolated && arp && arp.op == 2 && arp.spa == ${pg}_ip4 && "
        "arp.tpa == $pacific_isolated_ip4")
    assert isolation_answer_match("blue", own=True) == (
        f"outport == @{pg} && arp && arp.op == 2 && arp.spa == ${pg}_ip4")
    # every match names each address set once (ovn-controller's incremental
    # processing misses the flows of one naming a set twice)
    assert all(s.match.count(f"${pg}_ip4") == 1 for s in specs)
    assert {(s.action, s.log, s.meter) for s in specs} == {
        ("drop", True, "pacific-audit:tenant:blue"), ("allow", False, "")}


@pytest.mark.parametrize("name, want", [
    ("cnp:mon:ingress/2", ("ClusterNetworkPolicy", "", "mon", "ingress/2")),
    ("tenant:blue", ("Tenant", "", "blue", "isolation")),
    ("efw:shop:3", ("EgressFirewall", "shop", "default", "egress/3")),
    ("np:ns/p:egress/0", ("NetworkPolicy", "ns", "p", "egress/0"))])
def test_acl_names_name_their_policy(name, want):
    p = audit.policy_of(name)
    assert (p["kind"], p["namespace"], p["name"], p["rule"]) == want


def test_the_filters_of_pacific_flows():
    rec = audit.record(audit.parse_line(LINE), "n", {"10.16.0.3": "x/b", "10.16.0.4": "y/c"}.get)
    assert audit.matches(rec, namespace="x") and audit.matches(rec, namespace="default")
    assert not audit.matches(rec, namespace="z")
    assert audit.matches(rec, pod="y/c") and not audit.matches(rec, pod="y/b")
    assert audit.matches(rec, policy="web") and audit.matches(rec, policy="NetworkPolicy/default/web")
    assert not audit.matches(rec, policy="other") and not audit.matches(rec, verdict="allow")


def _flowlog(tmp_path):
    src, dest = tmp_path / "ovn-controller.log", tmp_path / "out" / "flows.jsonl"
    src.write_text("2026-11-27T05:00:00.000Z|00001|acl_log(ovn_pinctrl0)|INFO|name=\"old\", "
                   "verdict=drop, severity=info, direction=to-lport: tcp,nw_src=1.1.1.1\n")
    args = SimpleNamespace(ovn_controller_log=str(src), flow_log=str(dest),
                           flow_log_max_bytes=400, node_name="node2",
                           ovn_controller_log_max_bytes=0, ovn_rundir=str(tmp_path))
    fl = FlowLog(NodeContext(args))
    fl._on_ip(None, {"spec": {"ipAddress": "10.16.0.3", "namespace": "default", "pod": "b"}})
    return fl, src, dest


def test_the_node_turns_new_lines_into_records_once_per_connection(tmp_path):
    from pacific.node import metrics
    denied = metrics.FLOW_RECORDS.labels("deny")._value.get()
    fl, src, dest = _flowlog(tmp_path)
    fl.converge()                   # a first start: what was logged before is history
    assert not dest.exists()
    with open(src, "a") as f:
        f.write(LINE + "\n" + LINE.replace("tcp_flags=syn", "tcp_flags=ack") + "\n"
                + "2026-11-27T05:37:52.000Z|00013|binding|INFO|something else\n"
                + LINE.replace("tp_src=36150", "tp_src=36151") + "\n" + "partial line")
    fl.converge()
    recs = [json.loads(x) for x in dest.read_text().splitlines()]
    assert [r_["src"]["port"] for r_ in recs] == [36150, 36151]   # the ack: same connection
    assert recs[0]["src"]["pod"] == "default/b" and recs[0]["dst"]["pod"] is None
    assert metrics.FLOW_RECORDS.labels("deny")._value.get() == denied + 2
    # a restart goes on where the last run stopped; the partial line waits for its end
    fl2 = FlowLog(NodeContext(fl.ctx.args))
    with open(src, "a") as f:
        f.write("\n" + LINE.replace("tp_src=36150", "tp_src=40000") + "\n")
    fl2.converge()
    assert os.path.exists(str(dest) + ".1")          # past 400 bytes: rotated once
    assert [r_["src"]["port"] for r_ in flows.read([str(dest)], {})] == [36150, 36151, 40000]
    # a rotated source is read from its start; the records file rotates past its size
    os.rename(src, str(src) + ".1")
    src.write_text(LINE.replace("tp_src=36150", "tp_src=50000") + "\n")
    fl2.converge()
    assert [r_["src"]["port"] for r_ in flows.read([str(dest)], {})] == [36150, 36151, 40000, 50000]


def _fake_ovn_controller(rundir, src, late_line):
    """A unixctl socket answering vlog/reopen as ovn-controller does: a line
    it was writing lands in the renamed file, then it opens a new one."""
    import socket
    import threading
    (rundir / "ovn-controller.pid").write_text("4242\n")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(rundir / "ovn-controller.4242.ctl"))
    srv.listen(1)
    calls = []

    def serve():
        conn, _ = srv.accept()
        with conn:
            calls.append(json.loads(conn.recv(65536))["method"])
            with open(str(src) + ".1", "a") as f:
                f.write(late_line + "\n")
            src.write_text("")
            conn.sendall(json.dumps({"result": "", "error": None, "id": 0}).encode())
    threading.Thread(target=serve, daemon=True).start()
    return calls


def test_the_node_rotates_ovn_controller_s_log_at_its_size_and_loses_no_line(tmp_path):
    fl, src, dest = _flowlog(tmp_path)
    fl.source_max = 1000
    fl.converge()
    calls = _fake_ovn_controller(tmp_path, src, LINE.replace("tp_src=36150", "tp_src=2"))
    with open(src, "a") as f:      # past 1000 bytes once read: rotated
        f.write("".join(LINE.replace("tp_src=36150", f"tp_src={3 + i}") + "\n" for i in range(3)))
    fl.converge()
    assert calls == ["vlog/reopen"] and os.path.getsize(src) == 0
    assert os.path.getsize(str(src) + ".1") > 1000
    with open(src, "a") as f:      # the new file, read from its start
        f.write(LINE.replace("tp_src=36150", "tp_src=9") + "\n")
    fl.converge()
    assert [r_["src"]["port"] for r_ in flows.read([str(dest)], {})] == [3, 4, 5, 2, 9]


def test_pacific_flows_follows_new_records(tmp_path):
    import threading
    path = tmp_path / "flows.jsonl"
    path.write_text("")
    stop = threading.Event()
    rec = audit.record(audit.parse_line(LINE), "n", lambda ip: None)
    got = []

    records = flows.follow([str(path)], {"verdict": "deny"}, stop)   # from this moment

    def reader():
        for x in records:
            got.append(x)
            stop.set()
    t = threading.Thread(target=reader)
    t.start()
    with open(path, "a") as f:
        f.write(json.dumps({**rec, "verdict": "allow"}) + "\n" + json.dumps(rec) + "\n")
    t.join(5)
    assert got == [rec]
    assert "NetworkPolicy/default/web ingress" in flows.line(rec)


# -- the features on the controller fakes -------------------------------------------------
def _setup():
    ctl = make_controller()
    ctl.nb.owned.append(SimpleNamespace(table=ensure.LS, name="ovn-default", acls=[],
                                        external_ids={names.EXT_OWNER_KIND: names.OWNER_KIND_SUBNET}))
    ctl.kube.add(r.NAMESPACES, {"metadata": {"name": "a"}})
    return ctl


def _np(ann):
    return {"metadata": {"name": "web", "namespace": "a", "annotations": ann},
            "spec": {"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"]}}


def _group_acls(ctl):
    return [s for _, cs in ctl.writer.writes for c in cs
            if isinstance(c, acl.EnsureACLs) and c.group.startswith("np_") for s in c.specs]


def _switch_acls(ctl):
    return [c for _, cs in ctl.writer.writes for c in cs
            if isinstance(c, acl.EnsureACLs) and c.table == ensure.LS and c.scope == audit_feature.SCOPE]


def test_an_audited_networkpolicy_logs_its_drops_through_its_namespace_s_meter():
    ctl = _setup()
    ctl.kube.add(r.NETWORKPOLICIES, _np({names.ANN_AUDIT: "deny"}), "a")
    drain(ctl)
    specs = _group_acls(ctl)
    assert {(s.action, s.log) for s in specs} == {("drop", True), ("allow-related", False)}
    assert {s.meter for s in specs if s.log} == {"pacific-audit:ns:a"}
    meters = [c for _, cs in ctl.writer.writes for c in cs if isinstance(c, ensure.EnsureMeter)]
    assert meters and (meters[0].name, meters[0].rate, meters[0].fair) == (
        "pacific-audit:ns:a", names.AUDIT_RATE, False)


def test_a_dry_run_policy_enforces_nothing_and_observes_on_every_subnet_switch():
    ctl = _setup()
    ctl.kube.add(r.NETWORKPOLICIES, _np({names.ANN_ENFORCEMENT: "dry-run"}), "a")
    drain(ctl)
    assert _group_acls(ctl) == []
    assert next(f for f in ctl.features if f.name == "audit").observing() == 2
    last = _switch_acls(ctl)[-1]
    assert last.group == "ovn-default"
    assert {(s.action, s.log, s.after_lb) for s in last.specs} == {
        ("allow-related", True, False), ("allow-related", False, False)}
    # enforcing it: the observers go, the group's ACLs come
    ctl.writer.writes.clear()
    pol = r.get(ctl.kube, r.NETWORKPOLICIES, "web", "a")
    pol["metadata"]["annotations"] = {names.ANN_ENFORCEMENT: "enforce"}
    r.replace(ctl.kube, r.NETWORKPOLICIES, pol, "a")
    drain(ctl)
    observers = next(f for f in ctl.features if f.name == "audit")
    assert observers.observing() == 0          # (the fake switch never held them)
    assert {s.action for s in _group_acls(ctl)} == {"drop", "allow-related"}


def test_a_bad_annotation_is_an_event_and_the_policy_is_enforced():
    ctl = _setup()
    ctl.kube.add(r.NETWORKPOLICIES, _np({names.ANN_ENFORCEMENT: "maybe"}), "a")
    drain(ctl)
    assert any("drop" == s.action for s in _group_acls(ctl))
    assert any(e.startswith("InvalidAudit") and "maybe" in e for e in events(ctl, "web", "a"))


def test_ipv6_acls_have_observers_and_ipv6_log_lines_name_both_ends():
    spec = AclSpec("to-lport", 1000, "outport == @g && ip6", "drop", name="np:a/b:ingress/ip6")
    obs = audit.observer(spec, audit.Audit(dry_run=True), "np:a/b")
    assert obs.match == "ct.new && ip6.dst == $g_ip6 && ip6" and obs.log
    line = ('2026-11-28T05:37:51.530Z|00012|acl_log(ovn_pinctrl0)|INFO|'
            'name="np:default/web:ingress/0/ip6", verdict=allow, severity=info, '
            'direction=to-lport: tcp6,vlan_tci=0x0000,dl_src=0a:58:0a:10:00:03,'
            'dl_dst=0a:58:0a:10:00:04,ipv6_src=fd00:16::3,ipv6_dst=fd00:16::4,'
            'ipv6_label=0x00000,nw_tos=0,nw_ecn=0,nw_ttl=64,nw_frag=no,tp_src=36150,tp_dst=80,'
            'tcp_flags=syn')
    e = audit.parse_line(line)
    assert (e["protocol"], e["src"], e["dst"], e["dport"]) == ("TCP", "fd00:16::3", "fd00:16::4", 80)
    assert audit.policy_of(e["name"])["rule"] == "ingress/0/ip6"
