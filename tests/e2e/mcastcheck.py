"""Multicast probes for e2e tests and bench/bench_multicast.py, run inside pod
network namespaces (stdlib only, one process per role).

    (recv and send take an IPv6 GROUP too: MLD joins, the IPv6 hop limit)
    python3 mcastcheck.py recv GROUP PORT [--igmp 2|3] [--no-join]
        # joins GROUP on the pod's eth0 (IGMPv3 by default; --igmp 2 forces
        # IGMPv2 on eth0 first; --no-join: never), prints "joined" (or
        # "listening"), then one line per datagram:
        #   "wire SRC SEQ TAG"  every UDP datagram to GROUP:PORT that reached
        #                       eth0 at all (a packet socket, before the
        #                       kernel's membership filter): what the network
        #                       delivered
        #   "got SRC SEQ TAG"   what the joined socket received
        # stdin: "leave" drops the membership ("left"), "join" takes it again
        # ("joined"); EOF ends it
    python3 mcastcheck.py send GROUP PORT COUNT [INTERVAL] [TTL] [SIZE] [TAG]
        # COUNT datagrams "SEQ TAG" to GROUP:PORT, INTERVAL s apart (default
        # 0.01), IP TTL (default 8: Pacific's router relays between Subnets,
        # one hop), padded to SIZE bytes; prints "sent N"
    python3 mcastcheck.py count PORT [GROUP[,GROUP...]]
        # joins the GROUPs ("-": none), prints "ready", counts the datagrams
        # to PORT (unicast or a joined group) until stdin ends, then prints
        # "count N bytes B span S" (S: first to last datagram, s)
    python3 mcastcheck.py blast DEST[,DEST...] PORT COUNT SIZE [RATE]
        # COUNT datagrams of SIZE bytes to each DEST (a group or an address;
        # round robin), RATE per DEST per second (0: as fast as it can);
        # prints "sent N in S s"
    python3 mcastcheck.py query [GROUP]
        # one IGMPv2 membership query from this pod (a rogue querier);
        # GROUP empty: a general query to 224.0.0.1
"""
import os
import select
import socket
import struct
import sys
import time


def _eth0_index() -> int:
    return socket.if_nametoindex("eth0")


def _mreq(group: str) -> bytes:
    # struct ip_mreqn: group, local address (any), interface index
    return socket.inet_aton(group) + socket.inet_aton("0.0.0.0") + struct.pack("@i", _eth0_index())


def _words(payload: bytes) -> str:
    return " ".join(payload.decode(errors="replace").split()[:2])


def _mreq6(group: str) -> bytes:
    # struct ipv6_mreq: group, interface index
    return socket.inet_pton(socket.AF_INET6, group) + struct.pack("@I", _eth0_index())


def recv6(group: str, port: int, join: bool = True) -> None:
    wire = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x86DD))
    wire.bind(("eth0", 0))
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((group, port, 0, _eth0_index()))
    gaddr = socket.inet_pton(socket.AF_INET6, group)
    op = {"join": socket.IPV6_JOIN_GROUP, "leave": socket.IPV6_LEAVE_GROUP}
    if join:
        s.setsockopt(socket.IPPROTO_IPV6, op["join"], _mreq6(group))
    print("joined" if join else "listening", flush=True)
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([wire, s, stdin], [], [])
        if wire in ready:
            data, addr = wire.recvfrom(65535)
            if addr[2] != socket.PACKET_OUTGOING and data[6] == 17 and data[24:40] == gaddr \
                    and struct.unpack("!H", data[42:44])[0] == port:
                print("wire", socket.inet_ntop(socket.AF_INET6, data[8:24]), _words(data[48:]),
                      flush=True)
        if s in ready:
            data, peer = s.recvfrom(65535)
            print("got", peer[0].split("%")[0], _words(data), flush=True)
        if stdin in ready:
            line = os.read(stdin, 256)
            if not line:
                return
            for cmd in line.decode().split():
                if cmd in op:
                    s.setsockopt(socket.IPPROTO_IPV6, op[cmd], _mreq6(group))
                    print("left" if cmd == "leave" else "joined", flush=True)


