"""`pacific sandbox up --ovs-pods`: the whole network from Pacific's image and
deploy/ on nodes that run only a kubelet and containerd: OVN central as
deploy/central.yaml's pacific-central pods on three labelled nodes (NB and SB
RAFT clusters over TLS, certificates from `pacific tls init`), Open vSwitch and
ovn-controller as deploy/vswitch.yaml's pacific-vswitch pods, the controller
and node daemons as in --deploy.  Then what users of such installs report
losing (kube-ovn #6815, #7110, #1420): the leading member killed, a member's
database deleted, another's corrupted, a node relabelled out and in, every
component upgraded; each recovered by the pods themselves while pods' traffic
flows."""
from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from controller_fixtures import wait_until
from kubelet_fixtures import kubectl, running, skip_without_kubelets

from pacific import names
from pacific.kube import client
from pacific.kube import resources as r
from pacific.sandbox.k8s import bins, central, deploy, rollout, traffic
from pacific.sandbox.k8s import sandbox as k8s

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)

NS = "cen"
PODS = """
apiVersion: v1
kind: Pod
metadata: {name: %(name)s, namespace: cen, labels: {app: ping}}
spec:
  nodeName: %(node)s
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: localhost/busybox:latest
    imagePullPolicy: IfNotPresent
    command: [sh, -c, "exec httpd -f -p 8080 -h /var/www"]
"""
SELECTOR = f"app.kubernetes.io/name={central.WORKLOAD}"


@pytest.fixture(scope="module")
def cen(sandbox_factory):
    skip_without_kubelets()
    try:
        deploy.archive()
    except Exception as e:
        pytest.skip(str(e))
    # four nodes: the first three are central's, the fourth joins when relabelled
    sb = sandbox_factory(nodes=4, services=None, ovs_pods=True)
    api = client.load(k8s.kubeconfig_path(sb))
    kubectl(sb, "create", "namespace", NS)
    for i, node in ((1, "node1"), (2, "node2")):
        kubectl(sb, "apply", "-f", "-", input=PODS % {"name": f"p{i}", "node": node})
    wait_until(lambda: len(running(api, NS, "app=ping")) == 2, 120, what="2 pods Running")
    yield sb, api
    sb.down()


