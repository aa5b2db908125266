"""Carry TCP from a network namespace to a loopback address of the root namespace.

    python -m pacific.sandbox.k8s.forward --netns pac-x-central \
        --listen 192.168.77.1:6443 --to 127.0.0.1:41234

The sandbox's API server listens on 127.0.0.1 of the root namespace; node
namespaces reach it at the central address through this forwarder (TLS passes
through untouched, so the API server still sees each client's own credentials).
The listening socket is opened inside --netns by this process, which stays in the
root namespace to connect to --to.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from pacific.sandbox.k8s.listen import listen_socket

log = logging.getLogger("pacific.sandbox.forward")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


async def serve(netns: str | None, listen: tuple[str, int], to: tuple[str, int]) -> None:
    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(*to)
        except OSError as e:
            log.warning("cannot reach %s:%d: %s", *to, e)
            cw.close()
            return
        await asyncio.gather(_pipe(cr, uw), _pipe(ur, cw))

    sock = listen_socket(listen[0], listen[1], netns)
    server = await asyncio.start_server(handle, sock=sock)
    log.info("forwarding %s:%d (netns %s) -> %s:%d", *listen, netns or "root", *to)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def _addr(s: str) -> tuple[str, int]:
    """HOST:PORT, an IPv6 host in brackets ([fd00::1]:6443)."""
    host, _, port = s.rpartition(":")
    return host.strip("[]"), int(port)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pacific.sandbox.k8s.forward",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--netns", help="network namespace to listen in (default: this one)")
    p.add_argument("--listen", required=True, type=_addr, help="HOST:PORT to listen on")
    p.add_argument("--to", required=True, type=_addr, help="HOST:PORT to connect to")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(serve(a.netns, a.listen, a.to))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
