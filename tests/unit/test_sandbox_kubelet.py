"""Pure parts of the kubelet nodes: the OCI archives, the registry's answers,
the API server's egress configuration, containerd's and the kubelet's configs."""
import io
import json
import os
import subprocess
import tarfile
import threading
import urllib.request
from http.server import ThreadingHTTPServer

import pytest
import yaml

from pacific.sandbox.cluster import Sandbox
from pacific.sandbox.k8s import egress, images, kubelet, registry


def _layer():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        data = b"#!/bin/sh\n"
        ti = tarfile.TarInfo("bin/sh")
        ti.size, ti.mode = len(data), 0o755
        t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def _archive(tmp_path, name="localhost/busybox:latest"):
    return images.write_oci_archive(str(tmp_path / "img.tar"), name, _layer(), cmd=["/bin/sh"])


def test_oci_archive_is_a_content_addressed_layout(tmp_path):
    import hashlib
    path = _archive(tmp_path)
    with tarfile.open(path) as t:
        assert json.load(t.extractfile("oci-layout")) == {"imageLayoutVersion": "1.0.0"}
        index = json.load(t.extractfile("index.json"))
        man_d = index["manifests"][0]["digest"]
        assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == \
            "localhost/busybox:latest"
        blobs = {m.name.rsplit("/", 1)[1]: t.extractfile(m).read()
                 for m in t.getmembers() if m.isfile() and m.name.startswith("blobs/")}
    for digest, data in blobs.items():
        assert hashlib.sha256(data).hexdigest() == digest
    man = json.loads(blobs[man_d.split(":")[1]])
    cfg = json.loads(blobs[man["config"]["digest"].split(":")[1]])
    assert cfg["config"]["Cmd"] == ["/bin/sh"]
    assert cfg["rootfs"]["diff_ids"] == [man["layers"][0]["digest"]]


@pytest.mark.skipif(not os.access(images.BUSYBOX_BIN, os.X_OK), reason="no busybox-static")
def test_busybox_images_are_built_once(tmp_path):
    out = images.build(str(tmp_path))
    mtime = os.stat(out["busybox"]).st_mtime_ns
    assert images.build(str(tmp_path)) == out
    assert os.stat(out["busybox"]).st_mtime_ns == mtime      # the stamp kept them
    with tarfile.open(out["pause"]) as t:
        assert "localhost/pause:latest" in t.extractfile("index.json").read().decode()


def test_registry_serves_manifests_by_tag_and_digest_and_blobs(tmp_path):
    store = registry.Store([_archive(tmp_path)])
    server = ThreadingHTTPServer(("127.0.0.1", 0), registry.handler(store))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(f"{base}/v2/") as r:
            assert r.headers["Docker-Distribution-API-Version"] == "registry/2.0"
        with urllib.request.urlopen(f"{base}/v2/busybox/manifests/latest") as r:
            digest = r.headers["Docker-Content-Digest"]
            assert r.headers["Content-Type"] == "application/vnd.oci.image.manifest.v1+json"
            man = json.loads(r.read())
        req = urllib.request.Request(f"{base}/v2/busybox/manifests/{digest}", method="HEAD")
        with urllib.request.urlopen(req) as r:
            assert r.headers["Docker-Content-Digest"] == digest
        with urllib.request.urlopen(f"{base}/v2/busybox/blobs/{man['layers'][0]['digest']}") as r:
            assert r.read() == _layer()
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"{base}/v2/busybox/manifests/nope")
        assert e.value.code == 404
    finally:
        server.shutdown()


def test_egress_selector_config_names_the_unix_socket():
    doc = yaml.safe_load(egress.config_yaml("/run/x/egress.sock"))
    assert doc["kind"] == "EgressSelectorConfiguration"
    sel = doc["egressSelections"][0]
    assert sel["name"] == "cluster"
    assert sel["connection"] == {"proxyProtocol": "HTTPConnect",
                                 "transport": {"uds": {"udsName": "/run/x/egress.sock"}}}


