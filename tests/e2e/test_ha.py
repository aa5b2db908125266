"""OVN central as RAFT clusters (`pacific sandbox up --ha`) under the whole
stack: leaders killed, quorum lost and back, members restarted and re-created,
with pods created meanwhile and real packets."""
from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from controller_fixtures import wait_until
import probes
from pacific import contract, names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox import cnipods, ovnha

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
MEASURES_TIME = True   # runs last on its worker (tests/conftest.py)
NS = "ha"


@pytest.fixture(scope="module")
def ha(sandbox_factory):
    sb = sandbox_factory(nodes=2, services=None, ha=True)
    api = client.load(os.path.join(sb.dir, names.SANDBOX_KUBECONFIG))
    r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
    cnipods.add_pod(sb, NS, "a", "node1", api=api)
    cnipods.add_pod(sb, NS, "b", "node2", api=api)
    yield sb, api
    sb.down()


def ip_of(api, name):
    return probes.pod_ip(api, name, NS)


def lsp_names(sb) -> list[str]:
    out = sb.nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port",
                   f'external_ids:"{names.EXT_OWNER_KIND}"={names.OWNER_KIND_POD}')
    return [x for x in out.split() if x]


def restore(sb, db):
    for i in range(1, ovnha.MEMBERS + 1):
        if i not in ovnha.members_running(sb, db):
            ovnha.member_start(sb, i, db)
    wait_until(lambda: len(ovnha.members_up(sb, db)) == ovnha.MEMBERS, 30, interval=0.2,
               what=f"{db} back to {ovnha.MEMBERS} members")


def test_the_stack_runs_on_three_member_clusters(ha):
    sb, api = ha
    for db in ("nb", "sb"):
        assert ovnha.members_up(sb, db) == [1, 2, 3]
        assert ovnha.leader(sb, db) in (1, 2, 3)
    assert sb.nb_remote.count(",") == 2 and sb.sb_tcp_remote.count(",") == 2
    # the nodes reach SB over TLS only (the members listen with pssl:)
    assert all(r.startswith("ssl:") for r in sb.sb_tcp_remote.split(","))
    for node in sb.nodes:
        assert node.vsctl("get", "Open_vSwitch", ".", "external_ids:ovn-remote").strip() \
            .strip('"') == sb.sb_tcp_remote
        assert "ca.crt" in node.vsctl("get-ssl")
    pod = cnipods.load(sb, NS, "a")
    assert sb.exec(pod.netns, ["ping", "-c1", "-W2", ip_of(api, "b")], check=False).returncode == 0


def test_killing_the_nb_leader_stalls_pacifics_writes_briefly_and_loses_nothing(ha):
    """Pacific's own write (the pod's port and record) comes within 5 s of the
    kill; the pod then runs once ovn-northd found the new leader too (its
    reconnect back-off, up to 8 s, is OVN's: docs/ha.md)."""
    sb, api = ha
    lead = ovnha.leader(sb, "nb")
    made = {}
    t0 = time.monotonic()
    ovnha.member_stop(sb, lead, "nb")
    try:
        t = threading.Thread(target=lambda: made.update(
            pod=cnipods.add_pod(sb, NS, "after-nb-kill", "node1", api=api)))
        t.start()
        wait_until(lambda: contract.own_record(r.get(api, r.PODS, "after-nb-kill", NS) or {}),
                   20, interval=0.05, what="the pod's allocation")
        stall = time.monotonic() - t0
        assert names.pod_lsp_name(NS, "after-nb-kill") in lsp_names(sb)
        assert stall < 5, f"Pacific's write came {stall:.1f} s after the NB leader died"
        t.join(60)
        assert "pod" in made, "the pod did not run"
        assert ovnha.leader(sb, "nb") not in (None, lead)
        # written once: one port per pod, every address distinct
        ports = lsp_names(sb)
        assert len(ports) == len(set(ports)) == 3
        assert len({ip_of(api, n) for n in ("a", "b", "after-nb-kill")}) == 3
        assert sb.exec(made["pod"].netns, ["ping", "-c1", "-W2", ip_of(api, "b")],
                       check=False).returncode == 0
    finally:
        restore(sb, "nb")


