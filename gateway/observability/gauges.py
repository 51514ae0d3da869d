"""Gauges of shared state, read from Redis when /metrics is scraped.

The trace queue and the playbooks live in Redis, shared by every replica and worker, so
these are read at scrape time (a few commands) rather than tracked by whichever process
happened to change them last.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError

from gateway.store import as_text, keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.observability.metrics import Metrics

_LAG_SCAN_LIMIT = 10_000  # Redis 6.2 reports no lag: count undelivered entries up to this


async def trace_queue_depth(redis: aioredis.Redis, stream: str = keys.TRACE_STREAM) -> int:
    """Trace events of one shard's stream not yet acknowledged by the learners (pending +
    not yet delivered)."""
    try:
        groups = await redis.xinfo_groups(stream)
    except ResponseError:  # no stream yet
        return 0
    for group in groups:
        if as_text(group.get("name")) != keys.TRACE_GROUP:
            continue
        pending = int(group.get("pending") or 0)
        if group.get("lag") is not None:  # Redis 7+
            return pending + int(group["lag"])
        last = as_text(group.get("last-delivered-id") or "0-0")
        undelivered = await redis.xrange(stream, min=f"({last}", max="+",
                                         count=_LAG_SCAN_LIMIT)
        return pending + len(undelivered or [])
    return int(await redis.xlen(stream))


async def playbook_sizes(redis: aioredis.Redis) -> Counter[str]:
    """Bullets stored per task class, summed over tenants."""
    namespaces = [as_text(m) for m in await redis.smembers(keys.PLAYBOOK_INDEX)]
    if not namespaces:
        return Counter()
    async with redis.pipeline(transaction=False) as pipe:
        for ns in namespaces:
            tenant, _, task_class = ns.partition("/")
            pipe.hlen(keys.playbook_bullets(tenant, task_class))
        sizes = await pipe.execute()
    totals: Counter[str] = Counter()
    for ns, size in zip(namespaces, sizes, strict=True):
        totals[ns.partition("/")[2]] += int(size)
    return totals


async def trace_queue_depths(redis: aioredis.Redis, shards: int = 1) -> list[int]:
    """`trace_queue_depth` of every shard's stream, shard 0 first."""
    return [await trace_queue_depth(redis, keys.trace_stream(shard)) for shard in range(shards)]


def set_queue_depths(metrics: Metrics, depths: list[int]) -> None:
    """The whole queue on `ctxgate_trace_queue_depth` (no labels, as INTERFACE.md fixes it),
    each shard on `ctxgate_trace_shard_depth{shard}`."""
    metrics.trace_queue_depth.set(sum(depths))
    for shard, depth in enumerate(depths):
        metrics.trace_shard_depth.labels(str(shard)).set(depth)


async def refresh_gauges(redis: aioredis.Redis, metrics: Metrics, trace_shards: int = 1) -> None:
    """Every shard of the trace queue (`learner.trace_shards`) and the playbook sizes."""
    set_queue_depths(metrics, await trace_queue_depths(redis, trace_shards))
    for task_class, size in (await playbook_sizes(redis)).items():
        metrics.playbook_bullets.labels(task_class).set(size)
