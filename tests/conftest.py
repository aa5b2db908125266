"""Shared fixtures: sandboxes of real OVN nodes that are always torn down.

    def test_x(sandbox):             # session-wide 3-node sandbox (shared: clean up
        ...                          # the NB rows and test pods your test makes)

    def test_y(sandbox_factory):     # private sandboxes, down()ed at the module's end
        sb = sandbox_factory(nodes=2)

`make test` runs two pytest workers (pytest-xdist, `-n 2 --dist loadgroup`): every
end-to-end module with a Kubernetes sandbox runs on one worker, one module after the
other (group "datapath": they share the session sandbox, and the rates, outages and
failover times they measure assume no other cluster loads the 2 cores); the unit
tests and the modules that set `BESIDE_THE_DATAPATH = True` (an NB ovsdb-server, an
API server or a bare OVN sandbox of their own, nothing timed tighter than a 3 s
lease) run beside them on the other.

PACIFIC_KEEP_SANDBOXES=1 leaves them up after the session (to inspect a failure;
`pacific sandbox down --name NAME` removes each).  Sandbox names are unique per test run (`t<pid><n>`), so runs and other sandboxes
on the machine never collide.  End-to-end tests need root and OVS/OVN (`make setup`:
the build of hack/build-ovs-ovn.sh, Debian's packages for the module that proves
they still work); without them they are skipped with the reason.
"""
from __future__ import annotations

import itertools
import logging
import os
import shutil

import pytest

from pacific import ovsinstall
from pacific.sandbox.daemons import default_install

# the OVS/OVN of hack/build-ovs-ovn.sh (or $PACIFIC_OVS_PREFIX): its programs first
# on PATH for the whole session, before any module looks up a schema or a program;
# a module whose sandbox runs another one (ovs_prefix=...) gets it back at its end
SESSION_OVS = default_install()
ovsinstall.activate(SESSION_OVS)

BESIDE = "beside"
DATAPATH = "datapath"


@pytest.hookimpl(tryfirst=True)   # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            beside = (item.path.parent.name == "unit"
                      or getattr(item.module, "BESIDE_THE_DATAPATH", False))
            item.add_marker(pytest.mark.xdist_group(BESIDE if beside else DATAPATH))


_counter = itertools.count(1)
_REQUIRED = ("ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovn-northd", "ovs-vsctl",
             "ovn-nbctl", "ip", "ethtool")


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "end-to-end sandbox tests need root (network namespaces)"
    missing = [b for b in _REQUIRED if not shutil.which(b)]
    if missing:
        return f"missing binaries for the sandbox: {', '.join(missing)} (run `make setup`)"
    return None


def unique_sandbox_name() -> str:
    return f"t{os.getpid()}{next(_counter)}"


def _factory():
    """Yields `make(nodes=3, services=(), **kw) -> Sandbox` (already up); brings
    down every sandbox it made when resumed or closed."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from pacific.sandbox.cluster import Sandbox
    made: list[Sandbox] = []

    def make(nodes: int = 3, services=(), **kw) -> Sandbox:
        sb = Sandbox(unique_sandbox_name(), nodes=nodes, **kw)
        made.append(sb)
        sb.up(services=services)
        return sb

    try:
        yield make
    finally:      # also when the caller's make() failed and it closes this generator
        try:
            _down_all(made)
        finally:
            ovsinstall.activate(SESSION_OVS)


def _down_all(made) -> None:
    if os.environ.get("PACIFIC_KEEP_SANDBOXES"):   # debugging: inspect after a failure
        logging.getLogger(__name__).warning("keeping sandboxes %s (PACIFIC_KEEP_SANDBOXES)",
                                            [sb.name for sb in made])
        return
    errors = []
    for sb in reversed(made):
        try:
            sb.down()
        except Exception as e:  # keep tearing down the others
            logging.getLogger(__name__).exception("down of %s failed", sb.name)
            errors.append(e)
    if errors:
        raise errors[0]


@pytest.fixture(scope="module")
def sandbox_factory():
    """Factory `make(nodes=3, services=(), **kw) -> Sandbox` (already up); every
    sandbox it made is brought down at the end of the module, even on failure, so
    that no module's daemons load the modules after it.  Call `sb.down()` yourself
    to free it earlier (down is idempotent)."""
    yield from _factory()


@pytest.fixture(scope="session")
def sandbox():
    """One 3-node sandbox (network plus DEFAULT_SERVICES) shared by the session."""
    factory = _factory()
    try:
        yield next(factory)(nodes=3, services=None)
    finally:
        factory.close()
