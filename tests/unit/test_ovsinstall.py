"""pacific.ovsinstall: an OVS/OVN installation by prefix, and which one a process uses."""
from __future__ import annotations

import os

import pytest

from pacific import ovsinstall
from pacific.ovsinstall import Install


@pytest.fixture
def env(monkeypatch):
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin")
    monkeypatch.delenv(ovsinstall.PREFIX_ENV, raising=False)
    return monkeypatch


def test_a_build_goes_first_on_path_and_another_one_replaces_it(env):
    a, b = Install("/opt/a"), Install("/opt/b")
    ovsinstall.activate(a)
    ovsinstall.activate(a)                        # idempotent
    assert os.environ["PATH"] == "/opt/a/bin:/opt/a/sbin:/usr/local/bin:/usr/bin:/bin:/usr/sbin"
    assert ovsinstall.from_env() == a
    ovsinstall.activate(b)
    assert os.environ["PATH"] == "/opt/b/bin:/opt/b/sbin:/usr/local/bin:/usr/bin:/bin:/usr/sbin"
    ovsinstall.activate(Install(ovsinstall.SYSTEM_PREFIX))   # Debian's: the build leaves
    assert os.environ["PATH"] == "/usr/local/bin:/usr/bin:/bin:/usr/sbin"
    assert ovsinstall.from_env().prefix == "/usr"


def test_programs_and_schemas_of_an_installation(tmp_path):
    inst = Install(str(tmp_path))
    (tmp_path / "sbin").mkdir()
    (tmp_path / "sbin" / "ovs-vswitchd").write_text("#!/bin/sh\n")
    (tmp_path / "sbin" / "ovs-vswitchd").chmod(0o755)
    assert inst.usable()
    assert inst.program("ovs-vswitchd") == str(tmp_path / "sbin" / "ovs-vswitchd")
    assert inst.program("ovn-northd") == "ovn-northd"       # not there: found on PATH
    assert inst.schema("ovn-nb") == str(tmp_path / "share" / "ovn" / "ovn-nb.ovsschema")
    assert inst.python_dir == str(tmp_path / "python" / "ovs")
    assert Install("/usr").python_dir == "/usr/lib/python3/dist-packages/ovs"
    assert not Install(str(tmp_path / "nothing")).usable()
