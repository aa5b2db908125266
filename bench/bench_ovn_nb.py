#!/usr/bin/env python3
"""NB write throughput: logical switch ports created per second.

Compares, in the same run and against the same kind of fresh database
(a private ovsdb-server with the OVN NB schema in a temp dir):

  pacific batch      pacific.ovn NorthboundAPI, BATCH ports per transaction
  pacific per-port   pacific.ovn, one transaction per port
  nbctl chained      one `ovn-nbctl` invocation with BATCH `-- lsp-add` (one
                     transaction each; ARG_MAX limits one call to a few 1000)
  nbctl per-port     one `ovn-nbctl` invocation per port (the baseline)

Each port gets addresses, port_security and owner external_ids (as the
controller writes them).  Every measurement runs on a fresh server; the
median of --repeat runs is reported.

    .venv/bin/python bench/bench_ovn_nb.py [--ports 5000] [--batch 1000]
        [--single 300] [--nbctl-single 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "lib"))

import nb_commands  # noqa: E402
from pacific import names, ovsinstall  # noqa: E402
from pacific.ovn import NorthboundAPI, Owner  # noqa: E402
from pacific.sandbox.daemons import default_install  # noqa: E402

ovsinstall.activate(default_install())
NB_SCHEMA = ovsinstall.from_env().schema("ovn-nb")
SWITCH = "bench"


class Server:
    """A private NB ovsdb-server (child process), removed on exit."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="pacific-bench-nb-"))
        self.sock = self.dir / "nb.sock"
        db = self.dir / "nb.db"
        subprocess.run(["ovsdb-tool", "create", str(db), NB_SCHEMA],
                       check=True, capture_output=True)
        self.proc = subprocess.Popen(
            ["ovsdb-server", str(db), f"--remote=punix:{self.sock}",
             f"--pidfile={self.dir}/nb.pid", f"--unixctl={self.dir}/nb.ctl",
             f"--log-file={self.dir}/nb.log", "-vconsole:off"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(self.sock))
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError("ovsdb-server did not start")
                time.sleep(0.02)
        self.remote = f"unix:{self.sock}"

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def port(i: int) -> tuple[str, str, str]:
    """name, "mac ip", owner of the i-th port."""
    mac = f"0a:00:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}:01"
    ip = f"10.{16 + (i >> 16)}.{i >> 8 & 255}.{i & 255}"
    return f"p{i}.bench", f"{mac} {ip}", f"bench/p{i}"


def nbctl(remote: str, *args: str) -> None:
    subprocess.run(["ovn-nbctl", f"--db={remote}", *args], check=True,
                   capture_output=True)


def nbctl_port_args(i: int) -> list[str]:
    name, addr, owner = port(i)
    return ["--", "lsp-add", SWITCH, name,
            "--", "lsp-set-addresses", name, addr,
            "--", "lsp-set-port-security", name, addr,
            "--", "set", "Logical_Switch_Port", name,
            f'external_ids:"{names.EXT_OWNER_KIND}"={names.OWNER_KIND_POD}',
            f'external_ids:"{names.EXT_OWNER}"="{owner}"']


def run_pacific(n: int, batch: int) -> float:
    with Server() as srv:
        nb = NorthboundAPI(srv.remote, timeout=120)
        try:
            nb.commit(nb_commands.add_switch(nb, SWITCH, owner=Owner(
                names.OWNER_KIND_SUBNET, SWITCH)))
            t0 = time.perf_counter()
            for start in range(0, n, batch):
                with nb.transaction() as txn:
                    for i in range(start, min(start + batch, n)):
                        name, addr, owner = port(i)
                        txn.add(nb_commands.add_switch_port(nb,
                            SWITCH, name, addresses=[addr],
                            port_security=[addr],
                            owner=Owner(names.OWNER_KIND_POD, owner)))
            elapsed = time.perf_counter() - t0
            assert len(nb.lookup("Logical_Switch", SWITCH).ports) == n
        finally:
            nb.close()
    return n / elapsed


def run_nbctl(n: int, chained: bool, batch: int = 1000) -> float:
    """chained: one ovn-nbctl call (one transaction) per `batch` ports; the
    kernel's argument-size limit stops a single call at a few thousand."""
    with Server() as srv:
        nbctl(srv.remote, "ls-add", SWITCH)
        t0 = time.perf_counter()
        if chained:
            for start in range(0, n, batch):
                args: list[str] = []
                for i in range(start, min(start + batch, n)):
                    args += nbctl_port_args(i)
                nbctl(srv.remote, *args[1:])
        else:
            for i in range(n):
                nbctl(srv.remote, *nbctl_port_args(i)[1:])
        elapsed = time.perf_counter() - t0
        out = subprocess.run(["ovn-nbctl", f"--db={srv.remote}", "lsp-list",
                              SWITCH], check=True, capture_output=True,
                             text=True).stdout
        assert len(out.splitlines()) == n, "nbctl created a wrong port count"
    return n / elapsed


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ports", type=int, default=5000,
                    help="ports for the batched/chained runs (default 5000)")
    ap.add_argument("--batch", type=int, default=1000,
                    help="ports per pacific transaction (default 1000)")
    ap.add_argument("--single", type=int, default=300,
                    help="ports for pacific one-transaction-per-port (300)")
    ap.add_argument("--nbctl-single", type=int, default=100,
                    help="ports for one ovn-nbctl call per port (100)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per method; the median is reported (3)")
    a = ap.parse_args()
    if shutil.which("ovsdb-server") is None or shutil.which("ovn-nbctl") is None:
        print("needs ovsdb-server and ovn-nbctl (make setup)", file=sys.stderr)
        return 2

    cases = [
        (f"pacific batch ({a.batch}/txn)", a.ports,
         lambda: run_pacific(a.ports, a.batch)),
        (f"pacific batch ({a.ports}/txn)", a.ports,
         lambda: run_pacific(a.ports, a.ports)),
        ("pacific per-port (1/txn)", a.single,
         lambda: run_pacific(a.single, 1)),
        (f"nbctl chained ({a.batch}/call)", a.ports,
         lambda: run_nbctl(a.ports, chained=True, batch=a.batch)),
        ("nbctl per-port (1 call/port)", a.nbctl_single,
         lambda: run_nbctl(a.nbctl_single, chained=False)),
    ]
    print(f"# {cpu_model()}, {os.cpu_count()} CPUs, "
          f"{platform.python_implementation()} {platform.python_version()}")
    print(f"# {'method':32} {'ports':>6} {'ports/s (median)':>17}  runs")
    results = {}
    for label, n, fn in cases:
        runs = [fn() for _ in range(a.repeat)]
        med = statistics.median(runs)
        results[label] = med
        print(f"  {label:32} {n:6d} {med:17.0f}  "
              + " ".join(f"{r:.0f}" for r in runs), flush=True)
    base = results["nbctl per-port (1 call/port)"]
    print("# speed-up over one ovn-nbctl call per port: " + ", ".join(
        f"{k}: {v / base:.1f}x" for k, v in results.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
