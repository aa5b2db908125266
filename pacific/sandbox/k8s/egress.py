"""The API server's way to the kubelets: an HTTP CONNECT proxy on a unix socket.

    python -m pacific.sandbox.k8s.egress --socket <dir>/kube/egress.sock \
        --allow 192.168.77.0/24           # run inside the central namespace

kube-apiserver runs in the root namespace on 127.0.0.1, the kubelets in the node
namespaces on their underlay addresses, which only the sandbox's namespaces reach.
The API server's egress selector (`--egress-selector-config-file`, selection
`cluster`, HTTPConnect over a unix socket) sends every connection to a node or pod
(`kubectl logs`, `exec`, `port-forward`, the node proxy) through this proxy, which
runs in the central namespace and connects there.  Only destinations in --allow
are served; those in --pod-net (pods' and Services' addresses, `pods/proxy` and
`services/proxy`) are dialled from the network namespace --pods-via (a node's),
as an API server on a cluster node reaches them: from the node's join address.
"""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal

from pacific.sandbox.k8s.forward import _pipe
from pacific.sandbox.k8s.listen import socket_in

log = logging.getLogger("pacific.sandbox.egress")
MAX_HEAD = 16384


def config_yaml(socket_path: str) -> str:
    """The EgressSelectorConfiguration kube-apiserver v1.20 reads."""
    return ("apiVersion: apiserver.k8s.io/v1beta1\n"
            "kind: EgressSelectorConfiguration\n"
            "egressSelections:\n"
            "- name: cluster\n"
            "  connection:\n"
            "    proxyProtocol: HTTPConnect\n"
            "    transport:\n"
            "      uds:\n"
            f"        udsName: {socket_path}\n")


async def _connect(addr, port: int, via: tuple[str | None, list]):
    """(reader, writer) to addr:port, from the namespace via[0] when addr is in
    one of the networks via[1]."""
    netns, nets = via
    if netns is None or not any(addr in net for net in nets):
        return await asyncio.open_connection(str(addr), port)
    sock = socket_in(netns)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (str(addr), port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


async def _handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter, allow,
                  via=(None, [])) -> None:
    try:
        head = await cr.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        cw.close()
        return
    line = head.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = line.split()
    try:
        if len(parts) < 2 or parts[0] != "CONNECT":
            raise ValueError("only CONNECT is served")
        host, _, port = parts[1].rpartition(":")
        addr = ipaddress.ip_address(host.strip("[]"))
        served = [*allow, *via[1]]
        if not any(addr in net for net in served):
            raise ValueError(f"{addr} is outside {', '.join(map(str, served))}")
        ur, uw = await asyncio.wait_for(_connect(addr, int(port), via), 10)
    except (ValueError, OSError, asyncio.TimeoutError) as e:
        log.warning("refused %r: %s", line, e)
        cw.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
        try:
            await cw.drain()
        finally:
            cw.close()
        return
    cw.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    await cw.drain()
    await asyncio.gather(_pipe(cr, uw), _pipe(ur, cw))


async def serve(path: str, allow, via=(None, [])) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    server = await asyncio.start_unix_server(lambda r, w: _handle(r, w, allow, via), path=path,
                                             limit=MAX_HEAD)
    os.chmod(path, 0o600)
    log.info("HTTP CONNECT proxy on %s for %s%s", path, ", ".join(map(str, allow)),
             f"; {', '.join(map(str, via[1]))} from {via[0]}" if via[0] else "")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pacific.sandbox.k8s.egress",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--socket", required=True, help="unix socket to listen on")
    p.add_argument("--allow", action="append", required=True, type=ipaddress.ip_network,
                   help="destination network served (repeatable)")
    p.add_argument("--pod-net", action="append", default=[], type=ipaddress.ip_network,
                   help="destination network dialled from --pods-via (repeatable)")
    p.add_argument("--pods-via", help="network namespace to dial --pod-net from (a node's)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(serve(a.socket, a.allow, (a.pods_via, a.pod_net if a.pods_via else [])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
