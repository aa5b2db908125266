"""The product imports nothing of the sandbox, its components import one way, and
no module of `pacific/` takes part in an import circle.

Every `import` / `from ... import` in the product's packages is read with `ast`
(also those inside functions), so a lazy import cannot hide a wrong direction.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "pacific"
PRODUCT = ("cni", "node", "controller", "central", "vswitch", "ipam", "ovn", "kube", "tools")
# component -> Pacific packages it may import (besides itself and the top-level
# modules pacific.names / daemonlog / metrics / contract)
ALLOWED = {
    "cni": set(),                       # stdlib only: runs on the host as the plugin
    "ipam": set(),
    "kube": set(),
    "ovn": set(),
    "node": {"cni", "kube", "ovn"},    # the CNI protocol module, API helpers, OVSDB
    "controller": {"ipam", "kube", "ovn"},
    "central": {"kube"},               # OVN central's member: OVN's programs; its nodes
    "vswitch": set(),                  # a node's Open vSwitch: OVS's programs only
    "tools": {"kube", "ovn"},          # day-two tools: they read; shared rules are top-level
}
TOP_LEVEL = {"names", "daemonlog", "metrics", "contract", "exposure", "servicesnat", "remotes",
             "selectors", "egressip", "egressfirewall", "multicast", "clusterpolicy",
             "tenancy", "ovsinstall", "heap", "audit", "tailfile", "pki"}


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


def _module_names() -> dict[str, pathlib.Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _runtime_edges(module: str, path: pathlib.Path, modules) -> set[str]:
    """Pacific modules `module` imports when it runs (in functions too; not what
    only a type checker reads under `if TYPE_CHECKING:`)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            node.body = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    edges = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            edges |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:
                if f"{base}.{a.name}" in modules:
                    edges.add(f"{base}.{a.name}")
                elif base in modules:
                    edges.add(base)
    return edges - {module}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_in_pacific():
    modules = _module_names()
    graph = {m: _runtime_edges(m, p, modules) for m, p in modules.items()}
    circles = _circles(graph)
    assert not circles, "import circles:\n" + "\n".join(
        " <-> ".join(c) for c in circles)


def test_the_circle_check_finds_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert sorted(_circles(graph)) == [["a", "b", "c"], ["d", "e"]]


def test_the_circle_check_reads_function_imports_not_type_checking_ones(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pacific.a import X\n"
                 "def f():\n    from pacific import b\n    from . import c\n")
    modules = {"pacific.a", "pacific.b", "pacific.pkg.c", "pacific.pkg.m"}
    assert _runtime_edges("pacific.pkg.m", f, modules) == {"pacific.b", "pacific.pkg.c"}
