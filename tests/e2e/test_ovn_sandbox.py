"""pacific.ovn against real OVN daemons: a port bound through OvsAPI (waiting
for ovs-vswitchd) becomes ovn-installed and up, observed through IDL events."""

from __future__ import annotations

import os

import pytest

from ovsdb_fixtures import sandbox_programs
import nb_commands
from pacific import names, ovsinstall
from pacific.ovn import NorthboundAPI, OvsAPI, Owner
from pacific.sandbox.daemons import default_install

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)


def test_bound_port_becomes_ovn_installed_and_up(sandbox_factory):
    sb = sandbox_factory(nodes=1)
    node = sb.nodes[0]
    nb = NorthboundAPI(sb.nb_remote, timeout=20, created_by="test-ovn")
    ovs = OvsAPI(node.ovs_remote, timeout=20, created_by="test-ovn")
    lsp = "probe.ovn-test"
    owner = Owner(names.OWNER_KIND_POD, "ovn-test/probe")
    try:
        nb.commit(nb_commands.add_switch(nb, "t-ovn-ls", owner=owner),
                  nb_commands.add_switch_port(nb, "t-ovn-ls", lsp, owner=owner,
                                     addresses=["0a:00:47:00:00:05 10.71.0.5"]))
        # an internal port lives in the node's namespace (vswitchd runs there);
        # the commit returns once ovs-vswitchd applied it (cur_cfg)
        ovs.commit(ovs.add_interface_port(
            names.INTEGRATION_BRIDGE, "pt0", type="internal", owner=owner,
            external_ids={names.OVS_IFACE_ID: lsp}))
        assert ovs.get_interface("pt0").ofport[0] > 0
        assert ovs.wait_ovn_installed("pt0", timeout=20)
        up = nb.wait_for_row("Logical_Switch_Port",
                             lambda r: r.name == lsp and r.up == [True], 20)
        assert up is not None
        ovs.commit(ovs.del_port("pt0"))
        assert ovs.get_interface("pt0") is None
        nb.commit(nb.delete_owned("Logical_Switch_Port", names.OWNER_KIND_POD,
                                  "ovn-test/probe"),
                  nb.ls_del("t-ovn-ls"))
        assert nb.rows_owned("Logical_Switch", names.OWNER_KIND_POD) == []
    finally:
        ovs.close()
        nb.close()
        sb.down()


def test_the_sandbox_runs_the_built_ovs_and_ovn_and_sees_acl_tiers(sandbox_factory):
    """A new sandbox runs hack/build-ovs-ovn.sh's OVS and OVN (make setup), every
    daemon of it, and Pacific reads ACL tiers from that OVN's schema."""
    built = default_install()
    if built.prefix == ovsinstall.SYSTEM_PREFIX:
        pytest.skip("no OVS/OVN build (make setup builds it)")
    sb = sandbox_factory(nodes=1)
    node = sb.nodes[0]
    assert sb.ovs == built
    assert node.appctl("version").startswith("ovs-vswitchd (Open vSwitch) 4.0.")
    programs = sandbox_programs(sb)
    assert {os.path.basename(p) for p in programs.values()} == {
        "ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovn-northd"}
    for tag, exe in programs.items():
        assert exe == os.path.realpath(built.program(os.path.basename(exe))), tag
    nb = NorthboundAPI(sb.nb_remote, timeout=20)
    try:
        assert nb.capabilities().acl_tier
    finally:
        nb.close()
