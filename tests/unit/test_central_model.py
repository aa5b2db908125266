"""pacific/central: cluster/status read, which ids a leader kicks, what a member
does with its database file, and the flags it refuses."""
import pytest

from pacific import ovsinstall
from pacific.central import dbfile, raft
from pacific.central.main import build_parser, settings

LEADER = """\
ed38
Name: OVN_Northbound
Cluster ID: 4a2c (4a2c56dc-01b5-461c-b8c3-022166cf84d1)
Server ID: ed38 (ed38336f-93f9-4c61-a909-e691d2848047)
Address: tcp:127.0.0.2:16643
Status: cluster member
Role: leader
Term: 1
Leader: self
Vote: self

Election timer: 1000
Log: [2, 4]
Connections: <-581f ->581f
Disconnections: 0
Servers:
    581f (581f at tcp:127.0.0.3:16643) next_index=4 match_index=3 last msg 332 ms ago
    ed38 (ed38 at tcp:127.0.0.2:16643) (self) next_index=2 match_index=3
"""

FOLLOWER_NO_LEADER = """\
Name: OVN_Southbound
Cluster ID: 4a2c (4a2c56dc-01b5-461c-b8c3-022166cf84d1)
Server ID: 581f (581f32b8-f1bb-42b3-90de-d3581ff94698)
Address: tcp:127.0.0.3:16643
Status: cluster member
Role: candidate
Leader: unknown
Servers:
    581f (581f at tcp:127.0.0.3:16643) (self)
    ed38 (ed38 at tcp:127.0.0.2:16643)
"""


def test_a_leader_s_status_is_read():
    st = raft.parse(LEADER)
    assert (st.name, st.member, st.is_leader, st.leader_known) == \
        ("OVN_Northbound", True, True, True)
    assert st.cluster_id == "4a2c56dc-01b5-461c-b8c3-022166cf84d1"
    assert st.server_id == "ed38336f-93f9-4c61-a909-e691d2848047"
    assert st.servers == [raft.Server("581f", "tcp:127.0.0.3:16643", False, 332),
                          raft.Server("ed38", "tcp:127.0.0.2:16643", True, None)]


def test_a_member_without_a_leader_is_not_ready_and_kicks_nothing():
    st = raft.parse(FOLLOWER_NO_LEADER)
    assert st.member and not st.leader_known and not st.is_leader
    assert raft.stale(st) == []


def _leader_with(*servers):
    st = raft.parse(LEADER)
    st.servers = list(servers)
    return st


def test_the_leader_kicks_an_old_id_at_an_address_that_joined_again():
    old = raft.Server("aaaa", "tcp:127.0.0.3:16643", False, 40_000)
    new = raft.Server("bbbb", "tcp:127.0.0.3:16643", False, 200)
    me = raft.Server("ed38", "tcp:127.0.0.2:16643", True, None)
    assert raft.stale(_leader_with(old, new, me)) == ["aaaa"]
    # not while the new one has not answered, nor while the old one spoke lately
    assert raft.stale(_leader_with(old, raft.Server("bbbb", old.address, False, None), me)) == []
    assert raft.stale(_leader_with(raft.Server("aaaa", old.address, False, 3_000), new, me)) == []
    # never an id alone at its address (a member that is merely down)
    assert raft.stale(_leader_with(old, me)) == []


def test_the_leader_kicks_its_own_address_s_old_id():
    old_self = raft.Server("aaaa", "tcp:127.0.0.2:16643", False, None)
    me = raft.Server("ed38", "tcp:127.0.0.2:16643", True, None)
    assert raft.stale(_leader_with(old_self, me)) == ["aaaa"]


@pytest.mark.parametrize("state,cid,peers,seed,answer,action", [
    (dbfile.USABLE, None, True, True, False, "use"),
    (dbfile.MISSING, None, False, True, False, "create"),      # one central node
    (dbfile.CORRUPT, "c1", False, True, False, "create"),
    (dbfile.MISSING, "c1", True, True, False, "join"),         # it was in a cluster
    (dbfile.MISSING, None, True, True, True, "join"),          # a seed whose peers run on
    (dbfile.MISSING, None, True, True, False, "create"),       # the first start
    (dbfile.MISSING, None, True, False, False, "join"),        # the others wait for it
    (dbfile.CORRUPT, None, True, False, True, "join"),
])
def test_what_a_member_does_with_its_file(state, cid, peers, seed, answer, action):
    p = dbfile.plan(state, cid, peers, seed, answer)
    assert p.action == action, p
    assert p.cid == (cid if action == "join" else None)


