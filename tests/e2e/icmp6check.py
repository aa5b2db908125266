#!/usr/bin/env python3
"""ICMPv6 probes for tests/e2e/test_dual_stack.py, run inside a pod's namespace.

    icmp6check.py listen TYPE SECONDS   prints "ready", then "got" on the first
                                         ICMPv6 message of TYPE, or "none"
    icmp6check.py send TYPE DST IFNAME   one ICMPv6 message of TYPE (hop limit
                                         255, as router advertisements need)
"""
import socket
import struct
import sys
import time


def main() -> int:
    verb, kind = sys.argv[1], int(sys.argv[2])
    s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
    if verb == "listen":
        print("ready", flush=True)
        deadline = time.monotonic() + float(sys.argv[3])
        while (left := deadline - time.monotonic()) > 0:
            s.settimeout(left)
            try:
                data = s.recv(2048)
            except socket.timeout:
                break
            if data and data[0] == kind:
                print("got", flush=True)
                return 0
        print("none", flush=True)
        return 1
    dst, ifname = sys.argv[3], sys.argv[4]
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_UNICAST_HOPS, 255)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, socket.if_nametoindex(ifname))
    # type, code, checksum (the kernel fills it in), then a body: for a router
    # advertisement hop limit 64, flags 0, lifetime 1800 s, reachable, retrans
    body = struct.pack("!BBHII", 64, 0, 1800, 0, 0) if kind == 134 else struct.pack("!HH", 7, 1)
    s.sendto(struct.pack("!BBH", kind, 0, 0) + body, (dst, 0, 0, socket.if_nametoindex(ifname)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
