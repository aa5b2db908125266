"""Pod plumbing on the fast path, against the kernel and a real 1-node OVN
sandbox: batched rtnetlink requests (pacific.node.rtnl) and Plumber.add's
replace / conflict / rollback behaviour.  The Plumber runs as the node daemon
does, from a thread inside the node's network namespace."""
from __future__ import annotations

import errno
import ipaddress
import os
import subprocess

import pytest

import nb_commands
from pacific import names
from pacific.cni import plugin as proto
from pacific.cni.plugin import CniError
from pacific.node import rtnl
from pacific.node.attachment import PodAttachment
from pacific.node.nsutil import Netns
from pacific.node.plumbing import Plumber
from pacific.ovn.base import Owner
from pacific.ovn.nb import NorthboundAPI
from pacific.ovn.ovs import OvsAPI

pytestmark = pytest.mark.e2e
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)
SWITCH, CIDR, GW = "plumb-sw", "10.81.0.0/16", "10.81.0.1"


def ip_in(ns: str, *args: str) -> str:
    return subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True,
                          check=True).stdout


# --- rtnl against the kernel, in two private namespaces ------------------------
@pytest.fixture
def two_netns():
    base = f"pacrtnl{os.getpid()}"
    made = []
    try:
        for side in ("host", "pod"):
            subprocess.run(["ip", "netns", "add", f"{base}{side}"], check=True)
            made.append(f"{base}{side}")
        yield made
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], check=False)


def test_rtnl_batch_configures_pod_and_names_failed_requests(two_netns):
    host_ns, pod_ns = (Netns(f"/run/netns/{n}") for n in two_netns)
    with host_ns, pod_ns:
        req = rtnl.add_veth("t1_h", "02:00:00:00:00:01", 1300, "eth0",
                            "0a:58:0a:51:00:05", pod_ns.fd)
        assert host_ns.run(lambda: rtnl.run([req])) == [None]
        again = host_ns.run(lambda: rtnl.run([req]))[0]
        assert again.code == errno.EEXIST and "create veth t1_h <-> eth0" in str(again)

        def pod_side():
            import socket
            idx = socket.if_nametoindex("eth0")
            return rtnl.run([rtnl.link_up(1, "lo"), rtnl.link_up(idx, "eth0"),
                             rtnl.add_address(idx, "eth0", "10.81.0.5", 16),
                             rtnl.add_default_route("10.81.0.1", idx, "eth0"),
                             rtnl.add_default_route("10.99.0.1", idx, "eth0")])
        out = pod_ns.run(pod_side)
        assert out[:4] == [None] * 4
        # the fifth fails on its own, named, with the kernel's text; the rest stand
        assert out[4].code == errno.ENETUNREACH and "via 10.99.0.1" in out[4].args[1]
        assert "10.81.0.5/16" in ip_in(two_netns[1], "-o", "addr", "show", "eth0")
        assert "default via 10.81.0.1 dev eth0" in ip_in(two_netns[1], "route")
        link = ip_in(two_netns[0], "-o", "link", "show", "t1_h")
        assert "02:00:00:00:00:01" in link and "mtu 1300" in link and ",UP" in link
        assert "0a:58:0a:51:00:05" in ip_in(two_netns[1], "-o", "link", "show", "eth0")
        assert host_ns.run(lambda: rtnl.run([rtnl.del_link("t1_h")])) == [None]
        gone = host_ns.run(lambda: rtnl.run([rtnl.del_link("t1_h")]))[0]
        assert gone.code == errno.ENODEV
        assert "eth0" not in ip_in(two_netns[1], "-o", "link")  # the peer went with it


def test_random_mac_is_unicast_and_locally_administered():
    for _ in range(200):
        first = int(rtnl.random_mac()[:2], 16)
        assert first & 1 == 0 and first & 2 == 2


# --- Plumber in a sandbox --------------------------------------------------------
@pytest.fixture(scope="module")
def node(sandbox_factory):
    sb = sandbox_factory(nodes=1)
    nb = NorthboundAPI(sb.nb_remote, created_by="test-plumbing")
    nb.commit(nb_commands.add_switch(nb, SWITCH, owner=Owner(names.OWNER_KIND_SUBNET, SWITCH)))
    ovs = OvsAPI(sb.nodes[0].ovs_remote, created_by="pacific-node")
    assert ovs.wait_for_row("Bridge", lambda r: r.name == names.INTEGRATION_BRIDGE, 30)
    node_ns = Netns(f"/run/netns/{sb.nodes[0].netns}")
    yield sb, nb, ovs, node_ns
    node_ns.close()
    ovs.close()
    nb.close()
    sb.down()


_seq = iter(range(10, 1000))


