"""Daemons that outlive their pod: moved out of the pod's cgroups.

When a container stops, its runtime kills every process left in the
container's cgroup (runc, for a container in the host's PID namespace).  The
node's Open vSwitch must outlive a pacific-vswitch pod that is being upgraded
or restarted (on the userspace datapath ovs-vswitchd is the forwarding plane),
so its daemons move into a cgroup of their own beside the kubelet's pods:
`<the kubelet's cgroup root>/pacific-vswitch` in every hierarchy, through the
host's /sys/fs/cgroup mounted into the pod (deploy/vswitch.yaml).
systemd keeps a host's own Open vSwitch in a unit's cgroup the same way.
"""
from __future__ import annotations

import logging
import os

LOG = logging.getLogger(__name__)
HOST_CGROUP = "/host/sys/fs/cgroup"      # the host's /sys/fs/cgroup, mounted here
NAME = "pacific-vswitch"


def _own() -> dict[str, str]:
    """controller list ("memory", "name=systemd", "" for cgroup v2) -> our path."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            out[controllers] = path
    return out


def _hierarchy_dir(host: str, controllers: str) -> str | None:
    if controllers == "":                       # cgroup v2: unified or the root itself
        for d in (os.path.join(host, "unified"), host):
            if os.path.exists(os.path.join(d, "cgroup.procs")) and \
                    os.path.exists(os.path.join(d, "cgroup.controllers")):
                return d
        return None
    for name in (controllers.replace("name=", ""), *controllers.split(",")):
        d = os.path.join(host, name)
        if os.path.exists(os.path.join(d, "cgroup.procs")):
            return d
    return None


def target(path: str) -> str:
    """Where a daemon goes in a hierarchy where we are at `path`: beside the
    kubelet's pods (the part of the path before /kubepods), else the root."""
    root = path.split("/kubepods", 1)[0] if "/kubepods" in path else ""
    return f"{root.rstrip('/')}/{NAME}"


def escape(pids: list[int], host: str = HOST_CGROUP) -> bool:
    """Move `pids` out of the pod's cgroups (into every hierarchy's
    `target`); False (said) if any hierarchy could not be reached or written:
    then they stop with the pod."""
    own = _own()
    if not any("/kubepods" in path for path in own.values()):
        return True            # not in a pod: nothing will kill them with it
    ok = True
    for controllers, path in own.items():
        base = _hierarchy_dir(host, controllers)
        if base is None:
            LOG.warning("no cgroup hierarchy %r under %s: %s stop with this pod",
                        controllers or "cgroup2", host, pids)
            ok = False
            continue
        d = base + target(path)
        try:
            os.makedirs(d, exist_ok=True)
            parent = os.path.dirname(d)
            for f in ("cpuset.cpus", "cpuset.mems"):   # cpuset children start empty
                dst = os.path.join(d, f)
                if os.path.exists(dst):
                    with open(dst) as cur:
                        if cur.read().strip():
                            continue
                    with open(os.path.join(parent, f)) as src, open(dst, "w") as out:
                        out.write(src.read().strip())
            for pid in pids:
                with open(os.path.join(d, "cgroup.procs"), "w") as f:
                    f.write(str(pid))
        except OSError as exc:
            LOG.warning("cannot move %s into %s (%s): they stop with this pod", pids, d, exc)
            ok = False
    return ok
