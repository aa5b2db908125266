"""`make conformance`: Kubernetes' own networking end-to-end tests (v1.20.2's
e2e.test) against a sandbox of kubelet nodes running Pacific.

    python -m pacific.sandbox.conformance [--focus RE] [--isolation] [--parallel N]
        [--keep] [--dry-run]

hack/build-conformance.sh builds e2e.test and agnhost once per machine.  This
packs agnhost with the tools the tests run inside its containers (busybox's
applets, Debian's curl, netcat-openbsd and ss with their libraries) as
localhost/agnhost:2.21 (KUBE_TEST_REPO_LIST points the tests' registry at
localhost), imports it on every node, brings a sandbox up (tenant isolation
off unless --isolation: Kubernetes' model is that every pod reaches every pod),
runs the selection in --parallel e2e.test processes and prints a table: passed,
failed (apart: the known limitations, KNOWN, and with --isolation the tests
across namespaces, CROSS_NAMESPACE), skipped (each skip pattern with its
reason).  The JUnit reports are in the report directory.
"""
from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

from pacific.sandbox.k8s import bins, images

CACHE = os.path.join(os.path.dirname(bins.bin_dir()), "conformance")
AGNHOST = "localhost/agnhost:2.21"
INTERNET = "google.com"      # what e2e.test asks for first (internet_stub)
# the tests' image registries (test/utils/image/manifest.go), all served from the nodes
REPO_LIST = "".join(f"{k}: localhost\n" for k in (
    "promoterE2eRegistry", "gcRegistry", "dockerLibraryRegistry", "e2eRegistry",
    "buildImageRegistry"))
# the tools the tests run in agnhost containers (docs/conformance.md); dash as
# /bin/sh: Debian's static busybox runs its own applets before PATH (its nc
# has no -u or -z, its wget -T crashes here)
TOOLS = {"/usr/bin/curl": "usr/bin/curl", "/bin/nc.openbsd": "usr/bin/nc", "/bin/ss": "usr/bin/ss",
         "/usr/bin/wget": "usr/bin/wget", "/bin/dash": "bin/sh"}

FOCUS = r"\[sig-network\] (Networking|Services|NetworkPolicy|Conntrack)"
# (pattern, why it cannot apply here): each is in docs/conformance.md
SKIPS = (
    (r"\[Feature:(SCTP|SCTPConnectivity)\]", "SCTP: the tests load the sctp kernel module "
     "through host-exec pods (lsmod), and the connectivity ones are [Disruptive]"),
    (r"\[Feature:(Networking-IPv6|IPv6DualStack[A-Za-z]*)\]", "IPv6: not yet (issue 27)"),
    (r"\[Feature:Networking-IPv4\]", "dials 8.8.8.8: the sandbox sends nothing to the Internet"),
    (r"\[Disruptive\]|\[Serial\]", "restarts cluster components or needs the cluster alone"),
    (r"\[Slow\]", "slow (minutes each): run with --focus"),
    (r"kube-proxy|KubeProxy|CLOSE_WAIT|#74839", "kube-proxy's own ports and iptables: Pacific "
     "replaces kube-proxy"),
    (r"ESIPP|LoadBalancer|load balancer|cleanup finalizer", "cloud load balancers"),
)


def skip_regex() -> str:
    return "|".join(p for p, _ in SKIPS)


