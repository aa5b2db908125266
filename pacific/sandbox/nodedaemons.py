"""Start `pacific-node` on every node of a sandbox, inside the node's namespace.

    from pacific.sandbox import nodedaemons as launch
    launch.start_for_sandbox(sb, kubeconfig_underlay)   # one daemon per node
    launch.paths(sb.node("node1")).socket                # its CNI socket
    launch.restart(sb, "node1", kubeconfig_underlay, kill=True)   # kill -9 + start

Each node's CNI socket, conflist and plugin live under the node's run directory
(`<sandbox dir>/<node>/cni/...`), so nodes never share a socket.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass

from pacific import names
from pacific.sandbox import controllers
from pacific.cni import plugin as proto


@dataclass(frozen=True)
class NodePaths:
    socket: str
    conf_dir: str
    bin_dir: str

    @property
    def conflist(self) -> str:
        return os.path.join(self.conf_dir, names.CNI_CONF_NAME)

    @property
    def plugin(self) -> str:
        return os.path.join(self.bin_dir, names.CNI_TYPE)


def paths(node) -> NodePaths:
    base = os.path.join(node.rundir, "cni")
    return NodePaths(socket=os.path.join(base, "run", "cni.sock"),
                     conf_dir=os.path.join(base, "net.d"), bin_dir=os.path.join(base, "bin"))


def ovn_controller_log(node) -> str:
    return os.path.join(node.rundir, "ovn-controller.log")


def flow_log(node) -> str:
    """The node daemon's audit records (pacific flows --sandbox reads them)."""
    return os.path.join(node.rundir, "flows", os.path.basename(names.FLOW_LOG))


CENTRAL_DB_DIR = "/var/lib/pacific/central"    # deploy/central.yaml's databases


def deploy_host_dirs(node) -> dict[str, str]:
    """Host paths deploy/node.yaml and central.yaml mount -> this node's
    directories (a kubelet node of a --deploy sandbox binds them)."""
    p = paths(node)
    return {CENTRAL_DB_DIR: os.path.join(node.rundir, "central-db"),
            "/run/openvswitch": node.rundir, "/run/ovn": node.rundir,
            "/etc/openvswitch": node.rundir, "/var/log/openvswitch": node.rundir,
            "/run/pacific": os.path.dirname(p.socket), "/etc/cni/net.d": p.conf_dir,
            "/opt/cni/bin": p.bin_dir, names.OVN_TLS_DIR: os.path.join(node.rundir, "ovn-tls"),
            os.path.dirname(names.OVN_CONTROLLER_LOG): node.rundir,
            os.path.dirname(names.FLOW_LOG): os.path.dirname(flow_log(node))}


def tag(node) -> str:
    return f"{node.name}-pacific-node"


def argv(sandbox, node, kubeconfig: str, extra=()) -> list[str]:
    p = paths(node)
    return [sys.executable, "-m", "pacific.node.main", "--node-name", node.name,
            "--kubeconfig", kubeconfig, "--ovs-remote", node.ovs_remote,
            "--ovn-remote", sandbox.sb_tcp_remote, "--encap-ip", node.underlay_ip,
            "--ovn-rundir", node.rundir, "--ovs-rundir", node.rundir, "--mtu", str(node.mtu),
            "--cni-socket", p.socket, "--cni-conf-dir", p.conf_dir, "--cni-bin-dir", p.bin_dir,
            "--health-interval", "3", "--ovn-controller-log", ovn_controller_log(node),
            "--flow-log", flow_log(node), *_ssl(sandbox, node), *controllers.exposure_args(sandbox),
            "--service-cidr", ",".join(controllers.service_cidrs(sandbox)), *extra]


def _ssl(sandbox, node) -> list[str]:
    if not sandbox.ha:
        return []
    from pacific.sandbox import ovnha
    key, crt, ca = ovnha.ssl_files(sandbox, node.name)
    return ["--ovn-ssl-key", key, "--ovn-ssl-cert", crt, "--ovn-ssl-ca", ca]


def start(sandbox, node, kubeconfig: str, wait: bool = True, timeout: float = 30.0,
          extra=()) -> int:
    node = sandbox.node(node)
    pid = sandbox.spawn(tag(node), argv(sandbox, node, kubeconfig, extra), netns=node.netns)
    if wait:
        wait_ready(sandbox, node, timeout)
    return pid


def start_for_sandbox(sandbox, kubeconfig: str | None = None, wait: bool = True,
                      timeout: float = 30.0) -> list[int]:
    """Spawn one pacific-node per node (kubeconfig defaults to the sandbox's
    underlay kubeconfig), then wait until each answers STATUS."""
    kubeconfig = kubeconfig or os.path.join(sandbox.dir, names.SANDBOX_KUBECONFIG_UNDERLAY)
    pids = [start(sandbox, n, kubeconfig, wait=False) for n in sandbox.nodes]
    if wait:
        for n in sandbox.nodes:
            wait_ready(sandbox, n, timeout)
    return pids


def stop(sandbox, node, kill: bool = False) -> None:
    """Stop a node's daemon; kill=True sends SIGKILL (crash test)."""
    node = sandbox.node(node)
    pid = sandbox.daemon_pid(tag(node))
    if kill and pid:
        os.kill(pid, signal.SIGKILL)
    sandbox.stop(tag(node))


def restart(sandbox, node, kubeconfig: str | None = None, kill: bool = False,
            extra=()) -> int:
    """Stop (SIGKILL if kill) and start again; `extra` are more pacific-node flags."""
    kubeconfig = kubeconfig or os.path.join(sandbox.dir, names.SANDBOX_KUBECONFIG_UNDERLAY)
    stop(sandbox, node, kill=kill)
    return start(sandbox, node, kubeconfig, extra=extra)


def wait_ready(sandbox, node, timeout: float = 30.0) -> None:
    """Until the daemon's CNI STATUS says ready and its conflist is written
    (raises RuntimeError with the log)."""
    node = sandbox.node(node)
    sock = paths(node).socket
    conflist = paths(node).conflist
    deadline = time.monotonic() + timeout
    last = "socket not there yet"
    while time.monotonic() < deadline:
        if sandbox.daemon_pid(tag(node)) is None:
            raise RuntimeError(f"pacific-node on {node.name} exited; see "
                               f"{os.path.join(sandbox.dir, 'services', tag(node) + '.log')}")
        if os.path.exists(sock):
            try:
                proto.call_daemon(sock, proto.PATH_STATUS, None, 5.0)
                if os.path.exists(conflist):
                    return
                last = f"{conflist} not written yet"
            except proto.CniError as e:
                last = e.msg
            except (OSError, ValueError, json.JSONDecodeError, socket.error) as e:
                last = str(e)
        time.sleep(0.05)
    raise RuntimeError(f"pacific-node on {node.name} not ready within {timeout:.0f} s: {last}; "
                       f"see {os.path.join(sandbox.dir, 'services', tag(node) + '.log')}")
