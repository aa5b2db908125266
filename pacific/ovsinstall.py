"""Where an Open vSwitch / OVN installation lives: its programs, schemas and C JSON parser.

Debian's packages install under `/usr`; hack/build-ovs-ovn.sh installs a newer OVS and
OVN under one prefix of their own (bin/, sbin/, share/, lib/, python/ovs/).  An
`Install` answers where a program or schema of one installation is, and `activate`
puts its programs first on this process's PATH (and names it in $PACIFIC_OVS_PREFIX),
so every child process (daemons, ovs-vsctl, pacific-node) uses the same one.

Pure: no I/O beyond looking at the file system, no import of the rest of Pacific.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

PREFIX_ENV = "PACIFIC_OVS_PREFIX"
SYSTEM_PREFIX = "/usr"
# schema file of each database, relative to <prefix>/share
SCHEMAS = {"vswitch": "openvswitch/vswitch.ovsschema",
           "ovn-nb": "ovn/ovn-nb.ovsschema", "ovn-sb": "ovn/ovn-sb.ovsschema"}


@dataclass(frozen=True)
class Install:
    prefix: str

    @property
    def dirs(self) -> tuple[str, str]:
        return os.path.join(self.prefix, "bin"), os.path.join(self.prefix, "sbin")

    def program(self, name: str) -> str:
        """Absolute path of program `name` of this installation, or `name` itself
        (found on PATH) when the installation has no such program."""
        for d in self.dirs:
            path = os.path.join(d, name)
            if os.access(path, os.X_OK):
                return path
        return name

    def schema(self, db: str) -> str:
        """Schema file of "vswitch", "ovn-nb" or "ovn-sb"."""
        return os.path.join(self.prefix, "share", SCHEMAS[db])

    @property
    def python_dir(self) -> str:
        """Where this installation's `ovs/_json.*.so` is, if it has one."""
        if self.prefix == SYSTEM_PREFIX:
            return "/usr/lib/python3/dist-packages/ovs"
        return os.path.join(self.prefix, "python", "ovs")

    def usable(self) -> bool:
        return os.access(os.path.join(self.prefix, "sbin", "ovs-vswitchd"), os.X_OK)


def from_env() -> Install:
    """The installation named by $PACIFIC_OVS_PREFIX, else Debian's (/usr)."""
    return Install(os.environ.get(PREFIX_ENV) or SYSTEM_PREFIX)


def activate(install: Install) -> None:
    """Make `install` the one this process and its children use: its bin/ and sbin/
    first on PATH (other installations' directories taken off), $PACIFIC_OVS_PREFIX
    set.  Idempotent."""
    previous = os.environ.get(PREFIX_ENV)
    others = (set(Install(previous).dirs)
              if previous and previous not in (SYSTEM_PREFIX, install.prefix) else set())
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d not in others]
    if install.prefix != SYSTEM_PREFIX:   # Debian's /usr/{s,}bin stay where they are
        path = [*install.dirs, *(d for d in path if d not in install.dirs)]
    os.environ["PATH"] = os.pathsep.join(path)
    os.environ[PREFIX_ENV] = install.prefix
