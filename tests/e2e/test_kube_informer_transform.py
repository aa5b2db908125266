"""Informer(transform=...): listed, added, updated and deleted objects reach the
cache and the callbacks transformed; a failing transform keeps the object whole."""
from __future__ import annotations

import uuid

import pytest

from pacific.kube import client, resources as r
from pacific.kube.informer import Informer
from kube_fixtures import ApiServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60)]
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)


@pytest.fixture(scope="module")
def api():
    srv = ApiServerProcess()
    c = None
    try:
        c = client.load(srv.kubeconfig)
        yield c
    finally:
        if c is not None:
            c.close()
        srv.stop()


def cm(name: str, suite: str, value: str = "v") -> dict:
    return {"metadata": {"name": name, "labels": {"suite": suite}}, "data": {"k": value, "big": "x" * 1000}}


def only_k(obj: dict) -> dict:
    if (obj.get("data") or {}).get("k") == "boom":
        raise ValueError("cannot trim this one")
    m = obj["metadata"]
    return {"kind": obj["kind"], "metadata": {"name": m["name"], "namespace": m["namespace"],
                                              "resourceVersion": m["resourceVersion"]},
            "data": {"k": obj["data"]["k"]}}


def test_transform_applies_to_every_path(api, caplog):
    suite = uuid.uuid4().hex[:8]
    seen: list[tuple] = []
    pre = f"pre-{suite}"
    r.create(api, r.CONFIGMAPS, cm(pre, suite), "default")
    inf = Informer(api, r.CONFIGMAPS, namespace="default", label_selector=f"suite={suite}",
                   on_add=lambda o: seen.append(("add", o)),
                   on_update=lambda a, b: seen.append(("update", a, b)),
                   on_delete=lambda o: seen.append(("delete", o)), transform=only_k)
    inf.start()
    try:
        assert inf.wait_synced(10)
        assert inf.get(f"default/{pre}") == {"kind": "ConfigMap", "data": {"k": "v"}, "metadata": {
            "name": pre, "namespace": "default",
            "resourceVersion": inf.get(f"default/{pre}")["metadata"]["resourceVersion"]}}
        live = f"live-{suite}"
        r.create(api, r.CONFIGMAPS, cm(live, suite), "default")
        r.patch_merge(api, r.CONFIGMAPS, live, {"data": {"k": "w"}}, "default")
        assert inf.wait_for(f"default/{live}", lambda o: o["data"] == {"k": "w"}, 10) is not None
        r.delete(api, r.CONFIGMAPS, live, "default")
        assert inf.wait_for_absent(f"default/{live}", 10)
        bad = f"bad-{suite}"
        r.create(api, r.CONFIGMAPS, cm(bad, suite, "boom"), "default")
        got = inf.wait_for(f"default/{bad}", lambda o: True, 10)
        assert got is not None and got["data"]["big"] == "x" * 1000   # kept whole
        assert "transform failed" in caplog.text
    finally:
        inf.stop()
    objs = [o for ev in seen for o in ev[1:]]
    assert all("big" not in o["data"] for o in objs if o["data"]["k"] != "boom")
    assert [ev[0] for ev in seen if ev[-1]["metadata"]["name"] == live] == ["add", "update", "delete"]


def test_list_in_pages_sees_everything(api, monkeypatch):
    from pacific.kube import informer as informer_mod
    monkeypatch.setattr(informer_mod, "LIST_PAGE_SIZE", 2)
    suite = uuid.uuid4().hex[:8]
    names_ = [f"p{i}-{suite}" for i in range(7)]
    for n in names_:
        r.create(api, r.CONFIGMAPS, cm(n, suite), "default")
    added: list[str] = []
    inf = Informer(api, r.CONFIGMAPS, namespace="default", label_selector=f"suite={suite}",
                   on_add=lambda o: added.append(o["metadata"]["name"]), transform=only_k)
    inf.start()
    try:
        assert inf.wait_synced(10)
        assert sorted(added) == sorted(names_)
        assert sorted(k.split("/")[1] for k in inf.keys()) == sorted(names_)
        # the watch continues from the list's resourceVersion: nothing missed, nothing doubled
        r.create(api, r.CONFIGMAPS, cm(f"late-{suite}", suite), "default")
        assert inf.wait_for(f"default/late-{suite}", lambda o: True, 10) is not None
        assert len(added) == len(names_) + 1
    finally:
        inf.stop()
