"""deploy/Containerfile (it cannot be built here: no container daemon, no
registry): what the components execute is installed in the final stage, and
what it copies exists."""
import ast
import re
import shlex
import shutil
import subprocess

import pytest

from deploy_fixtures import DEPLOY
from pacific.node import bootstrap

ROOT = DEPLOY.parent
# Code that runs inside the image (the sandbox and the CLI do not).
IMAGE_CODE = ("pacific/node", "pacific/controller", "pacific/ovn", "pacific/kube", "pacific/ipam")
SUBPROCESS_CALLS = {"run", "Popen", "check_output", "check_call", "call"}


def stages() -> list[list[str]]:
    """The Containerfile's instructions (continuations joined), split per FROM."""
    text = (DEPLOY / "Containerfile").read_text()
    lines = re.sub(r"\\\n", " ", text).splitlines()
    out: list[list[str]] = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            out.append([])
        assert out, "instruction before the first FROM"
        out[-1].append(line)
    return out


def apt_packages(stage: list[str]) -> set[str]:
    pkgs = set()
    for ins in stage:
        for m in re.finditer(r"apt-get install ([^&;]*)", ins):
            pkgs |= {w for w in shlex.split(m.group(1)) if not w.startswith("-")}
    return pkgs


def executed_programs() -> dict[str, str]:
    """program -> where, for every subprocess call with a literal program name
    in the image's code, plus the CNI plugin launcher's interpreter."""
    found = {}
    for pkg in IMAGE_CODE:
        for path in sorted((ROOT / pkg).glob("*.py")):
            if path.name == "launch.py":          # sandbox launchers
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr in SUBPROCESS_CALLS \
                        and isinstance(node.func.value, ast.Name) \
                        and node.func.value.id == "subprocess" and node.args \
                        and isinstance(node.args[0], ast.List) and node.args[0].elts \
                        and isinstance(node.args[0].elts[0], ast.Constant):
                    found[node.args[0].elts[0].value] = \
                        f"{path.relative_to(ROOT)}:{node.lineno}"
    shebang = bootstrap.LAUNCHER.splitlines()[0]
    found[shebang[2:].split()[0]] = "pacific/node/bootstrap.py LAUNCHER (verify_plugin runs it)"
    return found


def owner_package(program: str) -> str:
    path = program if program.startswith("/") else shutil.which(program)
    assert path, f"{program} is not installed on this machine, cannot find its package"
    out = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.split(":")[0]


def depends(package: str) -> set[str]:
    out = subprocess.run(["dpkg-query", "-W", "-f=${Pre-Depends}, ${Depends}", package],
                         capture_output=True, text=True, timeout=30)
    return {re.split(r"[\s(:]", alt.strip())[0] for dep in out.stdout.split(",")
            for alt in dep.split("|") if alt.strip()}


def test_stages_and_copies():
    st = stages()
    assert [s[0].split()[-1] for s in st[:-1]] == ["build", "ovs"], \
        "expected a build stage, an ovs stage and a run stage"
    assert all(s[0].split()[1].startswith("docker.io/library/debian:12") for s in st)
    for stage in st:
        for ins in stage:
            if ins.upper().startswith("COPY ") and "--from=" not in ins:
                *srcs, _dst = shlex.split(ins)[1:]
                for src in srcs:
                    assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
    # the run stage gets the virtualenv the build stage made and finds its commands
    run = " ".join(st[-1])
    assert "COPY --from=build /opt/pacific /opt/pacific" in run
    assert "PATH=/opt/pacific/bin:" in run


def test_current_ovs_and_ovn_at_the_prefix_they_were_built_for():
    """The ovs stage runs the sandbox's build script; the run stage keeps its
    result where the script installed it (the programs' libraries are found by
    that path) and names it to Pacific (PACIFIC_OVS_PREFIX) and on PATH."""
    script = (ROOT / "hack" / "build-ovs-ovn.sh").read_text()
    root = re.search(r"ROOT=\$\{PACIFIC_OVS_CACHE_ROOT:-([^}]+)\}", script).group(1)
    ovs, run = " ".join(stages()[1]), " ".join(stages()[-1])
    assert "/src/hack/build-ovs-ovn.sh" in ovs and "PACIFIC_OVS_CACHE_ROOT" not in ovs
    assert f"COPY --from=ovs {root} {root}" in run
    assert f"PACIFIC_OVS_PREFIX={root}/current" in run
    assert f"{root}/current/bin:{root}/current/sbin" in run


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg to map programs to packages")
def test_every_program_the_components_run_is_installed():
    pkgs = apt_packages(stages()[-1])
    provided = pkgs | {d for p in pkgs for d in depends(p)}
    programs = executed_programs()
    # the daemons fork nothing any more (readiness asks ovn-controller over its
    # control socket); the scan must still see the plugin launcher's interpreter
    assert "/usr/bin/python3" in programs, "the scan no longer sees the launcher"
    missing = {prog: (owner_package(prog), where) for prog, where in programs.items()
               if owner_package(prog) not in provided}
    assert not missing, "the image lacks: " + "; ".join(
        f"{prog} (Debian package {pkg}, run at {where})" for prog, (pkg, where) in missing.items())


def test_python_openvswitch_for_the_c_json_parser():
    """pacific/ovn/cjson.py loads Debian's compiled parser; without it the
    controller spends a third of its CPU parsing JSON."""
    from pacific.ovn import cjson
    assert "python3-openvswitch" in apt_packages(stages()[-1])
    assert "/usr/lib/python3/dist-packages/ovs" in cjson.SYSTEM_DIRS
