"""Counts observed on the request path reach Redis batched: one write a period at most."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


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
