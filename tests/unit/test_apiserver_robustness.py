"""Robustness of the API emulator found in review: concurrent CRD updates, state
saving after a failed write, malformed requests answered 400 (not 500)."""
import sys
import threading

import yaml

from pacific.sandbox.apiserver.resources import CRD_KEY
from pacific.sandbox.apiserver.store import Store

SUBNET_CRD = "deploy/crds/subnet.yaml"


def _crd() -> dict:
    with open(SUBNET_CRD) as f:
        return yaml.safe_load(f)


def test_custom_resources_stay_served_while_their_crd_is_updated():
    """Every CRD update re-registers its resource types; a reader (any request
    routing through the registry) must never see them missing in between, or a
    LIST of custom resources answers 404 while someone labels the CRD."""
    store = Store()
    crd = _crd()
    rt = store.registry.by_key(CRD_KEY)
    store.create(rt, "", crd)
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    version = crd["spec"]["versions"][0]["name"]
    stop, missing, failed = threading.Event(), [], []

    def reader():
        while not stop.is_set():
            if store.registry.get(group, version, plural) is None:
                missing.append(1)
            try:
                store.registry.group_versions()   # iterates the registry (discovery)
            except RuntimeError as e:             # dictionary changed size during iteration
                failed.append(e)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)       # make thread switches inside the update likely
    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(400):
            store.mutate(rt, "", crd["metadata"]["name"],
                         lambda cur: {**cur, "metadata": {**cur["metadata"], "labels": {"i": str(i)}}})
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    assert not missing, f"{plural}.{group} unserved during {len(missing)} reads"
    assert not failed, f"discovery failed during CRD updates: {failed[0]}"


def test_state_is_saved_after_a_failed_save(tmp_path):
    """A save that fails (disk full, a transient error) must be retried by the
    saver: otherwise the objects written before it are lost on restart until
    some later write happens to mark the store dirty again."""
    import json
    import os
    import time

    from pacific.sandbox.apiserver.server import ApiServer
    state = tmp_path / "state.json"
    srv = ApiServer(["127.0.0.1:0"], state_file=str(state), save_interval=0.05)
    srv.load_state()
    blocker = tmp_path / f"state.json.tmp.{os.getpid()}"
    blocker.mkdir()                   # the atomic write's temporary file cannot be opened
    srv.start()
    try:
        ns = srv.store.registry.by_key(("", "namespaces"))
        srv.store.create(ns, "", {"metadata": {"name": "precious"}})
        time.sleep(0.3)               # several failed saves
        blocker.rmdir()
        deadline = time.monotonic() + 3
        saved = []
        while time.monotonic() < deadline:
            if state.exists():
                saved = [o["metadata"]["name"] for o in json.loads(state.read_text())["objects"]]
                if "precious" in saved:
                    break
            time.sleep(0.05)
        assert "precious" in saved, "the saver gave up after one failed save"
    finally:
        srv._stop.set()               # stop without the final save: the saver must have done it
        for s in srv.servers:
            s.shutdown()
            s.server_close()
