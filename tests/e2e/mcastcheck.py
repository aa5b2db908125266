"""Multicast probes for e2e tests and bench/bench_multicast.py, run inside pod
network namespaces (stdlib only, one process per role).

    python3 mcastcheck.py recv GROUP PORT [--igmp 2|3]
        # joins GROUP on the pod's eth0 (IGMPv3 by default; --igmp 2 forces
        # IGMPv2 on eth0 first), prints "joined", then one line per datagram:
        # "<source ip> <payload>"; reads stdin: "leave" drops the membership
        # (prints "left"), "join" takes it again (prints "joined"); EOF ends it
    python3 mcastcheck.py send GROUP PORT COUNT [INTERVAL] [TTL] [SIZE] [TAG]
        # COUNT datagrams "<seq> <tag>" to GROUP:PORT, INTERVAL s
        # apart (default 0.01), IP TTL (default 8: Pacific's router relays
        # between Subnets, one hop), padded to SIZE bytes; prints "sent N"
    python3 mcastcheck.py sniff GROUP SECONDS
        # without joining: counts the IPv4 datagrams to GROUP that reach eth0
        # at all (a packet socket, before any membership filter); prints
        # "seen N"
    python3 mcastcheck.py query [GROUP]
        # one IGMPv2 membership query from this pod (a rogue querier);
        # GROUP empty: a general query
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


def recv(group: str, port: int, igmp: int = 3) -> None:
    if igmp == 2:
        with open("/proc/sys/net/ipv4/conf/eth0/force_igmp_version", "w") as f:
            f.write("2")
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((group, port))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, _mreq(group))
    print("joined", flush=True)
    stdin = sys.stdin.fileno()
    while True:
        ready, _, _ = select.select([s, stdin], [], [])
        if s in ready:
            data, peer = s.recvfrom(65535)
            print(peer[0], *data.decode(errors="replace").split()[:2], flush=True)
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
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                 struct.pack("@4s4si", socket.inet_aton("0.0.0.0"), socket.inet_aton("0.0.0.0"),
                             _eth0_index()))
    sent = 0
    for seq in range(count):
        msg = f"{seq} {tag} ".encode()
        s.sendto(msg.ljust(size, b"x"), (group, port))
        sent += 1
        if interval:
            time.sleep(interval)
    print(f"sent {sent}", flush=True)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
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


def sniff(group: str, seconds: float) -> None:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
    s.bind(("eth0", 0))
    want, seen = socket.inet_aton(group), 0
    end = time.monotonic() + seconds
    print("sniffing", flush=True)
    while (left := end - time.monotonic()) > 0:
        if not select.select([s], [], [], left)[0]:
            break
        data, addr = s.recvfrom(65535)
        if addr[2] != socket.PACKET_OUTGOING and data[16:20] == want:
            seen += 1
    print(f"seen {seen}", flush=True)


def main(argv: list[str]) -> int:
    cmd, args = argv[0], argv[1:]
    if cmd == "recv":
        igmp = 3
        if "--igmp" in args:
            i = args.index("--igmp")
            igmp = int(args[i + 1])
            del args[i:i + 2]
        recv(args[0], int(args[1]), igmp)
    elif cmd == "send":
        vals = [args[0], int(args[1]), int(args[2])]
        if len(args) > 3:
            vals.append(float(args[3]))
        if len(args) > 4:
            vals.append(int(args[4]))
        if len(args) > 5:
            vals.append(int(args[5]))
        if len(args) > 6:
            vals.append(args[6])
        send(*vals)
    elif cmd == "sniff":
        sniff(args[0], float(args[1]))
    elif cmd == "query":
        query(args[0] if args else "")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
