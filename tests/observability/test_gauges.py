"""Gauges read from the shared Redis at scrape time (real redis-server)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.observability.gauges import playbook_sizes, refresh_gauges, trace_queue_depth
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
