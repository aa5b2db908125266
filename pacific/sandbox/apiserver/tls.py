"""Self-signed certificates for the emulator (openssl CLI): a CA and a server
certificate whose subjectAltNames cover every listen address."""
import ipaddress
import logging
import os
import subprocess

log = logging.getLogger(__name__)


def _san(hosts: list[str]) -> str:
    entries = ["DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default", "IP:127.0.0.1"]
    for h in hosts:
        try:
            ipaddress.ip_address(h)
            e = f"IP:{h}"
        except ValueError:
            e = f"DNS:{h}"
        if e not in entries:
            entries.append(e)
    return ",".join(entries)


def _run(argv: list[str]) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:3])} failed: {r.stderr.strip()}")


def ensure_certs(directory: str, hosts: list[str]) -> tuple[str, str, str]:
    """(ca.crt, server.crt, server.key) in directory, created when missing or when the
    existing certificate does not cover the hosts."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    ca_key, ca_crt = os.path.join(directory, "ca.key"), os.path.join(directory, "ca.crt")
    key, crt = os.path.join(directory, "server.key"), os.path.join(directory, "server.crt")
    san = _san(hosts)
    san_file = os.path.join(directory, "server.san")
    if all(os.path.exists(p) for p in (ca_crt, crt, key, san_file)) and open(san_file).read() == san:
        return ca_crt, crt, key
    log.info("generating emulator TLS certificates in %s (SAN %s)", directory, san)
    if not (os.path.exists(ca_key) and os.path.exists(ca_crt)):
        _run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
              "-nodes", "-keyout", ca_key, "-out", ca_crt, "-days", "3650",
              "-subj", "/CN=pacific-sandbox-ca",
              "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    csr = os.path.join(directory, "server.csr")
    ext = os.path.join(directory, "server.ext")
    with open(ext, "w") as f:
        f.write(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n")
    _run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
          "-keyout", key, "-out", csr, "-subj", "/CN=kube-apiserver"])
    _run(["openssl", "x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
          "-out", crt, "-days", "3650", "-extfile", ext])
    os.remove(csr)
    with open(san_file, "w") as f:
        f.write(san)
    for p in (ca_key, key):
        os.chmod(p, 0o600)
    return ca_crt, crt, key