def recv(group: str, port: int, igmp: int = 3, join: bool = True) -> None:
    if ":" in group:
        return recv6(group, port, join)
    if igmp == 2:
        with open("/proc/sys/net/ipv4/conf/eth0/force_igmp_version", "w") as f:
            f.write("2")
    wire = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
    wire.bind(("eth0", 0))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((group, port))
    gaddr = socket.inet_aton(group)
    if join:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, _mreq(group))
    print("joined" if join else "listening", flush=True)
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([wire, s, stdin], [], [])
        if wire in ready:
            data, addr = wire.recvfrom(65535)
            ihl = (data[0] & 0x0F) * 4
            if addr[2] != socket.PACKET_OUTGOING and data[9] == 17 and data[16:20] == gaddr \
                    and struct.unpack("!H", data[ihl + 2:ihl + 4])[0] == port:
                print("wire", socket.inet_ntoa(data[12:16]), _words(data[ihl + 8:]), flush=True)
        if s in ready:
            data, peer = s.recvfrom(65535)
            print("got", peer[0], _words(data), flush=True)
        if stdin in ready:
            line = os.read(stdin, 256)
            if not line:
                return
            for cmd in line.decode().split():
                if cmd == "leave":
                    s.setsockopt(socket.IPPROTO_IP, socket.IP_DROP_MEMBERSHIP, _mreq(group))
                    print("left", flush=True)
                elif cmd == "join":
                    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, _mreq(group))
                    print("joined", flush=True)


def send(group: str, port: int, count: int, interval: float = 0.01, ttl: int = 8,
         size: int = 0, tag: str = "m") -> None:
    if ":" in group:
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, ttl)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, _eth0_index())
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                     struct.pack("@4s4si", socket.inet_aton("0.0.0.0"),
                                 socket.inet_aton("0.0.0.0"), _eth0_index()))
    for seq in range(count):
        s.sendto(f"{seq} {tag} ".encode().ljust(size, b"x"), (group, port))
        if interval:
            time.sleep(interval)
    print(f"sent {count}", flush=True)


def count(port: int, groups: list[str]) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind(("0.0.0.0", port))
    for g in groups:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, _mreq(g))
    print("ready", flush=True)
    n = nbytes = 0
    first = last = 0.0
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([s, stdin], [], [])
        if s in ready:
            while True:
                try:
                    data = s.recv(65535, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    break
                last = time.monotonic()
                first = first or last
                n += 1
                nbytes += len(data)
        if stdin in ready and not os.read(stdin, 256):
            break
    print(f"count {n} bytes {nbytes} span {last - first:.6f}", flush=True)


def blast(dests: list[str], port: int, total: int, size: int, rate: float = 0) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 8)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                 struct.pack("@4s4si", socket.inet_aton("0.0.0.0"), socket.inet_aton("0.0.0.0"),
                             _eth0_index()))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
    payload = b"x" * size
    t0 = time.monotonic()
    sent = 0
    for i in range(total):
        for d in dests:
            while True:
                try:
                    s.sendto(payload, (d, port))
                    break
                except (BlockingIOError, OSError):     # ENOBUFS: the queue is full
                    time.sleep(0.0005)
            sent += 1
        if rate and i % 10 == 9:            # paced in steps of ten
            ahead = t0 + (i + 1) / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    print(f"sent {sent} in {time.monotonic() - t0:.6f} s", flush=True)


def _checksum(data: bytes) -> int:
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def query(group: str = "") -> None:
    """An IGMPv2 query to 224.0.0.1 (general) or to GROUP (group-specific)."""
    gaddr = socket.inet_aton(group or "0.0.0.0")
    body = struct.pack("!BBH4s", 0x11, 100, 0, gaddr)
    body = struct.pack("!BBH4s", 0x11, 100, _checksum(body), gaddr)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_IGMP)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
    s.sendto(body, (group or "224.0.0.1", 0))
    print("queried", flush=True)


def main(argv: list[str]) -> int:
    cmd, args = (argv[0], argv[1:]) if argv else ("", [])
    if cmd == "recv":
        igmp, join = 3, "--no-join" not in args
        args = [a for a in args if a != "--no-join"]
        if "--igmp" in args:
            i = args.index("--igmp")
            igmp = int(args[i + 1])
            del args[i:i + 2]
        recv(args[0], int(args[1]), igmp, join)
    elif cmd == "send":
        conv = (str, int, int, float, int, int, str)
        send(*(c(a) for c, a in zip(conv, args)))
    elif cmd == "count":
        count(int(args[0]), [] if len(args) < 2 or args[1] == "-" else args[1].split(","))
    elif cmd == "blast":
        blast(args[0].split(","), int(args[1]), int(args[2]), int(args[3]),
              float(args[4]) if len(args) > 4 else 0)
    elif cmd == "query":
        query(args[0] if args else "")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
