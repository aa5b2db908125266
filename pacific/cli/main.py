"""`pacific` command line: one sub-command group per area.

Each group lives in its own module under pacific/cli/ and exposes
`register(subparsers)`; this module only wires them together.
"""
import argparse
import logging
import sys

from pacific.cli import demo as demo_cli
from pacific.cli import sandbox as sandbox_cli
from pacific.cli import tenant as tenant_cli


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pacific",
        description="Pacific: a Kubernetes network plugin on OVN/Open vSwitch.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sandbox_cli.register(sub)
    demo_cli.register(sub)
    tenant_cli.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return args.func(args) or 0


if __name__ == "__main__":
    sys.exit(main())