def _closure(binary: str) -> dict[str, str]:
    """`binary`'s shared libraries (ldd): host path -> path in the image."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = {}
    for line in out.splitlines():
        m = re.search(r"(/\S+) \(0x", line)
        if m:
            libs[m.group(1)] = m.group(1).lstrip("/")
    return libs


def agnhost_archive(cache: str = CACHE) -> str:
    """localhost/agnhost:2.21 as an OCI archive in `cache` (rebuilt when older
    than agnhost or this module)."""
    out = os.path.join(cache, "agnhost.tar")
    src = os.path.join(cache, "agnhost")
    if not os.path.exists(src):
        raise SystemExit(f"{src} missing: run hack/build-conformance.sh (make conformance does)")
    if os.path.exists(out) and os.path.getmtime(out) > max(os.path.getmtime(src),
                                                          os.path.getmtime(__file__)):
        return out
    files: dict[str, str] = {src: "agnhost"}
    for host, inside in TOOLS.items():
        files[os.path.realpath(host)] = inside
        files.update(_closure(host))
    extra = {}
    for host, inside in files.items():
        with open(os.path.realpath(host), "rb") as f:
            extra[inside] = (f.read(), 0o755)
    extra["agnhost-2"] = ("agnhost", 0o777)
    for name in ("localhost.crt", "localhost.key"):    # porter's TLS server
        with open(os.path.join(cache, name), "rb") as f:
            extra[name] = (f.read(), 0o644)
    extra["uploads/.keep"] = (b"", 0o644)
    images.write_oci_archive(out, AGNHOST, images.rootfs_layer(extra), cmd=["pause"],
                             entrypoint=["/agnhost"],
                             env=["PATH=/usr/local/bin:/usr/bin:/bin"])
    return out


def results(report_dir: str) -> list[tuple[str, str, str]]:
    """(test name, "passed" | "failed" | "skipped", message) from the JUnit files."""
    got = []
    for name in sorted(os.listdir(report_dir)):
        if not (name.startswith("junit") and name.endswith(".xml")):
            continue
        for case in ET.parse(os.path.join(report_dir, name)).getroot().iter("testcase"):
            failure, skipped = case.find("failure"), case.find("skipped")
            if failure is not None:
                # the text: the test's location, then the message, then where it failed
                lines = [ln for ln in (failure.get("message") or failure.text or "").splitlines()
                         if ln.strip() and not re.search(r"\.go:\d+$", ln)]
                got.append((case.get("name", ""), "failed", " ".join(lines)[:300]))
            elif skipped is not None:
                got.append((case.get("name", ""), "skipped", skipped.get("message") or ""))
            else:
                got.append((case.get("name", ""), "passed", ""))
    return got


# (pattern, why): tests that run and fail for a limitation of Pacific's, said in
# the user guides; they are reported as known and do not fail the run
KNOWN: tuple[tuple[str, str], ...] = (
    (r"should function for service endpoints using hostNetwork",
     "its last step, 2,000-byte UDP from a pod through a cluster IP, fails when the "
     "balancer picks the host-network endpoint on the pod's own node (fragments hash "
     "to one endpoint): a UDP server bound to all addresses answers from the node's "
     "join address, which the pod drops (Kubernetes #95565: upstream skips its "
     "pod-Service(hostNetwork) udp test for it; docs/services.md)"),
)


# With tenant isolation on (--isolation), the tests whose client and server are in
# different namespaces fail, as on any cluster that keeps namespaces apart
# (docs/tenants.md); measured 2026-11-27, docs/conformance.md
_CROSS = "[sig-network] NetworkPolicy [LinuxOnly] NetworkPolicy between server and client should "
CROSS_NAMESPACE = tuple(_CROSS + t for t in (
    "allow ingress access from namespace on one named port [Feature:NetworkPolicy]",
    "allow ingress access from updated namespace [Feature:NetworkPolicy]",
    "enforce egress policy allowing traffic to a server in a different namespace based on "
    "PodSelector and NamespaceSelector [Feature:NetworkPolicy]",
    "enforce policy based on NamespaceSelector with MatchExpressions[Feature:NetworkPolicy]",
    "enforce policy based on PodSelector and NamespaceSelector [Feature:NetworkPolicy]",
    "enforce policy based on PodSelector or NamespaceSelector [Feature:NetworkPolicy]",
    "enforce policy to allow traffic from pods within server namespace based on PodSelector "
    "[Feature:NetworkPolicy]",
    "enforce policy to allow traffic only from a different namespace, based on "
    "NamespaceSelector [Feature:NetworkPolicy]",
    "enforce policy to allow traffic only from a pod in a different namespace based on "
    "PodSelector and NamespaceSelector [Feature:NetworkPolicy]",
    "support a 'default-deny-all' policy [Feature:NetworkPolicy]",
    "work with Ingress,Egress specified together [Feature:NetworkPolicy]",
))
CROSS_WHY = "its client and server are in different namespaces: tenant isolation keeps them apart"


def why_skipped(name: str) -> str:
    for pattern, why in SKIPS:
        if re.search(pattern, name):
            return why
    return ""


def why_known(name: str, isolation: bool = False) -> str:
    if isolation and name in CROSS_NAMESPACE:
        return CROSS_WHY
    for pattern, why in KNOWN:
        if re.search(pattern, name):
            return why
    return ""


def unexpected(got: list[tuple[str, str, str]], isolation: bool = False) -> list[str]:
    """The failed tests that are not known limitations (KNOWN) nor, with
    isolation, across namespaces (CROSS_NAMESPACE)."""
    return [n for n, s, _ in got if s == "failed" and not why_known(n, isolation)]


def table(got: list[tuple[str, str, str]], focus: str, isolation: bool = False) -> str:
    """Markdown: counts, then every test that ran or was skipped by our patterns."""
    ran = [g for g in got if g[1] != "skipped"]
    ran_names = {n for n, _, _ in ran}
    # each process's report lists every test it did not run: one row per test
    ours = sorted({(n, why_skipped(n)) for n, s, _ in got if s == "skipped" and n not in ran_names
                   and re.search(focus, n) and why_skipped(n)})
    failed, bad = sum(s == "failed" for _, s, _ in ran), len(unexpected(got, isolation))
    lines = ["| passed | failed | skipped by the patterns below |", "|---|---|---|",
             f"| {sum(s == 'passed' for _, s, _ in ran)} | {bad} (+ {failed - bad} known) "
             f"| {len(ours)} |", "", "| test | result |", "|---|---|"]
    def result(n, s, m):
        known = why_known(n, isolation) if s == "failed" else ""
        return f"{s}{f' (known: {known})' if known else ''}{': ' + m.splitlines()[0] if m else ''}"
    lines += [f"| {n} | {result(n, s, m)} |" for n, s, m in ran]
    lines += [f"| {n} | skipped: {why} |" for n, why in ours]
    return "\n".join(lines)


def e2e_argv(report: str, focus: str, skip: str) -> tuple[list[str], dict]:
    """e2e.test's command line (without --kubeconfig) and environment."""
    e2e = os.path.join(CACHE, "e2e.test")
    if not os.access(e2e, os.X_OK):
        raise SystemExit(f"{e2e} missing: run hack/build-conformance.sh (make conformance does)")
    repo_list = os.path.join(report, "repo-list.yaml")
    with open(repo_list, "w") as f:
        f.write(REPO_LIST)
    argv = [e2e, "--provider=skeleton", f"--kubectl-path={bins.path('kubectl')}",
            "--disable-log-dump=true", f"--report-dir={report}", "--ginkgo.noColor",
            f"--ginkgo.focus={focus}", f"--ginkgo.skip={skip or skip_regex()}"]
    env = {**os.environ, "KUBE_TEST_REPO_LIST": repo_list,
           "PATH": f"{bins.bin_dir()}:{os.environ.get('PATH', '')}"}
    return argv, env


