"""Budgets that adjust themselves: each class's forecast scale in Redis, moved from evidence.

`ClassForecasts` is the thin Redis side: the scale in force per class (read on the request
path through a short-lived local copy), and one judgement applied at most once — a Lua
script checks the version the judgement was made on, so replicas judging the same batch of
evidence at once move the class once. `ForecastController` runs off the request path
(`run`, every few seconds): per class it reads the evidence added since the last
judgement, asks `controller.decide`, and commits; every move is logged with its reason and
kept in a capped history.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, cast

import orjson

from gateway.context.controller import Counts, Judgement, decide, scaled_class
from gateway.context.evidence import EvidenceStore, baseline
from gateway.context.taskclass import TaskClass
from gateway.store import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger("ctxgate.forecast")

SCALE_TTL_S = 10.0  # how long a replica trusts its copy of a class's scale
HISTORY_CAP = 100
JUDGE_EVERY_S = 15.0

# KEYS: forecast hash, history list. ARGV: version judged on, managed totals judged (JSON),
# time, new scale ('' when the judgement holds), history entry, history cap, calm ('' none).
_COMMIT = """
local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if version ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'version', version + 1, 'judged', ARGV[2], 'judged_at', ARGV[3])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], 'calm', ARGV[7]) end
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'scale', ARGV[4])
  redis.call('LPUSH', KEYS[2], ARGV[5])
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[6]) - 1)
end
return 1
"""


class ClassForecasts:
    """The forecast scale per class in Redis (None: no move yet, the YAML caps hold)."""

    def __init__(self, redis: aioredis.Redis | None, ttl_s: float = SCALE_TTL_S) -> None:
        self._redis = redis
        self._ttl_s = ttl_s
        self._local: dict[str, tuple[float, float | None]] = {}
        self._commit = redis.register_script(_COMMIT) if redis is not None else None

    async def scale(self, task_class: str) -> float | None:
        now = time.monotonic()
        hit = self._local.get(task_class)
        if hit is not None and now - hit[0] < self._ttl_s:
            return hit[1]
        found = hit[1] if hit else None
        if self._redis is not None:
            try:
                raw = await self._redis.hget(keys.class_forecast(task_class), "scale")
                found = float(raw) if raw is not None else None
            except Exception:  # advisory: the last known scale (or the YAML) serves meanwhile
                pass
        self._local[task_class] = (now, found)
        return found

    async def state(self, task_class: str) -> dict[str, Any]:
        """The stored forecast: version, scale (None), managed totals already judged."""
        assert self._redis is not None
        raw = cast(dict[bytes, bytes],
                   await self._redis.hgetall(keys.class_forecast(task_class)))
        scale = raw.get(b"scale")
        return {
            "version": int(raw.get(b"version", 0)),
            "scale": float(scale) if scale is not None else None,
            "judged": Counts.from_dict(orjson.loads(raw.get(b"judged", b"{}"))),
            "judged_at": float(raw.get(b"judged_at", 0)) or None,
            "calm": int(raw[b"calm"]) if b"calm" in raw else None,
        }

    async def history(self, task_class: str, limit: int = HISTORY_CAP) -> list[dict[str, Any]]:
        assert self._redis is not None
        entries = await self._redis.lrange(keys.class_forecast_history(task_class), 0, limit - 1)
        return [orjson.loads(e) for e in entries]

    async def commit(self, task_class: str, version: int, judged: Counts,
                     judgement: Judgement) -> bool:
        """Apply a judgement made on `version`; False when another replica already did."""
        assert self._commit is not None
        entry = b""
        if judgement.moved:
            entry = orjson.dumps(history_entry(judgement))
        done = await self._commit(
            keys=[keys.class_forecast(task_class), keys.class_forecast_history(task_class)],
            args=[version, orjson.dumps(judged.to_dict()), time.time(),
                  repr(judgement.scale_to) if judgement.moved else "", entry, HISTORY_CAP,
                  "" if judgement.calm is None else judgement.calm],
        )
        if done:
            self._local.pop(task_class, None)
        return bool(done)

    async def reset(self, task_class: str) -> None:
        """Forget the class's moves and history: the YAML caps hold again (the evidence
        already judged stays judged)."""
        assert self._redis is not None
        await self._redis.hdel(keys.class_forecast(task_class), "scale")
        await self._redis.delete(keys.class_forecast_history(task_class))
        self._local.pop(task_class, None)


def history_entry(j: Judgement) -> dict[str, Any]:
    return {
        "ts": round(time.time(), 3), "action": j.action, "scale_from": j.scale_from,
        "scale_to": j.scale_to, "reason": j.reason, "calls": j.evidence.calls,
        "recall": j.evidence.recall, "refetch_rate": j.evidence.refetch_rate,
        "refetch_allowed": j.refetch_allowed, "baseline": j.baseline,
    }


class ForecastController:
    """Judges each adjustable class's new evidence and moves its scale (off the hot path)."""

    def __init__(self, classes: dict[str, TaskClass], evidence: EvidenceStore,
                 forecasts: ClassForecasts, *, enabled: bool = True) -> None:
        self.classes = classes
        self.evidence = evidence
        self.forecasts = forecasts
        self.enabled = enabled

    async def judge(self, task_class: str) -> Judgement | None:
        """One class: the evidence since its last judgement, judged and committed once."""
        policy = self.classes[task_class].forecast
        if not (self.enabled and policy.adjust):
            return None
        state = await self.forecasts.state(task_class)
        modes = await self.evidence.read(task_class)
        scale = state["scale"] if state["scale"] is not None else 1.0
        judged = state["judged"]
        if judged.calls > modes["managed"].calls:  # the evidence expired and started over
            judged = Counts()
        fresh = modes["managed"] - judged
        judgement = decide(policy, scale, fresh, baseline(modes), state["calm"])
        if judgement is None:
            return None
        if not await self.forecasts.commit(task_class, state["version"], modes["managed"],
                                           judgement):
            return None  # another replica judged this batch first
        level = logging.INFO if judgement.moved else logging.DEBUG
        # the log line carries its own ts
        entry = {k: v for k, v in history_entry(judgement).items() if k != "ts"}
        log.log(level, "forecast %s", judgement.action, extra={"task_class": task_class, **entry})
        return judgement

    async def run_once(self) -> list[Judgement]:
        judged = []
        for name in self.classes:
            try:
                judgement = await self.judge(name)
            except Exception:  # one class's trouble must not stop the others
                log.warning("forecast judgement failed", extra={"task_class": name},
                            exc_info=True)
                continue
            if judgement is not None:
                judged.append(judgement)
        return judged

    async def run(self, stop: asyncio.Event, every_s: float = JUDGE_EVERY_S) -> None:
        """Judge every `every_s` seconds until `stop` is set."""
        while not stop.is_set():
            await self.evidence.flush()
            await self.run_once()
            try:
                await asyncio.wait_for(stop.wait(), every_s)
            except TimeoutError:
                continue

    async def describe_all(self) -> list[dict[str, Any]]:
        return [await self.describe(name) for name in sorted(self.classes)]

    async def describe(self, task_class: str) -> dict[str, Any]:
        """A class's forecast in force, its evidence and its history (CLI, admin route)."""
        cls = self.classes[task_class]
        state = await self.forecasts.state(task_class)
        modes = await self.evidence.read(task_class)
        applies = self.enabled and cls.forecast.adjust and state["scale"] is not None
        scale = state["scale"] if applies else 1.0
        return {
            "task_class": task_class,
            "adjust": self.enabled and cls.forecast.adjust,
            "source": "forecast" if applies else "config",
            "scale": scale,
            "caps": caps(scaled_class(cls, scale)),
            "config_caps": caps(cls),
            "bounds": {"min_scale": cls.forecast.min_scale, "max_scale": cls.forecast.max_scale},
            "recall_target": cls.forecast.recall_target,
            "evidence": {mode: _shown(counts) for mode, counts in modes.items()},
            "since_last_judgement": _shown(modes["managed"] - state["judged"]),
            "min_evidence_calls": cls.forecast.min_evidence_calls,
            "judged_at": state["judged_at"],
            "history": await self.forecasts.history(task_class),
        }


