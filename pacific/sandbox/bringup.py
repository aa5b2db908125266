"""Bring-up steps of the sandbox network, called in order by `Sandbox.up()`.

Underlay: a Linux bridge `br-ul` inside the central namespace (nothing in the root
namespace).  Every node and the external namespace hang off it with a veth.  In a
node, the underlay veth `eth0` is a port of the OVS netdev bridge `br-phy`, which
owns the node's underlay address: userspace tunnelling routes and ARPs through an
OVS bridge that has the address.
"""
from __future__ import annotations

import concurrent.futures
import logging
import os
from typing import TYPE_CHECKING

from pacific import names
from pacific.sandbox import daemons, netns
from pacific.sandbox.proc import SandboxError, run, wait_for

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox
    from pacific.sandbox.node import SandboxNode

log = logging.getLogger(__name__)

PHYS_BRIDGE = names.UNDERLAY_BRIDGE
ENCAP = "geneve"


def central_up(sb: "Sandbox") -> None:
    netns.raise_packet_buffers()
    ns = sb.central_netns
    sb._record_netns(ns)
    netns.create(ns, forwarding=True)
    run(["ip", "link", "add", names.SANDBOX_UNDERLAY_BRIDGE, "mtu", str(sb.underlay_mtu),
         "type", "bridge"], netns=ns)
    run(["ip", "addr", "add", f"{sb.central_ip}/{sb.underlay_prefixlen}", "dev",
         names.SANDBOX_UNDERLAY_BRIDGE], netns=ns)
    run(["ip", "link", "set", "dev", names.SANDBOX_UNDERLAY_BRIDGE, "up"], netns=ns)
    # central's own TCP (OVSDB, API server) leaves br-ul with partial checksums
    netns.tx_offload_off(ns, names.SANDBOX_UNDERLAY_BRIDGE)
    if sb.central_ip6:     # --dual-stack: the underlay routes IPv6 through the external host
        ipv6_on(ns, names.SANDBOX_UNDERLAY_BRIDGE, sb.central_ip6, sb.external_ip6)
    run(["sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=0"], netns=ns, check=False)

    d = sb.central_dir
    os.makedirs(d, exist_ok=True)
    if sb.central_pods:      # deploy/central.yaml's pods, once the kubelets run
        log.info("central up: the underlay only (OVN central: pacific-central pods on %s)",
                 sb.nb_tcp_remote)
        return
    if sb.ha:
        from pacific.sandbox import ovnha
        ovnha.central_up(sb)
        sb.nbctl("init")
        ovnha.remember_server_ids(sb)
        log.info("central up (ha): NB %s, SB %s", sb.nb_tcp_remote, sb.sb_tcp_remote)
        return
    for db, schema, port in (("nb", sb.ovs.schema("ovn-nb"), names.OVN_NB_PORT),
                             ("sb", sb.ovs.schema("ovn-sb"), names.OVN_SB_PORT)):
        path = os.path.join(d, f"{db}.db")
        daemons.create_db(path, schema)
        st = daemons.ovsdb_server(db, path, [f"punix:{d}/{db}.sock",
                                             f"ptcp:{port}:{sb.central_ip}"], ns, d)
        sb._record_daemon(f"central/{db}", st, ns)
    st = daemons.ovn_northd(sb.nb_remote, sb.sb_remote, ns, d)
    sb._record_daemon("central/northd", st, ns)
    sb.nbctl("init")
    log.info("central up: NB %s, SB %s (tcp %s)", sb.nb_remote, sb.sb_remote, sb.sb_tcp_remote)