def test_node_configs_keep_nodes_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("PACIFIC_SANDBOX_DIR", str(tmp_path))
    sb = Sandbox("unit", nodes=2, kubelet=True)
    p1, p2 = (kubelet.Paths(sb, n) for n in sb.nodes)
    assert p1.socket != p2.socket and p1.cgroup_root == "/pac-unit-node1"
    conf = kubelet.containerd_config(p1, "192.168.77.1:5000")
    for must in (f'root = "{p1.containerd_root}"', f'Root = "{p1.runc_root}"',
                 "restrict_oom_score_adj = true", "SystemdCgroup = false",
                 f'conf_dir = "{p1.cni_conf_dir}"', 'endpoint = ["http://192.168.77.1:5000"]',
                 f'sandbox_image = "{images.PAUSE}"'):
        assert must in conf
    kc = kubelet.kubelet_config(sb, sb.nodes[0], p1, "/ca.crt")
    assert kc["address"] == sb.nodes[0].underlay_ip and kc["cgroupRoot"] == p1.cgroup_root
    assert kc["cgroupDriver"] == "cgroupfs" and kc["oomScoreAdj"] == 0


def test_loopback_wrapper_records_the_namespace_on_add(tmp_path, monkeypatch):
    monkeypatch.setenv("PACIFIC_SANDBOX_DIR", str(tmp_path))
    sb = Sandbox("unit", nodes=1, kubelet=True)
    p = kubelet.Paths(sb, sb.nodes[0])
    os.makedirs(p.base)
    script = tmp_path / "loopback"
    script.write_text(kubelet.loopback_wrapper(p).replace(f"exec {kubelet.CNI_PLUGINS}/loopback",
                                                          "echo ran"))
    for cmd in ("ADD", "DEL"):
        out = subprocess.run(["sh", str(script)], capture_output=True, text=True,
                             env={"CNI_COMMAND": cmd, "CNI_NETNS": f"/var/run/netns/cni-{cmd}"})
        assert out.stdout == "ran\n"
    assert open(p.netns_list).read() == "/var/run/netns/cni-ADD\n"


def test_shim_socket_is_containerds_hash():
    import hashlib
    want = hashlib.sha256(b"/a/containerd.sock/k8s.io/abc").hexdigest()
    assert kubelet._shim_socket("/a/containerd.sock", "k8s.io", "abc") == \
        f"/run/containerd/s/{want}"


def test_default_pods_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("PACIFIC_SANDBOX_DIR", str(tmp_path))
    monkeypatch.delenv("PACIFIC_SANDBOX_PODS", raising=False)
    assert Sandbox("unit", nodes=1).kubelet              # real nodes unless asked otherwise
    monkeypatch.setenv("PACIFIC_SANDBOX_PODS", "kubelet")
    assert Sandbox("unit", nodes=1).kubelet
    monkeypatch.setenv("PACIFIC_SANDBOX_PODS", "runner")
    assert not Sandbox("unit", nodes=1).kubelet
    monkeypatch.setenv("PACIFIC_SANDBOX_PODS", "docker")
    with pytest.raises(Exception, match="kubelet or runner"):
        Sandbox("unit", nodes=1)


def test_deploy_points_the_manifests_at_the_local_image_and_node_dirs(tmp_path, monkeypatch):
    from pacific.sandbox import nodedaemons
    from pacific.sandbox.k8s import deploy
    monkeypatch.setenv("PACIFIC_SANDBOX_DIR", str(tmp_path))
    docs = deploy._docs(("Deployment", "DaemonSet"))
    assert sorted(d["kind"] for d in docs) == ["DaemonSet", "Deployment"]
    for d in docs:
        out = deploy.with_image(d, "localhost/pacific:9")
        c = out["spec"]["template"]["spec"]["containers"][0]
        assert (c["image"], c["imagePullPolicy"]) == ("localhost/pacific:9", "IfNotPresent")
        assert d["spec"]["template"]["spec"]["containers"][0]["image"] != c["image"]  # a copy
    sb = Sandbox("unit", nodes=1, deploy=True)
    assert sb.kubelet, "--deploy runs on kubelet nodes"
    node = sb.nodes[0]
    dirs = nodedaemons.deploy_host_dirs(node)
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    host_paths = {v["hostPath"]["path"] for v in ds["spec"]["template"]["spec"]["volumes"]}
    # every hostPath of node.yaml is a node's own directory, but /var/run/netns
    assert host_paths - set(dirs) == {"/var/run/netns"}
    assert dirs["/etc/cni/net.d"] == nodedaemons.paths(node).conf_dir
    assert deploy.image_name().startswith("localhost/pacific:")
