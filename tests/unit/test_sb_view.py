"""pacific.ovn.sb.build_view: what the nodes read of Southbound's gateway
ports, from rows shaped as the ovs IDL hands them out."""
from types import SimpleNamespace as Row

from pacific.ovn.sb import build_view


def _tables(*bindings):
    return {"Chassis": Row(rows={"c1": Row(name="node1")}),
            "Port_Binding": Row(rows={i: b for i, b in enumerate(bindings)}),
            "Address_Set": Row(rows={})}


def test_a_gateway_port_of_both_families_gives_its_router_address_of_each():
    view = build_view(_tables(
        Row(type="patch", logical_port="lrp-egw:eip:web/fd00:77::150", chassis=[],
            mac=["0e:00:64:41:01:01 100.65.1.1/24 fd00:65:0:1::1/64"]),
        Row(type="patch", logical_port="lrp-egw:eip:web/192.168.77.150", chassis=[],
            mac=["0e:00:64:41:00:01 100.65.0.1/24"]),
        Row(type="chassisredirect", logical_port="cr-lrp-egw:eip:web/fd00:77::150",
            chassis=[Row(uuid="c1")], mac=[])), None)
    assert view.transits_under("lrp-egw:eip:") == {"web/fd00:77::150": "100.65.1.1",
                                                  "web/192.168.77.150": "100.65.0.1"}
    assert view.transits_under("lrp-egw:eip:", 6) == {"web/fd00:77::150": "fd00:65:0:1::1"}
    assert view.held_under("cr-lrp-egw:eip:") == {"web/fd00:77::150": "node1"}