def _settings(*argv):
    return settings(build_parser().parse_args(list(argv)), ovsinstall.Install("/usr"))


@pytest.mark.parametrize("argv,words", [
    (["--address", "10.0.0.1", "--members", "10.0.0.2,10.0.0.3,10.0.0.4", "--allow-tcp"],
     "is not one of --members"),
    (["--address", "10.0.0.1", "--members", "10.0.0.1,10.0.0.2", "--allow-tcp"],
     "give 1, 3 or 5 distinct ones"),
    (["--address", "10.0.0.1"], "no TLS files"),
    (["--address", "10.0.0.1", "--ssl-key", "/nonexistent/k"], "together"),
])
def test_flags_that_would_make_a_bad_cluster_are_refused(argv, words):
    with pytest.raises(SystemExit) as e:
        _settings(*argv)
    assert words in str(e.value), e.value


def test_the_seed_is_the_first_member_in_sorted_order():
    cfg = _settings("--address", "10.0.0.9", "--members", "10.0.0.9,10.0.0.10,10.0.0.2",
                    "--allow-tcp")
    assert cfg.proto == "tcp" and not cfg.seed
    assert _settings("--address", "10.0.0.10", "--members", "10.0.0.9,10.0.0.10,10.0.0.2",
                     "--allow-tcp").seed is False
    assert _settings("--address", "10.0.0.2", "--members", "10.0.0.9,10.0.0.10,10.0.0.2",
                     "--allow-tcp").seed


def _node(name, ip, central=True, extra_ips=()):
    return {"metadata": {"name": name,
                         "labels": {"pacific.io/role": "central"} if central else {}},
            "status": {"addresses": [{"type": "InternalIP", "address": a}
                                     for a in (ip, *extra_ips)]}}


def test_the_members_are_the_labelled_nodes_in_numeric_order():
    from pacific.central import discovery
    nodes = [_node("c", "10.0.0.10"), _node("a", "10.0.0.9", extra_ips=("10.0.0.200",)),
             _node("w", "10.0.0.5", central=False), _node("b", "10.0.0.2"),
             {"metadata": {"name": "no-address", "labels": {"pacific.io/role": "central"}}}]
    assert discovery.member_addresses(nodes) == ["10.0.0.2", "10.0.0.9", "10.0.0.10"]
    assert discovery.is_central(nodes[0]) and not discovery.is_central(nodes[2])
    assert not discovery.is_central(None)


class _Member:
    """What main.checks reads of a DbMember."""
    def __init__(self, name, text, age, answered=True):
        self.spec = type("S", (), {"name": name})()
        self._st, self._age, self.answered_once, self.restarts = \
            (raft.parse(text) if text else None), age, answered, 0

    def status(self):
        return self._st, self._age


def test_ready_only_as_a_member_that_knows_a_leader_alive_unless_silent():
    from pacific.central.main import checks
    live, ready = checks([_Member("OVN_Northbound", LEADER, 1), _Member("OVN_Southbound",
                                                                         FOLLOWER_NO_LEADER, 1)])
    assert live()[0] and ready() == (False, "OVN_Southbound: no leader (an election, or "
                                             "quorum lost)")
    joining = LEADER.replace("Status: cluster member", "Status: joining cluster")
    assert checks([_Member("OVN_Northbound", joining, 1)])[1]() == \
        (False, "OVN_Northbound: joining cluster")
    ok, text = checks([_Member("OVN_Northbound", LEADER, 1)])[1]()
    assert ok and text == "OVN_Northbound leader"
    assert checks([_Member("OVN_Northbound", LEADER, 20)])[1]()[0] is False     # stale
    assert checks([_Member("OVN_Northbound", None, 1e9, answered=False)])[0]()[0]  # starting
    assert checks([_Member("OVN_Northbound", LEADER, 90)])[0]()[0] is False     # hung
