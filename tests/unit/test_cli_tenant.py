"""`pacific tenant` against the fake API server: a namespace's name grants
nothing, so the commands set and remove the label accordingly."""
from __future__ import annotations

import pytest

from controller_fakes import FakeKube, _Resp
from pacific import names
from pacific.cli import tenant as cli
from pacific.kube import resources as r


class ListingKube(FakeKube):
    """The fake API server, also answering lists of namespaces and pods."""

    def _handle(self, method, path, body):
        path = path.split("?", 1)[0]
        if method == "GET" and path in ("/api/v1/namespaces", "/api/v1/pods"):
            kind = path.rsplit("/", 1)[1]
            items = [o for k, o in self.objects.items()
                     if k.startswith("/api/v1/") and k.split("/")[-2] == kind]
            return _Resp(200, {"items": items, "metadata": {"resourceVersion": "1"}})
        return super()._handle(method, path, body)


@pytest.fixture
def kube(monkeypatch):
    k = ListingKube()
    monkeypatch.setattr(cli, "_api", lambda args: k)
    return k


def ns(kube, name, tenant=None):
    labels = {} if tenant is None else {names.LABEL_TENANT: tenant}
    kube.add(r.NAMESPACES, {"metadata": {"name": name, "labels": labels}})


def label(kube, name):
    return (r.get(kube, r.NAMESPACES, name)["metadata"].get("labels") or {}).get(names.LABEL_TENANT)


def test_join_to_a_tenant_of_its_own_names_it_after_the_namespace(kube, capsys):
    ns(kube, "team-a")
    ns(kube, "team-b")
    assert cli.main(["tenant", "join", "team-b", "--to", "team-a"]) == 0
    assert label(kube, "team-a") == label(kube, "team-b") == "team-a"


def test_join_refuses_a_name_others_already_carry_as_label(kube, capsys):
    ns(kube, "acme")                    # unlabelled: tenant ns:acme
    ns(kube, "acme-db", "acme")         # tenant acme
    ns(kube, "x")
    assert cli.main(["tenant", "join", "x", "--to", "acme"]) == 1
    assert "acme-db" in capsys.readouterr().err
    assert label(kube, "acme") is None and label(kube, "x") is None


def test_isolate_removes_the_label_or_names_a_global_namespace(kube, capsys):
    ns(kube, "team-b", "team-a")
    ns(kube, "kube-system")
    assert cli.main(["tenant", "isolate", "team-b", "kube-system"]) == 0
    assert label(kube, "team-b") is None
    assert label(kube, "kube-system") == "kube-system"


def test_list_shows_own_tenants_apart_from_labels(kube, capsys):
    ns(kube, "acme")
    ns(kube, "acme-db", "acme")
    ns(kube, "global")
    ns(kube, "kube-system")
    assert cli.main(["tenant", "list"]) == 0
    rows = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows == {"global": "kube-system", "acme": "acme-db", "ns:acme": "acme",
                    "ns:global": "global"}
