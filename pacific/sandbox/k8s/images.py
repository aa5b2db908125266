"""Container images for the sandbox's kubelets, built offline from Debian's busybox-static.

    paths = images.build(cache_dir)      # {"busybox": ".../busybox.tar", "pause": ".../pause.tar"}

Two single-layer OCI archives (`ctr images import` reads them), made from
/bin/busybox and its applets:

  localhost/busybox:latest   busybox applets; the default command sleeps until
                             SIGTERM, so `kubectl create deployment --image=...`
                             runs without a command (workloads give one as usual)
  localhost/pause:latest     the pod sandbox image containerd starts first

They are rebuilt only when busybox or this recipe changed (a stamp file beside them).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile

BUSYBOX = "localhost/busybox:latest"
PAUSE = "localhost/pause:latest"
BUSYBOX_BIN = "/bin/busybox"
RECIPE = "1"
SLEEP_FOREVER = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; sleep 2147483647 & wait"]
APPLETS = ("sh", "ash", "ls", "cat", "echo", "sleep", "ip", "ping", "wget", "nc", "httpd",
           "hostname", "ps", "env", "id", "mkdir", "rm", "cp", "mv", "ln", "grep", "sed",
           "awk", "head", "tail", "wc", "date", "true", "false", "test", "[", "printf",
           "ifconfig", "route", "netstat", "nslookup", "kill", "uname", "touch", "chmod",
           "sort", "uniq", "tr", "cut", "seq", "timeout", "du", "df", "free", "top", "vi",
           "telnet", "traceroute", "arping", "tee", "xargs", "find", "basename", "dirname",
           "whoami", "mount", "umount", "udhcpc", "less", "more", "yes", "dd", "stat")


class ImageError(RuntimeError):
    pass


def _add(t: tarfile.TarFile, name: str, data: bytes = b"", mode: int = 0o644,
         kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.mtime = kind, mode, 0
    if kind == tarfile.REGTYPE:
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
    else:
        ti.linkname = link
        t.addfile(ti)


def rootfs_layer(extra: dict[str, tuple[bytes | str, int]] | None = None) -> bytes:
    """A tar layer: busybox, its applets as symlinks, /etc/passwd, /tmp, ...;
    and `extra` files (path -> (content, mode); a str content: a symlink to
    it), their directories made."""
    if not os.access(BUSYBOX_BIN, os.X_OK):
        raise ImageError(f"{BUSYBOX_BIN} missing: install Debian's busybox-static (`make setup`)")
    with open(BUSYBOX_BIN, "rb") as f:
        busybox = f.read()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "root", "var", "var/www", "run"):
            _add(t, d, kind=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755)
        _add(t, "bin/busybox", busybox, 0o755)
        for a in APPLETS:
            if f"bin/{a}" not in (extra or {}):
                _add(t, f"bin/{a}", kind=tarfile.SYMTYPE, link="busybox")
        _add(t, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")
        _add(t, "etc/group", b"root:x:0:\nnogroup:x:65534:\n")
        _add(t, "var/www/index.html", b"hello from pacific\n")
        made = {"bin", "etc", "tmp", "proc", "sys", "dev", "root", "var", "var/www", "run"}
        for path, (data, mode) in sorted((extra or {}).items()):
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in made:
                    made.add(d)
                    _add(t, d, kind=tarfile.DIRTYPE, mode=0o755)
            if isinstance(data, str):
                _add(t, path, kind=tarfile.SYMTYPE, link=data)
            else:
                _add(t, path, data, mode)
    return buf.getvalue()


def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def write_oci_archive(out: str, name: str, layer: bytes, cmd: list[str],
                      entrypoint: list[str] | None = None, env: list[str] | None = None) -> str:
    """A single-layer OCI image layout as a tar archive at `out`."""
    layer_d, layer = _blob(layer)
    config: dict = {"Env": env or ["PATH=/bin"], "Cmd": cmd}
    if entrypoint:
        config["Entrypoint"] = entrypoint
    cfg_d, cfg = _blob(json.dumps({
        "architecture": "amd64", "os": "linux", "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_d]}}, sort_keys=True).encode())
    man_d, man = _blob(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_d,
                   "size": len(cfg)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_d,
                    "size": len(layer)}]}, sort_keys=True).encode())
    index = json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": man_d,
        "size": len(man), "annotations": {
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1]}}]}).encode()
    tmp = f"{out}.tmp"
    with tarfile.open(tmp, "w") as t:
        _add(t, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add(t, "index.json", index)
        _add(t, "blobs", kind=tarfile.DIRTYPE, mode=0o755)
        _add(t, "blobs/sha256", kind=tarfile.DIRTYPE, mode=0o755)
        for d, data in ((layer_d, layer), (cfg_d, cfg), (man_d, man)):
            _add(t, "blobs/sha256/" + d.split(":")[1], data)
    os.replace(tmp, out)
    return out


def _stamp() -> str:
    st = os.stat(BUSYBOX_BIN)
    return f"{RECIPE} {st.st_size} {int(st.st_mtime)}"


def build(cache_dir: str) -> dict[str, str]:
    """Build (or reuse) busybox.tar and pause.tar in `cache_dir`; name -> path."""
    os.makedirs(cache_dir, exist_ok=True)
    out = {"busybox": os.path.join(cache_dir, "busybox.tar"),
           "pause": os.path.join(cache_dir, "pause.tar")}
    stamp = os.path.join(cache_dir, ".stamp")
    try:
        with open(stamp) as f:
            if f.read() == _stamp() and all(os.path.exists(p) for p in out.values()):
                return out
    except FileNotFoundError:
        pass
    layer = rootfs_layer()
    write_oci_archive(out["busybox"], BUSYBOX, layer, cmd=SLEEP_FOREVER)
    write_oci_archive(out["pause"], PAUSE, layer, cmd=SLEEP_FOREVER)
    with open(stamp, "w") as f:
        f.write(_stamp())
    return out


def clear(cache_dir: str) -> None:
    shutil.rmtree(cache_dir, ignore_errors=True)


def pack_rootfs(rootfs: str) -> bytes:
    """A root file system directory as one tar layer (numeric owners; the
    contents of /proc, /sys and /dev left out: the runtime mounts them)."""
    import subprocess
    return subprocess.run(["tar", "--numeric-owner", "-C", rootfs, "-cf", "-",
                           "--exclude=./proc/*", "--exclude=./sys/*", "--exclude=./dev/*", "."],
                          check=True, capture_output=True).stdout


def main(argv=None) -> int:
    import argparse
    p = argparse.ArgumentParser(prog="python -m pacific.sandbox.k8s.images",
                                description="Build the sandbox images, or pack a root file "
                                "system as an OCI archive (hack/build-image.sh).")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="localhost/busybox and localhost/pause into DIR")
    b.add_argument("dir")
    k = sub.add_parser("pack", help="a root file system directory as an OCI archive")
    k.add_argument("--rootfs", required=True)
    k.add_argument("--out", required=True)
    k.add_argument("--name", required=True, help="image name, e.g. localhost/pacific:0.1.0")
    k.add_argument("--env", action="append", default=[])
    k.add_argument("--cmd", action="append", default=[])
    a = p.parse_args(argv)
    if a.cmd == "build":
        for name, path in build(a.dir).items():
            print(f"{name}: {path}")
        return 0
    write_oci_archive(a.out, a.name, pack_rootfs(a.rootfs), cmd=a.cmd or ["/bin/sh"],
                      env=a.env or None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
