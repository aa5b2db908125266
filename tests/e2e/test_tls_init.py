"""`pacific tls init` against a control plane of the test's own: the CA and
certificates as Secrets, each node's files, kept on a second run, renewed from
the same CA with --renew; openssl verifies every certificate against the CA."""
from __future__ import annotations

import base64
import io
import os
import subprocess

import pytest

from kube_fixtures import ApiServerProcess
from pacific import names
from pacific.cli import tls
from pacific.kube import client
from pacific.kube import resources as r

pytestmark = pytest.mark.e2e
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)
NS = names.PACIFIC_NAMESPACE


@pytest.fixture(scope="module")
def api():
    kube = ApiServerProcess()
    try:
        api = client.load(kube.kubeconfig)
        r.create(api, r.NAMESPACES, {"metadata": {"name": NS}})
        for name, ip, central in (("c1", "10.9.0.11", True), ("c2", "10.9.0.12", True),
                                  ("w1", "10.9.0.21", False)):
            node = r.create(api, r.NODES, {"metadata": {"name": name, "labels": {
                names.CENTRAL_ROLE_LABEL: names.CENTRAL_ROLE} if central else {}}})
            r.patch_status(api, r.NODES, node, {"addresses": [
                {"type": "InternalIP", "address": ip}]})
        yield api
    finally:
        kube.stop()


def secret_files(api, name, tmp_path) -> dict[str, str]:
    data = r.get(api, r.SECRETS, name, NS)["data"]
    out = {}
    for k, v in data.items():
        path = tmp_path / f"{name}-{k}"
        path.write_bytes(base64.b64decode(v))
        out[k] = str(path)
    return out


def openssl(*argv) -> str:
    return subprocess.run(["openssl", *argv], capture_output=True, text=True, check=True).stdout


def test_init_makes_the_secrets_and_node_files_and_keeps_them(api, tmp_path):
    out = io.StringIO()
    tls.init(api, NS, str(tmp_path / "w1"), ["ovn.example"], str(tmp_path / "nodes"), out=out)
    text = out.getvalue()
    assert "pacific-ovn-central: created (subjectAltNames: 10.9.0.11, 10.9.0.12, ovn.example)" \
        in text, text
    ca = secret_files(api, tls.CA_SECRET, tmp_path)["ca.crt"]
    central = secret_files(api, tls.CENTRAL_SECRET, tmp_path)
    assert "OK" in openssl("verify", "-CAfile", ca, central["tls.crt"])
    sans = openssl("x509", "-noout", "-ext", "subjectAltName", "-in", central["tls.crt"])
    assert "IP Address:10.9.0.11" in sans and "IP Address:10.9.0.12" in sans \
        and "10.9.0.21" not in sans and "DNS:ovn.example" in sans, sans
    ctl = secret_files(api, tls.CONTROLLER_SECRET, tmp_path)
    assert "CN = pacific-controller" in openssl("x509", "-noout", "-subject", "-in", ctl["tls.crt"])
    for node in ("c1", "c2", "w1"):
        d = tmp_path / "nodes" / node
        assert "OK" in openssl("verify", "-CAfile", ca, str(d / "tls.crt"))
        assert f"CN = {node}" in openssl("x509", "-noout", "-subject", "-in", str(d / "tls.crt"))
        assert oct(os.stat(d / "tls.key").st_mode & 0o777) == "0o600"
    # a second run (another machine: a fresh work directory) keeps everything
    before = {s: r.get(api, r.SECRETS, s, NS)["data"] for s in
              (tls.CA_SECRET, tls.CENTRAL_SECRET, tls.CONTROLLER_SECRET)}
    out = io.StringIO()
    tls.init(api, NS, str(tmp_path / "w2"), node_certs=str(tmp_path / "nodes"), out=out)
    assert out.getvalue().count("kept") == 6, out.getvalue()
    assert before == {s: r.get(api, r.SECRETS, s, NS)["data"] for s in before}


def test_renew_issues_new_certificates_from_the_same_ca(api, tmp_path):
    tls.init(api, NS, str(tmp_path / "w1"))
    old = r.get(api, r.SECRETS, tls.CENTRAL_SECRET, NS)["data"]["tls.crt"]
    ca_before = r.get(api, r.SECRETS, tls.CA_SECRET, NS)["data"]
    out = io.StringIO()
    tls.init(api, NS, str(tmp_path / "w2"), renew=True, out=out)
    assert "pacific-ovn-central: renewed" in out.getvalue(), out.getvalue()
    assert r.get(api, r.SECRETS, tls.CA_SECRET, NS)["data"] == ca_before
    assert r.get(api, r.SECRETS, tls.CENTRAL_SECRET, NS)["data"]["tls.crt"] != old
    files = secret_files(api, tls.CENTRAL_SECRET, tmp_path)
    assert "OK" in openssl("verify", "-CAfile", files["ca.crt"], files["tls.crt"])


def test_a_missing_namespace_is_named_and_nothing_is_written(api, tmp_path):
    from pacific.pki import PkiError
    with pytest.raises(PkiError, match="namespace nowhere does not exist"):
        tls.init(api, "nowhere", str(tmp_path / "w"))