def external_up(sb: "Sandbox") -> None:
    ns = sb.external_netns
    sb._record_netns(ns)
    netns.create(ns, forwarding=True)
    netns.veth("ext", sb.central_netns, "eth0", ns, sb.underlay_mtu)
    run(["ip", "link", "set", "dev", "ext", "master", names.SANDBOX_UNDERLAY_BRIDGE, "up"],
        netns=sb.central_netns)
    run(["ip", "addr", "add", f"{sb.external_ip}/{sb.underlay_prefixlen}", "dev", "eth0"], netns=ns)
    run(["ip", "link", "set", "dev", "eth0", "up"], netns=ns)
    netns.tx_offload_off(ns, "eth0")
    run(["ip", "addr", "add", names.SANDBOX_EXTERNAL_REMOTE_CIDR, "dev", "lo"], netns=ns)
    # the external host is everyone's upstream router
    run(["ip", "route", "add", "default", "via", sb.external_ip], netns=sb.central_netns)
    if sb.external_ip6:    # --dual-stack: the outside's IPv6 address, behind the external host
        ipv6_on(ns, "eth0", sb.external_ip6)
        ipv6_on(ns, "lo", names.SANDBOX_EXTERNAL_REMOTE_CIDR6.split("/")[0])
    log.info("external host up: %s (%s, remote %s)", ns, sb.external_ip, sb.external_remote_ip)


def node_up(sb: "Sandbox", node: "SandboxNode") -> None:
    ns = node.netns
    sb._record_netns(ns)
    netns.create(ns, forwarding=True)
    port = f"node{node.index}"
    netns.veth(port, sb.central_netns, "eth0", ns, node.underlay_mtu)
    run(["ip", "link", "set", "dev", port, "master", names.SANDBOX_UNDERLAY_BRIDGE, "up"],
        netns=sb.central_netns)
    run(["ip", "link", "set", "dev", "eth0", "up"], netns=ns)

    d = node.rundir
    os.makedirs(d, exist_ok=True)
    if sb.ovs_pods:   # the address on eth0: pacific-vswitch's pod moves it to br-phy
        underlay_on(sb, node, "eth0")
        netns.tx_offload_off(ns, "eth0")
        log.info("%s up: netns %s, underlay %s on eth0 (Open vSwitch: pacific-vswitch pods)",
                 node.name, ns, node.underlay_ip)
        return
    db = os.path.join(d, "conf.db")
    daemons.create_db(db, sb.ovs.schema("vswitch"))
    st = daemons.ovsdb_server("ovsdb-server", db, [f"punix:{node.db_sock}"], ns, d)
    sb._record_daemon(f"{node.name}/ovsdb-server", st, ns)
    node.vsctl("--no-wait", "init")
    if sb.ha:     # SB speaks TLS only: ovn-controller's files (pacific-node sets them too)
        from pacific.sandbox import ovnha
        node.vsctl("--no-wait", "set-ssl", *ovnha.ssl_files(sb, node.name))
    st = daemons.ovs_vswitchd(node.ovs_remote, ns, d)
    sb._record_daemon(f"{node.name}/ovs-vswitchd", st, ns)
    ext_ids = {"system-id": node.name, "hostname": node.name,
               "ovn-remote": sb.sb_tcp_remote, "ovn-encap-type": ENCAP,
               "ovn-encap-ip": node.underlay_ip, "ovn-bridge-datapath-type": "netdev"}
    node.vsctl("add-br", PHYS_BRIDGE,
               "--", "set", "bridge", PHYS_BRIDGE, "datapath_type=netdev", "fail-mode=standalone",
               "--", "add-port", PHYS_BRIDGE, "eth0",
               "--", "set", "interface", PHYS_BRIDGE, f"mtu_request={node.underlay_mtu}",
               "--", "set", "open_vswitch", ".",
               *[f"external_ids:{k}={v}" for k, v in ext_ids.items()])
    wait_for(lambda: netns_has_link(ns, PHYS_BRIDGE), 10, f"{PHYS_BRIDGE} in {ns}")
    underlay_on(sb, node, PHYS_BRIDGE)
    if not sb.central_pods:  # else in the node's host view, with its TLS files (k8s.central)
        st = daemons.ovn_controller(node.ovs_remote, ns, d)
        sb._record_daemon(f"{node.name}/ovn-controller", st, ns)
    log.info("%s up: netns %s, underlay %s, ovsdb %s", node.name, ns, node.underlay_ip,
             node.ovs_remote)


