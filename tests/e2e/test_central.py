"""pacific-central: three members of OVN central on loopback addresses, over
TLS, with real ovsdb-servers and ovn-northd.  They form the NB and SB RAFT
clusters from nothing, say so on /readyz, and each recovers without manual
steps from what the docs used to make an operator do by hand: a lost database
file (a new server joins at the old address and the leader kicks the old id),
an unreadable one (moved aside, joined again), the leader's death (writes
resume on the others within 5 s; its daemons do not outlive it)."""
from __future__ import annotations

import glob
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from controller_fixtures import wait_until
from pacific import metrics, names
from pacific.central import raft
from pacific.kube import client as kclient
from pacific.kube import resources as r
from pacific.sandbox.k8s.pki import Pki

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)



def loopback_trio() -> list[str]:
    """Three addresses of a /24 of 127/8 no other run of this module uses at
    the same time (two fixtures here, a CI run beside a developer's)."""
    third = random.Random(os.getpid() ^ time.monotonic_ns()).randrange(2, 250)
    second = next(COUNTER)
    return [f"127.{second}.{third}.{i}" for i in (2, 3, 4)]


COUNTER = iter(range(30, 250))
PORTS = {"nb": 26641, "sb": 26642, "nb_raft": 26643, "sb_raft": 26644}
HEALTH_PORT = 29478
DB_NAMES = {"nb": "OVN_Northbound", "sb": "OVN_Southbound"}


class Member:
    def __init__(self, base, pki: Pki, address: str, trio: list[str]):
        self.address, self.trio = address, trio
        self.node = "central-" + address.rsplit(".", 1)[1]
        self.dir = os.path.join(base, address)
        self.db_dir, self.run_dir = os.path.join(self.dir, "db"), os.path.join(self.dir, "run")
        self.log = os.path.join(self.dir, "central.log")
        crt, key = pki.peer(f"central-{address}", [address])
        self.tls = (key, crt, pki.ca_crt)
        self.proc: subprocess.Popen | None = None

    def start(self, kubeconfig: str | None = None) -> None:
        """With `kubeconfig`: members from the labelled nodes, this one node `self.node`."""
        os.makedirs(self.dir, exist_ok=True)
        key, crt, ca = self.tls
        who = (["--members-from-nodes", "--node-name", self.node, "--kubeconfig", kubeconfig,
                "--pod-name", self.node, "--pod-namespace", names.PACIFIC_NAMESPACE]
               if kubeconfig else ["--address", self.address, "--members", ",".join(self.trio)])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pacific.central.main", *who,
             "--db-dir", self.db_dir, "--run-dir", self.run_dir,
             "--ssl-key", key, "--ssl-cert", crt, "--ssl-ca", ca,
             "--nb-port", str(PORTS["nb"]), "--sb-port", str(PORTS["sb"]),
             "--nb-raft-port", str(PORTS["nb_raft"]), "--sb-raft-port", str(PORTS["sb_raft"]),
             "--health-address", f"{self.address}:{HEALTH_PORT}", "--log-file", self.log],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)
        self.proc = None

    def ready(self) -> tuple[int, str]:
        try:
            return metrics.get(f"http://{self.address}:{HEALTH_PORT}/readyz", timeout=2)
        except OSError as e:
            return 0, str(e)

    def status(self, db: str) -> raft.Status:
        cp = subprocess.run(["ovs-appctl", "-t", os.path.join(self.run_dir, f"{db}.ctl"),
                             "cluster/status", DB_NAMES[db]], capture_output=True, text=True,
                            timeout=10)
        return raft.parse(cp.stdout if cp.returncode == 0 else "")

    def children(self) -> list[str]:
        """Processes still holding this member's run directory (its daemons)."""
        cp = subprocess.run(["pgrep", "-f", self.run_dir + "/"], capture_output=True, text=True)
        return cp.stdout.split()

    def logged(self) -> str:
        with open(self.log) as f:
            return f.read()


def ctl(members, db: str, *args: str, leader_only: bool = True) -> subprocess.CompletedProcess:
    prog = "ovn-nbctl" if db == "nb" else "ovn-sbctl"
    remote = ",".join(f"unix:{m.run_dir}/{db}.sock" for m in members)
    flags = [] if leader_only else ["--no-leader-only"]
    return subprocess.run([prog, f"--db={remote}", "--timeout=10", *flags, *args],
                          capture_output=True, text=True, timeout=30)


def all_ready(members) -> bool:
    return all(m.ready()[0] == 200 for m in members)


def one_address_each(members, db: str) -> bool:
    """The leader lists exactly one server per member address (no id left behind)."""
    for m in members:
        st = m.status(db)
        if st.is_leader:
            return sorted(s.address.rsplit(":", 2)[1] for s in st.servers) == \
                sorted(x.address for x in members)
    return False


