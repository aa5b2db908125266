"""The sandbox control plane's certificates and static tokens (openssl CLI).

    pki = Pki("<dir>/pki")
    pki.ensure(server_hosts=["127.0.0.1", "192.168.77.1"])
    pki.ca_crt, pki.server_crt, pki.server_key, pki.sa_key, pki.sa_pub
    pki.client("kubelet-client", org="system:masters")    # (crt, key)

One CA signs the API server's serving certificate (subjectAltNames: every host it
is reached at) and the client certificate the API server presents to kubelets;
an RSA key pair signs ServiceAccount tokens.  Files are created once and kept.
"""
from __future__ import annotations

import os

from pacific.pki import CertAuthority, alt_names, openssl

_DEFAULT_HOSTS = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                  "kubernetes.default.svc.cluster.local", "127.0.0.1"]


class Pki:
    def __init__(self, directory: str):
        self.dir = directory
        self.ca_key = os.path.join(directory, "ca.key")
        self.ca_crt = os.path.join(directory, "ca.crt")
        self.server_key = os.path.join(directory, "apiserver.key")
        self.server_crt = os.path.join(directory, "apiserver.crt")
        self.sa_key = os.path.join(directory, "sa.key")
        self.sa_pub = os.path.join(directory, "sa.pub")

    def ensure_ca(self, cn: str = "pacific-sandbox-ca") -> "Pki":
        CertAuthority(self.dir).ensure(cn)
        return self

    def peer(self, name: str, hosts: list[str] = ()) -> tuple[str, str]:
        """A certificate (crt, key) for both ends of a TLS connection (OVSDB
        members talk to each other and serve clients), made once."""
        return CertAuthority(self.dir).issue(name, hosts)

    def ensure(self, server_hosts: list[str]) -> "Pki":
        CertAuthority(self.dir).ensure("pacific-sandbox-ca")
        hosts = [*_DEFAULT_HOSTS, *server_hosts]
        want = alt_names(hosts)
        san_file = os.path.join(self.dir, "apiserver.san")
        if not (os.path.exists(self.server_crt) and os.path.exists(san_file)
                and open(san_file).read() == want):
            CertAuthority(self.dir).issue("apiserver", hosts, subject="/CN=kube-apiserver",
                                          usage="serverAuth", renew=True)
            with open(san_file, "w") as f:
                f.write(want)
        if not os.path.exists(self.sa_key):
            openssl("genrsa", "-out", self.sa_key, "2048")
            openssl("rsa", "-in", self.sa_key, "-pubout", "-out", self.sa_pub)
        for p in (self.ca_key, self.server_key, self.sa_key):
            os.chmod(p, 0o600)
        return self

    def client(self, name: str, cn: str | None = None, org: str | None = None) -> tuple[str, str]:
        """A client certificate (crt, key) signed by the CA, made once."""
        return CertAuthority(self.dir).issue(
            name, subject=(f"/O={org}" if org else "") + f"/CN={cn or name}", usage="clientAuth")
