"""Session-wide resources: an embedded Redis, the scripted upstream, the gateway (real
processes), and the embedding model loaded in this process.

Each starts once, before the first test, when a collected test needs it
(`pytest_collection_finish`), and stops when the session ends. A start is bounded by its own
work (`tests/harness.py`'s `wait_until_up`: CPU used, CPU idle), not by the test that
happens to need it first: pytest-timeout counts a fixture's set-up in the test's 300 s, and
on a loaded 2-core CI machine the gateway's start (its model load, ~15 CPU-s) took 128 s
of one test's set-up (bench/README.md, "CI reliability: the gateway's model load"). What
each start took is printed; a start that failed fails every test that needs it, saying why.

A module's own gateway (other settings than the session's) is declared with
`@module_gateway`: it starts outside its module's first test's timeout (spawned ahead, while
the tests before it run, when `ahead`; otherwise just before that test), bounded by its
work as the session's, and stops when its module ends (bench/README.md, "CI: a module's
own gateway starts outside its first test's timeout").
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.embeddings import Embedder, load_model
from gateway.store.embedded import EmbeddedRedis
from tests.harness import (
    AHEAD_NICENESS,
    Gateway,
    Upstream,
    cpu_seconds,
    listening,
    stop,
    unnice,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def gateway_env(upstream: Upstream, redis_url: str) -> dict[str, str]:
    return {
        "CTXGATE_UPSTREAM_URL": f"{upstream.url}/v1",
        "CTXGATE_ANTHROPIC_UPSTREAM_URL": upstream.url,
        "CTXGATE_REDIS_URL": redis_url,
        "CTXGATE_LEARNER_URL": f"{upstream.url}/v1",
        "CTXGATE_REFLECTOR_MODEL": "reflector-stub",
        "CTXGATE_CURATOR_MODEL": "curator-stub",
        "CTXGATE_UPSTREAM_TIMEOUT_S": "2",
        "CTXGATE_MAX_BODY_BYTES": "1048576",
        # Shared by every test: no class's caps move under another test's feet
        # (tests/integration/test_forecast_gateway.py turns it on for its own classes).
        "CTXGATE_FORECAST_ADJUST": "false",
        # A loaded 2-core CI machine can take over the shipped 1 s to fit a step call: the
        # tests that assert compaction must not see it go out unmanaged
        # (tests/integration/test_fit_time_budget.py sets its own tiny budget).
        "CTXGATE_FIT_TIMEOUT_S": "60",
    }


@dataclass
class SessionResources:
    """What `pytest_collection_finish` started, and why what it could not start failed."""

    redis: EmbeddedRedis | None = None
    upstream: Upstream | None = None
    gateway: Gateway | None = None
    embedder: Embedder | None = None
    failed: dict[str, str] = field(default_factory=dict)
    took: list[str] = field(default_factory=list)  # one line per start, for the report
    modules: ModuleGateways | None = None  # the collected tests' `@module_gateway`s
    spawned: Gateway | None = None  # the session's gateway, spawned, not yet waited for
    spawned_at: float = 0.0

    def get(self, name: str) -> Any:
        if name in self.failed:
            pytest.fail(f"the session's {name} did not start before the tests: "
                        f"{self.failed[name]}", pytrace=False)
        found = getattr(self, name)
        if found is None:  # not foreseen from the collected tests' fixtures
            pytest.fail(f"the session's {name} was not started up front", pytrace=False)
        return found

    def stop(self) -> None:
        if self.modules is not None:
            self.modules.stop_all()
        if self.spawned is not None:
            stop(self.spawned.process)
        if self.upstream is not None:
            stop(self.upstream.process)
        if self.redis is not None:
            self.redis.stop()
        if self.embedder is not None:
            self.embedder.close()


RESOURCES = pytest.StashKey[SessionResources]()
# Which session resource each fixture name needs (a test's fixture closure names them all).
NEEDS = {"gateway": "gateway", "upstream": "upstream", "redis_server": "redis",
         "redis_url": "redis", "embedder": "embedder"}


def pytest_sessionstart(session: pytest.Session) -> None:
    """A run of the whole suite (no paths given, as `make test`) starts Redis and the
    upstream (~1 s) and spawns the session's gateway before it collects: the gateway's
    model load (~15 CPU-s) then overlaps the collection's imports (~25 CPU-s) on the other
    core. Stopped after the collection if no collected test needs it (`-k`, `-m`)."""
    config = session.config
    resources = config.stash[RESOURCES] = SessionResources()
    if (config.args_source is not pytest.Config.ArgsSource.TESTPATHS
            or config.option.collectonly):
        return
    _servers(config, resources, {"redis", "upstream", "gateway"})


def pytest_collection_finish(session: pytest.Session) -> None:
    resources = session.config.stash.setdefault(RESOURCES, SessionResources())
    if session.config.option.collectonly:
        return
    names = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    wanted = {NEEDS[name] for name in names if name in NEEDS}
    if "gateway" in wanted:
        wanted |= {"redis", "upstream"}
    plans = _module_plans(session.items)
    if plans:
        wanted |= {"redis", "upstream"}
    if resources.spawned is not None and "gateway" not in wanted:
        stop(resources.spawned.process)
        resources.spawned = None
    if wanted:
        _start(session.config, resources, wanted)
    if plans:
        resources.modules = ModuleGateways(session.config, resources, plans)
        resources.modules.spawn_ahead()


def _servers(config: pytest.Config, resources: SessionResources, wanted: set[str]) -> None:
    """Start Redis and the upstream, and spawn the gateway, of `wanted`, unless done."""
    factory: pytest.TempPathFactory = config._tmp_path_factory  # the `tmp_path_factory`'s
    if "redis" in wanted and resources.redis is None and "redis" not in resources.failed:
        resources.redis = _attempt(resources, "redis", lambda: EmbeddedRedis(
            factory.mktemp("redis")).start())
    if ("upstream" in wanted and resources.upstream is None
            and "upstream" not in resources.failed):
        resources.upstream = _attempt(resources, "upstream", lambda: Upstream.start(
            factory.mktemp("upstream")))
    if "gateway" in wanted and resources.spawned is None and "gateway" not in resources.failed:
        if resources.redis is None or resources.upstream is None:
            resources.failed["gateway"] = "it needs the session's Redis and upstream"
        else:
            env = gateway_env(resources.upstream, resources.redis.url)
            resources.spawned = Gateway.spawn(factory.mktemp("gateway"), env)
            resources.spawned_at = time.monotonic()


def _start(config: pytest.Config, resources: SessionResources, wanted: set[str]) -> None:
    clock = time.monotonic()
    ahead = (f" (the gateway spawned {clock - resources.spawned_at:.1f} s before, as the "
             "collection began)" if resources.spawned is not None else "")
    _servers(config, resources, wanted)
    spawned = resources.spawned
    if "embedder" in wanted:  # loads while the gateway's process loads its own copy
        resources.embedder = _attempt(resources, "embedder",
                                      lambda: Embedder(loaded=load_model()))
    if spawned is not None:

        def up() -> Gateway:
            # warm (`/readyz`): no test measures the model loading
            spawned.wait_up("/readyz", name="the session's gateway (`ctxgate serve`)")
            return spawned

        resources.gateway = _attempt(resources, "gateway", up)
        if resources.gateway is None:
            stop(spawned.process)
            resources.spawned = None
        else:
            resources.took[-1] += f" more, {cpu_seconds(spawned.process.pid):.1f} CPU-s in all"
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"session resources started in {time.monotonic() - clock:.1f} s "
                            f"after the collection{ahead} (load {os.getloadavg()[0]:.1f}): "
                            f"{'; '.join(resources.took)}")
        for name, why in resources.failed.items():
            reporter.write_line(f"session {name} FAILED to start: {why}", red=True)


def _attempt(resources: SessionResources, name: str, start: Any) -> Any:
    clock = time.monotonic()
    try:
        started = start()
    except Exception as exc:  # every test that needs it fails with this reason
        resources.failed[name] = f"{type(exc).__name__}: {exc}"
        return None
    resources.took.append(f"{name} {time.monotonic() - clock:.1f} s")
    return started


@dataclass
class ModuleStart:
    """What a `@module_gateway` plan gets: its directory, the session's upstream and Redis,
    and where to note what its tests read (`noted`, also `Gateway.noted`) or register what
    to stop with the gateway (`on_stop`: e.g. a Redis of its own)."""

    workdir: Path
    upstream: Upstream
    redis_url: str
    noted: dict[str, Any] = field(default_factory=dict)
    on_stop: list[Callable[[], None]] = field(default_factory=list)
    niceness: int = 0  # a group spawns its processes at it (`spawn_niced`)
    pids: list[int] = field(default_factory=list)  # a group's processes, un-niced when used


@dataclass(frozen=True)
class Plan:
    """How a module's own gateway starts: `make` returns its environment (on top of the
    harness's), `wait_path` is what must answer, `then` runs right after it answers. A group
    (`module_group`: several processes, e.g. two gateways and two workers) is spawned by
    `make` itself, returning what its fixture yields, and waited for by its own tests;
    `loaded` tells when it no longer loads, `weight` is how many models it loads."""

    name: str  # the fixture's name, as its module names it
    make: Callable[[ModuleStart], Any]
    wait_path: str
    ahead: bool
    then: Callable[[Gateway], None] | None
    loaded: Callable[[Any], bool] | None = None  # a group's; None: a gateway's
    weight: int = 1


@dataclass
class _Started:
    plan: Plan
    start: ModuleStart | None = None
    gateway: Gateway | None = None
    group: Any = None  # what a group's `make` returned
    spawned_at: float = 0.0
    ahead: bool = False  # spawned before its module began (niced until then)
    loaded_at: float = 0.0  # when it was first seen loaded
    in_use: bool = False  # its module began
    up: bool = False
    failure: str = ""
    stopped: bool = False


class ModuleGateways:
    """The collected tests' `@module_gateway`s and `@module_group`s, in the order their
    modules run. Those with `ahead` are spawned before they are needed, niced, so that their
    model loads (~15 CPU-s each) take the CPU the tests before them leave idle: one plan
    loading at a time (`LOADING`, counting one whose tests have begun), and at most `HELD`
    models loaded or loading ahead and not yet in use (each ~0.7 GB). A plan that has loaded
    no longer counts as loading, so the next one starts loading while it waits for its
    module (checked before each test). A
    gateway is waited for (bounded by its work, as the session's) before its module's first
    test, outside that test's timeout; a group by its tests. Each is stopped when its module
    ends (bench/README.md, "CI time, part two")."""

    LOADING = 1  # plans loading ahead at once
    HELD = 5  # models loaded or loading ahead, not yet in use
    POLL_S = 1.0  # how often, at most, a test's start checks whether a plan has loaded

    def __init__(self, config: pytest.Config, resources: SessionResources,
                 plans: list[Plan]) -> None:
        self._factory: pytest.TempPathFactory = config._tmp_path_factory
        self._resources = resources
        self.order = [_Started(plan) for plan in plans]
        self.took: list[str] = []
        self._polled = 0.0
        # A long test (the cluster's: minutes) has no test start to poll at: a thread polls
        # too. Every method that reads or changes the plans holds the lock.
        self._lock = threading.RLock()
        self._ended = threading.Event()
        threading.Thread(target=self._watch, name="module-gateways", daemon=True).start()

    def _watch(self) -> None:
        while not self._ended.wait(self.POLL_S):
            with contextlib.suppress(Exception):  # a failed spawn is kept in its plan
                self.poll()

    def _find(self, plan: Plan) -> _Started:
        return next(started for started in self.order if started.plan is plan)

    def _spawn(self, started: _Started, ahead: bool = False) -> None:
        if started.start is not None:
            return
        upstream, redis = self._resources.upstream, self._resources.redis
        workdir = self._factory.mktemp(started.plan.name)
        if upstream is None or redis is None:
            started.start = ModuleStart(workdir, upstream, "")  # type: ignore[arg-type]
            started.failure = "it needs the session's Redis and upstream, which did not start"
            return
        started.start = ModuleStart(workdir, upstream, redis.url,
                                    niceness=AHEAD_NICENESS if ahead else 0)
        started.ahead = ahead
        try:
            made = started.plan.make(started.start)
            if started.plan.loaded is None:
                started.gateway = Gateway.spawn(workdir / "gateway", made,
                                                niceness=started.start.niceness)
            else:
                started.group = made
        except Exception as exc:
            started.failure = f"{type(exc).__name__}: {exc}"
            return
        started.spawned_at = time.monotonic()

    def _loaded(self, started: _Started) -> bool:
        if started.loaded_at:
            return True
        if started.failure:
            return True  # nothing loads any more
        try:
            if started.plan.loaded is not None:
                done = started.plan.loaded(started.group)
            else:
                assert started.gateway is not None
                done = listening(started.gateway.url) or started.gateway.process.poll() is not None
        except Exception:
            done = True  # its tests will say what is wrong
        if done:
            started.loaded_at = time.monotonic()
        return done

    def spawn_ahead(self) -> None:
        """Spawn the next `ahead` plans, in order, while fewer than `LOADING` plans load
        ahead and the models held ahead stay within `HELD`. A plan not `ahead` is skipped
        (it is spawned when its module begins)."""
        with self._lock:
            self._polled = time.monotonic()
            live = [s for s in self.order if s.start is not None and not s.stopped]
            held = sum(s.plan.weight for s in live if not s.in_use)
            # one still loading in its module's tests counts too: a group's tests wait for
            # their own four loads, under a wall bound, and get the cores to themselves
            loading = sum(1 for s in live if not self._loaded(s))
            for started in self.order:
                if started.start is not None or not started.plan.ahead:
                    continue
                if loading >= self.LOADING or held + started.plan.weight > self.HELD:
                    return
                self._spawn(started, ahead=True)
                loading += 1
                held += started.plan.weight

    def poll(self) -> None:
        """Before each test: a plan loaded ahead lets the next one start loading."""
        with self._lock:
            if time.monotonic() - self._polled >= self.POLL_S:
                self.spawn_ahead()

    def wait(self, plan: Plan) -> None:
        """Before the first test that needs `plan`'s gateway (outside its timeout): spawned
        if not yet, no longer niced, and up. A group is taken by its fixture (`get`)."""
        with self._lock:
            started = self._find(plan)
            if plan.loaded is not None:
                return
            self._spawn(started)
            self._use(started)
            if started.up or started.failure or started.gateway is None:
                return
            ahead = self._ahead_by(started)
            clock = time.monotonic()
            name = f"module gateway `{plan.name}` (`ctxgate serve`, {started.gateway.url})"
            try:
                started.gateway.wait_up(plan.wait_path, name=name)
                if plan.then is not None:
                    plan.then(started.gateway)
            except Exception as exc:
                started.failure = f"{type(exc).__name__}: {exc}"
                self._stop(started)
                return
            started.up = True
            started.gateway.noted.update(started.start.noted)  # type: ignore[union-attr]
            self.took.append(
                f"{plan.name} {time.monotonic() - clock:.1f} s waited before its first test "
                f"({time.monotonic() - started.spawned_at:.1f} s after its spawn, "
                f"{ahead}; {cpu_seconds(started.gateway.process.pid):.1f} CPU-s, "
                f"load {os.getloadavg()[0]:.1f})")

    def _use(self, started: _Started) -> None:
        """Its module began: no longer niced nor counted as held ahead."""
        if started.in_use:
            return
        started.in_use = True
        for pid in self._pids(started):
            unnice(pid)
        self.spawn_ahead()

    def _ahead_by(self, started: _Started) -> str:
        if not started.ahead:
            return "spawned as its module began"
        done = 0.0
        for pid in self._pids(started):
            with contextlib.suppress(OSError, IndexError, ValueError):
                done += cpu_seconds(pid)
        return (f"spawned ahead {time.monotonic() - started.spawned_at:.1f} s before its "
                f"module, {done:.1f} CPU-s done by then")

    def _pids(self, started: _Started) -> list[int]:
        if started.gateway is not None:
            return [started.gateway.process.pid]
        return list(started.start.pids) if started.start is not None else []

    def get(self, plan: Plan) -> Any:
        with self._lock:
            started = self._find(plan)
            if plan.loaded is not None and not started.in_use:  # a group, taken by its fixture
                self._spawn(started)
                self._use(started)
                started.up = not started.failure
                self.took.append(f"{plan.name} (a group of {plan.weight}) "
                                 f"{self._ahead_by(started)}")
            if not started.up:
                why = started.failure or "it was not waited for before the test"
                pytest.fail(f"the module's gateway `{plan.name}` did not start before its first "
                            f"test: {why}", pytrace=False)
            return started.gateway if started.gateway is not None else started.group

    def done(self, plan: Plan) -> None:
        """Its module ended: stop it, and spawn the next ahead."""
        with self._lock:
            self._stop(self._find(plan))
            self.spawn_ahead()

    def _stop(self, started: _Started) -> None:
        if started.stopped:
            return
        started.stopped = True
        if started.gateway is not None:
            stop(started.gateway.process)
        for hook in started.start.on_stop if started.start is not None else ():
            hook()

    def stop_all(self) -> None:
        self._ended.set()
        with self._lock:
            for started in self.order:
                if started.start is not None:
                    self._stop(started)


def module_gateway(*, wait_path: str = "/healthz", ahead: bool = True,
                   then: Callable[[Gateway], None] | None = None) -> Callable[..., Any]:
    """Declares a module's own gateway: decorates `make(start: ModuleStart) -> env` and makes
    a module-scoped fixture of the same name that yields the started `Gateway`. It starts
    outside the module's first test's timeout (`ModuleGateways`); a start that fails fails
    each test of the module with the process, the cause and its log's tail. `ahead=False`
    for a gateway that must not run while other modules' tests do (one that acts on the
    session's Redis by itself, or whose start a test measures)."""
    return _declare(lambda make: Plan(make.__name__, make, wait_path, ahead, then))


def module_group(*, loaded: Callable[[Any], bool], weight: int) -> Callable[..., Any]:
    """Declares a module's group of processes (e.g. two gateways and two workers on one
    Redis): decorates `make(start: ModuleStart) -> group`, which spawns them, not waiting
    (with `start.niceness`; their pids in `start.pids`, their stops in `start.on_stop`), and
    makes a module-scoped fixture of the same name that yields the group. Spawned ahead,
    as a module's gateway; `loaded(group)` tells when its `weight` models have loaded. Its
    tests wait for it to be ready, inside their timeout, as before."""
    return _declare(lambda make: Plan(make.__name__, make, "", True, None, loaded, weight))


def _declare(planned: Callable[[Callable[[ModuleStart], Any]], Plan]) -> Callable[..., Any]:
    def decorate(make: Callable[[ModuleStart], Any]) -> Any:
        plan = planned(make)

        def started(request: pytest.FixtureRequest) -> Iterator[Any]:
            modules = request.config.stash[RESOURCES].modules
            if modules is None:
                pytest.fail(f"`{plan.name}` was not foreseen from the collected tests",
                            pytrace=False)
            yield modules.get(plan)
            modules.done(plan)

        started.ctxgate_plan = plan  # type: ignore[attr-defined]
        started.__doc__ = make.__doc__
        return pytest.fixture(scope="module", name=plan.name)(started)

    return decorate


def _plans_of(item: pytest.Item) -> list[Plan]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [plan for name in item.fixturenames for fixturedef in info.name2fixturedefs.get(name, ())
            if (plan := getattr(fixturedef.func, "ctxgate_plan", None)) is not None]


def _module_plans(items: list[pytest.Item]) -> list[Plan]:
    """The `@module_gateway` and `@module_group` plans the collected tests need, or their
    modules define (a fixture taken by `request.getfixturevalue`, e.g. one per parameter),
    in the order they run."""
    seen: dict[int, Plan] = {}
    for item in items:
        module = getattr(item, "module", None)
        defined = [plan for value in vars(module).values()
                   if isinstance(plan := getattr(value, "ctxgate_plan", None), Plan)
                   ] if module is not None else []
        for plan in [*_plans_of(item), *defined]:
            seen.setdefault(id(plan), plan)
    return list(seen.values())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Before pytest-timeout's timer (its wrapper is inside this one): the module's own
    gateways this test needs are up, or known to have failed."""
    resources = item.config.stash.get(RESOURCES, None)
    if resources is not None and resources.modules is not None:
        for plan in _plans_of(item):
            resources.modules.wait(plan)
        resources.modules.poll()
    return (yield)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    resources = terminalreporter.config.stash.get(RESOURCES, None)
    if resources is not None and resources.modules is not None and resources.modules.took:
        terminalreporter.write_line("module gateways: " + "; ".join(resources.modules.took))


class CpuBoundExceeded(Exception):
    """A `cpu_bound` test used more CPU than its bound."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """A test marked `cpu_bound(cpu_s)` fails once this process has used `cpu_s` CPU-s in it
    (SIGPROF: every thread's CPU, none while idle). Its work is CPU: on a loaded machine its
    wall time is that work times the load, so its bound is the work, as a server start's is
    (`wait_until_up`); its wall `timeout` marker only catches a hang."""
    marker = item.get_closest_marker("cpu_bound")
    if marker is None:
        return (yield)
    limit = float(marker.args[0])

    def exceeded(signum: int, frame: object) -> None:
        raise CpuBoundExceeded(f"{item.nodeid} used over {limit:.0f} CPU-s "
                               f"(load {os.getloadavg()[0]:.1f})")

    previous = signal.signal(signal.SIGPROF, exceeded)
    signal.setitimer(signal.ITIMER_PROF, limit)
    try:
        return (yield)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)


def pytest_sessionfinish(session: pytest.Session) -> None:
    resources = session.config.stash.get(RESOURCES, None)
    if resources is not None:
        resources.stop()


def _resource(request: pytest.FixtureRequest, name: str) -> Any:
    return request.config.stash[RESOURCES].get(name)


@pytest.fixture(scope="session")
def redis_server(request: pytest.FixtureRequest) -> EmbeddedRedis:
    server: EmbeddedRedis = _resource(request, "redis")
    return server


@pytest.fixture(scope="session")
def redis_url(redis_server: EmbeddedRedis) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def upstream(request: pytest.FixtureRequest) -> Upstream:
    stub: Upstream = _resource(request, "upstream")
    return stub


@pytest.fixture(scope="session")
def gateway(request: pytest.FixtureRequest) -> Gateway:
    """The gateway in passthrough auth mode, shared by the whole session."""
    server: Gateway = _resource(request, "gateway")
    return server


@pytest.fixture(scope="session")
def embedder(request: pytest.FixtureRequest) -> Embedder:
    """The embedding model, loaded in this process (shared by the context engine tests)."""
    loaded: Embedder = _resource(request, "embedder")
    return loaded
