"""What the egress gateway tests read of a sandbox: HA chassis priorities and
BFD state between chassis."""
from __future__ import annotations

import dataclasses
import datetime
import os
import subprocess
import sys
import time

import probes
from pacific.kube import resources as r
from pacific.sandbox import bringup
from pacific.sandbox.proc import wait_for

NETCHECK = os.path.join(os.path.dirname(__file__), "netcheck.py")

# One failover, one sample, on 2 cores shared with everything else: measured
# 421 ms typically, a rare 1.03 s.  The goal (at most 1 s) is held to over 10
# failovers by bench/bench_gateway.py (p50 and max in docs/benchmarks.md); here
# a sample past OUTAGE_BOUND is a regression, not jitter.
OUTAGE_BOUND = 1.5


def remove_gateway_subnet(sb, api, subnet: str) -> None:
    """Delete a centralized Subnet and check its gateway rows went with it."""
    r.delete(api, r.SUBNETS, subnet)
    wait_for(lambda: r.get(api, r.SUBNETS, subnet) is None, 60, "the Subnet deleted",
             interval=0.2)

    def groups():
        return [g for g in sb.nbctl("--bare", "--columns=name", "list",
                                    "HA_Chassis_Group").split() if g.startswith("egw:")]
    # the gateway rows go too: the gateway feature removes them beside the Subnet
    # feature's own removal (not before it), in two transactions of its own
    wait_for(lambda: not groups(), 30, "the gateway's HA chassis groups removed", interval=0.2)


def priorities(sb, group: str) -> dict:
    """chassis -> priority in one HA chassis group, from `ovn-nbctl
    ha-chassis-group-list`: per group a "<uuid> (<name>)" line, then per
    chassis an indented "<uuid> (<chassis>)" line and a "priority N" line."""
    out, current, chassis = {}, None, None
    for line in sb.nbctl("ha-chassis-group-list").splitlines():
        if not line.strip():
            continue
        if not line.startswith((" ", "\t")):
            current = line.split("(", 1)[-1].rstrip(")").strip()
        elif line.strip().startswith("priority") and current == group and chassis:
            out[chassis] = int(line.split()[-1])
        else:
            chassis = line.split("(", 1)[-1].rstrip(")").strip()
    return out


def bfd_up(sb, node, peer) -> bool:
    cp = sb.exec(sb.node(node).netns, ["ovs-vsctl", f"--db=unix:{sb.node(node).db_sock}",
                                      "get", "Interface", f"ovn-{peer}-0", "bfd_status:state"],
                 check=False)
    return cp.returncode == 0 and cp.stdout.strip().strip('"') == "up"


def bfd_settled(sb, gateways=("node1", "node2"), client="node3") -> bool:
    """BFD up both ways between the client's chassis and every gateway, and
    between the gateways: a failover measured before a just-restored node's
    own sessions are up measures that node's recovery (seconds), not a
    failover."""
    pairs = [(client, g) for g in gateways] + [(g, client) for g in gateways] + \
        [(a, b) for a in gateways for b in gateways if a != b]
    return all(bfd_up(sb, a, b) for a, b in pairs)


def ask_outside(sb, netns: str, port: int, timeout: float = 1.0) -> str | None:
    """The source address the external host saw for one new TCP connection from
    the pod in `netns` to its `port`, or None when none came through."""
    text = probes.answer(sb, netns, "tcp", sb.external_remote_ip, port, timeout)
    return text.split()[-1] if text is not None else None


def steady_gateway(sb, netns: str, port: int, n: int = 8, timeout: float = 30) -> str:
    """The gateway node n new connections in a row leave through."""
    by_ip = {node.underlay_ip: node.name for node in sb.nodes}

    def steady():
        seen = {ask_outside(sb, netns, port) for _ in range(n)}
        return len(seen) == 1 and by_ip.get(seen.pop())
    return wait_for(steady, timeout, "egress through one gateway", interval=0.2)


def cut_link(sb, node: str) -> None:
    sb.exec(sb.node(node).netns, ["ip", "link", "set", "eth0", "down"])


def restore_link(sb, node: str) -> None:
    """The node's underlay link up again, with its default route and the tunnel
    neighbour cache warm (a long cut lets OVS forget its peers' MACs)."""
    sb.exec(sb.node(node).netns, ["ip", "link", "set", "eth0", "up"])
    sb.exec(sb.node(node).netns, ["ip", "route", "replace", "default", "via", sb.external_ip],
            check=False)
    bringup.warm_tunnels(sb, 30)


