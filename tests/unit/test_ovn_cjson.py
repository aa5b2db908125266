"""pacific.ovn.cjson: the system's C JSON parser is used only when it is sound.

Each case runs in a fresh interpreter: enabling the parser changes the `ovs`
package for the whole process."""
from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SYSTEM_SO = [p for d in ("/usr/lib/python3/dist-packages/ovs",)
             for s in importlib.machinery.EXTENSION_SUFFIXES if s != ".so"
             for p in [os.path.join(d, "_json" + s)] if os.path.isfile(p)]


def run(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


ROUND_TRIP = r"""
import json, logging, sys
logging.basicConfig(level=logging.INFO)
from pacific.ovn import cjson
dirs = {dirs!r}
state = cjson.enable(dirs) if dirs is not None else cjson.enable()
import ovs.json
doc = {{"method": "update2", "params": [None, {{"Logical_Switch_Port": {{
    "%08x-0000-0000-0000-000000000000" % i: {{"insert": {{
        "name": "p%d.ns-\u00e9" % i, "addresses": "0a:58:0a:10:00:%02x 10.16.0.%d" % (i, i),
        "external_ids": ["map", [["pacific.io/owner", "ns/p%d" % i]]], "tag": i, "x": 1.25,
        "up": False, "z": None}}}} for i in range(200)}}}}]}}
text = json.dumps(doc)
assert ovs.json.from_string(text) == doc, "parse differs"
print(state, ovs.json.PARSER)
"""


@pytest.mark.skipif(not SYSTEM_SO, reason="python3-openvswitch's ovs/_json not installed")
def test_system_parser_is_used_and_parses_like_python():
    p = run(ROUND_TRIP.format(dirs=None))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["C", "C"]
    assert "OVSDB JSON parser: C, from" in p.stderr


def test_switch_off_keeps_python_parser():
    p = run(ROUND_TRIP.format(dirs=None), env={"PACIFIC_OVS_C_JSON": "0"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["PYTHON", "PYTHON"]
    assert "PACIFIC_OVS_C_JSON=0" in p.stderr


def test_missing_parser_says_how_to_get_it(tmp_path):
    p = run(ROUND_TRIP.format(dirs=(str(tmp_path),)))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["PYTHON", "PYTHON"]
    assert "install python3-openvswitch" in p.stderr


def test_broken_build_is_refused(tmp_path):
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / ("_json" + suffix)).write_bytes(b"not an ELF file")
    p = run(ROUND_TRIP.format(dirs=(str(tmp_path),)))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["PYTHON", "PYTHON"]
    assert "cannot use" in p.stderr and str(tmp_path) in p.stderr
