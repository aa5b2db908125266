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
lease, or a private sandbox whose test measures no time) run beside them on the
other.  On the datapath worker the modules that set `MEASURES_TIME = True` (rates,
outages, failovers) run last, when the other worker is done with its sandboxes.

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


# Sandboxes by profile: the modules that declare one (SANDBOX_PROFILE) run one
# after another on one sandbox of it, up for the profile's first test and down
# after its last (tests/README.md).  A module-scoped fixture that is
# parametrized by address family names its profile per parameter
# ({param: profile}); a parameter without one runs on the session's sandbox.
PROFILES = {
    "dual-stack": dict(nodes=3, services=None, dual_stack=True),
    "ipv6-only": dict(nodes=3, services=None, ipv6_only=True),
}
_PROFILE = "profile:"


def profile_of(item) -> str | None:
    want = getattr(item.module, "SANDBOX_PROFILE", None)
    if isinstance(want, dict):
        spec = getattr(item, "callspec", None)
        return next((want[v] for v in (spec.params.values() if spec else ())
                     if isinstance(v, str) and v in want), None)
    return want


@pytest.hookimpl(tryfirst=True)   # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        if item.get_closest_marker("xdist_group") is None:
            beside = (item.path.parent.name == "unit"
                      or getattr(item.module, "BESIDE_THE_DATAPATH", False))
            item.add_marker(pytest.mark.xdist_group(BESIDE if beside else DATAPATH))
        profile = profile_of(item)
        if profile is not None:
            if profile not in PROFILES:
                raise pytest.UsageError(f"{item.nodeid}: no sandbox profile {profile!r} "
                                        f"(tests/conftest.py PROFILES: {', '.join(PROFILES)})")
            first.setdefault(profile, i)

    def key(pair):
        """A profile's tests where its first one was; the timed modules last (on
        the datapath worker); the unit tests after the other worker's sandbox
        modules, so that what runs beside the timed modules is light."""
        i, item = pair
        profile = profile_of(item)
        return (getattr(item.module, "MEASURES_TIME", False), item.path.parent.name == "unit",
                first[profile] if profile else i)
    items[:] = [item for _, item in sorted(enumerate(items), key=key)]


def pytest_collection_finish(session):
    """In a worker of `--dist loadgroup`: every test must carry its group, or
    pytest-xdist silently spreads the datapath modules over both workers (as with
    pytest 9.2, pytest-xdist issue 1386: hence pyproject's pin)."""
    if getattr(session.config.option, "loadgroup", False) and not all(
            "@" in item.nodeid for item in session.items):
        raise pytest.UsageError("pytest-xdist did not group the tests (--dist loadgroup): "
                                "this pytest and pytest-xdist do not work together")


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


_LIVE_SHARED: list = []     # the sandboxes up now that several modules share


def _factory(shared: bool = False):
    """Yields `make(nodes=3, services=(), **kw) -> Sandbox` (already up); brings
    down every sandbox it made when resumed or closed.  `shared`: its
    sandboxes are checked for what each test leaves behind."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from pacific.sandbox.cluster import Sandbox
    made: list[Sandbox] = []

    def make(nodes: int = 3, services=(), **kw) -> Sandbox:
        sb = Sandbox(unique_sandbox_name(), nodes=nodes, **kw)
        made.append(sb)
        sb.up(services=services)
        if shared:
            _LIVE_SHARED.append(sb)
        return sb

    try:
        yield make
    finally:      # also when the caller's make() failed and it closes this generator
        try:
            for sb in made:
                if sb in _LIVE_SHARED:
                    _LIVE_SHARED.remove(sb)
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
    factory = _factory(shared=True)
    try:
        yield next(factory)(nodes=3, services=None)
    finally:
        factory.close()


class _Shared:
    """One running set-up of `shared()`: its generator and its sandboxes' factory."""

    def __init__(self) -> None:
        self.factory = self.gen = self.value = None

    def close(self) -> None:
        factory, gen = self.factory, self.gen
        self.factory = self.gen = self.value = None
        try:
            if gen is not None:
                gen.close()          # runs the set-up's own clean-up (its finally)
        finally:
            if factory is not None:
                factory.close()      # brings its sandboxes down