@pytest.fixture(scope="module")
def central(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("central"))
    pki = Pki(os.path.join(base, "pki")).ensure_ca("central-test-ca")
    trio = loopback_trio()
    members = [Member(base, pki, a, trio) for a in trio]
    for m in members:
        m.start()
    try:
        wait_until(lambda: all_ready(members), 60, what="three members ready")
        yield members
    finally:
        for m in members:
            m.stop()
        leaked = {m.address: m.children() for m in members if m.children()}
        assert not leaked, f"daemons outlived pacific-central: {leaked}"


def test_three_members_form_both_clusters_and_northd_translates(central):
    for db in ("nb", "sb"):
        roles = sorted(m.status(db).role for m in central)
        assert roles == ["follower", "follower", "leader"], (db, roles)
        wait_until(lambda db=db: one_address_each(central, db), 10, what=f"{db}: three servers")
    texts = [m.ready()[1] for m in central]
    assert all("OVN_Northbound" in t and "OVN_Southbound" in t for t in texts), texts
    assert ctl(central, "nb", "ls-add", "sw0").returncode == 0
    # one ovn-northd is active and writes SB
    wait_until(lambda: "sw0" in ctl(central, "sb", "--bare", "--columns=external_ids", "list",
                                    "Datapath_Binding", leader_only=False).stdout,
               30, what="ovn-northd to write sw0's datapath into SB")


def test_a_member_that_lost_its_database_rejoins_by_itself(central):
    """Member 2 loses nb.db (its cluster id kept beside it); then the seed
    (member 1) loses its whole directory and must join its running peers, not
    start a second cluster.  One at a time: two of three files lost at once is
    a lost quorum, which no member can repair (docs/ha.md)."""
    assert ctl(central, "nb", "ls-add", "before-loss").returncode == 0
    second, seed = central[1], central[0]
    for m, lose in ((second, os.path.join(second.db_dir, "nb.db")), (seed, seed.db_dir)):
        m.stop()
        subprocess.run(["rm", "-rf", lose], check=True)
        m.start()
        wait_until(lambda: all_ready(central), 60, what=f"{m.address} ready again")
        for db in ("nb", "sb"):
            wait_until(lambda db=db: one_address_each(central, db), 60,
                       what=f"{db}: the ids {m.address}'s lost files left behind kicked")
        out = ctl([m], "nb", "ls-list", leader_only=False).stdout
        assert "before-loss" in out, (m.address, out)
    cids = {m.status(db).cluster_id for m in central for db in ("nb",)}
    assert len(cids) == 1, f"two NB clusters: {cids}"
    assert "joining" in seed.logged() and "kicked server" in "".join(
        m.logged() for m in central)


def test_an_unreadable_database_is_moved_aside_and_the_member_rejoins(central):
    third = central[2]
    third.stop()
    path = os.path.join(third.db_dir, "sb.db")
    with open(path, "r+b") as f:
        f.write(b"this is not an OVSDB file")
    third.start()
    wait_until(lambda: all_ready(central), 60, what="the member ready again")
    wait_until(lambda: one_address_each(central, "sb"), 60, what="sb: three servers")
    assert glob.glob(path + ".corrupt-*"), os.listdir(third.db_dir)
    assert "moved aside" in third.logged()
    # its copy came back from the peers: ovn-northd's rows are in it
    assert "sw0" in ctl([third], "sb", "--bare", "--columns=external_ids", "list",
                        "Datapath_Binding", leader_only=False).stdout


def test_the_leader_s_death_leaves_writes_working_and_no_daemon_behind(central):
    leader = next(m for m in central if m.status("nb").is_leader)
    others = [m for m in central if m is not leader]
    leader.stop(signal.SIGKILL)          # pacific-central itself, not its children
    wait_until(lambda: not leader.children(), 10, what="its ovsdb-servers and northd to exit")
    t0 = time.monotonic()
    wait_until(lambda: ctl(others, "nb", "ls-add", f"after-{int(t0)}").returncode == 0, 30,
               what="an NB write on the two others")
    took = time.monotonic() - t0
    assert took < 5, f"NB writes resumed {took:.1f} s after the leader died"
    leader.start()
    wait_until(lambda: all_ready(central), 60, what="the old leader back as a member")


