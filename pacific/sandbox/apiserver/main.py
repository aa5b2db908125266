"""`pacific sandbox apiserver` (also `python -m pacific.sandbox.apiserver`): run the
Kubernetes API emulator standalone."""
import argparse
import json
import logging
import os
import secrets
import sys

from pacific.sandbox.apiserver.kubeconfig import write_kubeconfig
from pacific.sandbox.apiserver.server import ApiServer, parse_listen
from pacific.sandbox.apiserver.tls import ensure_certs

log = logging.getLogger("pacific.apiserver")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", action="append", metavar="HOST:PORT[@NETNS]",
                   help="address to serve on, repeatable; @NETNS opens the socket inside the named "
                        "network namespace (/run/netns/NETNS). Port 0 picks a free port "
                        "(default 127.0.0.1:6443)")
    p.add_argument("--token", help="bearer token clients must send (requests without it get 401)")
    p.add_argument("--token-file", help="read the bearer token from this file (created with a random "
                                        "token if missing)")
    tls = p.add_mutually_exclusive_group()
    tls.add_argument("--tls-dir", help="serve HTTPS with a CA and server certificate kept in this "
                                       "directory (generated with openssl when missing)")
    tls.add_argument("--tls-cert", help="serve HTTPS with this certificate (needs --tls-key)")
    p.add_argument("--tls-key", help="private key of --tls-cert")
    p.add_argument("--state-file", help="persist objects here (atomically, periodically and on "
                                        "SIGTERM) and reload them on start, resourceVersions preserved")
    p.add_argument("--save-interval", type=float, default=2.0, help="seconds between state saves (2)")
    p.add_argument("--crd-dir", action="append", default=[],
                   help="preload every CustomResourceDefinition in this directory's *.yaml/*.json "
                        "(repeatable)")
    p.add_argument("--history", type=int, default=10000,
                   help="watch event history window; older resourceVersions get 410 Gone (10000)")
    p.add_argument("--bookmark-interval", type=float, default=5.0,
                   help="seconds between BOOKMARK events on idle watches that asked for them (5)")
    p.add_argument("--ready-file", help="write the actual listen addresses here (JSON) once serving")
    p.add_argument("--kubeconfig", help="write a kubeconfig for the first listen address here")


def _token(args) -> str | None:
    if args.token:
        return args.token
    if args.token_file:
        if not os.path.exists(args.token_file):
            fd = os.open(args.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(24) + "\n")
        with open(args.token_file) as f:
            tok = f.read().strip()
        if not tok:
            raise SystemExit(f"token file {args.token_file} is empty")
        return tok
    return None


def run(args) -> int:
    listens = args.listen or ["127.0.0.1:6443"]
    try:
        hosts = [parse_listen(s)[0] for s in listens]
    except ValueError as e:
        print(f"pacific apiserver: {e}", file=sys.stderr)
        return 2
    tls = ca = None
    if args.tls_cert:
        if not args.tls_key:
            print("pacific apiserver: --tls-cert needs --tls-key", file=sys.stderr)
            return 2
        tls = (args.tls_cert, args.tls_key)
    elif args.tls_dir:
        ca, crt, key = ensure_certs(args.tls_dir, hosts)
        tls = (crt, key)
    token = _token(args)
    if token is None:
        log.warning("no --token: every request is accepted unauthenticated")
    srv = ApiServer(listens, token=token, state_file=args.state_file, tls=tls, history=args.history,
                    bookmark_interval=args.bookmark_interval, save_interval=args.save_interval)
    try:
        srv.load_state()
        for d in args.crd_dir:
            if not os.path.isdir(d):
                print(f"pacific apiserver: --crd-dir {d}: not a directory", file=sys.stderr)
                return 2
            srv.load_crds(d)
        srv.start()
    except (OSError, RuntimeError) as e:
        print(f"pacific apiserver: {e}", file=sys.stderr)
        return 1
    scheme = "https" if tls else "http"
    if args.kubeconfig:
        a = srv.addresses[0]
        write_kubeconfig(args.kubeconfig, f"{scheme}://{a['host']}:{a['port']}", token, ca)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"pid": os.getpid(), "scheme": scheme, "addresses": srv.addresses}, f)
        os.replace(tmp, args.ready_file)
    srv.wait()
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="pacific-apiserver", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true")
    add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(args)
