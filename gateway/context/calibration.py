"""Token counts for models with no public tokenizer, corrected from what the provider reports.

For such a model (`estimated: true` in the model table: Anthropic's) the engine counts with a
shipped encoding, which is only an estimate of the provider's count. After every answer the
gateway compares the input tokens the provider reports with its own count of what it sent;
the ratio of their sums, per model, is the model's scale (provider tokens per estimated
token), and a budget is fitted in estimated tokens as `budget / scale` so that it holds in
the provider's tokens. The sums live in Redis (shared by replicas and kept over restarts),
written in one batched pipeline a second like the forecast's counts; the newest calls
count most (the sums are halved whenever they pass DECAY_AT estimated tokens).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, cast

from gateway.store import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

MIN_ESTIMATED = 1_000  # estimated tokens observed before the scale is trusted
DECAY_AT = 2_000_000  # estimated tokens after which both sums are halved
SCALE_TTL_S = 10.0  # how long a replica trusts its copy of a model's scale
FLUSH_EVERY_S = 1.0
SCALE_KEY_TTL_S = 30 * 86400
MAX_MODEL_NAME = 200


class TokenCalibration:
    """Per model: provider tokens per estimated token, learned from the provider's usage."""

    def __init__(self, redis: aioredis.Redis | None) -> None:
        self._redis = redis
        self._local: dict[str, tuple[float, float]] = {}  # model -> (fetched at, scale)
        self._unsent: dict[str, list[float]] = {}  # model -> [estimated, reported]
        self._flusher: asyncio.Task[None] | None = None

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
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_soon())

    async def _flush_soon(self) -> None:
        await asyncio.sleep(FLUSH_EVERY_S)
        await self.flush()

    async def flush(self) -> None:
        """Add the counts observed so far to the models' sums (at shutdown, and in tests)."""
        unsent, self._unsent = self._unsent, {}
        if self._redis is None or not unsent:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for model, (estimated, reported) in unsent.items():
                    key = keys.token_scale(model)
                    pipe.hincrbyfloat(key, "estimated", estimated)
                    pipe.hincrbyfloat(key, "reported", reported)
                    pipe.expire(key, SCALE_KEY_TTL_S)
                totals = await pipe.execute()
            for index, model in enumerate(unsent):
                estimated, reported = float(totals[3 * index]), float(totals[3 * index + 1])
                self._local[model] = (time.monotonic(), scale_of(estimated, reported))
                if estimated > DECAY_AT:
                    await self._redis.hset(keys.token_scale(model), mapping={
                        "estimated": estimated / 2, "reported": reported / 2})
        except Exception:  # a lost batch only slows the learning
            return


def scale_of(estimated: float, reported: float) -> float:
    """Provider tokens per estimated token, once MIN_ESTIMATED tokens were observed."""
    if estimated < MIN_ESTIMATED or reported <= 0:
        return 1.0
    return reported / estimated
