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
