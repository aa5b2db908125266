"""Issue 51: no conntrack state of a pod's addresses survives its CNI DEL.
The dump parsing and the flush calls against a recording unixctl, the DEL's
order (addresses and zone read before the port goes), and the host
firewall's wake when an address changes holder on the node."""
from pacific import names
from pacific.node import conntrack, frontends, unixctl
from pacific.node.attachment import PodAttachment
from pacific.node.cnihandler import CniHandler
from pacific.node.cnirequest import CniRequest

DUMP = """\
tcp,orig=(src=10.16.0.7,dst=10.96.0.50,sport=40000,dport=80),reply=(src=10.16.0.5,dst=10.16.0.7,sport=8080,dport=40000),zone=12,protoinfo=(state=ESTABLISHED)
tcp,orig=(src=10.16.0.55,dst=10.16.0.9,sport=1,dport=2),reply=(src=10.16.0.9,dst=10.16.0.55,sport=2,dport=1),zone=3,protoinfo=(state=ESTABLISHED)
icmp,orig=(src=10.16.0.5,dst=10.16.0.9,id=7,type=8,code=0),reply=(src=10.16.0.9,dst=10.16.0.5,id=7,type=0,code=0)
udp,orig=(src=fd00:16::9,dst=fd00:16::5,sport=53,dport=53),reply=(src=fd00:16::5,dst=fd00:16::9,sport=53,dport=53),zone=4
"""


def test_entries_of_finds_the_addresses_in_either_direction_by_their_original_tuple():
    got = conntrack.entries_of(DUMP, {"10.16.0.5", "fd00:16::5"})
    assert got == [
        (0, "ct_nw_src=10.16.0.5,ct_nw_dst=10.16.0.9,ct_nw_proto=1,icmp_id=7,icmp_type=8,"
            "icmp_code=0"),
        (4, "ct_ipv6_src=fd00:16::9,ct_ipv6_dst=fd00:16::5,ct_nw_proto=17,ct_tp_src=53,"
            "ct_tp_dst=53"),
        # a load-balanced connection to it: the reply's source, flushed by the original
        (12, "ct_nw_src=10.16.0.7,ct_nw_dst=10.96.0.50,ct_nw_proto=6,ct_tp_src=40000,"
             "ct_tp_dst=80"),
    ]                                       # 10.16.0.55 is another address


def test_own_zone_is_ovn_controllers_key_on_br_int():
    lsp = names.pod_lsp_name("red", "a")
    assert conntrack.own_zone({f"ct-zone-{lsp}": "12", "ct-zone-x_dnat": "1"}, lsp) == 12
    assert conntrack.own_zone({}, lsp) is None


def test_flush_ovs_flushes_the_zone_and_each_entry(monkeypatch):
    calls = []

    def call(path, method, params=(), timeout=5.0):
        calls.append((method, list(params)))
        return DUMP if method == "dpctl/dump-conntrack" else ""
    monkeypatch.setattr(unixctl, "call", call)
    assert conntrack.flush_ovs("/run/ovs.ctl", {"10.16.0.5"}, 12) == 3
    assert calls[0] == ("dpctl/flush-conntrack", ["zone=12"])
    assert ("dpctl/flush-conntrack", ["zone=0", "ct_nw_src=10.16.0.5,ct_nw_dst=10.16.0.9,"
                                      "ct_nw_proto=1,icmp_id=7,icmp_type=8,icmp_code=0"]) in calls
    calls.clear()
    monkeypatch.setattr(unixctl, "call", lambda *a, **k: "")     # a repeated DEL: nothing
    assert conntrack.flush_ovs("/run/ovs.ctl", {"10.16.0.5"}, None) == 0


def test_a_failing_flush_never_fails_the_del(monkeypatch):
    def boom(*a, **k):
        raise unixctl.UnixctlError("no answer")
    monkeypatch.setattr(unixctl, "call", boom)
    monkeypatch.setattr(conntrack, "flush_kernel", lambda ips: 0)
    conntrack.flush("/run/ovs.ctl", {"10.16.0.5"}, 3, "DEL red/a")


class Plumber:
    def __init__(self):
        self.steps = []
        self.att = PodAttachment(container_id="c1", ifname="eth0", netns="/run/netns/x",
                                 pod="red/a", lsp=names.pod_lsp_name("red", "a"),
                                 mac="0a:58:0a:10:00:05", ip_cidr="10.16.0.5/16",
                                 gateway="10.16.0.1", mtu=1400,
                                 more=(("fd00:16::5/64", "fd00:16::1"),))

    def attachment(self, cid, ifname, mtu):
        self.steps.append("read")
        return self.att

    def conntrack_zone(self, lsp):
        return 12

    def delete(self, cid, ifname):
        self.steps.append("delete")
        return True


def test_del_flushes_the_pods_addresses_after_removing_its_port(monkeypatch):
    plumber, flushed = Plumber(), []
    monkeypatch.setattr(conntrack, "flush", lambda ctl, ips, zone, what: flushed.append(
        (plumber.steps[:], ctl, ips, zone)))
    h = CniHandler(plumber, None, 1400, lambda: None, vswitchd_ctl=lambda: "/run/ovs.ctl")
    h.delete(CniRequest(command="DEL", container_id="c1", netns="", ifname="eth0",
                        pod_namespace="red", pod_name="a"))
    assert flushed == [(["read", "delete"], "/run/ovs.ctl", {"10.16.0.5", "fd00:16::5"}, 12)]


def test_a_pods_record_coming_or_going_changes_who_holds_its_address():
    from pacific.contract import PodRecord
    rec = PodRecord(uid="u", port=names.pod_lsp_name("red", "a"), ip="10.16.0.5",
                    mac="0a:58:0a:10:00:05", cidr="10.16.0.0/16", gateway="10.16.0.1",
                    subnet="ovn-default")
    pod = {"metadata": {"uid": "u", "namespace": "red", "name": "a",
                        "annotations": {names.ANN_ALLOCATION: rec.to_json()}}}
    assert frontends.held_addresses(pod) == ("red", frozenset({"10.16.0.5"}))
    assert frontends.held_addresses(None) is None
    assert frontends.held_addresses({"metadata": {"namespace": "red"}}) is None
