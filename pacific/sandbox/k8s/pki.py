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
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        if not os.path.exists(self.ca_crt):
            _run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                  "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", self.ca_key,
                  "-out", self.ca_crt, "-days", "3650", "-subj", f"/CN={cn}",
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"])
            os.chmod(self.ca_key, 0o600)
        return self

    def peer(self, name: str, hosts: list[str] = ()) -> tuple[str, str]:
        """A certificate (crt, key) for both ends of a TLS connection (OVSDB
        members talk to each other and serve clients), made once."""
        crt = os.path.join(self.dir, f"{name}.crt")
        key = os.path.join(self.dir, f"{name}.key")
        if not os.path.exists(crt):
            alt = ",".join(f"IP:{h}" for h in hosts)
            self._sign(name, f"/CN={name}", (f"subjectAltName={alt}\n" if alt else "")
                       + "extendedKeyUsage=serverAuth,clientAuth\n")
        return crt, key

    def ensure(self, server_hosts: list[str]) -> "Pki":
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        if not os.path.exists(self.ca_crt):
            _run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                  "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", self.ca_key,
                  "-out", self.ca_crt, "-days", "3650", "-subj", "/CN=pacific-sandbox-ca",
                  "-addext", "basicConstraints=critical,CA:TRUE",
                  "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"])
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
        key = os.path.join(self.dir, f"{name}.key")
        csr = os.path.join(self.dir, f"{name}.csr")
        crt = os.path.join(self.dir, f"{name}.crt")
        ext = os.path.join(self.dir, f"{name}.ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,"
                    "keyEncipherment\n" + ext_text)
        _run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
              "-nodes", "-keyout", key, "-out", csr, "-subj", subject])
        _run(["openssl", "x509", "-req", "-in", csr, "-CA", self.ca_crt, "-CAkey", self.ca_key,
              "-CAcreateserial", "-out", crt, "-days", "3650", "-extfile", ext])
        os.remove(csr)
        os.chmod(key, 0o600)
