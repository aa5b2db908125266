"""One request from inside a network namespace (a pod's, a node's, the outside
host's) through tests/e2e/netcheck.py, and what came back: the probes every
end-to-end module sends, written once.

    code, text = ask(sb, netns, "tcp", ip, port)       # 0 answered, 2 refused, 1 nothing
    answer(sb, netns, "udp", ip, port)                 # the answer's text, or None
    reach(sb, netns, "tcp", ip, port)                  # answered at all
    pod_ip(api, "web", "ns")                           # the controller's address of a pod
    probe("cni-1234", "udp", ip, port)                 # in-process: many at once, no process each
    node_get(sb, "/metrics", "node1")                  # a node daemon's HTTP endpoint
"""
from __future__ import annotations

import functools
import importlib.util
import os
import sys

NETCHECK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "e2e", "netcheck.py")


def ask(sb, netns: str, proto: str, ip: str, port: int, timeout: float = 2.0,
        src_port: int = 0) -> tuple[int, str]:
    """(exit code, answer) of one request from `netns`: 0 answered, 2 refused,
    1 nothing came back within `timeout` s."""
    argv = [sys.executable, NETCHECK, "ask", proto, ip, str(port), str(timeout)]
    p = sb.exec(netns, argv + ([str(src_port)] if src_port else []), check=False,
                timeout=timeout + 10)
    return p.returncode, p.stdout.strip()


def answer(sb, netns: str, proto: str, ip: str, port: int, timeout: float = 1.0) -> str | None:
    """The answer's text (netcheck's servers say who they are and who asked),
    or None when none came."""
    code, text = ask(sb, netns, proto, ip, port, timeout)
    return text if code == 0 else None


def reach(sb, netns: str, proto: str, ip: str, port: int, timeout: float = 2.0) -> bool:
    return ask(sb, netns, proto, ip, port, timeout)[0] == 0


def pod_ip(api, name: str, ns: str) -> str:
    """The address the controller gave pod ns/name (its record's first)."""
    from pacific import contract
    from pacific.kube import resources as r
    return contract.own_record(r.get(api, r.PODS, name, ns)).ip


@functools.lru_cache(maxsize=1)
def _netcheck():
    """netcheck.py (a script the pods run) as a module of this process."""
    spec = importlib.util.spec_from_file_location("netcheck", NETCHECK)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def probe(netns: str, proto: str, ip: str, port: int, timeout: float = 1.0) -> bool:
    """One TCP or UDP exchange with a netcheck server from network namespace
    `netns` (a name under /run/netns), on a thread that entered it (setns): no
    process per probe, so a matrix of hundreds runs in parallel without
    starving the two cores into false timeouts."""
    from pacific.node.nsutil import Netns
    check = _netcheck()
    with Netns(f"/run/netns/{netns}") as ns:
        return ns.run(lambda: check.probe(proto, ip, port, timeout))


def node_get(sb, path: str, node: str = "node1") -> tuple[int, str]:
    """(status, body) of GET `path` on `node`'s pacific-node metrics/health
    server, from inside the node's network namespace."""
    from pacific import metrics as m
    from pacific import names
    from pacific.node.nsutil import Netns
    url = f"http://127.0.0.1:{names.NODE_METRICS_PORT}{path}"
    with Netns(f"/run/netns/{sb.node(node).netns}") as ns:
        return ns.run(lambda: m.get(url))


def node_metrics(sb, node: str = "node1"):
    """`node`'s pacific-node /metrics, parsed (pacific.metrics.Samples)."""
    from pacific import metrics as m
    status, body = node_get(sb, m.PATH_METRICS, node)
    assert status == 200, body
    return m.parse_metrics(body)
