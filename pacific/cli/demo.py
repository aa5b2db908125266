"""`pacific demo`: the newcomer's first run (sandbox, controller, pods, matrix)."""


def register(sub):
    p = sub.add_parser("demo", help="bring up the sandbox cluster and show pods talking")
    p.set_defaults(func=lambda args: p.print_help())