def test_killing_the_sb_leader_does_not_interrupt_pod_traffic(ha):
    sb, api = ha
    src, dst = cnipods.load(sb, NS, "a"), ip_of(api, "b")
    lead = ovnha.leader(sb, "sb")
    ping = subprocess.Popen(["ip", "netns", "exec", src.netns, "ping", "-i", "0.01", "-c", "500",
                             "-W", "1", dst], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)       # the probe is running when the leader dies
    ovnha.member_stop(sb, lead, "sb")
    try:
        out, _ = ping.communicate(timeout=60)
        received = int(out.split(" received")[0].rsplit(" ", 1)[-1])
        assert received >= 495, out           # at most 5 of 500 probes (50 ms) lost
        # every ovn-controller is connected to the new leader
        for node in sb.nodes:
            wait_until(lambda node=node: subprocess.run(
                ["ovs-appctl", "-t", node.controller_ctl, "connection-status"],
                capture_output=True, text=True).stdout.strip() == "connected", 30,
                interval=0.2, what=f"{node.name}'s ovn-controller connected")
        pod = cnipods.add_pod(sb, NS, "after-sb-kill", "node2", api=api)
        assert sb.exec(pod.netns, ["ping", "-c1", "-W2", ip_of(api, "a")],
                       check=False).returncode == 0
    finally:
        restore(sb, "sb")


def test_without_quorum_writes_wait_and_resume_by_themselves(ha):
    from pacific import metrics as m
    from pacific.sandbox import controllers
    sb, api = ha
    lead = ovnha.leader(sb, "nb")
    down = [i for i in range(1, ovnha.MEMBERS + 1) if i != lead][:1] + [lead]
    for i in down:
        ovnha.member_stop(sb, i, "nb")
    made = {}

    def create():
        made["pod"] = cnipods.add_pod(sb, NS, "during-outage", "node2", api=api, timeout=120)
    t = threading.Thread(target=create)
    try:
        wait_until(lambda: ovnha.leader(sb, "nb") is None, 10, interval=0.2,
                   what="no NB leader")
        t.start()
        # the controllers say why they cannot write (readiness; the log after
        # the transaction timeout)
        for i in (1, 2):
            url = controllers.metrics_url(sb, i)
            status, body = wait_until(lambda url=url: (x := m.get(url + m.PATH_READYZ))[0] == 503
                                      and x, 15, interval=0.2, what="readiness failing")
            assert "quorum lost" in body, body
        assert "pod" not in made       # no address without an NB to write it to
    finally:
        restore(sb, "nb")
    t.join(120)
    assert "pod" in made, "the pod never got its address once quorum was back"
    assert sb.exec(made["pod"].netns, ["ping", "-c1", "-W2", ip_of(api, "a")],
                   check=False).returncode == 0


def test_a_member_that_lost_its_database_file_is_re_created_and_rejoins(ha):
    sb, api = ha
    victim = next(i for i in (3, 2, 1) if i != ovnha.leader(sb, "nb"))
    ovnha.member_stop(sb, victim, "nb")
    os.unlink(os.path.join(ovnha.member_dir(sb, victim), "nb.db"))
    with pytest.raises(Exception, match="no database file"):
        ovnha.member_start(sb, victim, "nb")
    ovnha.member_recreate(sb, victim, "nb")
    wait_until(lambda: len(ovnha.members_up(sb, "nb")) == ovnha.MEMBERS, 30, interval=0.2,
               what="the re-created member in the cluster")
    # it holds the data: ask it alone, not the leader
    own = ovnha.unix_remote(sb, victim, "nb")
    wait_until(lambda: names.pod_lsp_name(NS, "a") in subprocess.run(
        ["ovn-nbctl", f"--db={own}", "--no-leader-only", "--bare", "--columns=name", "list",
         "Logical_Switch_Port"], capture_output=True, text=True).stdout, 30, interval=0.2,
        what="the re-created member's copy of NB")
