"""OVN load balancers for Kubernetes Services, shared through one Load_Balancer_Group.

    nb.commit(EnsureLoadBalancer(nb, "svc:default/web:tcp", "tcp",
                                 {"10.96.0.10:80": "10.16.0.5:8080,10.16.0.6:8080"},
                                 options={"reject": "true"}, external_ids=ids,
                                 group=names.LB_GROUP))
    nb.commit(AttachLoadBalancerGroup(nb, "ovn-default", names.LB_GROUP))
    nb.commit(DeleteLoadBalancer(nb, "svc:default/web:tcp", group=names.LB_GROUP))

Every switch holds the one group (`Logical_Switch.load_balancer_group`), so a
Service is one row per protocol plus one membership, whatever the number of
switches: northd applies the group's balancers to every switch that holds it.
A Service change rewrites only its own rows.
"""
from __future__ import annotations

from ovsdbapp.backend.ovs_idl import idlutils

from pacific.ovn.ensure import (LS, Command, _init_ref_sets, _mutate_set, _set_if_changed,
                                find, has_ref, insert)

LB = "Load_Balancer"
LBG = "Load_Balancer_Group"


def _group(api, txn, name: str):
    """The group row `name`, created (empty) when missing."""
    row = find(api, txn, LBG, name)
    if row is None:
        row = insert(api, txn, LBG, name)
        _init_ref_sets(api.tables[LBG], row)
    return row


class EnsureLoadBalancer(Command):
    """Load balancer `name` with exactly these vips, protocol, options and
    external_ids, member of group `group`."""

    def __init__(self, api, name: str, protocol: str, vips: dict[str, str], *,
                 options: dict[str, str], external_ids: dict[str, str], group: str):
        super().__init__(api)
        self.name, self.protocol, self.vips = name, protocol, dict(vips)
        self.options, self.external_ids, self.group = dict(options), dict(external_ids), group

    def describe(self):
        return f"{self.name} ({len(self.vips)} vips)"

    def run_idl(self, txn):
        row = find(self.api, txn, LB, self.name)
        if row is None:
            row = insert(self.api, txn, LB, self.name)
        for col, val in (("protocol", [self.protocol]), ("vips", self.vips),
                         ("options", self.options), ("external_ids", self.external_ids)):
            _set_if_changed(row, col, idlutils.db_replace_record(val))
        grp = _group(self.api, txn, self.group)
        _mutate_set(grp, "load_balancer", row, present=has_ref(grp, "load_balancer", row), add=True)
        self.result = row.uuid


class DeleteLoadBalancer(Command):
    """Remove load balancer `name` from its group and delete it (no-op if gone)."""

    def __init__(self, api, name: str, *, group: str):
        super().__init__(api)
        self.name, self.group = name, group

    def describe(self):
        return self.name

    def run_idl(self, txn):
        row = find(self.api, txn, LB, self.name)
        if row is None:
            return
        grp = find(self.api, txn, LBG, self.group)
        if grp is not None:
            _mutate_set(grp, "load_balancer", row, present=has_ref(grp, "load_balancer", row),
                        add=False)
        row.delete()
        self.result = True


class AttachLoadBalancerGroup(Command):
    """Switch `switch` holds group `group` (created when missing)."""

    def __init__(self, api, switch: str, group: str):
        super().__init__(api)
        self.switch, self.group = switch, group

    def describe(self):
        return f"{self.switch} <- {self.group}"

    def run_idl(self, txn):
        ls = find(self.api, txn, LS, self.switch)
        if ls is None:
            raise RuntimeError(f"switch {self.switch} does not exist")
        grp = _group(self.api, txn, self.group)
        _mutate_set(ls, "load_balancer_group", grp,
                    present=has_ref(ls, "load_balancer_group", grp), add=True)
