"""How pacific-node installs the plugin: a launcher plus the plugin module, so
Python caches the module's bytecode; the install is idempotent, replaces stale
bytecode, and is verified by running the plugin as a runtime would."""
import os

from cni_fixtures import conf, copy_plugin_file, run_plugin, start_server
from pacific import names
from pacific.cni import plugin as proto
from pacific.node import bootstrap


def module_path(bindir):
    return os.path.join(bindir, names.CNI_PLUGIN_LIBDIR, names.CNI_PLUGIN_MODULE + ".py")


def cache_dir(bindir):
    return os.path.join(bindir, names.CNI_PLUGIN_LIBDIR, "__pycache__")


def test_install_verifies_and_caches_bytecode(tmp_path):
    path = bootstrap.install_plugin(str(tmp_path / "bin"))
    assert path == str(tmp_path / "bin" / names.CNI_TYPE)
    assert os.stat(path).st_mode & 0o777 == 0o755
    assert [f for f in os.listdir(cache_dir(tmp_path / "bin"))
            if f.startswith(names.CNI_PLUGIN_MODULE)], "verify run did not cache bytecode"
    rc, out, err = run_plugin(path, "VERSION", {"cniVersion": "0.4.0"})
    assert rc == 0, err
    assert out == {"cniVersion": "0.4.0", "supportedVersions": list(proto.SUPPORTED_VERSIONS)}


def test_reinstall_is_a_no_op_and_a_new_plugin_drops_old_bytecode(tmp_path):
    bindir = str(tmp_path / "bin")
    bootstrap.install_plugin(bindir)
    before = os.stat(module_path(bindir)).st_mtime_ns
    bootstrap.install_plugin(bindir, verify=False)
    assert os.stat(module_path(bindir)).st_mtime_ns == before
    assert os.listdir(cache_dir(bindir))
    # an older plugin of the same size must not run from its cached bytecode
    with open(module_path(bindir), "r+b") as f:
        f.write(b"X")
    bootstrap.install_plugin(bindir, verify=False)
    assert not os.path.exists(cache_dir(bindir))
    assert bootstrap.verify_plugin(os.path.join(bindir, names.CNI_TYPE))


def test_launcher_works_from_another_mount_point(tmp_path):
    bootstrap.install_plugin(str(tmp_path / "bin"), verify=False)
    os.symlink(tmp_path / "bin", tmp_path / "host-view")
    assert bootstrap.verify_plugin(str(tmp_path / "host-view" / names.CNI_TYPE))


def test_broken_plugin_is_reported(tmp_path, caplog):
    bindir = str(tmp_path / "bin")
    bootstrap.install_plugin(bindir, verify=False)
    with open(module_path(bindir), "w") as f:
        f.write("def main(:\n")
    assert not bootstrap.verify_plugin(os.path.join(bindir, names.CNI_TYPE))
    assert "does not run" in caplog.text and "SyntaxError" in caplog.text


def test_single_file_plugin_still_runs_as_a_script(tmp_path):
    server, backend = start_server(tmp_path)
    try:
        plugin = copy_plugin_file(tmp_path)
        rc, out, err = run_plugin(plugin, "ADD", conf(server.path, "1.1.0"))
        assert rc == 0, err
        assert out["cniVersion"] == "1.1.0" and backend.calls[0].command == "ADD"
    finally:
        server.stop()
