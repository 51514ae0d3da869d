"""Counts observed on the request path reach Redis batched: one write a period at most."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import redis.asyncio as aioredis

K = TypeVar("K")
V = TypeVar("V")


class FlushSoon:
    """Calls `flush` `after_s` seconds after the first `schedule()` since its last run, so
    a request only adds to an in-memory batch and never waits on Redis."""

    def __init__(self, flush: Callable[[], Awaitable[None]], after_s: float) -> None:
        self._flush = flush
        self._after_s = after_s
        self._task: asyncio.Task[None] | None = None

    def schedule(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        await asyncio.sleep(self._after_s)
        await self._flush()


class BatchedCounts(Generic[K, V]):
    """Counts kept in memory per key (`_unsent`) and written in one pipeline by `flush`,
    `after_s` after the first one since the last write; `_write` queues one key's."""

    def __init__(self, redis: aioredis.Redis | None, after_s: float) -> None:
        self._redis = redis
        self._unsent: dict[K, V] = {}
        self._flusher = FlushSoon(self.flush, after_s)

    def _write(self, pipe: Any, key: K, counts: V) -> None:
        raise NotImplementedError

    async def _written(self, unsent: dict[K, V], results: list[Any]) -> None:
        """What the pipeline answered for `unsent` (`_write`'s commands, in order)."""

    async def flush(self) -> None:
        """Write the counts observed so far (at shutdown, and in tests and benches)."""
        unsent, self._unsent = self._unsent, {}
        if self._redis is None or not unsent:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for key, counts in unsent.items():
                    self._write(pipe, key, counts)
                results = await pipe.execute()
            await self._written(unsent, results)
        except Exception:  # advisory counts: a lost batch only slows what learns from them
            return
