"""pacific.ovn.capabilities reads what an OVN can do from its Northbound schema:
Debian 12's OVN 23.03 has no ACL tiers, the OVN that hack/build-ovs-ovn.sh builds has."""
from __future__ import annotations

import json
import os

import pytest

from pacific import names, ovsinstall
from pacific.ovn.capabilities import from_schema


def schema_of(prefix: str) -> dict:
    path = ovsinstall.Install(prefix).schema("ovn-nb")
    if not os.path.exists(path):
        pytest.skip(f"no OVN schema at {path}")
    with open(path) as f:
        return json.load(f)


def test_debian_12_ovn_has_no_acl_tiers_and_the_log_line_says_so():
    caps = from_schema(schema_of(ovsinstall.SYSTEM_PREFIX))
    assert caps.schema_version.startswith("7.")
    assert not caps.acl_tier and not caps.acl_sample and caps.lb_health_check
    assert "ACL tiers no (tenant isolation and NetworkPolicy by priority bands)" in caps.describe()


def test_the_built_ovn_has_acl_tiers_and_sampling():
    caps = from_schema(schema_of(names.OVS_BUILD_CURRENT))
    assert caps.acl_tier and caps.acl_sample and caps.lb_health_check
    assert "ACL tiers yes," in caps.describe()


def test_a_schema_without_tables_has_nothing():
    caps = from_schema({"version": "1.0.0"})
    assert caps == type(caps)("1.0.0", False, False, False)
