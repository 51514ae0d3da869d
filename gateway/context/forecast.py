"""The budget forecast: what one call may spend on input, decided before fitting.

The class's caps, bounded by the model's context window and the output reserve. The reserve
is the request's own `max_tokens` when given, else what the class's completions have needed
(mean + 2 sd of observed sizes, raised by the overflow rate), kept per class in Redis.

Each budget says where it came from (`x-ctxgate-budget-source`, and the explainer's
account): `header` (the client's `x-ctxgate-budget-tokens`); `forecast` when anything
learned from evidence shaped it: the class's caps as the controller moved them
(`adjust.py`), or an output reserve forecast from the class's observed completions;
`config` when only configured values did: the YAML caps, with the configured reserve or
the request's own `max_tokens`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from cachetools import LRUCache

from gateway.context.models import ModelInfo
from gateway.context.taskclass import BudgetSplit, TaskClass
from gateway.store import keys
from gateway.store.batch import BatchedCounts

if TYPE_CHECKING:
    import redis.asyncio as aioredis

MIN_SAMPLES = 5
STATS_TTL_S = 10.0  # how long a replica trusts its copy of a class's stats
FLUSH_EVERY_S = 1.0  # observed completions reach Redis batched, one write a second at most
LOCAL_STATS = 10_000  # (tenant, class) pairs whose stats a replica keeps a copy of
FORECAST_TTL_S = 30 * 86400


@dataclass(frozen=True, slots=True)
class UsageStats:
    calls: int = 0
    completion_sum: float = 0.0
    completion_sumsq: float = 0.0
    overflows: int = 0

    @property
    def needed_reserve(self) -> int | None:
        if self.calls < MIN_SAMPLES:
            return None
        mean = self.completion_sum / self.calls
        var = max(self.completion_sumsq / self.calls - mean * mean, 0.0)
        overflow_rate = self.overflows / self.calls
        return math.ceil((mean + 2 * math.sqrt(var)) * (1 + 2 * overflow_rate))

    @classmethod
    def decode(cls, raw: dict[bytes, bytes]) -> UsageStats:
        return cls(
            int(raw.get(b"calls", 0)),
            float(raw.get(b"sum", 0)),
            float(raw.get(b"sumsq", 0)),
            int(raw.get(b"overflows", 0)),
        )


@dataclass(frozen=True, slots=True)
class Budget:
    input: int  # the most input tokens this call may send, as the engine counts them
    split: BudgetSplit
    source: str = "config"  # header | forecast | config (module docstring)
    stated: int | None = None  # in the provider's tokens, when `input` is an estimate's

    @property
    def provider_tokens(self) -> int:
        """The budget as stated to the client, in the provider's tokens."""
        return self.input if self.stated is None else self.stated

    def scaled(self, scale: float) -> Budget:
        """This budget in estimated tokens, for a model whose provider counts `scale` tokens
        per estimated one (`calibration.py`)."""
        if scale == 1.0:
            return self
        return replace(self, input=max(1, math.floor(self.input / scale)), stated=self.input)


def requested_output(body: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def forecast_budget(
    cls: TaskClass,
    model: ModelInfo,
    body: dict[str, Any],
    stats: UsageStats,
    header_budget: int | None,
    caps_forecast: bool = False,
) -> Budget:
    """`caps_forecast`: the class's caps are the controller's forecast (`adjust.py`), not
    the YAML's."""
    if header_budget is not None:
        return Budget(header_budget, cls.budget, "header")
    requested = requested_output(body)
    learned = caps_forecast
    if requested is not None:
        reserve = requested
    else:
        reserve = max(cls.budget.output_reserve, stats.needed_reserve or 0)
        reserve = min(reserve, model.max_output, model.context_window // 2)
        learned = learned or stats.needed_reserve is not None
    window_room = max(model.context_window - reserve, 1)
    source = "forecast" if learned else "config"
    return Budget(min(cls.budget.total, window_room), cls.budget, source)


class ForecastStore(BatchedCounts[tuple[str, str], list[float]]):
    """Class usage stats in Redis, with a short-lived local copy so a call rarely reads them."""

    def __init__(self, redis: aioredis.Redis | None) -> None:
        # unsent: calls, sum, sum of squares, overflows observed here and not yet in Redis
        super().__init__(redis, FLUSH_EVERY_S)
        # One entry per (tenant, class) seen: tenants are unbounded, so an LRU.
        self._local: LRUCache[tuple[str, str], tuple[float, UsageStats]] = LRUCache(
            maxsize=LOCAL_STATS)

    async def stats(self, tenant: str, task_class: str) -> UsageStats:
        hit = self._local.get((tenant, task_class))
        now = time.monotonic()
        if hit is not None and now - hit[0] < STATS_TTL_S:
            return hit[1]
        stats = UsageStats()
        if self._redis is not None:
            try:
                raw = await self._redis.hgetall(keys.forecast(tenant, task_class))
                stats = UsageStats.decode(cast(dict[bytes, bytes], raw))
            except Exception:  # a forecast is advisory: the class defaults serve meanwhile
                stats = hit[1] if hit else UsageStats()
        self._local[(tenant, task_class)] = (now, stats)
        return stats

    async def observe(
        self, tenant: str, task_class: str, completion_tokens: int | None, overflow: bool
    ) -> None:
        """Count one completion; counts reach Redis in one batched write per FLUSH_EVERY_S."""
        if self._redis is None or (completion_tokens is None and not overflow):
            return
        counts = self._unsent.setdefault((tenant, task_class), [0, 0.0, 0.0, 0])
        if completion_tokens is not None:
            counts[0] += 1
            counts[1] += completion_tokens
            counts[2] += float(completion_tokens) ** 2
        if overflow:
            counts[3] += 1
        self._flusher.schedule()

    def _write(self, pipe: Any, key: tuple[str, str], counts: list[float]) -> None:
        calls, total, squares, overflows = counts
        name = keys.forecast(*key)
        if calls:
            pipe.hincrby(name, "calls", int(calls))
            pipe.hincrbyfloat(name, "sum", total)
            pipe.hincrbyfloat(name, "sumsq", squares)
        if overflows:
            pipe.hincrby(name, "overflows", int(overflows))
        pipe.expire(name, FORECAST_TTL_S)
