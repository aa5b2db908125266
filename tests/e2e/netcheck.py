"""Reachability probes for e2e tests, run inside pod network namespaces.

    python3 netcheck.py serve PORT           # TCP and UDP echo on PORT (until killed)
    python3 netcheck.py probe tcp|udp IP PORT [TIMEOUT]   # exit 0 iff the echo came back

Stdlib only (it runs under `ip netns exec`), one process per probe."""
import random
import socket
import sys
import threading


def serve(port: int) -> None:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", port))
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", port))
    tcp.listen(64)

    def udp_loop():
        while True:
            data, peer = udp.recvfrom(2048)
            udp.sendto(data, peer)

    def handle(conn):
        with conn:
            conn.settimeout(5)
            try:
                conn.sendall(conn.recv(2048))
            except OSError:
                pass

    threading.Thread(target=udp_loop, daemon=True).start()
    print("ready", flush=True)
    while True:
        conn, _ = tcp.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def probe(proto: str, ip: str, port: int, timeout: float) -> bool:
    """One exchange from a random source port: a 5-tuple used again within the
    conntrack timeout would find the verdict of an earlier policy (OVN keeps
    dropping replies of a connection it marked blocked until it expires)."""
    msg = b"pacific-probe"
    kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
    with socket.socket(socket.AF_INET, kind) as s:
        s.settimeout(timeout)
        for _ in range(20):
            try:
                s.bind(("0.0.0.0", random.randint(20000, 60999)))
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


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        t = float(sys.argv[5]) if len(sys.argv) > 5 else 1.0
        sys.exit(0 if probe(sys.argv[2], sys.argv[3], int(sys.argv[4]), t) else 1)