@dataclasses.dataclass
class Sample:
    """One failover, seen by a pod opening a new TCP connection every 20 ms."""
    outage: float          # s: last answer the old way -> first answer the new way
    out: str               # what netcheck's watch printed
    since: float           # time.time() of the fault
    crashes: list          # ovs-vswitchd crashes logged before the first answer the new way
    later: list            # ... and after it, until the probe ended (they cost no outage here)

    def report(self, sb) -> str:
        return f"outage {self.outage:.2f} s; after the fault:\n{failover_timeline(sb, self.since)}"


def failover_sample(sb, netns: str, dest: str, port: int, fault, old, new,
                    seconds: float = 8) -> Sample:
    """Probe dest:port from the pod's netns for `seconds`, 1.5 s of them before
    calling fault(); `old(who)` / `new(who)` say whether an answer (the source
    address the outside saw) came the old way / the new way."""
    watch = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, NETCHECK, "watch",
                              "tcp", dest, str(port), str(seconds), "0.02", "0.2"],
                             stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)                 # a baseline of answers the old way
        cut_at, since = time.monotonic(), time.time()
        fault()
        out, _ = watch.communicate(timeout=seconds + 30)
    finally:
        watch.kill()
        watch.wait()
    lines = [(float(t), who) for t, _, who in (ln.partition(" ") for ln in out.splitlines())]
    after = [t for t, who in lines if t > cut_at and new(who)]
    if not after:            # a crash that lasted the whole probe is a disturbed sample too
        crashes = vswitchd_crashes(sb, since)
        assert crashes, (f"never answered the new way after the fault: {out[-400:]}\n"
                         f"after the fault:\n{failover_timeline(sb, since)}")
        return Sample(float("inf"), out, since, crashes, [])
    before = [t for t, who in lines if old(who) and t < after[0]]
    outage = after[0] - max(max(before, default=cut_at), cut_at - 0.02)
    first_new = since + (after[0] - cut_at)             # as time.time()
    return Sample(outage, out, since, vswitchd_crashes(sb, since, first_new),
                  vswitchd_crashes(sb, first_new + 0.001))


def crash_free(sample: Sample) -> Sample:
    """The sample, after checking that no node's ovs-vswitchd crashed while it was
    taken or after it (an abort restarted by --monitor measures the restart, not
    the failover, and is a bug of its own: none is expected of the OVS the suite
    runs, see docs/decisions/0029)."""
    crashes = sample.crashes + sample.later
    assert not crashes, f"ovs-vswitchd crashed around the failover: {'; '.join(crashes)}"
    return sample


def _stamp(line: str) -> float | None:
    """Epoch seconds of an ovn-controller line (2026-11-25T06:33:12.024Z, UTC)
    or a Pacific daemon line (2026-11-25 06:33:16,507, local time)."""
    try:
        if line[10:11] == "T":
            return datetime.datetime.strptime(line[:23], "%Y-%m-%dT%H:%M:%S.%f").replace(
                tzinfo=datetime.timezone.utc).timestamp()
        return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


CRASH_WORDS = ("crashes:", "assertion")      # OVS's --monitor and the abort it restarts after


def vswitchd_crashes(sb, since: float, until: float = float("inf")) -> list[str]:
    """The ovs-vswitchd crashes (restarted by --monitor) any node logged
    between `since` and `until` (time.time()): Debian 12's OVS 3.1.0 aborts in
    its userspace conntrack (docs/egress.md, "Known limits"), and a failover
    sample taken while a node on the path restarts measures that restart
    (about 2 s), not the failover."""
    out = []
    for n in sb.nodes:
        try:
            lines = open(n.log("ovs-vswitchd"), errors="replace").read().splitlines()
        except OSError:
            continue
        out += [f"{n.name}: {line[24:][:160]}" for line in lines
                if any(w in line for w in CRASH_WORDS)
                and since - 0.5 <= (_stamp(line) or 0) <= until]
    return out


def failover_timeline(sb, since: float, words=("cr-lrp", "bfd", "egress", "gateway")) -> str:
    """What each node's ovn-controller, ovs-vswitchd and pacific-node logged
    about gateways (and crashes) from `since` (time.time()) on, in time order,
    each line with its offset: the failure message of a failover test says
    where the time went."""
    rows = []
    for n in sb.nodes:
        for path, who in ((n.log("ovn-controller"), "ovn-controller"),
                          (n.log("ovs-vswitchd"), "ovs-vswitchd"),
                          (os.path.join(sb.dir, "services", f"{n.name}-pacific-node.log"),
                           "pacific-node")):
            try:
                lines = open(path, errors="replace").read().splitlines()
            except OSError:
                continue
            for line in lines:
                t = _stamp(line)
                if t is not None and t >= since - 0.5 and any(
                        w in line.lower() for w in words + CRASH_WORDS):
                    rows.append((t, f"{t - since:+7.3f}s {n.name} {who}: {line[24:][:160]}"))
    return "\n".join(text for _, text in sorted(rows)[:60])