# --- members from the nodes labelled pacific.io/role=central -------------------------
def node_body(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {names.CENTRAL_ROLE_LABEL: names.CENTRAL_ROLE}}}


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A control plane of the test's own, three Nodes labelled for central (at
    the loopback addresses), and a member on each, finding the others there."""
    from kube_fixtures import ApiServerProcess
    kube = ApiServerProcess()
    base = str(tmp_path_factory.mktemp("central-nodes"))
    pki = Pki(os.path.join(base, "pki")).ensure_ca("central-test-ca")
    trio = loopback_trio()
    members = [Member(base, pki, a, trio) for a in trio]
    api = kclient.load(kube.kubeconfig)
    try:
        r.create(api, r.NAMESPACES, {"metadata": {"name": names.PACIFIC_NAMESPACE}})
        for m in members:        # the pods whose labels say who leads (never scheduled here)
            r.create(api, r.PODS, {"metadata": {"name": m.node}, "spec": {"containers": [
                {"name": "central", "image": "pacific"}]}}, names.PACIFIC_NAMESPACE)
        for m in members:
            node = r.create(api, r.NODES, node_body(m.node))
            r.patch_status(api, r.NODES, node, {"addresses": [
                {"type": "InternalIP", "address": m.address}]})
        for m in members:
            m.start(kube.kubeconfig)
        wait_until(lambda: all_ready(members), 60, what="three members from the labelled nodes")
        yield api, kube.kubeconfig, members
    finally:
        for m in members:
            m.stop()
        kube.stop()


def test_a_node_relabelled_out_leaves_and_relabelled_in_joins_again(labelled):
    api, kubeconfig, members = labelled
    out = members[2]
    for db in ("nb", "sb"):
        wait_until(lambda db=db: one_address_each(members, db), 30, what=f"{db}: three servers")
    r.patch_merge(api, r.NODES, out.node, {"metadata": {"labels": {
        names.CENTRAL_ROLE_LABEL: None}}})
    out.stop()                 # what the DaemonSet does once the node no longer matches
    assert "leaving the clusters" in out.logged()
    rest = members[:2]
    for db in ("nb", "sb"):
        wait_until(lambda db=db: sorted(
            s.address for s in next(m.status(db) for m in rest if m.status(db).is_leader)
            .servers) == sorted(f"ssl:{m.address}:{PORTS[db + '_raft']}" for m in rest),
            30, what=f"{db}: two servers after the leave")
    assert glob.glob(os.path.join(out.db_dir, "nb.db.left-*"))
    # the others follow: ovn-northd is given the two that are left
    wait_until(lambda: all(f"central members now {','.join(sorted(x.address for x in rest))}"
                           in m.logged() for m in rest), 30,
               what="the others to take the new member list")
    assert ctl(rest, "nb", "ls-add", "after-leave").returncode == 0
    # a stop while labelled is only a stop: the cluster keeps the member
    members[1].stop()
    assert "leaving" not in members[1].logged()
    members[1].start(kubeconfig)
    wait_until(lambda: all_ready(rest), 60, what="member 2 back")
    r.patch_merge(api, r.NODES, out.node, {"metadata": {"labels": {
        names.CENTRAL_ROLE_LABEL: names.CENTRAL_ROLE}}})
    out.start(kubeconfig)
    wait_until(lambda: all_ready(members), 60, what="the relabelled node a member again")
    for db in ("nb", "sb"):
        wait_until(lambda db=db: one_address_each(members, db), 30, what=f"{db}: three again")
    assert "after-leave" in ctl([out], "nb", "ls-list", leader_only=False).stdout


def leader_pods(api, db: str) -> list[str]:
    label = names.CENTRAL_LEADER_LABELS[db]
    pods, _ = r.list_(api, r.PODS, names.PACIFIC_NAMESPACE)
    return sorted(p["metadata"]["name"] for p in pods
                  if (p["metadata"].get("labels") or {}).get(label) == "true")


def test_the_pod_of_the_member_that_leads_is_labelled_and_the_label_follows(labelled):
    api, kubeconfig, members = labelled
    wait_until(lambda: all_ready(members), 60, what="three members")

    def labels_match(db):
        lead = [m.node for m in members if m.proc is not None and m.status(db).is_leader]
        return len(lead) == 1 and leader_pods(api, db) == lead
    for db in ("nb", "sb"):
        wait_until(lambda db=db: labels_match(db), 30, what=f"the {db} leader's pod labelled")
    leader = next(m for m in members if m.status("nb").is_leader)
    leader.stop(signal.SIGKILL)
    wait_until(lambda: not leader.children(), 10, what="the killed member's daemons gone")
    # the new leader labels itself; the killed one's "true" stays until it is back
    wait_until(lambda: any(m.status("nb").is_leader and m.node in leader_pods(api, "nb")
                           for m in members if m is not leader), 30,
               what="the new NB leader's pod labelled")
    leader.start(kubeconfig)
    wait_until(lambda: all_ready(members), 60, what="the old leader back")
    wait_until(lambda: labels_match("nb"), 30, what="one NB leader label again")
