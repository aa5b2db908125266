"""OpenFlow tables kept across a restart of ovs-vswitchd (OVS's own `ovs-save`).

On the userspace datapath ovs-vswitchd is the forwarding plane: a new one starts
with no flows, and ovn-controller needs a while to compute and install them
all.  As `ovs-ctl restart` does, pacific-vswitch replacing an ovs-vswitchd
first saves every bridge's flows, groups and tunnel maps with `ovs-save
save-flows` (into the run directory), sets
`other_config:flow-restore-wait=true` so that the new one neither forwards nor
flushes until told, replays the saved tables into it, clears the flag, and
only then replaces ovn-controller, told by
`external_ids:ovn-ofctrl-wait-before-clear` not to clear them before it has
computed its own.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess

LOG = logging.getLogger(__name__)
SUFFIX = ".restore.sh"


class Saved:
    def __init__(self, directory: str, ovs_save: str):
        self.dir, self.ovs_save = directory, ovs_save

    def scripts(self) -> dict[str, str]:
        """bridge -> its restore script, of what was saved."""
        if not os.path.isdir(self.dir):
            return {}
        return {n[:-len(SUFFIX)]: os.path.join(self.dir, n) for n in sorted(os.listdir(self.dir))
                if n.endswith(SUFFIX)}

    def present(self) -> bool:
        return bool(self.scripts())

    def save(self, bridges: list[str], env: dict[str, str]) -> list[str]:
        """`ovs-save save-flows` of each bridge into the directory; the bridges
        saved (one that fails is said and left to ovn-controller)."""
        self.discard()
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        saved = []
        for bridge in bridges:       # one by one: a bridge without a datapath fails alone
            p = subprocess.run([self.ovs_save, "save-flows", bridge],
                               env={**env, "TMPDIR": self.dir}, capture_output=True, text=True,
                               timeout=60)
            if p.returncode != 0 or "replace-flows" not in p.stdout:
                LOG.warning("could not save the flows of %s: %s", bridge,
                            (p.stderr or p.stdout).strip()[-300:])
                continue
            path = os.path.join(self.dir, bridge + SUFFIX)
            with open(f"{path}.tmp", "w") as f:
                f.write("set -e\n" + p.stdout)
            os.replace(f"{path}.tmp", path)
            saved.append(bridge)
        if saved:
            LOG.info("flows of %s saved for the next ovs-vswitchd", ", ".join(saved))
        return saved

    def restore(self, env: dict[str, str]) -> list[str]:
        """Replay the saved tables (then forget them); the bridges restored."""
        done = []
        for bridge, script in self.scripts().items():
            p = subprocess.run(["sh", script], env=env, capture_output=True, text=True,
                               timeout=60)
            if p.returncode == 0:
                done.append(bridge)
            else:
                LOG.warning("saved flows of %s not restored (ovn-controller installs them): %s",
                            bridge, (p.stderr or p.stdout).strip()[-300:])
        if done:
            LOG.info("saved flows of %s restored", ", ".join(done))
        self.discard()
        return done

    def discard(self) -> None:
        if os.path.isdir(self.dir):
            for name in os.listdir(self.dir):
                path = os.path.join(self.dir, name)
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
