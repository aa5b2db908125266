"""pacific diagnose's Subnet check: how full each Subnet is, per family for a
dual-stack one (a pod needs an address of each, so either running out
stops new pods)."""
from __future__ import annotations

from pacific.tools import diagnose


def _subnet(name, **status):
    return {"metadata": {"name": name}, "status": status}


def test_a_dual_stack_subnet_full_in_one_family_is_named_with_the_family():
    found = [str(f) for f in diagnose.subnet_findings([
        _subnet("small6", usedIPs=250, availableIPs=65000, v4availableIPs=65000,
                v6availableIPs=3),
        _subnet("roomy", usedIPs=10, availableIPs=65000, v4availableIPs=65000,
                v6availableIPs=1.8e19),
        _subnet("v4full", usedIPs=250, availableIPs=4)])]
    assert len(found) == 2, found
    assert "Subnet small6 is 99% full in IPv6 (3 addresses left)" in found[0]
    assert "Subnet v4full is 98% full (4 addresses left)" in found[1]


def test_no_full_subnet_is_ok():
    (f,) = diagnose.subnet_findings([_subnet("roomy", usedIPs=10, availableIPs=65000,
                                             v4availableIPs=65000, v6availableIPs=1.8e19)])
    assert f.level == "ok"
