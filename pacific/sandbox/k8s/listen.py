"""Sockets of a named network namespace (/run/netns/<name>) for a process that
stays in its own: this thread switches in only to create the socket (its
namespace is fixed then), and back; binding, listening and connecting happen in
the socket's namespace from anywhere."""
import ctypes
import os
import socket

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def socket_in(netns: str, family: int = socket.AF_INET,
              kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A new socket of the network namespace `netns` (whatever it later binds
    or connects to is that namespace's), made from this thread."""
    path = f"/run/netns/{netns}"
    if not os.path.exists(path):
        raise FileNotFoundError(f"network namespace {netns!r} does not exist ({path})")
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(path, os.O_RDONLY)
    try:
        _setns(target)
        try:
            return socket.socket(family, kind)
        finally:
            _setns(own)
    finally:
        os.close(target)
        os.close(own)


def listen_socket(host: str, port: int, netns: str | None = None, backlog: int = 512) -> socket.socket:
    """A bound, listening TCP socket on host:port, in netns if given."""
    return bound_socket(host, port, netns, socket.SOCK_STREAM, backlog)


def bound_socket(host: str, port: int, netns: str | None = None,
                 kind: int = socket.SOCK_STREAM, backlog: int = 512) -> socket.socket:
    """A socket of `kind` bound to host:port in netns if given (listening, for TCP)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket_in(netns, family, kind) if netns else socket.socket(family, kind)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, port))        # in the socket's own namespace, whatever this thread's
        if kind == socket.SOCK_STREAM:
            s.listen(backlog)
    except OSError as e:
        s.close()
        where = f" in netns {netns}" if netns else ""
        raise OSError(e.errno, f"cannot listen on {host}:{port}{where}: {e.strerror}") from None
    return s
