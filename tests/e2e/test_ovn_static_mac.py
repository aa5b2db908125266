"""ovn/gateway.py EnsureStaticMacBindings against a real NB ovsdb-server: an
IPv6 gateway's transit host is bound to the gateway interface's fixed MAC,
converged in place, and gone with the gateway."""
from __future__ import annotations

import pytest

from ovsdb_fixtures import nbdb  # noqa: F401,F811 (a fixture)
from pacific import names
from pacific.ovn import NorthboundAPI, nb as nbmod
from pacific.ovn.gateway import SMB, EnsureStaticMacBindings

pytestmark = pytest.mark.e2e
PORT = "lrp-egw:eip:web/fd00:77::150"


def bindings(api) -> set[tuple]:
    return {(r.logical_port, r.ip, r.mac, r.override_dynamic_mac)
            for r in api.tables[SMB].rows.values()}


def test_a_ports_bindings_converge_and_leave_other_ports_alone(nbdb):
    api = NorthboundAPI(nbdb.remote, timeout=10, created_by="test",
                        monitor=nbmod.CONTROLLER_MONITOR)      # the controller's replica
    try:
        mac = names.EGRESS_PORT_MAC
        api.commit(EnsureStaticMacBindings(api, PORT, {"fd00:65:0:1::2": mac}),
                   EnsureStaticMacBindings(api, "other", {"fd00:65:0:2::2": mac}))
        assert bindings(api) == {(PORT, "fd00:65:0:1::2", mac, True),
                                 ("other", "fd00:65:0:2::2", mac, True)}
        api.commit(EnsureStaticMacBindings(api, PORT, {"fd00:65:0:1::2": mac}))   # no change
        api.commit(EnsureStaticMacBindings(api, PORT, {"fd00:65:0:3::2": "0e:00:00:00:00:01"}))
        assert bindings(api) == {(PORT, "fd00:65:0:3::2", "0e:00:00:00:00:01", True),
                                 ("other", "fd00:65:0:2::2", mac, True)}
        api.commit(EnsureStaticMacBindings(api, PORT, {}))
        assert bindings(api) == {("other", "fd00:65:0:2::2", mac, True)}
    finally:
        api.close()