def underlay_on(sb: "Sandbox", node: "SandboxNode", dev: str) -> None:
    """The node's underlay address and default route on `dev` (up), whether it
    had them or not: eth0 (--ovs-pods, until pacific-vswitch moves them), or
    br-phy's tap, after every start of ovs-vswitchd."""
    run(["ip", "addr", "replace", f"{node.underlay_ip}/{node.underlay_prefixlen}", "dev", dev],
        netns=node.netns)
    run(["ip", "link", "set", "dev", dev, "up"], netns=node.netns)
    run(["ip", "route", "replace", "default", "via", sb.external_ip], netns=node.netns)
    if node.underlay_ip6:    # --dual-stack: IPv6 on the underlay device alone, forwarded
        ipv6_on(node.netns, dev, node.underlay_ip6, sb.external_ip6)


def ipv6_on(ns: str, dev: str, address: str, gateway: str | None = None) -> None:
    """IPv6 on one device of a namespace that has it off elsewhere (netns.create):
    `address`/64 (/128 on lo) without duplicate address detection or router
    advertisements, IPv6 forwarding, and a default route via `gateway`."""
    run(["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=0", f"net.ipv6.conf.{dev}.accept_ra=0",
         f"net.ipv6.conf.{dev}.accept_dad=0", "net.ipv6.conf.all.forwarding=1"], netns=ns)
    plen = 128 if dev == "lo" else 64
    run(["ip", "-6", "addr", "replace", f"{address}/{plen}", "dev", dev, "nodad"], netns=ns)
    if gateway:
        run(["ip", "-6", "route", "replace", "default", "via", gateway], netns=ns)


def restart_node_daemon(sb: "Sandbox", node: "SandboxNode", daemon: str,
                        timeout: float = 30) -> None:
    """Stop and start one of a node's daemons ("ovs-vswitchd" or
    "ovn-controller"), as a crash and a supervisor's restart would.  The
    userspace datapath's tap devices (br-phy, internal ports) go with
    ovs-vswitchd and come back without their addresses, so the underlay
    address, default route and tunnel neighbours are restored afterwards."""
    starters = {"ovs-vswitchd": daemons.ovs_vswitchd, "ovn-controller": daemons.ovn_controller}
    if daemon not in starters:
        raise ValueError(f"cannot restart {daemon!r}: one of {', '.join(starters)}")
    if sb.ovs_pods:
        raise SandboxError(f"{node.name}'s {daemon} runs in a pacific-vswitch pod: delete "
                           "the pod or roll the DaemonSet (pacific.sandbox.k8s.rollout)")
    tag = f"{node.name}/{daemon}"
    sb.stop(tag)
    wrap = []
    if daemon == "ovn-controller" and sb.central_pods:
        from pacific.sandbox.k8s import kubelet
        wrap = kubelet.host_view(sb, node)
    st = starters[daemon](node.ovs_remote, node.netns, node.rundir, wrap=wrap)
    sb._record_daemon(tag, st, node.netns)
    if daemon == "ovs-vswitchd":
        wait_for(lambda: netns_has_link(node.netns, PHYS_BRIDGE), timeout,
                 f"{PHYS_BRIDGE} in {node.netns}")
        underlay_on(sb, node, PHYS_BRIDGE)
        warm_tunnels(sb, timeout)
    log.info("%s restarted (pid %d)", tag, st.pid)


def guard_tag(node: "SandboxNode") -> str:
    return f"{node.name}-guard"


def start_guards(sb: "Sandbox") -> None:
    """One pacific.sandbox.nodeguard per node (idempotent)."""
    import sys
    if sb.ovs_pods:      # pacific-vswitch restores it after each ovs-vswitchd start
        return
    for node in sb.nodes:
        if sb.daemon_pid(guard_tag(node)) is None:
            # in the node's namespace: whatever cleans the sandbox up finds it there
            sb.spawn(guard_tag(node), [sys.executable, "-m", "pacific.sandbox.nodeguard",
                                       "--sandbox", sb.name, "--node", node.name],
                     netns=node.netns)


