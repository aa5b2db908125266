"""Node bootstrap: ovn-controller's Open_vSwitch external_ids, the CNI conflist
and the plugin executable.  Every step is idempotent and writes files atomically
(temporary file + rename), so a runtime never reads half a config or binary."""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile

from pacific import names
from pacific.cni import plugin as proto

log = logging.getLogger(__name__)
PLUGIN_SOURCE = os.path.join(os.path.dirname(proto.__file__), "plugin.py")


def ovs_external_ids(node_name: str, ovn_remote: str, encap_ip: str,
                     encap_type: str = "geneve", datapath_type: str = "netdev") -> dict:
    ids = {"system-id": node_name, "hostname": node_name, "ovn-remote": ovn_remote,
           "ovn-encap-type": encap_type, "ovn-encap-ip": encap_ip}
    if datapath_type:
        ids["ovn-bridge-datapath-type"] = datapath_type
    return ids


def configure_ovs(ovs, ids: dict) -> None:
    current = ovs.get_ovs_external_ids()
    changed = {k: v for k, v in ids.items() if current.get(k) != v}
    if changed:
        ovs.commit(ovs.set_ovs_external_ids(changed))
        log.info("Open_vSwitch external_ids set: %s", ", ".join(
            f"{k}={v}" for k, v in sorted(changed.items())))
    else:
        log.info("Open_vSwitch external_ids already configured")


def configure_ssl(ovs, private_key: str, certificate: str, ca_cert: str) -> None:
    """ovn-controller's TLS files for an ssl: ovn-remote (the Open_vSwitch SSL
    row, as `ovs-vsctl set-ssl`); SystemExit naming a file that is missing."""
    for flag, path in (("--ovn-ssl-key", private_key), ("--ovn-ssl-cert", certificate),
                       ("--ovn-ssl-ca", ca_cert)):
        if not path or not os.access(path, os.R_OK):
            raise SystemExit(f"pacific-node: {flag} {path!r} is not a readable file")
    ovs.commit(ovs.set_ssl(private_key, certificate, ca_cert))
    log.info("ovn-controller TLS: key %s, certificate %s, CA %s", private_key, certificate,
             ca_cert)


def _write_atomic(path: str, data: bytes, mode: int) -> bool:
    """Write `path` unless it already holds `data`; True if written."""
    try:
        with open(path, "rb") as f:
            if f.read() == data and (os.stat(path).st_mode & 0o777) == mode:
                return False
    except FileNotFoundError:
        pass
    d = os.path.dirname(path)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".pacific-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return True


def conflist(socket_path: str, cni_version: str = "1.0.0") -> dict:
    return {"cniVersion": cni_version, "name": names.CNI_NETWORK_NAME,
            "plugins": [{"type": names.CNI_TYPE, "server_socket": socket_path}]}


def write_conflist(conf_dir: str, socket_path: str) -> str:
    path = os.path.join(conf_dir, names.CNI_CONF_NAME)
    data = (json.dumps(conflist(socket_path), indent=2) + "\n").encode()
    if _write_atomic(path, data, 0o644):
        log.info("wrote CNI configuration %s", path)
    return path


# The Python plugin's launcher: imports the plugin from the pacific.d/ directory
# (its own, or next to it), so Python caches its bytecode there (run as a script,
# it was compiled on every ADD: ~4 ms of a ~14 ms plugin run) and exits without the
# interpreter's teardown (another ~3 ms).  The directory is found from the
# launcher's own path, which also holds when the daemon sees the bin dir under
# another mount point than the runtime does.
LAUNCHER = f'''#!/usr/bin/python3 -IS
"""The Pacific CNI plugin in Python, installed by pacific-node: the plugin is
{names.CNI_PLUGIN_LIBDIR}/{names.CNI_PLUGIN_MODULE}.py, imported rather than run so that
Python keeps its compiled bytecode."""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here if os.path.basename(here) == "{names.CNI_PLUGIN_LIBDIR}"
                else os.path.join(here, "{names.CNI_PLUGIN_LIBDIR}"))
from {names.CNI_PLUGIN_MODULE} import exit_now, main  # noqa: E402

exit_now(main())
'''
# The `pacific` shim (decision 0044), built by `make setup` / the image: hands
# each call to pacific-node whole, runs the Python plugin when it cannot.
SHIM_SOURCE = os.path.join(os.path.dirname(proto.__file__), "shim.c")
SHIM_BINARY = os.path.join(os.path.dirname(proto.__file__), "pacific-cni")


def install_plugin(bin_dir: str, verify: bool = True, shim: bool = True) -> str:
    """Install `<bin_dir>/pacific` and, under `<bin_dir>/pacific.d/`, the Python
    plugin (module and launcher); returns the executable's path.  `pacific` is
    the shim when it was built (shim=False: the launcher, as without one), else
    the launcher.  verify: run it once (VERSION) as the runtime will, which also
    compiles and caches the module; a failure is logged as an error naming the
    cause."""
    path = os.path.join(bin_dir, names.CNI_TYPE)
    lib = os.path.join(bin_dir, names.CNI_PLUGIN_LIBDIR)
    with open(PLUGIN_SOURCE, "rb") as f:
        data = f.read()
    if _write_atomic(os.path.join(lib, names.CNI_PLUGIN_MODULE + ".py"), data, 0o644):
        # Bytecode of an older plugin must not survive (Python checks the
        # source's mtime in seconds and its size, not its content).
        shutil.rmtree(os.path.join(lib, "__pycache__"), ignore_errors=True)
        log.info("installed CNI plugin module in %s", lib)
    launcher = os.path.join(lib, names.CNI_PLUGIN_PY)
    _write_atomic(launcher, LAUNCHER.encode(), 0o755)
    exe = shim_binary() if shim else None
    if exe is None and shim:
        log.warning("the CNI shim %s was not built (make setup builds it): %s runs "
                    "the Python plugin, ~7 ms more per call", SHIM_BINARY, path)
    if _write_atomic(path, exe or LAUNCHER.encode(), 0o755):
        log.info("installed CNI plugin %s (%s)", path, "shim" if exe else "Python")
    if verify:
        verify_plugin(launcher)       # the fallback, which this run also compiles
        if exe:
            verify_plugin(path)
    return path


def shim_binary() -> bytes | None:
    """The built shim, or None if it is missing or older than its source."""
    try:
        if os.path.exists(SHIM_SOURCE) and \
                os.stat(SHIM_SOURCE).st_mtime > os.stat(SHIM_BINARY).st_mtime:
            log.warning("the CNI shim %s is older than %s: not installed", SHIM_BINARY,
                        SHIM_SOURCE)
            return None
        with open(SHIM_BINARY, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def verify_plugin(path: str) -> bool:
    """Run the installed plugin's VERSION as a runtime would; log what is wrong."""
    try:
        p = subprocess.run([path], input=b"", capture_output=True, timeout=30,
                           env={"CNI_COMMAND": "VERSION", "PATH": os.defpath})
        ok = p.returncode == 0 and b"supportedVersions" in p.stdout
        why = (p.stderr or p.stdout).decode(errors="replace").strip()[-500:]
    except (OSError, subprocess.SubprocessError) as e:
        ok, why = False, str(e)
    if not ok:
        log.error("the installed CNI plugin %s does not run (its interpreter is "
                  "/usr/bin/python3, 3.10 or later): %s", path, why)
    return ok
