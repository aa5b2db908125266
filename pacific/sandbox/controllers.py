"""Start controller replicas inside a sandbox (called from the sandbox's up()).

    from pacific.sandbox.controllers import start_for_sandbox
    pids = start_for_sandbox(sb, kubeconfig, replicas=2)

Replicas run in the root namespace (NB through its unix socket, the API on
127.0.0.1), each through `sandbox.spawn("controller<i>", ...)` so `down()`
stops them; they elect a leader with a Lease.  Returns once one of them leads
and has synced (the Lease names a holder), or raises after `timeout`.

Each replica serves /metrics, /healthz, /readyz on its own free 127.0.0.1 port
(the root namespace is shared by every sandbox on the machine):
`metrics_url(sandbox, i)` reads it back from the replica's recorded argv.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import time

from pacific import names

LOG = logging.getLogger(__name__)


def controller_tag(i: int) -> str:
    return f"controller{i}"


def controller_argv(sandbox, kubeconfig: str, identity: str, extra=()) -> list[str]:
    return [sys.executable, "-m", "pacific.controller.main", "--kubeconfig", kubeconfig,
            "--nb-remote", sandbox.nb_remote, "--sb-remote", sandbox.sb_remote,
            "--identity", identity,
            # short lease in the sandbox: failover within a few seconds
            "--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "1",
            "--lag-probe-interval", "2", *exposure_args(sandbox),
            "--egress-ip-cidrs", ",".join([names.SANDBOX_EGRESS_IP_CIDRS] + (
                [names.SANDBOX_EGRESS_IP_CIDR6] if getattr(sandbox, "dual_stack", False) else [])),
            "--dns-servers", dns_server(sandbox), *trusted_args(sandbox),
            *dual_stack_args(sandbox), *extra]


def dual_stack_args(sandbox) -> list[str]:
    """A --dual-stack sandbox's controllers: the default Subnet, the service
    CIDR and the join network of both families (which makes the cluster carry
    IPv6); an --ipv6-only sandbox's, of IPv6 only."""
    if not getattr(sandbox, "dual_stack", False):
        return []
    return ["--default-cidr", ",".join(families(
                sandbox, names.DEFAULT_CIDR, names.SANDBOX_DEFAULT_CIDR6)),
            "--service-cidr", ",".join(service_cidrs(sandbox)),
            "--join-cidr", ",".join(families(sandbox, names.JOIN_CIDR, names.SANDBOX_JOIN_CIDR6))]


def families(sandbox, v4: str, v6: str) -> list[str]:
    """A network of the sandbox's cluster: IPv4, both (--dual-stack, IPv4
    first) or IPv6 (--ipv6-only)."""
    if getattr(sandbox, "ipv6_only", False):
        return [v6]
    return [v4, v6] if getattr(sandbox, "dual_stack", False) else [v4]


def service_cidrs(sandbox) -> list[str]:
    """The sandbox's service CIDRs (its API server's --service-cluster-ip-range)."""
    return families(sandbox, names.SERVICE_CIDR, names.SANDBOX_SERVICE_CIDR6)


def trusted_args(sandbox) -> list[str]:
    """With kubelets, the cluster DNS's Service (its endpoint is the central
    address, pacific.sandbox.k8s.clusterdns) is the administrator's, trusted."""
    if not getattr(sandbox, "kubelet", False):
        return []
    return ["--trusted-endpoint-services", "default/kubernetes," + "/".join(names.SANDBOX_CLUSTER_DNS)]


def dns_server(sandbox) -> str:
    """Where the sandbox's controllers resolve EgressFirewall DNS names:
    127.0.0.1 and a port of its own (kept in the sandbox's directory, so a
    restarted replica asks the same), on which a test runs dnsmasq."""
    path = os.path.join(sandbox.dir, "dns-port")
    try:
        with open(path) as f:
            port = int(f.read())
    except (FileNotFoundError, ValueError):
        port = free_ports(1)[0]
        with open(path, "w") as f:
            f.write(str(port))
    return f"127.0.0.1:{port}"