def selected(report: str, focus: str = FOCUS, skip: str = "") -> list[str]:
    """The names of the tests the focus and skip select (e2e.test's dry run)."""
    os.makedirs(report, exist_ok=True)
    argv, env = e2e_argv(report, focus, skip)
    cp = subprocess.run([*argv, "--ginkgo.dryRun", "--kubeconfig=/dev/null"], env=env,
                        capture_output=True, text=True)
    # a dry run "passes" every selected test: one JSON progress line each
    return sorted(json.loads(ln[ln.index("{"):])["msg"].split(" ", 1)[1]
                  for ln in cp.stdout.splitlines() if '{"msg":"PASSED ' in ln)


def exactly(names: list[str]) -> str:
    """A ginkgo (Go RE2) focus that selects exactly these tests by full name
    (ginkgo matches "[Top Level] " + the name)."""
    def esc(name: str) -> str:
        return re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", name)
    return r"\] (" + "|".join(esc(n) for n in names) + ")$"


def shards(names: list[str], n: int) -> list[list[str]]:
    """`names` dealt into at most n non-empty shards, alike in size."""
    return [part for part in (names[i::n] for i in range(n)) if part]


def run_in(sb, report: str, focus: str = FOCUS, skip: str = "",
           isolation: bool = False, parallel: int = 1) -> list[tuple[str, str, str]]:
    """Run the selection against the sandbox `sb` (kubelet nodes, up): agnhost
    imported, the controllers restarted with --no-isolation unless `isolation`;
    the results (results()), the JUnit report and e2e.log in `report`.  With
    `parallel` > 1 the selection is dealt into that many e2e.test processes side
    by side (as ginkgo -p does: the tests make their own namespaces; [Serial]
    ones are skipped), each with its own report directory report/shard-N."""
    from pacific.sandbox.controllers import start_for_sandbox
    from pacific.sandbox.k8s import kubelet
    from pacific.sandbox.k8s.sandbox import kubeconfig_path
    shutil.rmtree(report, ignore_errors=True)
    os.makedirs(report)
    runs = [(report, focus)]
    if parallel > 1:
        parts = shards(selected(report, focus, skip), parallel)
        runs = [(os.path.join(report, f"shard-{i + 1}"), exactly(p)) for i, p in enumerate(parts)]
        for d, _ in runs:
            os.makedirs(d)
    kc = kubeconfig_path(sb)
    if not isolation:
        for tag in ("controller1", "controller2"):
            sb.stop(tag)
        start_for_sandbox(sb, kc, extra_args=("--no-isolation",))
    kubelet.import_image(sb, agnhost_archive(), AGNHOST)
    hosts = os.path.join(report, "hosts")
    with internet_stub() as stub:
        with open("/etc/hosts") as f, open(hosts, "w") as out:
            out.write(f.read().rstrip("\n") + f"\n{stub} {INTERNET}\n")
        procs = []
        for d, f in runs:
            argv, env = e2e_argv(d, f, skip)
            with open(os.path.join(d, "e2e.log"), "w") as log:
                # its own mount namespace, where /etc/hosts names the stub
                procs.append(subprocess.Popen(
                    ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                     'mount --bind "$0" /etc/hosts && exec "$@"', hosts,
                     *argv, f"--kubeconfig={kc}"],
                    stdout=log, stderr=subprocess.STDOUT, env=env))
        for p in procs:
            p.wait()
    return [g for d, _ in runs for g in results(d)]