def netns_has_link(ns: str, dev: str) -> bool:
    return run(["ip", "link", "show", "dev", dev], netns=ns, check=False).returncode == 0


def _lines(text: str) -> list[str]:
    return [x.strip().strip('"') for x in text.splitlines() if x.strip()]


def chassis_names(sb: "Sandbox") -> list[str]:
    return sorted(_lines(sb.sbctl("--bare", "--columns=name", "list", "Chassis")))


def tunnel_count(node: "SandboxNode") -> int:
    return len(_lines(node.vsctl("--bare", "--columns=name", "find", "Interface",
                                 f"type={ENCAP}")))


def wait_ready(sb: "Sandbox", timeout: float) -> None:
    """Every chassis registered, a full mesh of tunnels, and NB changes reach all
    hypervisors (`ovn-nbctl --wait=hv sync`)."""
    want = sorted(n.name for n in sb.nodes)
    wait_for(lambda: chassis_names(sb) == want, timeout,
             f"chassis {', '.join(want)} to register in the SB database")
    log.info("chassis registered: %s", ", ".join(want))
    for node in sb.nodes:
        wait_for(lambda: tunnel_count(node) == len(sb.nodes) - 1, timeout,
                 f"{len(sb.nodes) - 1} {ENCAP} tunnels on {node.name} (see {node.log('ovn-controller')})")
    sb.nbctl("--wait=hv", f"--timeout={int(timeout)}", "sync")
    log.info("tunnels up: full %s mesh between %d nodes", ENCAP, len(sb.nodes))


def warm_tunnels(sb: "Sandbox", timeout: float) -> None:
    """Userspace tunnels resolve the remote VTEP's MAC from OVS's own neighbour
    cache, learnt by snooping ARP on br-phy; a miss drops the packet.  Stretch the
    aging to its maximum and fill the cache with a ping mesh."""
    if len(sb.nodes) < 2:
        return
    # an ovs-vswitchd that its --monitor is restarting after a crash
    # (pacific.sandbox.nodeguard) has no control socket for a moment: wait for it
    for node in sb.nodes:
        wait_for(lambda: node.appctl("tnl/neigh/aging", "3600") is not None, timeout,
                 f"{node.name}'s ovs-vswitchd to answer on {node.vswitchd_ctl}")

    def warm(node: "SandboxNode") -> None:
        others = [o.underlay_ip for o in sb.nodes if o is not node]

        def learnt() -> bool:
            table = node.appctl("tnl/neigh/show")
            missing = [ip for ip in others if ip not in table]
            for ip in missing:
                # OVS learns only from ARP *replies* to its own requests; a kernel
                # entry learnt from the peer's request would suppress ours
                run(["ip", "neigh", "del", ip, "dev", PHYS_BRIDGE], netns=node.netns,
                    check=False)
                run(["ping", "-c1", "-W1", ip], netns=node.netns, check=False)
            return not missing
        wait_for(learnt, timeout, f"{node.name} to learn the underlay MACs of {others}")

    with concurrent.futures.ThreadPoolExecutor(len(sb.nodes)) as pool:
        for f in [pool.submit(warm, n) for n in sb.nodes]:
            f.result()
    log.info("tunnels warm: neighbour cache filled on every node (aging 3600 s)")


def check_paths(sb: "Sandbox") -> None:
    longest = os.path.join(sb.dir, f"node{len(sb.nodes)}", "ovn-controller.4194304.ctl")
    if len(longest) > 107:
        raise SandboxError(f"sandbox directory {sb.dir} is too long for unix socket paths "
                           f"(limit 107 bytes, would need {len(longest)}); set "
                           f"{names.SANDBOX_DIR_ENV} to a shorter directory")
