"""Which (API group, resource, verb) a component calls, read from its source.

The components reach the API server only through `pacific.kube.resources`
helpers and `pacific.kube.informer.Informer`, always naming the resource by a
`Resource` constant.  This scan (ast, no import side effects) finds those calls
in every function of the component's modules, follows calls into other Pacific
functions (e.g. `resources.create_event`, `leader.run_leader_elected` and the
methods of the classes it instantiates), and maps them to RBAC verbs:

    get -> get, list_ -> list, create -> create, replace -> update,
    patch_merge -> patch, delete -> delete, Informer(...) -> list + watch;
    subresource="status" -> resource "<plural>/status"; patch_status -> patch of
    "<plural>/status".

A call it cannot resolve (a raw `resources.request`, a resource held in a
variable) in component code is reported in `Scan.unresolved`, so the tests
fail instead of silently under-counting.  Generic helpers inside pacific.kube
(which take the resource as a parameter) are not counted: their callers are.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

from pacific.kube import resources

ROOT = Path(__file__).resolve().parents[2]
RES = "pacific.kube.resources"
INFORMER = "pacific.kube.informer.Informer"
# a controller or node feature declares its informers as InformerSpec(resource,
# ...) (module level, pacific/controller/informers.py, pacific/node/feature.py);
# the daemon then makes each Informer from `spec.resource`
INFORMER_SPECS = ("pacific.controller.feature.InformerSpec", "pacific.node.feature.InformerSpec")
HELPER_VERBS = {"get": ("get",), "list_": ("list",), "create": ("create",),
                "replace": ("update",), "patch_merge": ("patch",), "delete": ("delete",),
                "patch_status": ("patch",)}
SCANNED_PACKAGES = ("pacific/kube", "pacific/controller", "pacific/node", "pacific/central",
                    "pacific/cni", "pacific/ipam", "pacific/ovn")


@dataclass(frozen=True)
class Use:
    group: str
    resource: str            # plural, or plural/subresource
    verb: str
    where: str               # module:line of the call


@dataclass
class Scan:
    uses: set[Use] = field(default_factory=set)
    unresolved: list[str] = field(default_factory=list)

    def pairs(self) -> set[tuple[str, str, str]]:
        return {(u.group, u.resource, u.verb) for u in self.uses}

    def where(self, group: str, resource: str, verb: str) -> list[str]:
        return sorted(u.where for u in self.uses
                      if (u.group, u.resource, u.verb) == (group, resource, verb))


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class _Module:
    def __init__(self, path: Path):
        self.name = _module_name(path)
        self.tree = ast.parse(path.read_text(), str(path))
        self.aliases: dict[str, str] = {}
        pkg = self.name if path.name == "__init__.py" else self.name.rpartition(".")[0]
        for node in ast.walk(self.tree):   # function-local imports count too
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = \
                        a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{base}.{a.name}"
        # functions: "mod.f", "mod.C.m"; classes: "mod.C" -> method names
        self.functions: dict[str, ast.AST] = {}
        self.classes: dict[str, list[str]] = {}
        for node in self.tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{self.name}.{node.name}"
                self.functions[q] = node
                self.aliases.setdefault(node.name, q)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):   # module constants
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    if isinstance(t, ast.Name):
                        self.aliases.setdefault(t.id, f"{self.name}.{t.id}")
            elif isinstance(node, ast.ClassDef):
                q = f"{self.name}.{node.name}"
                self.aliases.setdefault(node.name, q)
                self.classes[q] = []
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self.functions[f"{q}.{item.name}"] = item
                        self.classes[q].append(f"{q}.{item.name}")

    def resolve(self, expr: ast.AST, cls: str | None) -> str | None:
        if isinstance(expr, ast.Name):
            return self.aliases.get(expr.id)
        if isinstance(expr, ast.Attribute):
            if isinstance(expr.value, ast.Name) and expr.value.id == "self" and cls:
                return f"{cls}.{expr.attr}"
            base = self.resolve(expr.value, cls)
            return f"{base}.{expr.attr}" if base else None
        return None


class _Index:
    def __init__(self):
        self.modules: dict[str, _Module] = {}
        for pkg in SCANNED_PACKAGES:
            for path in sorted((ROOT / pkg).rglob("*.py")):
                m = _Module(path)
                self.modules[m.name] = m
        self.owner: dict[str, tuple[_Module, str | None]] = {}
        self.classes: dict[str, list[str]] = {}
        for m in self.modules.values():
            self.classes.update(m.classes)
            for q in m.functions:
                cls = q.rpartition(".")[0]
                self.owner[q] = (m, cls if cls in m.classes else None)

    def node(self, q: str) -> ast.AST:
        return self.owner[q][0].functions[q]


def _resource(mod: _Module, expr: ast.AST | None, cls: str | None):
    q = mod.resolve(expr, cls) if expr is not None else None
    if q and q.startswith(RES + "."):
        val = getattr(resources, q[len(RES) + 1:], None)
        if isinstance(val, resources.Resource):
            return val
    return None


def _arg(call: ast.Call, pos: int, kw: str):
    for k in call.keywords:
        if k.arg == kw:
            return k.value
    return call.args[pos] if len(call.args) > pos else None


def scan(component_modules: list[str]) -> Scan:
    """Everything reachable from every function of `component_modules`."""
    idx = _Index()
    out = Scan()
    todo = [q for name in component_modules for q in idx.modules[name].functions]
    seen: set[str] = set()
    while todo:
        q = todo.pop()
        if q in seen:
            continue
        seen.add(q)
        mod, cls = idx.owner[q]
        generic = mod.name.startswith("pacific.kube.")
        for call in ast.walk(idx.node(q)):
            if not isinstance(call, ast.Call):
                continue
            target = mod.resolve(call.func, cls)
            where = f"{mod.name}:{call.lineno}"
            if target == INFORMER:
                arg = _arg(call, 1, "res")
                res = _resource(mod, arg, cls)
                if res is None and isinstance(arg, ast.Attribute) and arg.attr == "resource":
                    continue   # made from an InformerSpec: counted where the spec is declared
                if res is None:
                    out.unresolved.append(f"{where}: Informer on a resource held in a variable")
                    continue
                for verb in ("list", "watch"):
                    out.uses.add(Use(res.group, res.plural, verb, where))
            elif target and target.startswith(RES + ".") and target[len(RES) + 1:] in HELPER_VERBS:
                res = _resource(mod, _arg(call, 1, "res"), cls)
                if res is None:
                    if not generic:
                        out.unresolved.append(f"{where}: {target} on a resource held in a "
                                              "variable")
                    continue
                plural = res.plural
                sub = ast.Constant("status") if target.endswith("patch_status") else \
                    _arg(call, 5 if target.endswith("patch_merge") else 4, "subresource")
                if isinstance(sub, ast.Constant) and sub.value:
                    plural = f"{plural}/{sub.value}"
                elif sub is not None and not (isinstance(sub, ast.Constant) and sub.value is None):
                    out.unresolved.append(f"{where}: subresource is not a constant")
                for verb in HELPER_VERBS[target[len(RES) + 1:]]:
                    out.uses.add(Use(res.group, plural, verb, where))
            elif target == f"{RES}.request":
                if not generic:
                    out.unresolved.append(f"{where}: raw resources.request (use the helpers)")
            elif target in idx.classes:           # instantiation: any method may run
                todo.extend(idx.classes[target])
            elif target in idx.owner:
                todo.append(target)
    for name in component_modules:   # module-level InformerSpec declarations
        mod = idx.modules[name]
        for call in ast.walk(mod.tree):
            if isinstance(call, ast.Call) and mod.resolve(call.func, None) in INFORMER_SPECS:
                arg = _arg(call, 0, "resource")
                # `A if version == "v1beta1" else B`: either one may be used
                choices = [arg.body, arg.orelse] if isinstance(arg, ast.IfExp) else [arg]
                found = [_resource(mod, a, None) for a in choices]
                if None in found:
                    out.unresolved.append(f"{mod.name}:{call.lineno}: InformerSpec on a resource "
                                          "held in a variable")
                    continue
                for res in found:
                    for verb in ("list", "watch"):
                        out.uses.add(Use(res.group, res.plural, verb, f"{mod.name}:{call.lineno}"))
    return out