@contextlib.contextmanager
def internet_stub():
    """An HTTP server on a loopback address, port 80, for the check the "[sig-network]
    Networking" tests make before each test, from e2e.test itself (GET
    http://google.com): the sandbox sends nothing to the Internet."""
    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):       # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")

        def log_message(self, *args):
            pass
    srv = None
    for last in range(1, 255):       # a loopback address of its own: runs side by side
        try:
            srv = http.server.ThreadingHTTPServer((f"127.0.80.{last}", 80), Ok)
            break
        except OSError:
            continue
    if srv is None:
        raise SystemExit("no free loopback address 127.0.80.1-254 for port 80")
    threading.Thread(target=srv.serve_forever, name="internet-stub", daemon=True).start()
    try:
        yield srv.server_address[0]
    finally:
        srv.shutdown()
        srv.server_close()


def run(args) -> int:
    from pacific.sandbox.cluster import Sandbox
    report = os.path.abspath(args.report_dir)
    if args.dry_run:
        picked = selected(report, args.focus, args.skip)
        print("\n".join(picked) + f"\n{len(picked)} tests selected")
        return 0
    sb = Sandbox(args.name, nodes=args.nodes, kubelet=True)
    t0 = time.monotonic()
    print(f"conformance: sandbox {args.name} ({args.nodes} kubelet nodes) coming up; then "
          f"e2e.test (isolation {'on' if args.isolation else 'off'}), log {report}/e2e.log",
          flush=True)
    try:
        sb.up()
        got = run_in(sb, report, args.focus, args.skip, args.isolation, args.parallel)
    finally:
        if not args.keep:
            sb.down()
    out = table(got, args.focus, args.isolation)
    with open(os.path.join(report, "summary.md"), "w") as f:
        f.write(out + "\n")
    print(out)
    print(f"conformance: {time.monotonic() - t0:.0f} s; report {report}")
    return 1 if unexpected(got, args.isolation) or not got else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pacific.sandbox.conformance",
        description="Run Kubernetes v1.20.2's own [sig-network] end-to-end tests (e2e.test, "
                    "built by hack/build-conformance.sh) against a sandbox of kubelet nodes "
                    "running Pacific, and print what passed, failed and was skipped (why: "
                    "docs/conformance.md).")
    p.add_argument("--focus", default=FOCUS, help="ginkgo focus regex (default: %(default)s)")
    p.add_argument("--skip", default="", help="ginkgo skip regex (default: the patterns of "
                   "docs/conformance.md)")
    p.add_argument("--isolation", action="store_true",
                   help="keep tenant isolation on (its failures are the tests that expect "
                        "pods of different namespaces to talk)")
    p.add_argument("--name", default="conf", help="sandbox name (default %(default)s)")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--report-dir", default="_output/conformance")
    p.add_argument("--parallel", type=int, default=3, metavar="N",
                   help="run the selection as N e2e.test processes side by side (default "
                        "%(default)s: the 79 tests in about 36 minutes on 2 cores; 1: one "
                        "at a time, about 1.8 minutes a test)")
    p.add_argument("--keep", action="store_true", help="leave the sandbox up")
    p.add_argument("--dry-run", action="store_true", help="list the selected tests only")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