def serve_dns(sandbox, hosts: str):
    """dnsmasq (Debian's dnsmasq-base) answering from the hosts file `hosts`
    on the controllers' DNS server, with a TTL of 1 s; SIGHUP re-reads the
    file.  The caller kills the returned process."""
    import subprocess
    port = dns_server(sandbox).rsplit(":", 1)[1]
    return subprocess.Popen(["dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts",
                             f"--addn-hosts={hosts}", "--listen-address=127.0.0.1",
                             "--bind-interfaces", f"--port={port}", "--local-ttl=1",
                             # every name local: a type a name lacks is NODATA, not REFUSED
                             "--local=/#/", "--pid-file="], stderr=subprocess.DEVNULL)


def exposure_args(sandbox) -> list[str]:
    """What the sandbox's administrator grants Services as external IPs, and
    its infrastructure addresses (OVN central, the underlay's router); a
    dual-stack sandbox's of both families."""
    cidrs, infra = [names.SANDBOX_EXTERNAL_IP_CIDRS], [sandbox.central_ip, sandbox.external_ip]
    if getattr(sandbox, "dual_stack", False):
        cidrs.append(names.SANDBOX_EXTERNAL_IP_CIDR6)
        infra += [sandbox.central_ip6, sandbox.external_ip6]
    return ["--external-ip-cidrs", ",".join(cidrs), "--infrastructure-ips", ",".join(infra)]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports free on `host` now (all held open while picking)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((host, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def metrics_url(sandbox, i: int) -> str | None:
    """http://127.0.0.1:<port> of replica i's endpoints (None if not running)."""
    d = sandbox.state.read()["daemons"].get(controller_tag(i))
    if not d or not sandbox.daemon_pid(controller_tag(i)):
        return None
    argv = d.get("argv") or []
    addr = None
    for flag, val in zip(argv, argv[1:]):
        if flag == "--metrics-address":
            addr = val              # the last one counts, as for argparse
    if not addr:
        return None
    host, _, port = addr.rpartition(":")
    return f"http://{host or '127.0.0.1'}:{port}"


def start_for_sandbox(sandbox, kubeconfig: str, replicas: int = 2, wait: bool = True,
                      timeout: float = 60.0, extra_args=()) -> list[int]:
    pids = []
    ports = free_ports(replicas)
    for i in range(1, replicas + 1):
        tag = controller_tag(i)
        if sandbox.daemon_pid(tag):
            LOG.info("%s already runs (pid %d)", tag, sandbox.daemon_pid(tag))
            pids.append(sandbox.daemon_pid(tag))
            continue
        extra = ("--metrics-address", f"127.0.0.1:{ports[i - 1]}", *extra_args)
        pids.append(sandbox.spawn(tag, controller_argv(sandbox, kubeconfig, f"{sandbox.name}-{tag}",
                                                       extra)))
    if wait:
        wait_for_leader(kubeconfig, timeout)
    return pids


def wait_for_leader(kubeconfig: str, timeout: float = 60.0) -> str:
    """Block until the controller Lease has a holder; return its identity."""
    from pacific.kube import client, errors
    from pacific.kube import resources as r
    api = client.load(kubeconfig)
    deadline = time.monotonic() + timeout
    while True:
        try:
            lease = r.get(api, r.LEASES, names.CONTROLLER_NAME, names.CONTROLLER_LEASE_NAMESPACE)
        except errors.ApiError:
            lease = None
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
        if holder:
            LOG.info("controller leader: %s", holder)
            return holder
        if time.monotonic() > deadline:
            raise TimeoutError(f"no pacific-controller became leader within {timeout:.0f}s "
                               "(see the controller logs under the sandbox's services/ dir)")
        time.sleep(0.2)


def service(sandbox) -> None:
    """Sandbox service hook entry (after the control plane, before the node daemons):
    two replicas with pacific-controller's ServiceAccount token."""
    start_for_sandbox(sandbox, kubeconfig_path(sandbox), replicas=2)


def kubeconfig_path(sandbox) -> str:
    """pacific-controller's kubeconfig (its ServiceAccount; root namespace)."""
    return os.path.join(sandbox.dir, names.SANDBOX_KUBECONFIG_CONTROLLER)
