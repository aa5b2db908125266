"""Raw Ethernet frames for e2e attack tests, run inside pod network namespaces
(stdlib only: it runs under `ip netns exec`).

    python3 rawframe.py send IFACE KIND DST_MAC [ARG...]
        raw ETHERTYPE TEXT   a frame of that Ethernet type (e.g. 0x88b5), payload TEXT
        arp TARGET_IP [TEXT] an ARP request (the port's own MAC and address), TEXT in
                             its trailer (default ATK-arp)
        ip6 SRC DST TEXT     an ICMPv6 echo request (SRC "ll": the MAC's link-local address)
        ra                   an ICMPv6 router advertisement from the link-local address
                             (to DST_MAC, ff02::1), offering prefix 2001:db8:66::/64
        --src MAC            (after KIND's args) send with another source MAC (a spoof)
    python3 rawframe.py listen IFACE WATCH STOP
        prints "ready", then receives every frame on IFACE until one whose payload
        holds STOP; WATCH is a comma list of MACs and payload words: every frame
        received from such a MAC (Ethernet or ARP sender) or holding such a word
        is printed, one line each: "<kind> <src mac> <ethertype> <detail>"; then
        "stop <src mac>" and exit 0.

Nothing here waits on time: the listener ends on the STOP frame, which a test
sends after the frames it expects not to arrive.
"""
import fcntl
import socket
import struct
import sys

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SIOCGIFADDR = 0x8915


def mac_bytes(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.replace("-", ":").split(":"))


def mac_text(b: bytes) -> str:
    return ":".join("%02x" % x for x in b)


def own_mac(iface: str) -> bytes:
    with open(f"/sys/class/net/{iface}/address") as f:
        return mac_bytes(f.read().strip())


def own_ip(iface: str) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("256s", iface.encode()[:15])
        return fcntl.ioctl(s.fileno(), SIOCGIFADDR, req)[20:24]


def link_local(mac: bytes) -> bytes:
    eui = bytes([mac[0] ^ 0x02]) + mac[1:3] + b"\xff\xfe" + mac[3:6]
    return b"\xfe\x80" + b"\x00" * 6 + eui


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\x00"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def icmp6(src: bytes, dst: bytes, body: bytes) -> bytes:
    """IPv6 header + ICMPv6 message `body` (its checksum field zero), checksummed."""
    pseudo = src + dst + struct.pack("!I3xB", len(body), 58)
    body = body[:2] + struct.pack("!H", checksum(pseudo + body)) + body[4:]
    return struct.pack("!IHBB", 0x60000000, len(body), 58, 255) + src + dst + body


def build(iface: str, kind: str, dst: bytes, args: list, src: bytes) -> bytes:
    if kind == "raw":
        etype, text = int(args[0], 0), args[1].encode()
        return dst + src + struct.pack("!H", etype) + text.ljust(46, b".")
    if kind == "arp":
        tpa = socket.inet_aton(args[0])
        body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + src + own_ip(iface) + b"\x00" * 6 + tpa
        text = (args[1] if len(args) > 1 else "ATK-arp").encode()
        return dst + src + struct.pack("!H", 0x0806) + body + text.ljust(18, b".")
    if kind == "ip6":
        s6 = link_local(src) if args[0] == "ll" else socket.inet_pton(socket.AF_INET6, args[0])
        d6 = socket.inet_pton(socket.AF_INET6, args[1])
        body = struct.pack("!BBHHH", 128, 0, 0, 0x66, 1) + args[2].encode()
        return dst + src + struct.pack("!H", 0x86DD) + icmp6(s6, d6, body)
    if kind == "ra":
        prefix = socket.inet_pton(socket.AF_INET6, "2001:db8:66::")
        opt = struct.pack("!BBBBIII", 3, 4, 64, 0xC0, 86400, 14400, 0) + prefix
        body = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 1800, 0, 0) + opt
        d6 = socket.inet_pton(socket.AF_INET6, "ff02::1")
        return dst + src + struct.pack("!H", 0x86DD) + icmp6(link_local(src), d6, body)
    raise SystemExit(f"rawframe: unknown kind {kind!r}")


def send(iface: str, kind: str, dst_mac: str, args: list) -> None:
    src = own_mac(iface)
    if "--src" in args:
        i = args.index("--src")
        src, args = mac_bytes(args[i + 1]), args[:i] + args[i + 2:]
    frame = build(iface, kind, mac_bytes(dst_mac), args, src)
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((iface, 0))
        s.send(frame)


def describe(frame: bytes) -> tuple:
    src, etype = frame[6:12], struct.unpack("!H", frame[12:14])[0]
    if etype == 0x0806:
        trailer = frame[42:].rstrip(b".\x00").decode(errors="replace")
        return "arp", mac_text(src), etype, f"sha {mac_text(frame[22:28])} {trailer}", frame[22:28]
    if etype == 0x86DD and len(frame) >= 55:
        s6 = socket.inet_ntop(socket.AF_INET6, frame[22:38])
        d6 = socket.inet_ntop(socket.AF_INET6, frame[38:54])
        nh = frame[20]
        detail = f"{s6} > {d6} next {nh}" + (f" icmp6 type {frame[54]}" if nh == 58 else "")
        return "ip6", mac_text(src), etype, detail, None
    if etype == 0x0800:
        return "ip4", mac_text(src), etype, socket.inet_ntoa(frame[26:30]) + " > " + \
            socket.inet_ntoa(frame[30:34]), None
    return "raw", mac_text(src), etype, frame[14:40].rstrip(b".").decode(errors="replace"), None


def listen(iface: str, watch: str, stop: str) -> None:
    words = [w for w in watch.split(",") if w]
    macs = {w.lower() for w in words if w.count(":") == 5}
    marks = [w.encode() for w in words if w.lower() not in macs]
    stop_b = stop.encode()
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL)) as s:
        s.bind((iface, 0))
        print("ready", flush=True)
        while True:
            frame, addr = s.recvfrom(65535)
            if addr[2] == PACKET_OUTGOING or len(frame) < 14:
                continue
            kind, src, etype, detail, sha = describe(frame)
            if stop_b in frame:
                print(f"stop {src}", flush=True)
                return
            if src in macs or (sha is not None and mac_text(sha) in macs) or \
                    any(m in frame for m in marks):
                print(f"{kind} {src} 0x{etype:04x} {detail}", flush=True)


def main(argv: list) -> int:
    if argv[:1] == ["send"] and len(argv) >= 4:
        send(argv[1], argv[2], argv[3], argv[4:])
        return 0
    if argv[:1] == ["listen"] and len(argv) == 4:
        listen(*argv[1:])
        return 0
    print(__doc__, file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
