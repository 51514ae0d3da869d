"""A trace is queued for the workers only once it is stored, on a Redis Cluster too.

On a cluster the trace stream and a tenant's keys live on different nodes, so one
pipeline's writes to both land in no set order: an entry the workers read before its trace
was stored was learned as an expired trace, acknowledged, and claimed the trace
(`keys.trace_learned`), so the entry the write-back queued again was skipped as a duplicate
and the step's citation credit was lost (seen once as a bullet one credit short after a
primary was killed, tests/store/test_cluster_learning.py). Here the tenant's node is down
while the trace is written, the stream's node up: the worst case of that race, on cue."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.cluster import RedisCluster

from gateway.learner import traces
from gateway.learner.traces import TraceSink
from gateway.learner.worker import RETRY_S, STORE_ERRORS, run_worker
from gateway.playbook.bullet import Operation
from gateway.playbook.store import PlaybookStore
from gateway.services import Services
from gateway.store import keys
from gateway.store.client import connect
from tests.harness import Upstream
from tests.learner.conftest import failed_step_event, make_services, make_settings
from tests.store.cluster import LocalCluster


def _apart(client: RedisCluster) -> str:
    """A tenant whose keys live on another node than the (one-shard) trace stream's."""
    stream = client.get_node_from_key(keys.TRACE_STREAM).port
    while True:
        tenant = "t" + uuid.uuid4().hex[:8]
        if client.get_node_from_key(keys.playbook_meta(tenant, "code")).port != stream:
            return tenant


async def _drain(services: Services) -> None:
    """Burst workers until the queue is empty, a restarted node's stale connection waited
    out as the long-running worker waits it out (`worker._consume`): once."""
    for attempt in range(2):
        try:
            await run_worker(services, stop=asyncio.Event(), burst=True, consumer="c1")
            return
        except STORE_ERRORS:
            if attempt:
                raise
            await asyncio.sleep(RETRY_S)


async def _helpful(redis: aioredis.Redis, tenant: str, bullet_id: str) -> int:
    bullet = await PlaybookStore(redis).get(tenant, "code", bullet_id)
    assert bullet is not None
    return bullet.helpful


async def test_a_trace_stored_while_its_node_is_down_is_credited_once(
        tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch) -> None:
    # The held traces are written back when the test says (`flush`), not on a timer.
    monkeypatch.setattr(traces, "RETRY_FIRST_S", 3600.0)
    cluster = LocalCluster(tmp_path / "cluster").start()
    lookup = RedisCluster.from_url(cluster.url)
    settings = make_settings(upstream, ("r-" + uuid.uuid4().hex[:6], "c-x"), tmp_path,
                             redis_url=cluster.url, redis_cluster=True, redis_timeout_s=1.0)
    gateway_redis, worker_redis = connect(settings), connect(settings)
    services = make_services(settings, worker_redis, tmp_path)
    sink = TraceSink(gateway_redis)
    try:
        tenant = _apart(lookup)
        [added] = await PlaybookStore(gateway_redis).merge(tenant, "code", [
            Operation("ADD", "seed", section="tool_usage", content="Run pytest -x.")])
        await _drain(services)  # the group
        port = lookup.get_node_from_key(keys.playbook_meta(tenant, "code")).port
        [node] = [n for n in cluster.nodes if n.port == port]

        node.kill()  # the tenant's node: its trace cannot be stored, the stream answers
        sink.publish(failed_step_event(tenant, "tr-cited", injected=[added.bullet_id],
                                       said=f"Per [{added.bullet_id}] I run pytest -x.",
                                       tool_output="5 passed in 0.1s"))
        await sink.flush()
        assert sink.pending == 1  # held through the outage
        node.start()
        cluster.wait_ok()

        # The workers take what is queued before the trace is written back ...
        await _drain(services)
        await sink.flush()
        assert sink.pending == 0
        # ... and what the write-back queued: the citation is credited, and only once.
        for _ in range(2):
            await _drain(services)
            assert await _helpful(gateway_redis, tenant, added.bullet_id) == 1
        info = await worker_redis.xpending(keys.TRACE_STREAM, keys.TRACE_GROUP)
        assert int(info["pending"]) == 0
    finally:
        await sink.aclose(timeout_s=0.5)
        await gateway_redis.aclose()
        await worker_redis.aclose()
        lookup.close()
        cluster.stop()
