"""`pacific sandbox ...` sub-commands.

The network part (up/down/status) lives here; other areas add their own
sub-commands through the modules imported in `register`.
"""
from pacific.cli import sandbox_kube, sandbox_pods


def register(sub):
    p = sub.add_parser("sandbox", help="single-machine sandbox of real OVN nodes")
    sp = p.add_subparsers(dest="sandbox_command", metavar="SUBCOMMAND", required=True)
    sandbox_kube.register(sp)
    sandbox_pods.register(sp)
