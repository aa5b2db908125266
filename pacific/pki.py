"""A certificate authority on the openssl command line: one CA, certificates it
signs for both ends of a TLS connection (OVSDB peers serve and connect).

    ca = CertAuthority("/dir").ensure("pacific-ovn-ca")      # made once, kept
    crt, key = ca.issue("pacific-central", ["10.0.0.1"])    # file paths
    crt, key = ca.issue("node-a", renew=True)                # a new key and certificate

Used by `pacific tls` (OVN's certificates as Secrets) and by the sandbox.  Keys
are EC P-256, files 0600, certificates valid for DAYS days.
"""
from __future__ import annotations

import ipaddress
import os
import subprocess

DAYS = 3650


class PkiError(RuntimeError):
    pass


def openssl(*argv: str) -> str:
    try:
        cp = subprocess.run(["openssl", *argv], capture_output=True, text=True, timeout=60)
    except FileNotFoundError as exc:
        raise PkiError("openssl is not installed (it makes the certificates)") from exc
    if cp.returncode != 0:
        raise PkiError(f"openssl {' '.join(argv[:2])} failed: {cp.stderr.strip()}")
    return cp.stdout


def alt_names(hosts) -> str:
    out = []
    for h in hosts:
        try:
            ipaddress.ip_address(h)
            out.append(f"IP:{h}")
        except ValueError:
            out.append(f"DNS:{h}")
    return ",".join(dict.fromkeys(out))


class CertAuthority:
    def __init__(self, directory: str):
        self.dir = directory
        self.ca_key = os.path.join(directory, "ca.key")
        self.ca_crt = os.path.join(directory, "ca.crt")

    def ensure(self, cn: str) -> "CertAuthority":
        """The CA, created with common name `cn` unless its files exist."""
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        if not os.path.exists(self.ca_crt):
            openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", self.ca_key, "-out", self.ca_crt, "-days", str(DAYS),
                    "-subj", f"/CN={cn}", "-addext", "basicConstraints=critical,CA:TRUE",
                    "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature")
            os.chmod(self.ca_key, 0o600)
        return self

    def paths(self, name: str) -> tuple[str, str]:
        return os.path.join(self.dir, f"{name}.crt"), os.path.join(self.dir, f"{name}.key")

    def issue(self, name: str, hosts=(), subject: str | None = None,
              usage: str = "serverAuth,clientAuth", renew: bool = False) -> tuple[str, str]:
        """(certificate, key) for `name` (CN = name unless `subject`), with
        subjectAltNames `hosts`; made once unless `renew`."""
        crt, key = self.paths(name)
        if os.path.exists(crt) and not renew:
            return crt, key
        alt = alt_names(hosts)
        ext = os.path.join(self.dir, f"{name}.ext")
        csr = os.path.join(self.dir, f"{name}.csr")
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,"
                    f"keyEncipherment\nextendedKeyUsage={usage}\n"
                    + (f"subjectAltName={alt}\n" if alt else ""))
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", key, "-out", csr, "-subj", subject or f"/CN={name}")
        openssl("x509", "-req", "-in", csr, "-CA", self.ca_crt, "-CAkey", self.ca_key,
                "-CAcreateserial", "-out", crt, "-days", str(DAYS), "-extfile", ext)
        os.remove(csr)
        os.chmod(key, 0o600)
        return crt, key
