"""Session-wide real processes: an embedded Redis, the scripted upstream, the gateway."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.store.embedded import EmbeddedRedis
from tests.harness import Gateway, Upstream, stop

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: EmbeddedRedis) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    stub = Upstream.start(tmp_path_factory.mktemp("upstream"))
    yield stub
    stop(stub.process)


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


@pytest.fixture(scope="session")
def gateway(tmp_path_factory: pytest.TempPathFactory, upstream: Upstream,
            redis_url: str) -> Iterator[Gateway]:
    """The gateway in passthrough auth mode, shared by the whole session."""
    server = Gateway.start(tmp_path_factory.mktemp("gateway"), gateway_env(upstream, redis_url),
                           wait_path="/readyz")  # warm: no test measures the model loading
    yield server
    stop(server.process)
