"""What kubelet nodes change on the host, and how `down` puts it back.

    hoststate.make_cgroups(root)      # a node's cgroup root in every hierarchy
    hoststate.save_sysctls(base)      # before the first kubelet of any sandbox
    hoststate.make_mountpoints(base, binds)
    ...
    hoststate.remove_cgroups(root)    # in kubelet.cleanup(), once the processes are gone
    hoststate.remove_mountpoints(base); hoststate.restore_sysctls(base)   # with the last one

The kubelet rewrites host sysctls (SYSCTLS): their values are saved before the
first kubelet of any sandbox starts and restored when the last one goes (a
sandbox that runs kubelets holds a MARKER file).  Host directories that nodes'
mount namespaces bind-mount over are made if missing and removed with the last
kubelet sandbox.  pacific.sandbox.k8s.kubelet uses these; nothing else does.
"""
from __future__ import annotations

import glob
import json
import logging
import os

log = logging.getLogger(__name__)

SYSCTLS = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
           "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes")
SYSCTL_SAVE = ".kubelet-sysctl.json"       # in the sandboxes' base directory
MARKER = ".kubelet"                        # in a sandbox directory: it runs kubelets


def write_file(path: str, data: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


# ---------------------------------------------------------------------- cgroups
def hierarchies() -> list[str]:
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, mnt, fstype = line.split()[:3]
            if fstype in ("cgroup", "cgroup2"):
                out.append(mnt)
    return out


def make_cgroups(root: str) -> None:
    for h in hierarchies():
        d = h + root
        os.makedirs(d, exist_ok=True)
        for f in ("cpuset.cpus", "cpuset.mems"):   # cpuset children start empty
            src, dst = os.path.join(h, f), os.path.join(d, f)
            if os.path.exists(dst):
                with open(dst) as cur:
                    if cur.read().strip():
                        continue
                with open(src) as s, open(dst, "w") as t:
                    t.write(s.read().strip())


def cgroup_pids(root: str) -> set[int]:
    pids: set[int] = set()
    for h in hierarchies():
        for dirpath, _dirs, files in os.walk(h + root):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(dirpath, "cgroup.procs")) as f:
                        pids.update(int(x) for x in f.read().split())
                except OSError:
                    pass
    return pids


def remove_cgroups(root: str) -> list[str]:
    left = []
    for h in hierarchies():
        top = h + root
        if not os.path.isdir(top):
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top, topdown=False),
                                             key=lambda w: -w[0].count("/")):
            try:
                os.rmdir(dirpath)
            except OSError as e:
                left.append(f"{dirpath}: {e.strerror}")
    return left


# ---------------------------------------------------------------------- sysctls
def read_sysctl(key: str) -> str | None:
    try:
        with open("/proc/sys/" + key.replace(".", "/")) as f:
            return f.read().strip()
    except OSError:
        return None


def save_sysctls(base: str) -> None:
    path = os.path.join(base, SYSCTL_SAVE)
    if not os.path.exists(path):
        write_file(path, json.dumps({k: read_sysctl(k) for k in SYSCTLS}))


def restore_sysctls(base: str) -> None:
    """Put back the saved values once no sandbox with kubelets is left."""
    path = os.path.join(base, SYSCTL_SAVE)
    if not os.path.exists(path) or glob.glob(os.path.join(base, "*", MARKER)):
        return
    with open(path) as f:
        saved = json.load(f)
    for k, v in saved.items():
        if v is not None and read_sysctl(k) != v:
            try:
                with open("/proc/sys/" + k.replace(".", "/"), "w") as f:
                    f.write(v)
                log.info("restored %s = %s", k, v)
            except OSError as e:
                log.warning("cannot restore %s = %s: %s", k, v, e)
    os.unlink(path)


# ---------------------------------------------------------------------- mount points
CREATED = ".kubelet-created"                # in the base directory: host dirs we made


def make_mountpoints(base: str, binds: dict) -> None:
    """Host directories bind-mounted over in a node's mount namespace must exist;
    the ones made here are removed with the last kubelet sandbox."""
    made = []
    for d, src in binds.items():
        os.makedirs(src, exist_ok=True)
        x = d
        while not os.path.exists(x):     # every directory made, deepest first
            made.append(x)
            x = os.path.dirname(x)
        os.makedirs(d, exist_ok=True)
    if made:
        with open(os.path.join(base, CREATED), "a") as f:
            f.write("".join(f"{d}\n" for d in made))


def remove_mountpoints(base: str) -> None:
    path = os.path.join(base, CREATED)
    try:
        with open(path) as f:
            made = [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return
    for d in made:
        try:
            os.rmdir(d)
        except FileNotFoundError:
            pass                  # listed twice (two sandboxes made it), gone already
        except OSError as e:
            log.warning("%s not removed: %s", d, e.strerror)
    os.unlink(path)
