"""Pacific's OVSDB connections over TLS (ssl: remotes) with certificate
verification, against a real ovsdb-server listening with pssl: on loopback.

The ovs library keeps the PKI process-wide, so each client runs in its own
process: one with a certificate of the server's CA, one with a certificate of
another CA (the server refuses it), one that does not trust the server's CA
(it refuses the server), one with no PKI (a clear error before connecting)."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from ovsdb_fixtures import NB_SCHEMA, OvsdbServer
from pacific.sandbox.k8s.pki import Pki

pytestmark = pytest.mark.e2e
BESIDE_THE_DATAPATH = True   # runs on the other worker (tests/conftest.py)

CLIENT = """
import sys
from pacific.ovn import NorthboundAPI, configure_ssl, OvnError
remote, key, crt, ca = sys.argv[1:5]
try:
    if key:
        configure_ssl(key, crt, ca)
    nb = NorthboundAPI(remote, timeout=4)
    nb.commit(nb.ls_add(sys.argv[5]))
    print("OK", sorted(r.name for r in nb.tables["Logical_Switch"].rows.values()))
except OvnError as e:
    print("ERROR", type(e).__name__, e)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("tls")
    good, other = Pki(str(d / "ca")).ensure_ca("good-ca"), Pki(str(d / "other")).ensure_ca("other-ca")
    s_crt, s_key = good.peer("server", ["127.0.0.1"])
    port = free_port()
    srv = OvsdbServer(d / "nb", NB_SCHEMA, extra_args=(
        f"--remote=pssl:{port}:127.0.0.1", f"--private-key={s_key}", f"--certificate={s_crt}",
        f"--ca-cert={good.ca_crt}"))
    with srv:
        yield f"ssl:127.0.0.1:{port}", good, other, srv


def client(remote, key, crt, ca, switch):
    cp = subprocess.run([sys.executable, "-c", CLIENT, remote, key, crt, ca, switch],
                        capture_output=True, text=True, timeout=60)
    return cp.stdout.strip() or cp.stderr.strip()


def test_a_client_with_a_certificate_of_the_servers_ca_reads_and_writes(server):
    remote, good, _, _ = server
    crt, key = good.peer("controller")
    assert client(remote, key, crt, good.ca_crt, "s1") == "OK ['s1']"
    # a cluster given as a list with one member down still works over TLS
    dead = f"ssl:127.0.0.1:{free_port()}"
    assert client(f"{dead},{remote}", key, crt, good.ca_crt, "s2") == "OK ['s1', 's2']"


def test_the_server_refuses_a_certificate_of_another_ca(server):
    remote, good, other, srv = server
    crt, key = other.peer("intruder")
    out = client(remote, key, crt, good.ca_crt, "x")
    assert out.startswith("ERROR OvnConnectionError"), out
    assert "certificate verify failed" in srv.log.read_text()


def test_the_client_refuses_a_server_it_cannot_verify(server):
    remote, good, other, srv = server
    crt, key = other.peer("cautious")       # trusts only the other CA
    out = client(remote, key, crt, other.ca_crt, "x")
    assert out.startswith("ERROR OvnConnectionError"), out
    assert "alert unknown ca" in srv.log.read_text()          # the client's verdict


def test_an_ssl_remote_without_pki_is_a_clear_error(server, tmp_path):
    remote, good, _, _ = server
    out = client(remote, "", "", "", "x")
    assert out.startswith("ERROR OvnError") and "needs a private key, a certificate and a CA" in out
    crt, key = good.peer("c2")
    out = client(remote, str(tmp_path / "missing.key"), crt, good.ca_crt, "x")
    assert out == f"ERROR OvnError TLS private key '{tmp_path / 'missing.key'}' is not a readable file"
