"""pacific.vswitch.cgroups: where a pod's daemons go to outlive it, against a
host cgroup tree laid out as cgroup v1 (files stand in for the kernel's)."""
import os

import pytest

from pacific.vswitch import cgroups

POD = "/pac-sb-node1/kubepods/burstable/pod1234/abcd"


def test_the_target_is_beside_the_kubelets_pods():
    assert cgroups.target(POD) == "/pac-sb-node1/pacific-vswitch"
    assert cgroups.target("/kubepods.slice/kubepods-burstable.slice/x") == "/pacific-vswitch"
    assert cgroups.target("/") == "/pacific-vswitch"


@pytest.fixture
def host(tmp_path, monkeypatch):
    for h in ("memory", "cpuset", "systemd"):
        os.makedirs(tmp_path / h / "pac-sb-node1")
        (tmp_path / h / "cgroup.procs").write_text("")
    (tmp_path / "cpuset" / "pac-sb-node1" / "cpuset.cpus").write_text("0-1\n")
    (tmp_path / "cpuset" / "pac-sb-node1" / "cpuset.mems").write_text("0\n")
    monkeypatch.setattr(cgroups, "_own", lambda: {"memory": POD, "cpuset": POD,
                                                  "name=systemd": POD})
    return tmp_path


def test_escape_writes_every_hierarchy_and_fills_cpuset(host):
    d = "pac-sb-node1/pacific-vswitch"
    os.makedirs(host / "cpuset" / d)                     # the kernel makes these empty
    (host / "cpuset" / d / "cpuset.cpus").write_text("")
    (host / "cpuset" / d / "cpuset.mems").write_text("")
    assert cgroups.escape([41, 42], str(host))
    for h in ("memory", "cpuset", "systemd"):
        assert (host / h / d / "cgroup.procs").read_text() == "42"   # one pid per write
    assert (host / "cpuset" / d / "cpuset.cpus").read_text() == "0-1"


def test_a_missing_hierarchy_says_the_daemons_stop_with_the_pod(host, monkeypatch):
    monkeypatch.setattr(cgroups, "_own", lambda: {"memory": POD, "pids": POD})
    assert cgroups.escape([41], str(host)) is False


def test_outside_a_pod_nothing_moves(host, monkeypatch):
    monkeypatch.setattr(cgroups, "_own", lambda: {"memory": "/user.slice", "": "/"})
    assert cgroups.escape([41], str(host))
    assert not (host / "memory" / "pacific-vswitch").exists()