def make_pod(sb, nb) -> PodAttachment:
    n = next(_seq)
    ip = str(ipaddress.ip_network(CIDR)[n])
    mac = "0a:58:%02x:%02x:%02x:%02x" % tuple(ipaddress.ip_address(ip).packed)
    lsp = f"plumb-{n}"
    nb.commit(nb_commands.add_switch_port(nb, SWITCH, lsp, owner=Owner(names.OWNER_KIND_POD, f"t/{lsp}"),
                                 addresses=[f"{mac} {ip}"], port_security=[f"{mac} {ip}"]))
    ns = f"{sb.netns_prefix}plumb{n}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    return PodAttachment(container_id=os.urandom(32).hex(), ifname="eth0",
                         netns=f"/run/netns/{ns}", pod=f"t/{lsp}", lsp=lsp, mac=mac,
                         ip_cidr=f"{ip}/16", gateway=GW, mtu=sb.nodes[0].mtu)


def host_state(sb, ovs, att) -> tuple[bool, bool]:
    links = ip_in(sb.nodes[0].netns, "-o", "link")
    return att.host_ifname + "@" in links, ovs.get_interface(att.host_ifname) is not None


def test_add_configures_pod_and_is_ovn_installed(node):
    sb, nb, ovs, node_ns = node
    att = make_pod(sb, nb)
    result = node_ns.run(lambda: Plumber(ovs).add(att))
    assert result["interfaces"][1] == {"name": "eth0", "mac": att.mac, "sandbox": att.netns,
                                       "mtu": att.mtu}
    assert ovs.is_ovn_installed(att.host_ifname)
    pod = os.path.basename(att.netns)
    assert att.ip_cidr in ip_in(pod, "-o", "addr", "show", "eth0")
    assert f"default via {GW} dev eth0" in ip_in(pod, "route")
    assert "LOOPBACK,UP" in ip_in(pod, "-o", "link", "show", "lo")
    off = subprocess.run(["ip", "netns", "exec", pod, "ethtool", "-k", "eth0"],
                         capture_output=True, text=True, check=True).stdout
    assert "tx-checksumming: off" in off
    iface = ovs.get_interface(att.host_ifname)
    assert iface.external_ids[names.OVS_IFACE_ID] == att.lsp
    assert result["interfaces"][0]["mac"] in ip_in(sb.nodes[0].netns, "-o", "link", "show",
                                                   att.host_ifname)


def test_repeated_add_replaces_the_first(node):
    sb, nb, ovs, node_ns = node
    first = make_pod(sb, nb)
    node_ns.run(lambda: Plumber(ovs).add(first))
    # The runtime retries ADD for the same container into another namespace:
    # the first veth (host end name taken) and OVS port are replaced.
    other = f"{sb.netns_prefix}plumb-again"
    subprocess.run(["ip", "netns", "add", other], check=True)
    att = PodAttachment(**{**first.__dict__, "netns": f"/run/netns/{other}"})
    node_ns.run(lambda: Plumber(ovs).add(att))
    assert host_state(sb, ovs, att) == (True, True)
    assert ovs.is_ovn_installed(att.host_ifname)
    assert ovs.get_interface(att.host_ifname).external_ids[names.OVS_NETNS] == att.netns
    assert "eth0" not in ip_in(os.path.basename(first.netns), "-o", "link")
    assert att.ip_cidr in ip_in(other, "-o", "addr", "show", "eth0")
    assert node_ns.run(lambda: Plumber(ovs).delete(att.container_id, att.ifname))
    assert host_state(sb, ovs, att) == (False, False)
    assert not node_ns.run(lambda: Plumber(ovs).delete(att.container_id, att.ifname))


def test_existing_pod_interface_is_refused_and_nothing_left(node):
    sb, nb, ovs, node_ns = node
    att = make_pod(sb, nb)
    ip_in(os.path.basename(att.netns), "link", "add", "eth0", "type", "veth", "peer", "x0")
    with pytest.raises(CniError) as e:
        node_ns.run(lambda: Plumber(ovs).add(att))
    assert e.value.code == proto.ERR_PLUMBING and "eth0 already exists" in e.value.msg
    assert host_state(sb, ovs, att) == (False, False)


def test_pod_side_failure_rolls_back_port_and_veth(node):
    sb, nb, ovs, node_ns = node
    att = make_pod(sb, nb)
    pod = os.path.basename(att.netns)
    # A default route already there: the pod side's route request fails.
    ip_in(pod, "link", "add", "d0", "type", "veth", "peer", "d1")
    ip_in(pod, "link", "set", "d0", "up")
    ip_in(pod, "route", "add", "default", "dev", "d0")
    with pytest.raises(CniError) as e:
        node_ns.run(lambda: Plumber(ovs).add(att))
    assert e.value.code == proto.ERR_PLUMBING
    assert f"add default route via {GW} dev eth0: File exists" in e.value.msg
    assert host_state(sb, ovs, att) == (False, False)


