"""A pod attachment of a dual-stack record: both addresses and routes in the
CNI result (IPv4 first), and the same attachment rebuilt from OVS."""
from pacific import names
from pacific.contract import PodRecord
from pacific.node.attachment import PodAttachment


def test_a_dual_stack_attachment_plumbs_and_reports_both_families():
    rec = PodRecord(uid="u", port=names.pod_lsp_name("ns", "web"), ip="10.16.0.5",
                    mac="0a:58:0a:10:00:05", cidr="10.16.0.0/16", gateway="10.16.0.1",
                    subnet="ovn-default", ips=("10.16.0.5", "fd00:16::5"),
                    cidrs=("10.16.0.0/16", "fd00:16::/64"), gateways=("10.16.0.1", "fd00:16::1"))
    att = PodAttachment.from_record(rec, container_id="c" * 64, ifname="eth0",
                                    netns="/var/run/netns/x", pod="ns/web", mtu=1400)
    assert att.addresses() == [("10.16.0.5/16", "10.16.0.1"), ("fd00:16::5/64", "fd00:16::1")]
    res = att.result()
    assert [(i["address"], i["version"], i["gateway"]) for i in res["ips"]] == [
        ("10.16.0.5/16", "4", "10.16.0.1"), ("fd00:16::5/64", "6", "fd00:16::1")]
    assert res["routes"] == [{"dst": "0.0.0.0/0", "gw": "10.16.0.1"},
                             {"dst": "::/0", "gw": "fd00:16::1"}]
    ids = att.ovs_external_ids()
    assert ids[names.OVS_MORE_ADDRESSES] == "fd00:16::5/64 fd00:16::1"
    assert PodAttachment.from_ovs(ids, 1400, att.host_ifname).addresses() == att.addresses()


def test_a_single_family_attachment_records_nothing_more():
    rec = PodRecord(uid="u", port=names.pod_lsp_name("ns", "web"), ip="10.16.0.5",
                    mac="0a:58:0a:10:00:05", cidr="10.16.0.0/16", gateway="10.16.0.1",
                    subnet="ovn-default")
    att = PodAttachment.from_record(rec, container_id="c" * 64, ifname="eth0",
                                    netns="/var/run/netns/x", pod="ns/web", mtu=1400)
    assert names.OVS_MORE_ADDRESSES not in att.ovs_external_ids()
    assert len(att.result()["ips"]) == 1
