"""Sockets inside another network namespace, without forking.

pyroute2's `IPRoute(netns=...)` forks a helper process per socket (~10 ms); a
pod ADD needs a netlink socket and an ethtool socket in the pod's namespace, so
instead a short-lived thread enters the namespace with setns(2) (which only
moves the calling thread), creates the socket there and exits.  A socket stays
bound to the namespace it was created in, so the caller then uses it from any
thread (~0.3 ms).  `Netns.start(fn)` runs a whole piece of work in there while
the caller does something else (ADD configures the pod while it adds the OVS
port).
"""
import ctypes
import errno
import fcntl
import os
import socket
import threading
from typing import Callable, Generic, TypeVar

from pyroute2 import IPRoute
from pyroute2.ethtool.ioctl import IoctlEthtool

CLONE_NEWNET = 0x40000000
NS_GET_NSTYPE = 0xB703  # ioctl on a namespace file: its CLONE_NEW* type (Linux 4.11)
NETLINK_ROUTE = 0
_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


class NetnsError(OSError):
    pass


class NsTask(Generic[T]):
    """fn() running on a thread inside a namespace (see Netns.start)."""
    thread: threading.Thread
    value: T
    error: BaseException | None = None

    def wait(self) -> None:
        """Until fn() has returned or raised (does not raise)."""
        self.thread.join()

    def result(self) -> T:
        """fn()'s return value; re-raises what fn() raised."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value


class Netns:
    """An open reference to a network namespace file (e.g. /var/run/netns/x or
    /proc/<pid>/ns/net).  Use as a context manager; holds one fd."""

    def __init__(self, path: str):
        self.path = path
        try:
            # O_NONBLOCK: a FIFO at that path must not block the caller forever
            self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            raise NetnsError(e.errno, f"cannot open network namespace {path}: "
                             f"{e.strerror}") from None
        try:
            kind = fcntl.ioctl(self.fd, NS_GET_NSTYPE)
        except OSError:
            kind = None  # not a namespace file at all
        if kind != CLONE_NEWNET:
            os.close(self.fd)
            self.fd = -1
            raise NetnsError(errno.EINVAL, f"{path} is not a network namespace")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "Netns":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def run(self, fn: Callable[[], T]) -> T:
        """Call fn() on a fresh thread that lives in this namespace."""
        return self.start(fn).result()

    def start(self, fn: Callable[[], T]) -> "NsTask[T]":
        """Start fn() on a fresh thread that lives in this namespace and return
        at once; the caller works on meanwhile and collects with result()."""
        task: NsTask[T] = NsTask()

        def body():
            try:
                if _libc.setns(self.fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise NetnsError(err, f"setns({self.path}): {os.strerror(err)} (is it "
                                     "a network namespace?)")
                task.value = fn()
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller
                task.error = e

        task.thread = threading.Thread(target=body, name="netns-enter", daemon=True)
        task.thread.start()
        return task

    def iproute(self) -> IPRoute:
        """An IPRoute (netlink) bound to this namespace; close it after use."""
        sock = self.run(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM,
                                              NETLINK_ROUTE))
        return IPRoute(fileno=sock.detach())

    def ethtool(self, ifname: str) -> IoctlEthtool:
        """pyroute2's ethtool ioctl object for `ifname` in this namespace."""
        return self.run(lambda: IoctlEthtool(ifname))

    def same_as_current(self) -> bool:
        st, cur = os.fstat(self.fd), os.stat("/proc/thread-self/ns/net")
        return (st.st_dev, st.st_ino) == (cur.st_dev, cur.st_ino)
