"""`pacific` command line: one sub-command group per area.

Each group lives in its own module under pacific/cli/ and exposes
`register(subparsers)`; this module only wires them together.
"""
import argparse
import logging
import os
import sys

from pacific.cli import demo as demo_cli
from pacific.cli import diagnose as diagnose_cli
from pacific.cli import flows as flows_cli
from pacific.cli import sandbox as sandbox_cli
from pacific.cli import tenant as tenant_cli
from pacific.cli import tls as tls_cli
from pacific.cli import topology as topology_cli
from pacific.cli import trace as trace_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        # as a kubectl plugin (the kubectl-pacific entry point): `kubectl pacific ...`
        prog="kubectl pacific" if os.path.basename(sys.argv[0]) == "kubectl-pacific" else "pacific",
        description="Pacific: a Kubernetes network plugin on OVN/Open vSwitch.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sandbox_cli.register(sub)
    demo_cli.register(sub)
    tenant_cli.register(sub)
    tls_cli.register(sub)
    trace_cli.register(sub)
    topology_cli.register(sub)
    diagnose_cli.register(sub)
    flows_cli.register(sub)
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after the first "--" is a command to run (`sandbox exec NS/POD
    # --name X -- CMD...`): split before argparse, whose subparsers mishandle "--"
    rest = None
    if "--" in argv:
        i = argv.index("--")
        argv, rest = argv[:i], argv[i + 1:]
    args = parser.parse_args(argv)
    if rest is not None:
        if not hasattr(args, "argv"):
            parser.error("'--' (a command to run) is only for `pacific sandbox exec`")
        args.argv = list(args.argv or []) + rest
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