def test_a_second_interface_of_the_container_is_plumbed_beside_the_first(node):
    # The host veth / OVS port name is a hash of container id AND interface name:
    # a second attachment of one container (Multus' net1) gets its own port and
    # veth, and DEL of one leaves the other.
    sb, nb, ovs, node_ns = node
    first = make_pod(sb, nb)
    node_ns.run(lambda: Plumber(ovs).add(first))
    # a secondary network: no gateway (the default route stays on eth0)
    second = PodAttachment(**{**make_pod(sb, nb).__dict__, "container_id": first.container_id,
                              "netns": first.netns, "ifname": "net1", "gateway": None})
    pod = os.path.basename(first.netns)
    try:
        assert second.host_ifname != first.host_ifname
        node_ns.run(lambda: Plumber(ovs).add(second))
        assert ovs.is_ovn_installed(first.host_ifname) and ovs.is_ovn_installed(second.host_ifname)
        assert second.ip_cidr in ip_in(pod, "-o", "addr", "show", "net1")
        assert node_ns.run(lambda: Plumber(ovs).delete(second.container_id, "net1"))
        assert host_state(sb, ovs, second) == (False, False)
        assert host_state(sb, ovs, first) == (True, True)
        assert first.ip_cidr in ip_in(pod, "-o", "addr", "show", "eth0")
    finally:
        node_ns.run(lambda: Plumber(ovs).delete(first.container_id, "eth0"))
        node_ns.run(lambda: Plumber(ovs).delete(second.container_id, "net1"))
    assert host_state(sb, ovs, first) == (False, False)


def test_containers_whose_ids_share_a_long_prefix_get_ports_of_their_own(node):
    # cnitool's ids are "cnitool-" + hex: with the first 12 characters as the
    # name they collided after 4 hex digits.
    sb, nb, ovs, node_ns = node
    first = make_pod(sb, nb)
    first = PodAttachment(**{**first.__dict__, "container_id": "cnitool-" + "ab" * 28})
    other = make_pod(sb, nb)
    other = PodAttachment(**{**other.__dict__, "container_id": "cnitool-" + "ab" * 27 + "cd"})
    try:
        node_ns.run(lambda: Plumber(ovs).add(first))
        node_ns.run(lambda: Plumber(ovs).add(other))
        assert first.host_ifname != other.host_ifname
        assert ovs.is_ovn_installed(first.host_ifname) and ovs.is_ovn_installed(other.host_ifname)
        assert node_ns.run(lambda: Plumber(ovs).delete(other.container_id, "eth0"))
        assert host_state(sb, ovs, first) == (True, True)
    finally:
        node_ns.run(lambda: Plumber(ovs).delete(first.container_id, "eth0"))
        node_ns.run(lambda: Plumber(ovs).delete(other.container_id, "eth0"))


def test_a_port_plumbed_under_the_old_name_is_found_and_removed_by_del(node):
    # Ports plumbed before the hashed names (first 12 characters of the id):
    # DEL finds them through the OVS record and removes port and veth.
    sb, nb, ovs, node_ns = node
    att = make_pod(sb, nb)
    legacy = PodAttachment(**{**att.__dict__, "host": att.container_id[:12] + "_h"})
    node_ns.run(lambda: Plumber(ovs).add(legacy))
    assert host_state(sb, ovs, legacy) == (True, True)
    assert node_ns.run(lambda: Plumber(ovs).delete(att.container_id, "eth0"))
    assert host_state(sb, ovs, legacy) == (False, False)


def test_new_sandbox_of_a_pod_replaces_a_stale_one_whose_del_never_came(node):
    sb, nb, ovs, node_ns = node
    old = make_pod(sb, nb)
    node_ns.run(lambda: Plumber(ovs).add(old))
    # the pod's sandbox is re-created (new container id, new netns); the old
    # sandbox's DEL was lost, so its port is still bound to the pod's LSP
    other = f"{sb.netns_prefix}plumb-newsandbox"
    subprocess.run(["ip", "netns", "add", other], check=True)
    new = PodAttachment(**{**old.__dict__, "container_id": os.urandom(32).hex(),
                           "netns": f"/run/netns/{other}"})
    node_ns.run(lambda: Plumber(ovs).add(new))
    assert host_state(sb, ovs, old) == (False, False)        # stale port and veth gone
    assert host_state(sb, ovs, new) == (True, True)
    assert [i.name for i in ovs.find_interfaces({names.OVS_IFACE_ID: new.lsp})] == \
        [new.host_ifname]
    assert ovs.is_ovn_installed(new.host_ifname)
    assert node_ns.run(lambda: Plumber(ovs).delete(new.container_id, new.ifname))
