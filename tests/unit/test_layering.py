"""The product imports nothing of the sandbox, and its components import one way.

Every `import` / `from ... import` in the product's packages is read with `ast`
(also those inside functions), so a lazy import cannot hide a wrong direction.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "pacific"
PRODUCT = ("cni", "node", "controller", "ipam", "ovn", "kube", "tools")
# component -> Pacific packages it may import (besides itself and the top-level
# modules pacific.names / daemonlog / metrics / contract)
ALLOWED = {
    "cni": set(),                       # stdlib only: runs on the host as the plugin
    "ipam": set(),
    "kube": set(),
    "ovn": set(),
    "node": {"cni", "kube", "ovn"},    # the CNI protocol module, API helpers, OVSDB
    "controller": {"ipam", "kube", "ovn"},
    "tools": {"kube", "ovn", "controller"},   # day-two tools: read-only, name things as the controller does
}
TOP_LEVEL = {"names", "daemonlog", "metrics", "contract", "exposure", "egressip", "remotes"}


def _imports(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names if node.module == "pacific"]
    return [m for m in out if m == "pacific" or m.startswith("pacific.")]


@pytest.mark.parametrize("component", PRODUCT)
def test_component_imports_only_what_it_may(component):
    wrong = []
    for path in sorted((ROOT / component).rglob("*.py")):
        for mod in _imports(path):
            parts = mod.split(".")
            if len(parts) < 2:
                continue
            target = parts[1]
            if target == component or (target in TOP_LEVEL):
                continue
            if target not in ALLOWED[component]:
                wrong.append(f"{path.relative_to(ROOT.parent)} imports {mod}")
    assert not wrong, "\n".join(wrong)


def test_top_level_modules_import_no_component():
    wrong = []
    for name in TOP_LEVEL:
        path = ROOT / f"{name}.py"
        if not path.exists():
            continue
        for mod in _imports(path):
            parts = mod.split(".")
            if len(parts) >= 2 and parts[1] not in TOP_LEVEL:
                wrong.append(f"pacific/{name}.py imports {mod}")
    assert not wrong, "\n".join(wrong)


def test_the_scan_sees_lazy_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from pacific.sandbox import cluster\n    import pacific.cni.plugin\n")
    assert set(_imports(f)) == {"pacific.sandbox", "pacific.cni.plugin"}
