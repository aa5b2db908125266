"""The API emulator inside a real sandbox: reachable from the root namespace
(127.0.0.1) and from a node namespace through the underlay (central_ip:6443),
and its state survives a restart of the emulator."""
import subprocess
import sys

import pytest
from kubernetes import client, config

from pacific import names
from pacific.sandbox.apiserver import start_for_sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

PROBE = """
import sys
from kubernetes import client, config
api = config.new_client_from_config(config_file=sys.argv[1])
v1 = client.CoreV1Api(api)
v1.create_namespaced_config_map("default", {"metadata": {"name": "from-node"}})
print(",".join(sorted(n.metadata.name for n in v1.list_namespace().items)))
"""


def test_sandbox_apiserver_from_root_and_node_namespaces(sandbox_factory):
    sb = sandbox_factory(nodes=1)
    info = start_for_sandbox(sb)
    assert info.underlay_url == f"https://{sb.central_ip}:{names.KUBE_API_PORT}"
    with config.new_client_from_config(config_file=info.kubeconfig) as api:
        v1 = client.CoreV1Api(api)
        v1.create_namespace({"metadata": {"name": "persisted"}})
    node = sb.nodes[0]
    r = subprocess.run(["ip", "netns", "exec", node.netns, sys.executable, "-c", PROBE,
                        info.kubeconfig_underlay], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "persisted" in r.stdout.strip().split(",")
    # restart: the objects and their resourceVersions are still there
    with config.new_client_from_config(config_file=info.kubeconfig) as api:
        before = client.CoreV1Api(api).read_namespaced_config_map("from-node", "default")
    assert sb.stop(names.SANDBOX_APISERVER_TAG)
    info2 = start_for_sandbox(sb)
    with config.new_client_from_config(config_file=info2.kubeconfig) as api:
        after = client.CoreV1Api(api).read_namespaced_config_map("from-node", "default")
    assert after.metadata.uid == before.metadata.uid
    assert after.metadata.resource_version == before.metadata.resource_version


def test_sandbox_apiserver_that_dies_at_start_fails_fast(tmp_path, monkeypatch):
    """An emulator that exits during start-up (here: its state file is corrupt)
    is reported at once with its own error, not after the whole start timeout."""
    import time

    from pacific.sandbox.apiserver.sandbox import apiserver_dir
    from pacific.sandbox.cluster import Sandbox
    monkeypatch.setenv(names.SANDBOX_DIR_ENV, str(tmp_path))
    sb = Sandbox("deadapi", nodes=1)         # only its directory: no network needed
    d = apiserver_dir(sb)
    import os
    os.makedirs(d)
    with open(os.path.join(d, "state.json"), "w") as f:
        f.write("{not json")
    t0 = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="cannot read state file"):
            start_for_sandbox(sb, timeout=20)
        assert time.monotonic() - t0 < 8
    finally:
        sb.down()
