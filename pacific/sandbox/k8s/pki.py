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

import ipaddress
import os
import subprocess

from pacific.pki import CertAuthority

_DEFAULT_SANS = ["DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default",
                 "DNS:kubernetes.default.svc", "DNS:kubernetes.default.svc.cluster.local",
                 "IP:127.0.0.1"]


def _run(argv: list[str]) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed: {r.stderr.strip()}")


def san(hosts: list[str]) -> str:
    entries = list(_DEFAULT_SANS)
    for h in hosts:
        try:
            ipaddress.ip_address(h)
            e = f"IP:{h}"
        except ValueError:
            e = f"DNS:{h}"
        if e not in entries:
            entries.append(e)
    return ",".join(entries)


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
        want = san(server_hosts)
        san_file = os.path.join(self.dir, "apiserver.san")
        if not (os.path.exists(self.server_crt) and os.path.exists(san_file)
                and open(san_file).read() == want):
            self._sign("apiserver", "/CN=kube-apiserver",
                       f"subjectAltName={want}\nextendedKeyUsage=serverAuth\n")
            with open(san_file, "w") as f:
                f.write(want)
        if not os.path.exists(self.sa_key):
            _run(["openssl", "genrsa", "-out", self.sa_key, "2048"])
            _run(["openssl", "rsa", "-in", self.sa_key, "-pubout", "-out", self.sa_pub])
        for p in (self.ca_key, self.server_key, self.sa_key):
            os.chmod(p, 0o600)
        return self

    def client(self, name: str, cn: str | None = None, org: str | None = None) -> tuple[str, str]:
        """A client certificate (crt, key) signed by the CA, made once."""
        crt = os.path.join(self.dir, f"{name}.crt")
        key = os.path.join(self.dir, f"{name}.key")
        if not os.path.exists(crt):
            subj = (f"/O={org}" if org else "") + f"/CN={cn or name}"
            self._sign(name, subj, "extendedKeyUsage=clientAuth\n")
        return crt, key

    def _sign(self, name: str, subject: str, ext_text: str) -> None:
        usage, alt = "", []
        for line in ext_text.splitlines():
            k, _, v = line.partition("=")
            if k == "extendedKeyUsage":
                usage = v
            elif k == "subjectAltName":
                alt = [e.split(":", 1)[1] for e in v.split(",") if e]
        CertAuthority(self.dir).issue(name, alt, subject=subject, usage=usage, renew=True)
