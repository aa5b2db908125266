"""`pacific sandbox ...` sub-commands (filled in by the sandbox work)."""


def register(sub):
    p = sub.add_parser("sandbox", help="single-machine sandbox of real OVN nodes")
    p.set_defaults(func=lambda args: p.print_help())
