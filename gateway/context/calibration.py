"""Token counts for models with no public tokenizer, corrected from what the provider reports.

For such a model (`estimated: true` in the model table: Anthropic's) the engine counts with a
shipped encoding, which is only an estimate of the provider's count. After every answer the
gateway compares the input tokens the provider reports with its own count of what it sent;
the ratio of their sums, per model, is the model's scale (provider tokens per estimated
token), and a budget is fitted in estimated tokens as `budget / scale` so that it holds in
the provider's tokens. The sums live in Redis (shared by replicas and kept over restarts),
written in one batched pipeline a second like the forecast's counts; the newest calls
count most (the sums are halved whenever they pass DECAY_AT estimated tokens). The scale is
held within [MIN_SCALE, MAX_SCALE]: tokenizers differ by tens of percent, not by 4x, so a
provider (or a proxy in front of it) reporting bogus usage — ten tokens for a 2,000-token
call — cannot make every budget of that model 200 times larger.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from cachetools import LRUCache

from gateway.store import keys
from gateway.store.batch import BatchedCounts

if TYPE_CHECKING:
    import redis.asyncio as aioredis

MIN_ESTIMATED = 1_000  # estimated tokens observed before the scale is trusted
MIN_SCALE, MAX_SCALE = 0.25, 4.0  # plausible provider tokens per estimated token
DECAY_AT = 2_000_000  # estimated tokens after which both sums are halved
SCALE_TTL_S = 10.0  # how long a replica trusts its copy of a model's scale
FLUSH_EVERY_S = 1.0
SCALE_KEY_TTL_S = 30 * 86400
MAX_MODEL_NAME = 200
LOCAL_MODELS = 1_024  # models whose scale a replica keeps a copy of


class TokenCalibration(BatchedCounts[str, list[float]]):
    """Per model: provider tokens per estimated token, learned from the provider's usage.
    The unsent counts are, per model, [estimated, reported]."""

    def __init__(self, redis: aioredis.Redis | None) -> None:
        super().__init__(redis, FLUSH_EVERY_S)
        # model -> (fetched at, scale); models are named by clients: an LRU, not a dict
        self._local: LRUCache[str, tuple[float, float]] = LRUCache(maxsize=LOCAL_MODELS)

    async def scale(self, model: str) -> float:
        """The model's scale: 1.0 until enough of its calls have been observed."""
        model = model[:MAX_MODEL_NAME]
        hit = self._local.get(model)
        now = time.monotonic()
        if hit is not None and now - hit[0] < SCALE_TTL_S:
            return hit[1]
        scale = hit[1] if hit else 1.0
        if self._redis is not None:
            try:
                raw = cast(dict[bytes, bytes],
                           await self._redis.hgetall(keys.token_scale(model)))
                scale = scale_of(float(raw.get(b"estimated", 0)), float(raw.get(b"reported", 0)))
            except Exception:  # advisory: the last known scale serves meanwhile
                pass
        self._local[model] = (now, scale)
        return scale

    def observe(self, model: str, estimated: int, reported: int) -> None:
        """One answered call: the gateway's count of what it sent and the provider's."""
        if self._redis is None or estimated <= 0 or reported <= 0:
            return
        counts = self._unsent.setdefault(model[:MAX_MODEL_NAME], [0.0, 0.0])
        counts[0] += estimated
        counts[1] += reported
        self._flusher.schedule()

    def _write(self, pipe: Any, key: str, counts: list[float]) -> None:
        name = keys.token_scale(key)
        pipe.hincrbyfloat(name, "estimated", counts[0])
        pipe.hincrbyfloat(name, "reported", counts[1])
        pipe.expire(name, SCALE_KEY_TTL_S)

    async def _written(self, unsent: dict[str, list[float]], results: list[Any]) -> None:
        """The models' sums as they now stand: the local scales, halved past DECAY_AT."""
        assert self._redis is not None
        for index, model in enumerate(unsent):
            estimated, reported = float(results[3 * index]), float(results[3 * index + 1])
            self._local[model] = (time.monotonic(), scale_of(estimated, reported))
            if estimated > DECAY_AT:
                await self._redis.hset(keys.token_scale(model), mapping={
                    "estimated": estimated / 2, "reported": reported / 2})


def scale_of(estimated: float, reported: float) -> float:
    """Provider tokens per estimated token, once MIN_ESTIMATED tokens were observed."""
    if estimated < MIN_ESTIMATED or reported <= 0:
        return 1.0
    return min(max(reported / estimated, MIN_SCALE), MAX_SCALE)
