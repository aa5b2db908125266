"""Reachability probes for e2e tests, run inside pod network namespaces
(IPv4 and, where the namespace has it, IPv6).

    python3 netcheck.py serve PORT [NAME]    # TCP and UDP echo on PORT (until killed);
                                             # with NAME it answers "NAME <client ip>"
    python3 netcheck.py probe tcp|udp IP PORT [TIMEOUT]   # exit 0 iff the echo came back
    python3 netcheck.py ask tcp|udp IP PORT [TIMEOUT] [SRCPORT]
        # prints the answer; exit 0 answered, 2 refused (RST / ICMP unreachable),
        # 1 no answer
    python3 netcheck.py rawtcp IP PORT FLAGS    # one bare TCP segment (FLAGS e.g. "SR":
                                             # SYN+RST, which conntrack calls INVALID)
    python3 netcheck.py watch tcp IP PORT SECONDS [INTERVAL] [TIMEOUT]
        # a new connection every INTERVAL s (default 0.02) for SECONDS; one line
        # each: "<monotonic time> <answer or ->" (outage measurements)
    python3 netcheck.py flood IP RATE SECONDS PORTS   # UDP at RATE/s to ports 20000 +
                                             # i % PORTS, new source ports each round

Stdlib only (it runs under `ip netns exec`), one process per probe."""
import random
import socket
import sys
import threading
import time


