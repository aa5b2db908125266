"""deploy/grafana/pacific-dashboard.json asks only for metrics the daemons export."""
from __future__ import annotations

import json
import pathlib
import re

from prometheus_client import REGISTRY

import pacific.controller.lagprobe  # noqa: F401 - registers its metrics
import pacific.controller.metrics as cm
import pacific.node.metrics  # noqa: F401

DASHBOARD = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "pacific-dashboard.json"
SUFFIXES = ("_total", "_bucket", "_count", "_sum")


def exported() -> set[str]:
    names = set()
    for fam in REGISTRY.collect():
        names |= {s.name for s in fam.samples} | {fam.name}
    # scrape-time gauges of the leading controller (absent without one)
    names |= {"pacific_controller_workqueue_depth", "pacific_ipam_used_addresses",
              "pacific_ipam_available_addresses", "pacific_node_pods_attached",
              "pacific_node_mgmt_port_ready"}
    assert "pacific_controller_workqueue_depth" in (cm.__doc__ or "")
    return names


def test_every_panel_queries_an_exported_metric():
    doc = json.loads(DASHBOARD.read_text())
    have = exported()
    used = set()
    for panel in doc["panels"]:
        assert panel["targets"], panel["title"]
        for t in panel["targets"]:
            used |= set(re.findall(r"\b(pacific_[a-z0-9_]+)", t["expr"]))
    missing = {u for u in used if u not in have
               and not any(u.endswith(s) and u[: -len(s)] in have for s in SUFFIXES)}
    assert not missing, f"the dashboard queries metrics nobody exports: {sorted(missing)}"
    assert len(used) >= 15