_SHARED: dict[str, _Shared] = {}


@pytest.fixture(scope="session")
def shared():
    """`shared(name, setup)`: one set-up for consecutive tests, across modules.

    `setup(make_sandbox)` is a generator function (`make_sandbox` as from
    `sandbox_factory`) that yields the value once.  Call it from a function-scoped
    fixture called `name`: the first test asking for `name` makes it, and it goes
    (its generator closed, its sandboxes down) after the last test in a row that
    asks for it, so it loads no later module.  A pod-laden sandbox that two modules
    check the same way is brought up once, not twice."""
    def get(name: str, setup):
        s = _SHARED.setdefault(name, _Shared())
        if s.gen is None:
            s.factory = _factory(shared=True)
            try:
                s.gen = setup(next(s.factory))
                s.value = next(s.gen)
            except BaseException:
                s.close()
                raise
        return s.value
    try:
        yield get
    finally:
        for s in _SHARED.values():
            s.close()


@pytest.fixture(scope="session")
def profile_sandbox(shared):
    """`profile_sandbox(name)`: the sandbox of profile `name` (PROFILES), shared
    by the consecutive tests of that profile; the module declares it
    (SANDBOX_PROFILE) and leaves the sandbox as it found it."""
    def get(profile: str):
        def setup(make):
            yield make(**PROFILES[profile])
        return shared(_PROFILE + profile, setup)
    return get


def _close_unneeded(nextitem, profiles: bool) -> None:
    for name, s in _SHARED.items():
        if s.gen is None:
            continue
        if name.startswith(_PROFILE):
            done = profiles and (nextitem is None or profile_of(nextitem) != name[len(_PROFILE):])
        else:
            done = nextitem is None or name not in nextitem.fixturenames
        if done:
            s.close()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    # a module's fixtures are finalized when the next test is in another module;
    # within a module, a parametrized one (another family, another profile) only
    # in the next test's setup: its profile's sandbox goes after that
    _close_unneeded(nextitem, profiles=nextitem is None or nextitem.module is not item.module)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield
    _close_unneeded(item, profiles=True)


def _check_clean(before: dict, what: str, namespaced: bool = True) -> None:
    from sandbox_state import leftovers, snapshot
    problems = []
    for sb, state in before.items():
        if sb in _LIVE_SHARED:
            problems += [f"sandbox {sb.name}: {line}"
                         for line in leftovers(state, snapshot(sb, namespaced))]
    if problems:
        pytest.fail(f"{what} left the shared sandbox changed (clean up in a finally): "
                    + "; ".join(problems), pytrace=False)


def _snapshots(namespaced: bool = True) -> dict:
    from sandbox_state import snapshot
    return {sb: snapshot(sb, namespaced) for sb in _LIVE_SHARED}


@pytest.fixture(autouse=True, scope="module")
def module_leaves_shared_sandboxes_clean(request):
    """A module leaves every shared sandbox that was up before it as it found
    it: no pod, Service, Subnet, ClusterNetworkPolicy or EgressIP of its own,
    no node label changed (checked after its fixtures' teardown: this fixture
    is set up first and torn down last)."""
    before = _snapshots()
    yield
    _check_clean(before, f"module {request.module.__name__}")


@pytest.fixture(autouse=True)
def leaves_shared_sandboxes_clean(request):
    """Each test leaves every shared sandbox (the session's, `shared()`'s, a
    profile's) as it found it cluster-wide: no Subnet, ClusterNetworkPolicy or
    EgressIP of its own, no node label changed.  What it made in its module's
    namespaces (pods, Services) the module removes with them, checked above."""
    before = _snapshots(namespaced=False)
    yield
    _check_clean(before, request.node.nodeid, namespaced=False)
