"""Gauges read from the shared Redis at scrape time (real redis-server)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.observability.gauges import (
    playbook_sizes,
    refresh_gauges,
    trace_queue_depth,
    trace_queue_depths,
)
from gateway.observability.metrics import Metrics
from gateway.store import keys


@pytest.fixture
async def fresh_redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url.rsplit("/", 1)[0] + "/11")
    await client.flushdb()
    yield client
    await client.flushdb()
    await client.aclose()


async def test_queue_depth_counts_pending_and_undelivered(fresh_redis: aioredis.Redis) -> None:
    assert await trace_queue_depth(fresh_redis) == 0  # no stream at all
    for n in range(5):
        await fresh_redis.xadd(keys.TRACE_STREAM, {"n": n})
    await fresh_redis.xgroup_create(keys.TRACE_STREAM, keys.TRACE_GROUP, id="0")
    read = await fresh_redis.xreadgroup(keys.TRACE_GROUP, "w1", {keys.TRACE_STREAM: ">"},
                                        count=2)
    first_id = read[0][1][0][0]
    await fresh_redis.xack(keys.TRACE_STREAM, keys.TRACE_GROUP, first_id)
    assert await trace_queue_depth(fresh_redis) == 4  # 1 pending + 3 never delivered


async def test_playbook_sizes_sum_tenants_per_class(fresh_redis: aioredis.Redis) -> None:
    for tenant, task_class, n in (("a", "code", 3), ("b", "code", 2), ("a", "sql", 1)):
        await fresh_redis.sadd(keys.PLAYBOOK_INDEX, f"{tenant}/{task_class}")
        await fresh_redis.hset(keys.playbook_bullets(tenant, task_class),
                               mapping={f"x-{i:05d}": "{}" for i in range(n)})
    assert await playbook_sizes(fresh_redis) == {"code": 5, "sql": 1}
    metrics = Metrics()
    await refresh_gauges(fresh_redis, metrics)
    assert metrics.playbook_bullets.labels("code")._value.get() == 5


async def test_refresh_reads_every_trace_shard(fresh_redis: aioredis.Redis) -> None:
    """`ctxgate_trace_queue_depth` (no labels) is the whole queue over every shard; each
    shard on `ctxgate_trace_shard_depth{shard}`; a shard with no stream yet counts 0."""
    for shard, n in ((0, 2), (1, 3), (3, 4)):  # shard 2 never written
        stream = keys.trace_stream(shard)
        for i in range(n):
            await fresh_redis.xadd(stream, {"n": i})
        await fresh_redis.xgroup_create(stream, keys.TRACE_GROUP, id="0")
    read = await fresh_redis.xreadgroup(keys.TRACE_GROUP, "w1", {keys.trace_stream(3): ">"},
                                        count=1)
    await fresh_redis.xack(keys.trace_stream(3), keys.TRACE_GROUP, read[0][1][0][0])
    assert await trace_queue_depths(fresh_redis, 4) == [2, 3, 0, 3]
    metrics = Metrics()
    await refresh_gauges(fresh_redis, metrics, trace_shards=4)
    assert metrics.trace_queue_depth._value.get() == 8
    assert [metrics.trace_shard_depth.labels(str(s))._value.get() for s in range(4)] == [2, 3, 0, 3]
    await refresh_gauges(fresh_redis, metrics)  # one shard: the unsharded stream alone
    assert metrics.trace_queue_depth._value.get() == 2
    exposed = metrics.exposition().decode()
    assert "ctxgate_trace_queue_depth 2.0" in exposed
    assert 'ctxgate_trace_shard_depth{shard="1"} 3.0' in exposed


def test_worker_failure_counts_the_interface_metric_and_its_shard() -> None:
    metrics = Metrics()
    metrics.worker_failure("error", 2)
    metrics.worker_failure("error", 0, 3)
    assert metrics.worker_failures.labels("error")._value.get() == 4  # labels: reason only
    assert metrics.trace_shard_failures.labels("2", "error")._value.get() == 1
    assert metrics.trace_shard_failures.labels("0", "error")._value.get() == 3


async def test_metrics_endpoint_reads_the_configured_shards(fresh_redis: aioredis.Redis) -> None:
    """The admin side's scrape (`GET /metrics`) reads `learner.trace_shards` streams, not
    only shard 0."""
    from types import SimpleNamespace
    from typing import Any

    from gateway.api.health import MetricsEndpoint
    from gateway.settings import Settings

    for shard in range(3):
        await fresh_redis.xadd(keys.trace_stream(shard), {"n": shard})
    settings = Settings().model_copy(update={"learner": {"trace_shards": 3}})
    services: Any = SimpleNamespace(redis=fresh_redis, metrics=Metrics(), settings=settings)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    await MetricsEndpoint(services)({"type": "http", "method": "GET"}, receive, send)
    body = b"".join(m.get("body", b"") for m in sent).decode()
    assert "ctxgate_trace_queue_depth 3.0" in body  # no group yet: the streams' lengths
    assert all(f'ctxgate_trace_shard_depth{{shard="{s}"}} 1.0' in body for s in range(3))


def test_learner_child_relays_shard_failures() -> None:
    """The in-process learner's child records failures through `MetricRelay`s: both the
    INTERFACE.md counter and the per-shard one reach the gateway's registry."""
    import multiprocessing

    from gateway.learner.process import RELAYED, MetricRelay, apply_metric

    child, gateway = Metrics(), Metrics()
    ours, theirs = multiprocessing.Pipe()
    for name in RELAYED:
        setattr(child, name, MetricRelay(name, theirs))
    child.worker_failure("malformed_output", 1)
    while ours.poll(0.5):
        apply_metric(gateway, ours.recv())
    assert gateway.worker_failures.labels("malformed_output")._value.get() == 1
    assert gateway.trace_shard_failures.labels("1", "malformed_output")._value.get() == 1