def caps(cls: TaskClass) -> dict[str, int | None]:
    c = cls.compaction
    return {
        "history": cls.budget.history, "knowledge": cls.budget.knowledge,
        "verbatim_tokens_high": c.verbatim_tokens_high, "verbatim_tokens_low":
        c.verbatim_tokens_low, "verbatim_turns_high": c.verbatim_turns_high,
        "verbatim_turns_low": c.verbatim_turns_low,
    }


def _shown(counts: Counts) -> dict[str, Any]:
    return {**counts.to_dict(), "recall": counts.recall, "refetch_rate": counts.refetch_rate}


def render_text(described: list[dict[str, Any]]) -> str:
    """`ctxgate forecast` for a reader: per class its caps in force, evidence, history."""
    lines = []
    for d in described:
        bounds = d["bounds"]
        lines.append(f"{d['task_class']}  adjust={'on' if d['adjust'] else 'off'}  "
                     f"source={d['source']}  scale={d['scale']:g} "
                     f"(bounds {bounds['min_scale']:g}-{bounds['max_scale']:g}, "
                     f"recall target {d['recall_target']:.1%})")
        caps_in_force = ", ".join(
            f"{name} {value} (config {d['config_caps'][name]})"
            for name, value in d["caps"].items() if value is not None)
        lines.append(f"  caps: {caps_in_force}")
        shown = " | ".join(f"{mode} {_figures(e)}" for mode, e in d["evidence"].items())
        lines.append(f"  evidence: {shown}")
        since = d["since_last_judgement"]
        lines.append(f"  since last judgement: {since['calls']} calls "
                     f"(judged once {d['min_evidence_calls']} are in)")
        for move in d["history"] or []:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(move["ts"]))
            lines.append(f"  {stamp} {move['action']} {move['scale_from']:g} -> "
                         f"{move['scale_to']:g}: {move['reason']}")
        if not d["history"]:
            lines.append("  no moves yet")
    return "\n".join(lines)


def _figures(e: dict[str, Any]) -> str:
    recall = "n/a" if e["recall"] is None else f"{e['recall']:.1%}"
    refetch = "n/a" if e["refetch_rate"] is None else f"{e['refetch_rate']:.1%}"
    return f"{e['calls']} calls, recall {recall}, refetch {refetch}"
