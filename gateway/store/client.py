"""The one place a Redis client is built from settings (gateway, worker, learner, CLI).

`CTXGATE_REDIS_CLUSTER=true` makes it a `RedisCluster`: `CTXGATE_REDIS_URL` names any one
node and the client discovers the others. The gateway uses only what both clients offer:
single-key commands, non-transactional pipelines, and Lua scripts and transactions whose
keys share one hash tag (see keys.py), so the rest of the code types it as `Redis`.
"""

from __future__ import annotations

from typing import cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

from gateway.settings import Settings
from gateway.store.embedded import resolve_redis_url


def connect(settings: Settings) -> aioredis.Redis:
    """An async client for the configured Redis (or Redis Cluster, or embedded server)."""
    if settings.redis_cluster:
        if not settings.redis_url:
            raise RuntimeError("CTXGATE_REDIS_CLUSTER=true needs CTXGATE_REDIS_URL (one node)")
        # Same command surface for everything the gateway calls (see the module docstring).
        return cast(aioredis.Redis, RedisCluster.from_url(settings.redis_url))
    return aioredis.from_url(resolve_redis_url(settings.redis_url, settings.data_dir))
