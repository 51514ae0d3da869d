"""Session-wide resources: an embedded Redis, the scripted upstream, the gateway (real
processes), and the embedding model loaded in this process.

Each starts once, before the first test, when a collected test needs it
(`pytest_collection_finish`), and stops when the session ends. A start is bounded by its own
work (`tests/harness.py`'s `wait_until_up`: CPU used, CPU idle), not by the test that
happens to need it first: pytest-timeout counts a fixture's set-up in the test's 300 s, and
on a loaded 2-core CI machine the gateway's start (its model load, ~15 CPU-s) took 128 s
of one test's set-up (bench/README.md, "CI reliability: the gateway's model load"). What
each start took is printed; a start that failed fails every test that needs it, saying why.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gateway.embeddings import Embedder, load_model
from gateway.store.embedded import EmbeddedRedis
from tests.harness import Gateway, Upstream, cpu_seconds, stop

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

    def get(self, name: str) -> Any:
        if name in self.failed:
            pytest.fail(f"the session's {name} did not start before the tests: "
                        f"{self.failed[name]}", pytrace=False)
        found = getattr(self, name)
        if found is None:  # not foreseen from the collected tests' fixtures
            pytest.fail(f"the session's {name} was not started up front", pytrace=False)
        return found

    def stop(self) -> None:
        if self.gateway is not None:
            stop(self.gateway.process)
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


def pytest_collection_finish(session: pytest.Session) -> None:
    resources = session.config.stash[RESOURCES] = SessionResources()
    if session.config.option.collectonly:
        return
    names = {name for item in session.items for name in getattr(item, "fixturenames", ())}
    wanted = {NEEDS[name] for name in names if name in NEEDS}
    if "gateway" in wanted:
        wanted |= {"redis", "upstream"}
    if wanted:
        _start(session.config, resources, wanted)


def _start(config: pytest.Config, resources: SessionResources, wanted: set[str]) -> None:
    factory: pytest.TempPathFactory = config._tmp_path_factory  # the `tmp_path_factory`'s
    clock = time.monotonic()
    if "redis" in wanted:
        resources.redis = _attempt(resources, "redis", lambda: EmbeddedRedis(
            factory.mktemp("redis")).start())
    if "upstream" in wanted:
        resources.upstream = _attempt(resources, "upstream", lambda: Upstream.start(
            factory.mktemp("upstream")))
    spawned: Gateway | None = None
    if "gateway" in wanted:
        if resources.redis is None or resources.upstream is None:
            resources.failed["gateway"] = "it needs the session's Redis and upstream"
        else:
            env = gateway_env(resources.upstream, resources.redis.url)
            spawned = Gateway.spawn(factory.mktemp("gateway"), env)
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
        else:
            resources.took[-1] += f" more, {cpu_seconds(spawned.process.pid):.1f} CPU-s in all"
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"session resources started in {time.monotonic() - clock:.1f} s "
                            f"(load {os.getloadavg()[0]:.1f}): {'; '.join(resources.took)}")
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
