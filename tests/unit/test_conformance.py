"""pacific.sandbox.conformance: the selection, the JUnit report read back, the
summary table, and the image layer with the tools the upstream tests run."""
from __future__ import annotations

import io
import re
import tarfile

from pacific.sandbox import conformance as c
from pacific.sandbox.k8s import images

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite tests="4" failures="1" errors="0" time="120">
  <testcase name="[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" time="30"></testcase>
  <testcase name="[sig-network] NetworkPolicy [LinuxOnly] NetworkPolicy between server and client should enforce policy to allow traffic only from a different namespace, based on NamespaceSelector [Feature:NetworkPolicy]" classname="Kubernetes e2e suite" time="80">
    <failure type="Failure">k8s.io/kubernetes/test/e2e/framework/framework.go:629&#xA;Nov 27 10:02:45.946: client-a could not reach server&#xA;k8s.io/kubernetes/vendor/github.com/onsi/ginkgo/internal/leafnodes/runner.go:113</failure>
  </testcase>
  <testcase name="[sig-network] Services should handle load balancer cleanup finalizer for service" classname="Kubernetes e2e suite" time="0"><skipped></skipped></testcase>
  <testcase name="[sig-storage] Volumes should mount" classname="Kubernetes e2e suite" time="0"><skipped></skipped></testcase>
</testsuite>
"""


def test_every_skip_pattern_compiles_and_has_a_reason():
    for pattern, why in c.SKIPS:
        re.compile(pattern)
        assert len(why) > 10, pattern
    re.compile(c.skip_regex())
    assert c.why_skipped("[sig-network] Services should be able to create an internal type "
                         "load balancer [Slow]") == "slow (minutes each): run with --focus"
    assert c.why_skipped("[sig-network] Services should handle load balancer cleanup "
                         "finalizer for service") == "cloud load balancers"
    assert c.why_skipped("[sig-network] Networking Granular Checks: Pods should function "
                         "for node-pod communication: udp [LinuxOnly]") == ""


def test_the_report_is_read_back_and_summarised(tmp_path):
    (tmp_path / "junit_01.xml").write_text(JUNIT)
    (tmp_path / "e2e.log").write_text("not a report")
    got = c.results(str(tmp_path))
    assert [s for _, s, _ in got] == ["passed", "failed", "skipped", "skipped"]
    assert got[1][2] == "Nov 27 10:02:45.946: client-a could not reach server"
    out = c.table(got, c.FOCUS)
    assert out.splitlines()[2] == "| 1 | 1 (+ 0 known) | 1 |"   # the storage skip is not ours
    assert "| [sig-network] Services should handle load balancer cleanup finalizer for " \
           "service | skipped: cloud load balancers" in out
    assert "failed: Nov 27 10:02:45.946: client-a could not reach server |" in out
    assert "sig-storage" not in out
    assert c.unexpected(got) == [got[1][0]]


def test_a_known_limitation_is_reported_and_does_not_fail_the_run(monkeypatch):
    hostnet = "[sig-network] Networking Granular Checks: Services should function for " \
              "service endpoints using hostNetwork"
    monkeypatch.setattr(c, "KNOWN", ((r"using hostNetwork", "a limitation said in a guide"),))
    got = [(hostnet, "failed", "failed dialing endpoint"), ("[sig-network] x", "passed", "")]
    assert c.unexpected(got) == []
    out = c.table(got, c.FOCUS)
    assert out.splitlines()[2] == "| 1 | 0 (+ 1 known) | 0 |"
    assert f"| {hostnet} | failed (known: a limitation said in a guide)" in out


def test_the_image_layer_carries_the_extra_files_and_their_directories():
    layer = images.rootfs_layer({"usr/bin/nc": (b"#!nc", 0o755), "agnhost": (b"ELF", 0o755),
                                 "usr/lib/x86_64-linux-gnu/libbsd.so.0": (b"lib", 0o644),
                                 "agnhost-2": ("agnhost", 0o777), "bin/sh": (b"dash", 0o755)})
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        members = {m.name: m for m in t.getmembers()}
        assert t.extractfile("usr/bin/nc").read() == b"#!nc"
    assert members["agnhost"].mode == 0o755 and members["agnhost-2"].linkname == "agnhost"
    assert members["usr"].isdir() and members["usr/lib/x86_64-linux-gnu"].isdir()
    assert members["bin/nc"].issym()         # busybox's, after /usr/bin on the image's PATH
    assert members["bin/sh"].isfile()        # replaced, not linked to busybox as well
    with tarfile.open(fileobj=io.BytesIO(layer)) as t:
        every = [m.name for m in t.getmembers()]
    assert len(every) == len(set(every)), "a path twice in the layer"


def test_shards_deal_every_test_once_and_the_focus_matches_only_its_names():
    names = ["[sig-network] Services should serve a basic endpoint from pods  [Conformance]",
             "[sig-network] Networking Granular Checks: Pods should function for intra-pod "
             "communication: http [NodeConformance] [Conformance]",
             "[sig-network] NetworkPolicy [LinuxOnly] should support a 'default-deny-all' policy",
             "[sig-network] Services should serve a basic endpoint"]
    parts = c.shards(names, 3)
    assert sorted(n for p in parts for n in p) == sorted(names) and len(parts) == 3
    assert c.shards(names[:1], 3) == [names[:1]]
    focus = re.compile(c.exactly(names[:3]))   # RE2's syntax is Python's here
    for n in names[:3]:
        assert focus.search(f"[Top Level] {n}")
    assert not focus.search(f"[Top Level] {names[3]}")   # a prefix of another name
    assert not focus.search(f"[Top Level] {names[0]} and more")


def test_with_isolation_the_cross_namespace_tests_are_expected_to_fail():
    cross = c.CROSS_NAMESPACE[0]
    got = [(cross, "failed", "Pod client-b should be able to connect"),
           ("[sig-network] Services should serve a basic endpoint from pods  [Conformance]",
            "passed", "")]
    assert c.unexpected(got) == [cross]                   # isolation off: a failure
    assert c.unexpected(got, isolation=True) == []
    out = c.table(got, c.FOCUS, isolation=True)
    assert f"| {cross} | failed (known: {c.CROSS_WHY}): Pod client-b" in out
    assert len(c.CROSS_NAMESPACE) == 11 and all("NetworkPolicy" in n for n in c.CROSS_NAMESPACE)
