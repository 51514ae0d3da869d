"""The evidence store: live fidelity signals per task class and mode, in Redis.

`record` is on the request path: it only adds the call's signals to an in-memory batch,
which reaches Redis in one pipelined write a second at most (as `forecast.py` does for
completion sizes). Redis keeps running totals per class, `{mode}:{count}`; the window the
controller judges is what was added since its last judgement (`adjust.py`).
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any, cast

from gateway.context.controller import Counts
from gateway.context.fidelity import CallSignals
from gateway.store import keys
from gateway.store.batch import BatchedCounts

if TYPE_CHECKING:
    import redis.asyncio as aioredis

MODES = ("managed", "bypass", "unmanaged")
BASELINE_MODES = ("bypass", "unmanaged")
FLUSH_EVERY_S = 1.0
EVIDENCE_TTL_S = 30 * 86400  # a class with no traffic for this long starts over
COUNT_NAMES = tuple(f.name for f in fields(Counts))


class EvidenceStore(BatchedCounts[tuple[str, str], Counts]):
    """Per class and mode: calls, values needed and found, tool calls and refetches."""

    def __init__(self, redis: aioredis.Redis | None, flush_every_s: float = FLUSH_EVERY_S) -> None:
        super().__init__(redis, flush_every_s)

    async def record(self, signals: CallSignals) -> None:
        """Count one call's signals (batched; a mode outside MODES is ignored)."""
        if self._redis is None or signals.mode not in MODES:
            return
        key = (signals.task_class, signals.mode)
        self._unsent[key] = self._unsent.get(key, Counts()) + Counts.of(signals)
        self._flusher.schedule()

    def _write(self, pipe: Any, key: tuple[str, str], counts: Counts) -> None:
        task_class, mode = key
        name = keys.class_evidence(task_class)
        for count, value in counts.to_dict().items():
            if value:
                pipe.hincrby(name, f"{mode}:{count}", value)
        pipe.expire(name, EVIDENCE_TTL_S)

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
