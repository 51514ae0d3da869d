"""The evidence store: live fidelity signals per task class and mode, in Redis.

`record` is on the request path: it only adds the call's signals to an in-memory batch,
which reaches Redis in one pipelined write a second at most (as `forecast.py` does for
completion sizes). Redis keeps running totals per class, `{mode}:{count}`; the window the
controller judges is what was added since its last judgement (`adjust.py`).
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, cast

from gateway.context.controller import Counts
from gateway.context.fidelity import CallSignals
from gateway.store import keys
from gateway.store.batch import FlushSoon

if TYPE_CHECKING:
    import redis.asyncio as aioredis

MODES = ("managed", "bypass", "unmanaged")
BASELINE_MODES = ("bypass", "unmanaged")
FLUSH_EVERY_S = 1.0
EVIDENCE_TTL_S = 30 * 86400  # a class with no traffic for this long starts over
COUNT_NAMES = tuple(f.name for f in fields(Counts))


class EvidenceStore:
    """Per class and mode: calls, values needed and found, tool calls and refetches."""

    def __init__(self, redis: aioredis.Redis | None, flush_every_s: float = FLUSH_EVERY_S) -> None:
        self._redis = redis
        self._unsent: dict[tuple[str, str], Counts] = {}
        self._flusher = FlushSoon(self.flush, flush_every_s)

    async def record(self, signals: CallSignals) -> None:
        """Count one call's signals (batched; a mode outside MODES is ignored)."""
        if self._redis is None or signals.mode not in MODES:
            return
        key = (signals.task_class, signals.mode)
        self._unsent[key] = self._unsent.get(key, Counts()) + Counts.of(signals)
        self._flusher.schedule()

    async def flush(self) -> None:
        """Write the batch observed so far (at shutdown, and in tests and benches)."""
        unsent, self._unsent = self._unsent, {}
        if self._redis is None or not unsent:
            return
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for (task_class, mode), counts in unsent.items():
                    key = keys.class_evidence(task_class)
                    for name, value in counts.to_dict().items():
                        if value:
                            pipe.hincrby(key, f"{mode}:{name}", value)
                    pipe.expire(key, EVIDENCE_TTL_S)
                await pipe.execute()
        except Exception:  # evidence is advisory: a lost batch only delays a judgement
            return

    async def read(self, task_class: str) -> dict[str, Counts]:
        """The class's running totals per mode (every mode present, zero when unseen)."""
        if self._redis is None:
            return {mode: Counts() for mode in MODES}
        raw = cast(dict[bytes, bytes], await self._redis.hgetall(keys.class_evidence(task_class)))
        return decode_modes(raw)


def decode_modes(raw: dict[bytes, bytes]) -> dict[str, Counts]:
    """`{mode}:{count}` fields of an evidence hash, as Counts per mode."""
    per_mode: dict[str, dict[str, int]] = {mode: {} for mode in MODES}
    for field, value in raw.items():
        mode, _, name = field.decode().partition(":")
        if mode in per_mode and name in COUNT_NAMES:
            per_mode[mode][name] = int(value)
    return {mode: Counts.from_dict(counts) for mode, counts in per_mode.items()}


def baseline(modes: dict[str, Counts]) -> Counts:
    """Bypass and unmanaged calls together: what the class does with nothing compacted."""
    total = Counts()
    for mode in BASELINE_MODES:
        total += modes[mode]
    return total
