"""Gateway chassis for centralized egress: an HA_Chassis_Group bound to a
router port (a distributed gateway port), and NB_Global options.

    nb.commit(EnsureHAChassisGroup(nb, "egw:audited", {"node1": 20, "node2": 10},
                                   external_ids=ids, router_port="lrp:egw:audited"))
    nb.commit(DeleteHAChassisGroup(nb, "egw:audited"))
    nb.commit(SetGlobalOptions(nb, {"bfd-min-rx": "100"}))
    nb.commit(EnsureStaticMacBindings(nb, "lrp:egw:x", {"100.65.0.2": "0e:00:64:41:ff:fe",
                                                          "fd00:65::2": "0e:00:64:41:ff:fe"}))

ovn-controller then binds the port's chassisredirect port on the live chassis
of highest priority, and moves it when BFD over the Geneve tunnels says that
chassis is gone: the data plane fails over on its own, no controller needed.
"""
from __future__ import annotations

from pacific.ovn.ensure import LRP, Command, _DeleteNamed, _set_if_changed, find, insert

HCG = "HA_Chassis_Group"
HC = "HA_Chassis"
SMB = "Static_MAC_Binding"


class EnsureHAChassisGroup(Command):
    """Group `name` holding exactly these chassis (name -> priority), owned by
    `external_ids`; with `router_port`, that port's ha_chassis_group."""

    def __init__(self, api, name: str, priorities: dict[str, int], *, external_ids: dict,
                 router_port: str | None = None):
        super().__init__(api)
        self.name, self.priorities = name, dict(priorities)
        self.external_ids, self.router_port = dict(external_ids), router_port

    def describe(self):
        return f"{self.name}: {self.priorities}"

    def run_idl(self, txn):
        group = find(self.api, txn, HCG, self.name)
        if group is None:
            group = insert(self.api, txn, HCG, self.name)
            group.ha_chassis = []
        _set_if_changed(group, "external_ids", self.external_ids)
        have = {}
        for hc in list(getattr(group, "ha_chassis", []) or []):
            if hc.chassis_name in self.priorities and hc.chassis_name not in have:
                have[hc.chassis_name] = hc
            else:
                group.delvalue("ha_chassis", hc)
        for chassis, prio in self.priorities.items():
            hc = have.get(chassis)
            if hc is None:
                hc = txn.insert(self.api.tables[HC])
                hc.chassis_name = chassis
                group.addvalue("ha_chassis", hc)
            _set_if_changed(hc, "priority", int(prio))
        if self.router_port:
            port = find(self.api, txn, LRP, self.router_port)
            # a port inserted in this transaction has no value yet: getattr raises
            if port is not None and list(getattr(port, "ha_chassis_group", None) or []) != [group]:
                port.ha_chassis_group = [group]
        self.result = True


class DeleteHAChassisGroup(_DeleteNamed):
    TABLE = HCG


class SetGlobalOptions(Command):
    """NB_Global options: these keys set (others kept)."""

    def __init__(self, api, options: dict[str, str]):
        super().__init__(api)
        self.options = dict(options)

    def describe(self):
        return str(self.options)

    def run_idl(self, txn):
        for row in self.api.tables["NB_Global"].rows.values():
            cur = dict(row.options)
            if any(cur.get(k) != v for k, v in self.options.items()):
                row.options = {**cur, **self.options}


class EnsureStaticMacBindings(Command):
    """Router port `port`'s static MAC bindings become exactly `bindings`
    (address -> MAC), overriding what the router would learn.  For a gateway's
    transit host, whose interface has one fixed MAC on every node
    (names.EGRESS_PORT_MAC), so the binding never changes and is never learned:
    OVN solicits a router policy's IPv6 next hop at the solicited-node group of
    the packet's destination, not of the next hop, so the host never hears the
    solicitation; and over IPv4 the gateway node's bridge port (`br-egress`, on
    the same segment) could answer the ARP with its own MAC, and a router that
    learnt it sent the Subnet's traffic where the host firewall does not mark
    it, so the replies went back through `ovn0` and were dropped (decision
    0052)."""

    def __init__(self, api, port: str, bindings: dict[str, str]):
        super().__init__(api)
        self.port, self.bindings = port, dict(bindings)

    def describe(self):
        return f"{self.port}: {self.bindings}"

    def run_idl(self, txn):
        have = {}
        for row in list(self.api.tables[SMB].rows.values()):
            if row.logical_port != self.port:
                continue
            if row.ip in self.bindings and row.ip not in have:
                have[row.ip] = row
                _set_if_changed(row, "mac", self.bindings[row.ip])
                _set_if_changed(row, "override_dynamic_mac", True)
            else:
                row.delete()
        for ip, mac in self.bindings.items():
            if ip not in have:
                row = txn.insert(self.api.tables[SMB])
                row.logical_port, row.ip, row.mac = self.port, ip, mac
                row.override_dynamic_mac = True
        self.result = True