def _pods(api) -> dict[str, dict]:
    """node name -> its pacific-central pod (scheduled, not being deleted)."""
    items = r.list_(api, r.PODS, names.PACIFIC_NAMESPACE, label_selector=SELECTOR)[0]
    return {p["spec"]["nodeName"]: p for p in items
            if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")}


def _servers(node, db: str) -> int:
    """How many servers member `node` counts in its cluster (0: not a member)."""
    st = central.cluster_status(node, db)
    if "Status: cluster member" not in st:
        return 0
    return len(re.findall(r"^\s+\w{4} \(\w{4} at ", st.split("Servers:", 1)[-1], re.M))


def _whole(sb, n: int = 3) -> bool:
    return all(_servers(m, db) == n for m in central.members(sb) for db in ("nb", "sb"))


def _kill_member(sb, node) -> int:
    """SIGKILL the pacific-central process on `node` (a crash of its container)."""
    want = os.stat(f"/run/netns/{node.netns}").st_ino
    for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if any(a.endswith(b"pacific-central") for a in argv[:2]) \
                    and os.stat(f"/proc/{pid}/ns/net").st_ino == want:
                os.kill(pid, signal.SIGKILL)
                return pid
        except OSError:
            continue
    raise AssertionError(f"no pacific-central process in {node.netns}")


def _ping(sb, api) -> subprocess.Popen:
    """A ping from p1 (node1) to p2 (node2), 150 packets 0.1 s apart."""
    p2 = {p["metadata"]["name"]: p for p in running(api, NS, "app=ping")}["p2"]
    return subprocess.Popen(
        [bins.path("kubectl"), f"--kubeconfig={k8s.kubeconfig_path(sb)}", "-n", NS, "exec",
         "p1", "--", "ping", "-q", "-c", "150", "-i", "0.1", "-W", "1", p2["status"]["podIP"]],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _loss(ping: subprocess.Popen) -> tuple[int, int]:
    out = ping.communicate(timeout=60)[0]
    m = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def test_the_network_comes_up_from_the_manifests(cen):
    sb, api = cen
    pods = _pods(api)
    assert sorted(pods) == [n.name for n in central.members(sb)]
    assert all(deploy.pod_ready(p) for p in pods.values())
    assert {c["image"] for p in pods.values() for c in p["spec"]["containers"]} \
        == {deploy.image_name()}
    # no OVSDB server of the sandbox's own: the members' sockets are the pods'
    assert not [t for t in sb.state.read()["daemons"] if t.startswith("central/")]
    assert _whole(sb)
    # nor an Open vSwitch: each node's is its pacific-vswitch pod's
    nodes = {n.name for n in sb.nodes}
    assert not [t for t in sb.state.read()["daemons"] if t.split("/")[0] in nodes]
    vswitch = r.list_(api, r.PODS, names.PACIFIC_NAMESPACE,
                      label_selector=f"app.kubernetes.io/name={central.VSWITCH}")[0]
    assert sorted(p["spec"]["nodeName"] for p in vswitch if deploy.pod_ready(p)) \
        == [n.name for n in sb.nodes]
    # each database's leader labels its pod; the leader Services select it
    for db in ("nb", "sb"):
        lead = central.leader(sb, db)
        labelled = wait_until(lambda db=db: [n for n, p in _pods(api).items()
                                             if p["metadata"]["labels"].get(
                                                 names.CENTRAL_LEADER_LABELS[db]) == "true"],
                              30, what=f"the {db} leader's pod label")
        assert labelled == [lead.name]
    # the TLS listeners take no plain TCP client
    cp = subprocess.run(["ovn-nbctl", f"--db=tcp:{central.members(sb)[0].underlay_ip}:6641",
                         "--timeout=3", "show"], capture_output=True, text=True)
    assert cp.returncode != 0
    # pods on two nodes talk through the network these members serve
    p2 = {p["metadata"]["name"]: p for p in running(api, NS, "app=ping")}["p2"]
    out = kubectl(sb, "-n", NS, "exec", "p1", "--", "ping", "-c", "3", "-W", "2",
                  p2["status"]["podIP"])
    assert " 0% packet loss" in out.stdout, out.stdout


def test_the_leading_member_killed_writes_resume_and_traffic_flows(cen):
    sb, api = cen
    lead = central.leader(sb, "nb")
    ping = _ping(sb, api)
    time.sleep(1)          # the ping is under way before the kill
    t0 = time.monotonic()
    _kill_member(sb, lead)
    done = None
    for i in range(200):
        cp = subprocess.run(["ovn-nbctl", f"--db={sb.nb_remote}", "--timeout=1",
                             "ls-add", f"after-kill-{os.getpid()}-{i}"],
                            capture_output=True, text=True)
        if cp.returncode == 0:
            done = time.monotonic() - t0
            break
    assert done is not None and done <= 5.0, f"NB writes resumed after {done} s"
    sent, got = _loss(ping)
    print(f"leader killed: NB writes resumed after {done:.2f} s; a ping across it: "
          f"{sent} sent, {got} received")
    assert sent >= 100 and got == sent
    # the container restarts and its member rejoins: three servers again
    wait_until(lambda: _whole(sb) and all(deploy.pod_ready(p) for p in _pods(api).values()), 120,
               what="the killed member back in both clusters")


def test_a_members_database_deleted_is_recovered(cen):
    sb, api = cen
    victim = next(n for n in central.members(sb) if n is not central.leader(sb, "nb"))
    wait_until(lambda: _whole(sb), 60, what="whole clusters")
    marker = f"deleted-{os.getpid()}"
    sb.nbctl("ls-add", marker)
    os.unlink(central.db_file(victim, "nb"))
    _kill_member(sb, victim)
    wait_until(lambda: _whole(sb) and _has(victim, marker), 120,
               what=f"{victim.name}'s NB member back, three servers (the old id kicked)")


def _has(node, switch: str) -> bool:
    cp = subprocess.run(["ovn-nbctl", f"--db=unix:{central.socket(node, 'nb')}", "--no-leader-only",
                         "--timeout=3", "--bare", "--columns=name", "find", "Logical_Switch",
                         f"name={switch}"], capture_output=True, text=True)
    return cp.returncode == 0 and switch in cp.stdout


def test_a_members_corrupted_database_is_moved_aside_and_recovered(cen):
    sb, api = cen
    wait_until(lambda: _whole(sb), 60, what="whole clusters")
    victim = central.members(sb)[-1]
    path = central.db_file(victim, "sb")
    with open(path, "r+b") as f:        # the RAFT header overwritten (kube-ovn #7110)
        f.write(b"\0garbage" * 64)
    _kill_member(sb, victim)
    wait_until(lambda: _whole(sb), 120, what=f"{victim.name}'s SB member back")
    aside = glob.glob(path + ".corrupt-*")
    assert aside, os.listdir(os.path.dirname(path))
    pod = wait_until(lambda: _pods(api).get(victim.name), 30,
                     what=f"{victim.name}'s pacific-central pod")["metadata"]["name"]
    logs = kubectl(sb, "-n", names.PACIFIC_NAMESPACE, "logs", pod).stdout
    assert "moved aside" in logs, logs[-2000:]


def _relabel(sb, api, out, into) -> None:
    """Take the label off `out`, put it on `into`; wait until the members are
    the others and `into` (three servers each, `out`'s pod gone)."""
    kubectl(sb, "label", "node", out.name, f"{names.CENTRAL_ROLE_LABEL}-")
    kubectl(sb, "label", "node", into.name, f"{names.CENTRAL_ROLE_LABEL}={names.CENTRAL_ROLE}")
    now = [m for m in central.members(sb) if m is not out] + [into] \
        if out in central.members(sb) else central.members(sb)
    def moved() -> bool:
        pods = _pods(api)         # one snapshot: a pod may be replaced between two reads
        return (out.name not in pods and into.name in pods and deploy.pod_ready(pods[into.name])
                and all(_servers(m, db) == 3 for m in now for db in ("nb", "sb")))
    wait_until(moved, 180, what=f"{out.name} out of both clusters, {into.name} in")


def test_a_node_relabelled_out_and_a_new_one_in(cen):
    """node3 out (it leaves both clusters), node4, never a member, in (it joins
    and receives the data); then back as they were."""
    sb, api = cen
    wait_until(lambda: _whole(sb), 60, what="whole clusters")
    old, new = central.members(sb)[-1], sb.nodes[3]
    marker = f"relabel-{os.getpid()}"
    sb.nbctl("ls-add", marker)
    _relabel(sb, api, old, new)
    assert _has(new, marker)
    assert "Status: cluster member" not in central.cluster_status(old, "nb")
    marker2 = f"relabel-back-{os.getpid()}"
    sb.nbctl("ls-add", marker2)
    _relabel(sb, api, new, old)
    wait_until(lambda: _whole(sb), 60, what="node1..3 the members again")
    assert _has(old, marker2)


def _served_serial(sb, node) -> str:
    """The serial of the certificate NB serves at `node`'s address (seen from
    the underlay, with that node's own client certificate)."""
    f = central.tls_files(node)
    cp = subprocess.run(["ip", "netns", "exec", sb.central_netns, "openssl", "s_client",
                         "-connect", f"{node.underlay_ip}:{names.OVN_NB_PORT}",
                         "-cert", f["tls.crt"], "-key", f["tls.key"], "-CAfile", f["ca.crt"]],
                        input="", capture_output=True, text=True, timeout=30)
    pem = re.search(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----", cp.stdout, re.S)
    assert pem, cp.stdout + cp.stderr
    return _serial(pem.group(0))


def _serial(pem: str) -> str:
    return subprocess.run(["openssl", "x509", "-noout", "-serial"], input=pem,
                          capture_output=True, text=True, check=True).stdout.strip()


def _secret_serial(api, name: str) -> str:
    import base64
    sec = r.get(api, r.SECRETS, name, names.PACIFIC_NAMESPACE)
    return _serial(base64.b64decode(sec["data"]["tls.crt"]).decode())


RENEWED: dict[str, str] = {}


def test_certificates_renewed(cen):
    """`pacific tls init --renew`: new certificates of the same CA in the
    Secrets and on every node; the rolling updates below restart the daemons
    onto them (docs/ha.md), the last test checks they are in use."""
    sb, api = cen
    RENEWED["old_served"] = _served_serial(sb, central.members(sb)[0])
    old = {s: _secret_serial(api, s) for s in ("pacific-ovn-central", "pacific-ovn-tls")}
    old_node = _serial(open(central.tls_files(sb.nodes[0])["tls.crt"]).read())
    central.certificates(api, sb, renew=True)
    new = {s: _secret_serial(api, s) for s in old}
    assert all(new[s] != old[s] for s in old), (old, new)
    assert _serial(open(central.tls_files(sb.nodes[0])["tls.crt"]).read()) != old_node
    RENEWED["central"] = new["pacific-ovn-central"]


@pytest.mark.parametrize("kind,name", [("DaemonSet", "pacific-central"),
                                       ("DaemonSet", "pacific-node"),
                                       ("Deployment", "pacific-controller"),
                                       ("DaemonSet", "pacific-vswitch")])
def test_a_rolling_upgrade_keeps_pods_talking(cen, kind, name):
    """A new image for one component, rolled out pod by pod, while p1 pings p2
    and streams TCP to it across nodes: no ping lost, the connection holds
    (pacific-vswitch: the new pods adopt the daemons of their version, which
    forward throughout)."""
    sb, api = cen
    wait_until(lambda: _whole(sb), 60, what="whole clusters")
    pods = {p["metadata"]["name"]: p for p in running(api, NS, "app=ping")}
    probe = traffic.Probe(sb, pods["p1"], pods["p2"]).start()
    try:
        took = rollout.upgrade(sb, api, kind, name)
        marker = f"after-upgrade-{name}-{os.getpid()}"
        sb.nbctl("ls-add", marker)          # NB still takes writes
    finally:
        res = probe.stop()
    print(f"rolling upgrade of {kind} {name} ({took:.1f} s): {res}")
    assert res.lost == 0 and res.broken is None, str(res)
    assert res.stall < 1.0, str(res)
    if name == "pacific-central":
        assert _whole(sb)


def test_an_open_vswitch_upgrade_costs_under_a_second_per_node(cen):
    """pacific-vswitch rolled out replacing its daemons, as a new Open vSwitch
    version makes it (PACIFIC_VSWITCH_REPLACE_DAEMONS=1): on each node
    ovs-vswitchd restarts with its saved flows and tunnel neighbours replayed
    under flow-restore-wait.  The userspace datapath is that process, so
    packets are lost while it restarts: under a second on each of p1's and
    p2's nodes, and the TCP connection holds."""
    sb, api = cen
    pods = {p["metadata"]["name"]: p for p in running(api, NS, "app=ping")}
    before = {n.name: open(os.path.join(n.rundir, "ovs-vswitchd.pid")).read() for n in sb.nodes}
    probe = traffic.Probe(sb, pods["p1"], pods["p2"]).start()
    try:
        took = rollout.upgrade(sb, api, "DaemonSet", central.VSWITCH,
                               env={"PACIFIC_VSWITCH_REPLACE_DAEMONS": "1"})
    finally:
        res = probe.stop()
    print(f"Open vSwitch replaced on every node ({took:.1f} s): {res}, about "
          f"{res.lost * traffic.PING_INTERVAL:.2f} s of pings lost")
    after = {n.name: open(os.path.join(n.rundir, "ovs-vswitchd.pid")).read() for n in sb.nodes}
    assert all(after[n] != before[n] for n in after), "every node's ovs-vswitchd replaced"
    assert res.broken is None, str(res)
    assert res.lost * traffic.PING_INTERVAL <= 2 * 1.0, str(res)
    assert {p["status"]["podIP"] for p in running(api, NS, "app=ping")} \
        == {p["status"]["podIP"] for p in pods.values()}, "the pods keep their addresses"


def test_the_renewed_certificates_are_in_use(cen):
    """After the rolling updates: every member serves the renewed certificate,
    every ovn-controller is connected with its node's renewed one, and the
    controller (its renewed client certificate) still writes NB: a new pod runs."""
    sb, api = cen
    assert RENEWED, "test_certificates_renewed did not run"
    for m in central.members(sb):
        assert _served_serial(sb, m) == RENEWED["central"] != RENEWED["old_served"]
    for n in sb.nodes:
        wait_until(lambda n=n: subprocess.run(
            ["ovs-appctl", "-t", n.controller_ctl, "connection-status"], capture_output=True,
            text=True).stdout.strip() == "connected", 30,
            what=f"{n.name}'s ovn-controller connected to SB")
    kubectl(sb, "apply", "-f", "-", input=PODS % {"name": "p3", "node": "node3"})
    wait_until(lambda: "p3" in {p["metadata"]["name"] for p in running(api, NS, "app=ping")},
               120, what="p3 Running (its port written by the controller)")


def _tool(sb, kubeconfig: str, *args: str, tmpdir: str) -> subprocess.CompletedProcess:
    """A day-two command given nothing but a kubeconfig, run where an operator's
    workstation would be: on the underlay (the sandbox's central namespace)."""
    pacific = os.path.join(os.path.dirname(sys.executable), "pacific")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PACIFIC_")}
    env["TMPDIR"] = tmpdir
    return subprocess.run(["ip", "netns", "exec", sb.central_netns, pacific, *args,
                           "--kubeconfig", kubeconfig], capture_output=True, text=True,
                          env=env, timeout=120)


def _underlay_kubeconfig(sb, path: str, token: str | None = None) -> str:
    """The sandbox administrator's kubeconfig (or `token`'s) at the API's
    underlay address."""
    import yaml
    with open(k8s.kubeconfig_path(sb)) as f:
        cfg = yaml.safe_load(f)
    for c in cfg["clusters"]:
        c["cluster"]["server"] = k8s.underlay_url(sb)
    if token:
        for u in cfg["users"]:
            u["user"] = {"token": token}
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def test_the_tools_find_central_through_the_cluster(cen, tmp_path):
    """trace and topology with nothing but a kubeconfig: the remotes from
    pacific-config, the TLS files from pacific-ovn-tls.  A tenant with edit in
    one namespace gets a refusal that names the right it lacks, and nothing of
    OVN (no remote, no address)."""
    sb, api = cen
    admin = _underlay_kubeconfig(sb, str(tmp_path / "admin"))
    tmp = tmp_path / "tmp"            # the tools' TMPDIR: where they write TLS files
    tmp.mkdir()
    cp = _tool(sb, admin, "topology", "--format", "json", tmpdir=str(tmp))
    assert cp.returncode == 0, cp.stderr
    assert {n.name for n in sb.nodes} <= set(re.findall(r"node\d", cp.stdout))
    cp = _tool(sb, admin, "trace", f"{NS}/p1", f"{NS}/p2", "--tcp", "8080", tmpdir=str(tmp))
    assert cp.returncode == 0, cp.stderr
    assert "p2" in cp.stdout
    # no TLS file is left behind by the tools
    assert not os.listdir(tmp)
    # a tenant: ServiceAccount with edit in its namespace only
    kubectl(sb, "-n", NS, "create", "serviceaccount", "tenant")
    kubectl(sb, "-n", NS, "create", "rolebinding", "tenant-edit", "--clusterrole=edit",
            f"--serviceaccount={NS}:tenant")
    token = k8s.service_account_token(api, NS, "tenant")
    tenant = _underlay_kubeconfig(sb, str(tmp_path / "tenant"), token)
    cp = _tool(sb, tenant, "topology", tmpdir=str(tmp))
    assert cp.returncode != 0
    assert f"get on configmap {names.PACIFIC_NAMESPACE}/{names.CONFIG_MAP}" in cp.stderr, cp.stderr
    assert "ssl:" not in cp.stderr + cp.stdout
    assert not any(n.underlay_ip in cp.stderr + cp.stdout for n in sb.nodes)
