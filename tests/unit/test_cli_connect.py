"""The day-two tools find OVN through the cluster (pacific.cli.connect.from_cluster,
decision 0048): the remotes of pacific-config, the controller's TLS files from
pacific-ovn-tls into a private directory; a user without the right is told
which one, and nothing of OVN."""
from __future__ import annotations

import base64
import os
import stat
from types import SimpleNamespace

import pytest

from controller_fakes import FakeKube, _status
from pacific import names
from pacific.cli.connect import from_cluster
from pacific.kube import resources as r

NS = names.PACIFIC_NAMESPACE
REMOTES = {"nb-remote": "ssl:192.0.2.1:6641,ssl:192.0.2.2:6641",
           "sb-remote": "ssl:192.0.2.1:6642,ssl:192.0.2.2:6642"}
FILES = {"tls.key": b"KEY\n", "tls.crt": b"CRT\n", "ca.crt": b"CA\n"}


@pytest.fixture(autouse=True)
def tls_tmp(tmp_path, monkeypatch):
    """from_cluster writes the TLS files under $TMPDIR and removes them at exit
    of the process: here, at the end of each test."""
    import tempfile
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    yield tmp_path


def args(**kw):
    base = dict(nb=None, sb=None, ssl_key=None, ssl_cert=None, ssl_ca=None)
    base.update(kw)
    return SimpleNamespace(**base)


def installed(data=REMOTES, secret=True) -> FakeKube:
    kube = FakeKube()
    kube.add(r.CONFIGMAPS, {"metadata": {"name": names.CONFIG_MAP}, "data": dict(data)}, NS)
    if secret:
        kube.add(r.SECRETS, {"metadata": {"name": names.OVN_TLS_SECRET}, "data": {
            k: base64.b64encode(v).decode() for k, v in FILES.items()}}, NS)
    return kube


class Forbidden(FakeKube):
    """A tenant's view: every read in pacific-system of `what` is refused."""
    def __init__(self, base: FakeKube, what: str):
        super().__init__()
        self.objects, self.what = base.objects, what

    def _handle(self, method, path, body):
        if f"/namespaces/{NS}/{self.what}/" in path:
            return _status(403, "Forbidden", f"{self.what} is forbidden: User cannot get")
        return super()._handle(method, path, body)


def test_remotes_and_tls_files_of_the_cluster():
    a = args()
    from_cluster(installed(), a, need_sb=True)
    assert (a.nb, a.sb) == (REMOTES["nb-remote"], REMOTES["sb-remote"])
    d = os.path.dirname(a.ssl_key)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    for path, key in ((a.ssl_key, "tls.key"), (a.ssl_cert, "tls.crt"), (a.ssl_ca, "ca.crt")):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        with open(path, "rb") as f:
            assert f.read() == FILES[key]


def test_flags_given_win_and_tcp_needs_no_secret():
    a = args(nb="tcp:198.51.100.1:6641")
    from_cluster(installed({"nb-remote": "tcp:10.0.0.1:6641", "sb-remote": "tcp:10.0.0.1:6642"},
                           secret=False), a, need_sb=True)
    assert (a.nb, a.sb, a.ssl_key) == ("tcp:198.51.100.1:6641", "tcp:10.0.0.1:6642", None)
    b = args(ssl_key="k", ssl_cert="c", ssl_ca="a")     # their own files: no Secret read
    from_cluster(Forbidden(installed(), "secrets"), b, need_sb=True)
    assert b.ssl_key == "k" and b.nb == REMOTES["nb-remote"]


@pytest.mark.parametrize("what,kind,name", [("configmaps", "configmap", names.CONFIG_MAP),
                                            ("secrets", "secret", names.OVN_TLS_SECRET)])
def test_a_user_without_the_right_is_told_which_and_learns_nothing(what, kind, name):
    with pytest.raises(SystemExit) as e:
        from_cluster(Forbidden(installed(), what), args(), need_sb=True)
    msg = str(e.value)
    assert f"needs get on {kind} {NS}/{name}" in msg and "(403)" in msg
    assert "ssl:" not in msg and "192.0.2" not in msg


def test_not_installed_or_incomplete():
    with pytest.raises(SystemExit, match="is Pacific installed"):
        from_cluster(FakeKube(), args(), need_sb=True)
    with pytest.raises(SystemExit, match="names no nb-remote/sb-remote"):
        from_cluster(installed({"nb-remote": "ssl:192.0.2.1:6641"}), args(), need_sb=True)
    a = args()                   # topology needs NB only
    from_cluster(installed({"nb-remote": "tcp:192.0.2.1:6641"}, secret=False), a, need_sb=False)
    assert a.nb == "tcp:192.0.2.1:6641"