def _family(ip: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in ip else socket.AF_INET


def _any(family: socket.AddressFamily) -> str:
    return "::" if family == socket.AF_INET6 else "0.0.0.0"


def _listen(family: socket.AddressFamily, port: int):
    """(udp, tcp) sockets of one family on `port`; IPv6 ones IPv6 only, so an
    IPv4 client's address reads as IPv4 (the IPv4 sockets answer it)."""
    udp = socket.socket(family, socket.SOCK_DGRAM)
    tcp = socket.socket(family, socket.SOCK_STREAM)
    for s in (udp, tcp):
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((_any(family), port))
    tcp.listen(64)
    return udp, tcp


def serve(port: int, name: str | None = None) -> None:
    pairs = [_listen(socket.AF_INET, port)]
    try:
        pairs.append(_listen(socket.AF_INET6, port))
    except OSError:
        pass           # no IPv6 in this namespace: IPv4 only

    def udp_loop(udp):
        while True:
            try:
                data, peer = udp.recvfrom(2048)
                udp.sendto(f"{name} {peer[0]}".encode() if name else data, peer)
            except OSError as e:      # one failed answer must not end the server
                print(f"netcheck serve {port}: udp: {e}", file=sys.stderr, flush=True)

    def handle(conn, peer):
        with conn:
            conn.settimeout(5)
            try:
                data = conn.recv(2048)
                conn.sendall(f"{name} {peer[0]}".encode() if name else data)
            except OSError:
                pass

    def tcp_loop(tcp):
        while True:
            conn, peer = tcp.accept()
            threading.Thread(target=handle, args=(conn, peer), daemon=True).start()

    for udp, tcp in pairs:
        threading.Thread(target=udp_loop, args=(udp,), daemon=True).start()
        threading.Thread(target=tcp_loop, args=(tcp,), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


def probe(proto: str, ip: str, port: int, timeout: float) -> bool:
    """One exchange from a random source port: a 5-tuple used again within the
    conntrack timeout would find the verdict of an earlier policy (OVN keeps
    dropping replies of a connection it marked blocked until it expires)."""
    msg = b"pacific-probe"
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    with socket.socket(_family(ip), kind) as s:
        s.settimeout(timeout)
        for _ in range(20):
            try:
                s.bind((_any(_family(ip)), random.randint(20000, 60999)))
                break
            except OSError:
                continue
        try:
            if proto == "tcp":
                s.connect((ip, port))
                s.sendall(msg)
            else:
                s.sendto(msg, (ip, port))
            return s.recv(2048) == msg
        except OSError:
            return False


def ask(proto: str, ip: str, port: int, timeout: float, src_port: int = 0) -> int:
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    with socket.socket(_family(ip), kind) as s:
        s.settimeout(timeout)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((_any(_family(ip)), src_port or random.randint(20000, 60999)))
        try:
            if proto == "tcp":
                s.connect((ip, port))
                s.sendall(b"ask")
            else:
                s.connect((ip, port))
                s.send(b"ask")
            print(s.recv(2048).decode(), flush=True)
            return 0
        except ConnectionRefusedError:
            print("refused", flush=True)
            return 2
        except OSError as e:
            print(f"no answer: {e}", flush=True)
            return 1


def rawtcp(ip: str, port: int, flags: str) -> None:
    """Send one TCP segment with these flags (S F R P A) from a random port,
    outside any connection: the kernel's TCP stack is not involved."""
    import struct
    bits = {"F": 1, "S": 2, "R": 4, "P": 8, "A": 16}
    src_port, seq = random.randint(20000, 60999), random.randint(0, 2**32 - 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:   # the source address
        u.connect((ip, port))
        src = u.getsockname()[0]
    hdr = struct.pack("!HHIIBBHHH", src_port, port, seq, 0, 5 << 4,
                      sum(bits[f] for f in flags), 1024, 0, 0)
    pseudo = socket.inet_aton(src) + socket.inet_aton(ip) + struct.pack("!BBH", 0, 6, len(hdr))
    data = pseudo + hdr
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    hdr = hdr[:16] + struct.pack("!H", ~total & 0xFFFF) + hdr[18:]
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP) as s:
        s.sendto(hdr, (ip, port))
    print(f"sent {flags} from {src}:{src_port}", flush=True)


def flood(ip: str, rate: float, seconds: float, ports: int, base: int = 20000) -> None:
    """UDP datagrams to `ip` at `rate` per second for `seconds`, port base + i
    % ports, each from a socket of its own (a new connection every time: every
    one meets an ACL first); prints how many and how long."""
    family = _family(ip)
    n, t0 = 0, time.monotonic()
    socks = [socket.socket(family, socket.SOCK_DGRAM) for _ in range(64)]
    while (now := time.monotonic()) < t0 + seconds:
        while n < int((now - t0) * rate):
            s = socks[n % len(socks)]
            if n % len(socks) == 0 and n:
                for i, old in enumerate(socks):       # new source ports: new connections
                    old.close()
                    socks[i] = socket.socket(family, socket.SOCK_DGRAM)
                s = socks[0]
            try:
                s.sendto(b"x" * 64, (ip, base + n % ports))
            except OSError:
                pass
            n += 1
        time.sleep(0.0005)
    print(n, time.monotonic() - t0, flush=True)


def watch(proto: str, ip: str, port: int, seconds: float, interval: float, timeout: float):
    import io
    import contextlib
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = ask(proto, ip, port, timeout)
        print(f"{t0:.3f} {buf.getvalue().strip() if rc == 0 else '-'}", flush=True)
        time.sleep(max(0.0, interval - (time.monotonic() - t0)))


if __name__ == "__main__":
    if sys.argv[1] == "rawtcp":
        rawtcp(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "watch":
        watch(sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]),
              float(sys.argv[6]) if len(sys.argv) > 6 else 0.02,
              float(sys.argv[7]) if len(sys.argv) > 7 else 0.2)
    elif sys.argv[1] == "flood":
        flood(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    elif sys.argv[1] == "serve":
        serve(int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None)
    elif sys.argv[1] == "ask":
        t = float(sys.argv[5]) if len(sys.argv) > 5 else 2.0
        sys.exit(ask(sys.argv[2], sys.argv[3], int(sys.argv[4]), t,
                     int(sys.argv[6]) if len(sys.argv) > 6 else 0))
    else:
        t = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0
        sys.exit(0 if probe(sys.argv[2], sys.argv[3], int(sys.argv[4]), t) else 1)
