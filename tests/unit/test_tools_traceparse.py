"""ovn-trace --detailed output (captured from the sandbox's OVN 23.03 and 26.03)
parsed into sections and steps, and how each trace ended."""
from __future__ import annotations

import pathlib

from pacific.tools import traceparse as tp

DATA = pathlib.Path(__file__).parent / "data"


def load(name):
    return tp.parse((DATA / name).read_text())


def test_a_service_trace_is_delivered_through_the_load_balancer():
    sections = load("ovn-trace-service.txt")
    assert [(s.pipeline, s.datapath) for s in sections] == [
        ("ingress", "ovn-default"), ("egress", "ovn-default"), ("ingress", "pacific-cluster"),
        ("egress", "pacific-cluster"), ("ingress", "ovn-default"), ("egress", "ovn-default")]
    assert sections[0].inport == "pod:a/p1" and sections[0].outport is None
    assert sections[1].outport == "ls-lrp:ovn-default"
    assert sections[1].output == ("ls-lrp:ovn-default", "patch")
    lb = [st for s in sections for st in s.steps if st.backends]
    assert len(lb) == 1 and lb[0].stage == "ls_in_lb" and lb[0].backends == ["10.16.0.3:80"]
    assert lb[0].priority == 120 and lb[0].uuid == "f18cdfbe" and lb[0].table == 12
    out = tp.outcome(sections)
    assert out.delivered_to == "pod:a/p2" and out.dropped_at is None


def test_an_acl_drop_of_ovn_26_is_its_eval_step_not_the_action_stage():
    """OVN >= 23.09: the ACL's flow in ls_out_acl_eval only sets the drop bit;
    ls_out_acl_action drops without a `drop;` the trace shows."""
    sections = load("ovn-trace-tenant-drop-2603.txt")
    out = tp.outcome(sections)
    assert out.delivered_to is None
    st = out.dropped_at
    assert st.is_acl and st.drops and st.stage == "ls_out_acl_eval"
    assert (st.table, st.priority, st.uuid) == (6, 4000, "22c90144")
    assert "ip4.src == $pacific_isolated_ip4" in st.match
    allowed = [s for sec in sections for s in sec.steps if s.stage == "ls_in_acl_eval"]
    assert allowed and not allowed[0].drops       # the default flow decides nothing


def test_an_acl_drop_is_the_outcome_with_its_step():
    sections = load("ovn-trace-tenant-drop.txt")
    out = tp.outcome(sections)
    assert out.delivered_to is None
    st = out.dropped_at
    assert st.is_acl and st.drops and st.stage == "ls_out_acl"
    assert (st.table, st.priority, st.uuid) == (4, 4000, "3a1f1814")
    assert "ip4.src == $pacific_isolated_ip4" in st.match and st.actions == ["drop;"]


def test_no_sections_and_a_trace_that_just_ends():
    assert tp.outcome([]).last is None
    text = ('ingress(dp="r", inport="lrp:x")\n---\n'
            " 13. lr_in_ip_routing (northd.c:1): ip4.dst == 10.0.0.0/8, priority 50, uuid 0a0b0c0d\n"
            "    next;\n")
    out = tp.outcome(tp.parse(text))
    assert out.delivered_to is None and out.dropped_at is None and out.last.datapath == "r"
    assert out.last.steps[0].actions == ["next;"]


def test_copies_of_a_multicast_datagram_are_sections_however_deep():
    """ovn-trace indents what a clone or a multicast group fans out: each copy
    is a section of its own, with its output or its drop."""
    text = """ingress(dp="ovn-default", inport="pod:a/p1")
---------------------------------------------
32. ls_in_l2_lkup (northd.c:11122): eth.mcast && ip4 && ip4.dst == 239.1.1.1, priority 90, uuid 08d091a2
    clone { outport = "_MC_mrouter_flood"; output; };
    multicast(dp="ovn-default", mcgroup="239.1.1.1")
    ------------------------------------------------
        egress(dp="ovn-default", inport="pod:a/p1", outport="pod:a/p2")
        ---------------------------------------------------------------
             15. ls_out_apply_port_sec (northd.c:6271): 1, priority 0, uuid 86d3c247
                output;
                /* output to "pod:a/p2", type "" */
        egress(dp="ovn-default", inport="pod:a/p1", outport="pod:b/p3")
        ---------------------------------------------------------------
             4. ls_out_acl_eval (northd.c:7000): reg0[8] == 1 && (outport == @pt_x), priority 4000, uuid 11111111
                reg8[17] = 1;
                next;
"""
    secs = tp.parse(text)
    assert [(s.pipeline, s.outport) for s in secs] == [
        ("ingress", None), ("egress", "pod:a/p2"), ("egress", "pod:b/p3")]
    assert secs[1].output == ("pod:a/p2", "") and secs[2].steps[0].drops


def test_an_egress_policy_drop_after_load_balancing_is_an_acl_drop():
    """Policies' egress ACLs are evaluated after the load balancer (decision
    0042): their drop is a step of ls_in_acl_after_lb_eval."""
    text = """\
ingress(dp="ovn-default", inport="pod:mcoff/o1")
------------------------------------------------
 12. ls_in_lb (northd.c:8000): ct.new && ip4.dst == 10.96.0.10, priority 120, uuid 33333333
    next;
 16. ls_in_acl_after_lb_eval (northd.c:7100): reg0[8] == 1 && (inport == @pacific_mcast_off && ip4.mcast), priority 4100, uuid 44444444
    reg8[17] = 1;
    next;
"""
    (sec,) = tp.parse(text)
    lb, acl = sec.steps
    assert not lb.is_acl and not lb.drops
    assert acl.is_acl and acl.drops and acl.uuid == "44444444"
    assert tp.outcome([sec]).dropped_at is acl
