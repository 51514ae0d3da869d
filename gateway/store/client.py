"""The one place a Redis client is built from settings (gateway, worker, learner, CLI).

`CTXGATE_REDIS_CLUSTER=true` makes it a `RedisCluster`: `CTXGATE_REDIS_URL` names any one
node and the client discovers the others. The gateway uses only what both clients offer:
single-key commands, non-transactional pipelines, and Lua scripts and transactions whose
keys share one hash tag (see keys.py), so the rest of the code types it as `Redis`.

Every client connects and reads within `CTXGATE_REDIS_TIMEOUT_S`: a Redis that hangs raises
`TimeoutError` (one of `STORE_DOWN`) like one that is down, and the timed-out connection is
dropped, not reused. A blocking command must block for less (`blocking_ms`).

A command that finds its pooled connection closed (the server restarted since it was last
used: its first use fails with `ConnectionError`) is sent once more on a new connection,
so a Redis that restarted is answered at once instead of failing one request per stale
connection (an admin route's 503). Not on a timeout: that would double a hung Redis's wait.
"""

from __future__ import annotations

from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException

from gateway.settings import Settings
from gateway.store.embedded import resolve_redis_url


def connect(settings: Settings) -> aioredis.Redis:
    """An async client for the configured Redis (or Redis Cluster, or embedded server)."""
    timeouts = {"socket_timeout": settings.redis_timeout_s,
                "socket_connect_timeout": settings.redis_timeout_s}
    if settings.redis_cluster:
        if not settings.redis_url:
            raise RuntimeError("CTXGATE_REDIS_CLUSTER=true needs CTXGATE_REDIS_URL (one node)")
        # Same command surface for everything the gateway calls (see the module docstring).
        return cast(aioredis.Redis, FailoverCluster.from_url(settings.redis_url, **timeouts))
    return aioredis.from_url(resolve_redis_url(settings.redis_url, settings.data_dir),
                             retry=stale_connection_retry(), **timeouts)


def stale_connection_retry() -> Retry:
    """One more try, on a new connection, of a command whose connection was closed."""
    return Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))


def blocking_ms(settings: Settings, wanted_ms: int) -> int:
    """How long a blocking command (XREADGROUP BLOCK) may block: `wanted_ms`, but at most
    half the socket timeout, so that an idle wait is never taken for a hung Redis."""
    return max(1, min(wanted_ms, int(settings.redis_timeout_s * 500)))


def torn_down(error: BaseException) -> bool:
    """Whether `error` is redis-py's own AttributeError/TypeError from a connection torn
    down under a command (see the module docstring): raised in a frame of redis-py."""
    if not isinstance(error, (AttributeError, TypeError)):
        return False
    frame = error.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and str(frame.tb_frame.f_globals.get("__name__")).startswith(
        "redis.")


def _as_connection_error(error: AttributeError | TypeError) -> RedisConnectionError:
    return RedisConnectionError(f"connection torn down under a command: {error}")


class FailoverCluster(RedisCluster):
    """The cluster client, its connection torn down under a command raised as the
    `ConnectionError` it is (see the module docstring)."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().execute_command(*args, **kwargs)
        except (AttributeError, TypeError) as error:
            if not torn_down(error):
                raise
            raise _as_connection_error(error) from error

    def pipeline(self, transaction: Any | None = None,
                 shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:  # as RedisCluster.pipeline
            raise RedisClusterException("shard_hint is deprecated in cluster mode")
        return FailoverPipeline(self, transaction)  # type: ignore[abstract]  # as redis-py does


class FailoverPipeline(ClusterPipeline):
    """A cluster pipeline whose torn-down connection is a `ConnectionError`."""

    async def execute(self, raise_on_error: bool = True,
                      allow_redirections: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error, allow_redirections)
        except (AttributeError, TypeError) as error:
            if not torn_down(error):
                raise
            raise _as_connection_error(error) from error
