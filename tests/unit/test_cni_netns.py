"""pacific.node.nsutil.Netns on paths that are not network namespaces: the path
comes from the runtime's CNI_NETNS, so a wrong one must fail at once, naming it."""
import os
import threading

import pytest

from pacific.node.nsutil import Netns, NetnsError


def open_in_thread(path, timeout=3.0):
    out = {}

    def body():
        try:
            out["ns"] = Netns(path)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e
    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():  # unblock the thread: open the FIFO's other end
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        t.join(timeout)
        pytest.fail(f"opening {path} blocked for {timeout:g} s")
    if "ns" in out:
        out["ns"].close()
    return out.get("error")


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = str(tmp_path / "netns")
    os.mkfifo(fifo)
    err = open_in_thread(fifo)
    assert isinstance(err, NetnsError) and fifo in str(err)
    assert "not a network namespace" in str(err)


def test_regular_file_is_refused(tmp_path):
    path = tmp_path / "netns"
    path.write_text("")
    err = open_in_thread(str(path))
    assert isinstance(err, NetnsError) and "not a network namespace" in str(err)


def test_own_network_namespace_opens():
    assert open_in_thread("/proc/self/ns/net") is None


def test_other_namespace_kind_is_refused():
    err = open_in_thread("/proc/self/ns/uts")
    assert isinstance(err, NetnsError) and "not a network namespace" in str(err)
