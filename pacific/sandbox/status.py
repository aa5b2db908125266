"""`Sandbox.status()`: what runs, where its sockets and logs are, which chassis exist."""
from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from pacific.sandbox import netns
from pacific.sandbox.proc import SandboxError, alive, run

if TYPE_CHECKING:
    from pacific.sandbox.cluster import Sandbox


def _chassis(sb: "Sandbox") -> list[dict] | str:
    """Chassis rows from SB (name, hostname, encap IPs), or the error text."""
    try:
        out = run(["ovn-sbctl", f"--db={sb.sb_remote}", "--timeout=3", "--format=json",
                   "--columns=name,hostname,encaps", "list", "Chassis"], timeout=5).stdout
        encaps = run(["ovn-sbctl", f"--db={sb.sb_remote}", "--timeout=3", "--format=json",
                      "--columns=_uuid,type,ip", "list", "Encap"], timeout=5).stdout
    except SandboxError as e:
        return str(e)
    enc = {row[0][1]: (row[1], row[2]) for row in json.loads(encaps)["data"]}
    result = []
    for name, hostname, encap_ref in json.loads(out)["data"]:
        refs = encap_ref[1] if encap_ref[0] == "set" else [encap_ref]
        result.append({"name": name, "hostname": hostname,
                       "encaps": [f"{enc[r[1]][0]}:{enc[r[1]][1]}" for r in refs if r[1] in enc]})
    return sorted(result, key=lambda c: c["name"])


def collect(sb: "Sandbox") -> dict:
    st = sb.state.read()
    daemons = {tag: {"pid": d["pid"], "alive": alive(d["pid"], d["start"]),
                     "netns": d.get("netns"), "log": d.get("log"), "kind": d.get("kind")}
               for tag, d in sorted(st["daemons"].items(), key=lambda kv: kv[1].get("seq", 0))}
    exists = sb.state.exists()
    nodes = []
    for node in sb.nodes:
        info = node.describe()
        info["netns_exists"] = netns.exists(node.netns)
        info["daemons_alive"] = {t.split("/", 1)[1]: d["alive"] for t, d in daemons.items()
                                 if t.startswith(node.name + "/")}
        nodes.append(info)
    return {
        "name": sb.name,
        "dir": sb.dir,
        "exists": exists,
        "ready": bool(st.get("ready")) and sb.healthy(),
        # how pods run: "kubelet" (containerd + kubelet per node), "runner"; and
        # whether Pacific runs from its image and deploy/ (--deploy)
        "pods": "kubelet" if sb.kubelet else "runner",
        "deploy": sb.deploy,
        # OVN central as deploy/central.yaml's pods on the first nodes (--central-pods)
        "central_pods": sb.central_pods,
        # Open vSwitch and ovn-controller as deploy/vswitch.yaml's pods (--ovs-pods)
        "ovs_pods": sb.ovs_pods,
        "nb_remote": sb.nb_remote,
        "sb_remote": sb.sb_remote,
        "nb_tcp_remote": sb.nb_tcp_remote,
        "sb_tcp_remote": sb.sb_tcp_remote,
        "central": {"netns": sb.central_netns, "underlay_ip": sb.central_ip,
                    "logs": _central_logs(sb)},
        "external": {"netns": sb.external_netns, "underlay_ip": sb.external_ip,
                     "remote_ip": sb.external_remote_ip},
        "chassis": _chassis(sb) if exists else [],
        "daemons": daemons,
        "nodes": nodes,
        "test_pods": sorted(st.get("pods", {})),
    }


def _central_logs(sb) -> dict[str, str]:
    if sb.central_pods:
        from pacific.sandbox.k8s import central
        return {f"{n.name}/{d}": os.path.join(central.host_dirs(n)[central.RUN_DIR], f"{d}.log")
                for n in central.members(sb) for d in ("nb", "sb", "northd")}
    if sb.ha:
        return {f"ovn{i}/{d}": f"{sb.central_dir}/ovn{i}/{d}.log"
                for i in (1, 2, 3) for d in ("nb", "sb")}
    return {d: f"{sb.central_dir}/{d}.log" for d in ("nb", "sb", "northd")}
