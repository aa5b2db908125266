"""`pacific tenant`: tenant isolation between namespaces, as a convenience over
the namespace label `pacific.io/tenant` (`kubectl label` works just as well).

    pacific tenant list
    pacific tenant join team-b team-c --to team-a     # one tenant with team-a
    pacific tenant global monitoring                   # reaches / reached by all
    pacific tenant isolate team-b                      # a tenant of its own again
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict

from pacific import names


def register(sub) -> None:
    p = sub.add_parser(
        "tenant", help="join, isolate or make global namespaces (tenant isolation)",
        description="Tenants are namespaces whose pods talk to each other and to no other "
        f"tenant's pods.  A namespace is a tenant of its own (listed as ns:NAMESPACE) unless "
        f"labelled {names.LABEL_TENANT}=NAME (same NAME: one tenant; 'global': reaches and is "
        "reached by every tenant); its name alone never joins it to a tenant.  These commands "
        "set or remove that label; the controller applies a change to running pods at once.")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                   help="kubeconfig (default: $KUBECONFIG, else in-cluster)")
    p.add_argument("--global-namespaces", default=",".join(names.DEFAULT_GLOBAL_NAMESPACES),
                   help="the controller's --global-namespaces, for `list` (default: %(default)s)")
    tsub = p.add_subparsers(dest="tenant_command", metavar="ACTION", required=True)
    j = tsub.add_parser("join", help="put namespaces into the tenant of another one")
    j.add_argument("namespaces", nargs="+", metavar="NS")
    j.add_argument("--to", required=True, metavar="NS",
                   help="the namespace whose tenant they join (a namespace of its own tenant is "
                   "first labelled with its name, if no other namespace carries that label)")
    j.set_defaults(func=_join)
    i = tsub.add_parser("isolate", help="make each namespace a tenant of its own")
    i.add_argument("namespaces", nargs="+", metavar="NS")
    i.set_defaults(func=_isolate)
    g = tsub.add_parser("global", help="let namespaces reach, and be reached by, every tenant")
    g.add_argument("namespaces", nargs="+", metavar="NS")
    g.set_defaults(func=_global)
    ls = tsub.add_parser("list", help="tenants, their namespaces and pod counts")
    ls.set_defaults(func=_list)


class _Error(Exception):
    pass


def _api(args):
    from pacific.kube import client
    return client.load(args.kubeconfig)


def _namespace(api, name: str) -> dict:
    from pacific.kube import resources as r
    ns = r.get(api, r.NAMESPACES, name)
    if ns is None:
        raise _Error(f"namespace {name!r} does not exist")
    return ns


def _globals(args) -> frozenset:
    return frozenset(n.strip() for n in args.global_namespaces.split(",") if n.strip())


def _set(api, namespaces: list[str], tenant: str | None) -> None:
    """Label the namespaces with `tenant` (None: remove the label)."""
    from pacific.kube import resources as r
    for ns in namespaces:
        _namespace(api, ns)
    for ns in namespaces:
        r.patch_merge(api, r.NAMESPACES, ns, {"metadata": {"labels": {names.LABEL_TENANT: tenant}}})
        print(f"namespace {ns}: tenant {tenant}" if tenant is not None else
              f"namespace {ns}: a tenant of its own")


def _labelled(api, value: str) -> list[str]:
    """Namespaces whose tenant label is `value`."""
    from pacific.kube import resources as r
    return sorted(n["metadata"]["name"] for n in r.list_(api, r.NAMESPACES)[0]
                  if ((n["metadata"].get("labels") or {}).get(names.LABEL_TENANT)) == value)


def _run(fn):
    def wrapped(args) -> int:
        from pacific.kube import errors
        try:
            return fn(args) or 0
        except (_Error, errors.ApiError) as e:
            print(f"pacific tenant: {e}", file=sys.stderr)
            return 1
    return wrapped


@_run
def _join(args) -> None:
    from pacific.tenancy import GLOBAL, is_own_tenant, tenant_of
    api = _api(args)
    tenant, problem = tenant_of(_namespace(api, args.to), args.to, _globals(args))
    if problem:
        raise _Error(f"namespace {args.to}: {problem}")
    if tenant == GLOBAL:
        raise _Error(f"namespace {args.to} is global; use `pacific tenant global` to make "
                     "namespaces global")
    if is_own_tenant(tenant):
        # a tenant of its own has no label value (a namespace's name grants
        # nothing): it becomes the tenant labelled with its name, unless others
        # already form that tenant (then joining them is for the admin to decide)
        others = [n for n in _labelled(api, args.to) if n not in (args.to, *args.namespaces)]
        if others:
            raise _Error(f"namespace {args.to} is a tenant of its own, and the tenant "
                         f"{args.to!r} it would be named is that of {', '.join(others)}; "
                         f"label {args.to} ({names.LABEL_TENANT}=NAME) first")
        tenant = args.to
        _set(api, [args.to], tenant)
    _set(api, args.namespaces, tenant)


@_run
def _isolate(args) -> None:
    api = _api(args)
    globals_ = _globals(args)
    for ns in args.namespaces:
        if ns in globals_:
            # without a label it is global (--global-namespaces): a tenant named
            # after it, which the administrator then owns
            others = [n for n in _labelled(api, ns) if n != ns]
            if others:
                raise _Error(f"namespace {ns} is global by --global-namespaces, and the tenant "
                             f"{ns!r} a label would name is that of {', '.join(others)}; "
                             f"label {ns} ({names.LABEL_TENANT}=NAME) yourself")
            _set(api, [ns], ns)
        else:
            _set(api, [ns], None)     # no label: a tenant of its own (ns:NAME)


@_run
def _global(args) -> None:
    from pacific.tenancy import GLOBAL
    _set(_api(args), args.namespaces, GLOBAL)


@_run
def _list(args) -> None:
    from pacific.tenancy import tenant_of
    from pacific.kube import resources as r
    api = _api(args)
    namespaces, _ = r.list_(api, r.NAMESPACES)
    pods, _ = r.list_(api, r.PODS)
    count = defaultdict(int)
    for p in pods:
        if not (p.get("spec") or {}).get("hostNetwork"):
            count[p["metadata"]["namespace"]] += 1
    tenants: dict[str, list[str]] = defaultdict(list)
    for ns in namespaces:
        name = ns["metadata"]["name"]
        tenants[tenant_of(ns, name, _globals(args))[0]].append(name)
    rows = [("TENANT", "NAMESPACES", "PODS")]
    for t in sorted(tenants, key=lambda t: (t != "global", t)):
        members = sorted(tenants[t])
        rows.append((t, ",".join(members), str(sum(count[n] for n in members))))
    width = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print("   ".join(c.ljust(w) for c, w in zip(row, width)).rstrip())


def main(argv=None) -> int:   # for tests: the group alone
    parser = argparse.ArgumentParser(prog="pacific")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)
