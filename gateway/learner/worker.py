"""The learner worker: a consumer of the trace stream's consumer group.

Each entry is learned from (TraceLearner) and acknowledged only after its delta is merged.
Entries another consumer left pending longer than `learner.reclaim_idle_s` are claimed with
XAUTOCLAIM; an entry delivered more than `learner.max_deliveries` times, or whose learner
output stays malformed after the retries, is parked in the dead-letter stream with the
reason and acknowledged. Malformed output never reaches the playbook.

One trace can be queued twice (a trace write that timed out on a hung Redis may still land,
and the outage buffer writes it again): the first entry of a trace (per kind: trace or
feedback) to be taken claims it (`keys.trace_learned`, SET NX, kept as long as traces are);
any other entry for it is acknowledged unlearned and counted as
`ctxgate_worker_failures_total{reason="duplicate_trace"}`. The claiming entry's own
redeliveries (a worker that died mid-job) are still learned from. An entry whose trace is
not stored (expired, or announced before it was written) is acknowledged unlearned, logged
and counted as `{reason="trace_missing"}`, and gives its claim back: a later entry for the
trace, once it is stored, is learned from, not skipped as a duplicate (a Redis Cluster
primary's restart once cost a citation credit so, bench/README.md, "Redis Cluster: a
trace announced before it was stored"; the trace writer now announces a trace only once
it is stored).

A long-running worker outlives anything that goes wrong around a job: it never exits but
on `stop` (burst mode, a one-shot drain, still raises). A store outage or failover (a
RedisError, a RedisClusterException such as SlotNotCoveredError, an OSError) is logged as
a warning, counted as `ctxgate_worker_failures_total{reason="store_unavailable"}`, and the
consumer resumes after 1 s. Anything else escaping the consumer's loop is logged with its
traceback (log.exception, never silent), counted as `{reason="error"}`, and the loop
resumes after a pause that doubles from 1 s to 30 s while such errors keep coming (a bug
that fails every time neither spins nor ends the worker; back to 1 s after a quiet minute).
That is not hypothetical: while a primary is killed and restarted, redis-py 8.1's asyncio
cluster client lets `AttributeError: 'NoneType' object has no attribute 'writelines'` out
of ordinary commands (XREADGROUP, XINFO, XADD: a connection closed while it is being
connected; redis/redis-py#4287 is the same family, a TypeError on Python 3.12), and a
worker ended on it. The heartbeat that keeps a job's entry claimed survives the same way:
a missed beat is logged, never the heartbeat's silent end (which would let another worker
reclaim the job while it is learned).

`ctxgate worker` takes no entry before its embedding model is loaded (`Embedder.warm`; the
merge's near-duplicate check needs it). Loaded lazily, the model came in the middle of the
first job that merged a second lesson, and its load holds the GIL for seconds at a time: the
job's Redis commands timed out on the stalled loop (the cluster client then tore down
connections under the other commands), its heartbeat missed, another worker reclaimed the
entry and waited on its own model load too, and every later entry of that shard waited
behind both (tests/store/test_cluster_learning.py, 1 run in 8 past its 180 s under load).
The in-process learner (`process.py`) still loads it on first use: at idle priority, its
load before any entry could take minutes on a busy machine, and the first lessons (an ADD
to an empty playbook needs no model) would wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisClusterException, RedisError, ResponseError

from gateway.learner.build import build_learner, build_llm
from gateway.learner.episodes import TraceLearner
from gateway.learner.llm import LearnerUnavailable, MalformedOutput
from gateway.learner.throttle import Throttle
from gateway.observability.gauges import set_queue_depths, trace_queue_depths
from gateway.playbook.config import LearnerSettings, learner_settings
from gateway.store import as_text, keys
from gateway.store.client import blocking_ms

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.observability.metrics import Metrics
    from gateway.services import Services

log = logging.getLogger(__name__)
Entry = tuple[str, dict[str, str]]
DEAD_LETTER_MAXLEN = 10_000
DEPTH_EVERY_S = 5.0  # the queue-depth gauge scans the stream on Redis 6: not after every job
# Redis down, restarting, or a cluster failing over: waited out (see the module docstring).
STORE_ERRORS = (RedisError, RedisClusterException, OSError)
RETRY_S = 1.0  # after a store error, and the first pause after an unexpected one
RETRY_MAX_S = 30.0  # unexpected errors in a row: the pause doubles up to this
CALM_S = 60.0  # an unexpected error this long after the last one starts again at RETRY_S
# 1 when entry ARGV[1] is the one its trace is learned from (it claims it now, or did
# before), 0 when another entry did: one key, so one round trip, atomic on a cluster too.
CLAIM_TRACE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return 1 end
return 0
"""
# Give the claim of entry ARGV[1] back (its trace was not stored): only if it holds it.
RELEASE_TRACE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _entry(raw_id: Any, raw_fields: dict[Any, Any]) -> Entry:
    return as_text(raw_id), {as_text(k): as_text(v) for k, v in raw_fields.items()}


async def ensure_group(redis: aioredis.Redis, shard: int = 0) -> None:
    try:
        await redis.xgroup_create(keys.trace_stream(shard), keys.TRACE_GROUP, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


class StreamConsumer:
    """One consumer of one trace shard's group: claim, read, learn, ack or dead-letter."""

    def __init__(
        self, redis: aioredis.Redis, learner: TraceLearner, settings: LearnerSettings,
        consumer: str, metrics: Metrics | None = None, shard: int = 0,
        throttle: Throttle | None = None,
        block_ms: int = 1000,  # below the client's socket timeout (`blocking_ms`)
    ) -> None:
        self._redis = redis
        self._block_ms = block_ms
        self.shard = shard
        self._stream = keys.trace_stream(shard)
        self._dead = keys.trace_dead_letter(shard)
        self._learner = learner
        self._settings = settings
        self.name = consumer
        self._metrics = metrics
        self._throttle = throttle
        self.in_flight: str | None = None  # the entry being learned from, if any
        self._depth_reported = 0.0
        self._claim_trace = redis.register_script(CLAIM_TRACE)
        self._release_trace = redis.register_script(RELEASE_TRACE)

    async def reclaim(self) -> list[Entry]:
        """Entries idle past the reclaim time, now ours."""
        idle_ms = int(self._settings.reclaim_idle_s * 1000)
        answer: Any = await self._redis.xautoclaim(
            self._stream, keys.TRACE_GROUP, self.name, idle_ms, "0-0",
            count=self._settings.batch)
        claimed = answer[1]
        return [_entry(i, f) for i, f in claimed if f]

    async def read_new(self, block_ms: int | None) -> list[Entry]:
        answer: Any = await self._redis.xreadgroup(
            keys.TRACE_GROUP, self.name, {self._stream: ">"},
            count=self._settings.batch, block=block_ms)
        return [_entry(i, f) for _, entries in answer or [] for i, f in entries]

    async def claim_state(self, entry_id: str) -> tuple[str, int] | None:
        """(owner, deliveries) of a pending entry; None once it was acknowledged."""
        info = await self._redis.xpending_range(
            self._stream, keys.TRACE_GROUP, min=entry_id, max=entry_id, count=1)
        if not info:
            return None
        return as_text(info[0]["consumer"]), int(info[0]["times_delivered"])

    async def _keep_claimed(self, entry_id: str, done: asyncio.Event) -> None:
        """Reset the entry's idle time until `done`, so no one reclaims it while it is
        worked on. Ended by `done`, not only by a cancel: redis-py 8.1 was seen to swallow
        the cancel of a command in flight, and a heartbeat that outlived its job would keep
        an unacknowledged entry claimed by this consumer for ever."""
        period = max(self._settings.reclaim_idle_s / 3, 0.05)
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(done.wait(), period)
            if done.is_set():
                return
            try:
                await self._redis.xclaim(self._stream, keys.TRACE_GROUP, self.name, 0,
                                         [entry_id], justid=True)
            except Exception as exc:
                if done.is_set():  # the beat was cancelled (redis-py may raise, not cancel)
                    return
                if isinstance(exc, STORE_ERRORS):  # a missed beat risks a reclaim, which
                    log.warning("could not keep %s claimed", entry_id, exc_info=True)
                else:  # the merge tolerates; not a store error: said loudly, beats go on
                    log.exception("could not keep %s claimed", entry_id)

    async def process(self, entry_id: str, fields: dict[str, str]) -> None:
        state = await self.claim_state(entry_id)
        if state is None or state[0] != self.name:
            return  # finished, or reclaimed by another consumer while it waited in our batch
        if state[1] > self._settings.max_deliveries:
            await self.dead_letter(entry_id, fields, "max_deliveries")
            return
        if not await self._first_for_trace(entry_id, fields):
            log.info("%s repeats a trace already queued: not learned from twice", entry_id,
                     extra={"trace_id": fields.get("trace_id")})
            await self._redis.xack(self._stream, keys.TRACE_GROUP, entry_id)
            self.failed("duplicate_trace")
            return
        done = asyncio.Event()
        heartbeat = asyncio.create_task(self._keep_claimed(entry_id, done))
        try:
            learned = await self._learner.handle(fields)
        except MalformedOutput as exc:
            await self.dead_letter(entry_id, fields, f"malformed_output: {exc}")
            return
        except LearnerUnavailable as exc:  # left pending: reclaimed and retried later
            log.warning("learner unavailable for %s: %s", entry_id, exc)
            self.failed("learner_unavailable")
            return
        except Exception:  # a bug or a Redis error: leave it pending, max_deliveries bounds it
            log.exception("learning from %s failed", entry_id)
            self.failed("error")
            return
        finally:
            done.set()
            heartbeat.cancel()
        if learned is None:  # before the ack: a failed release leaves the entry pending
            await self._give_back(entry_id, fields)
            log.warning("%s names a trace that is not stored (expired, or not written "
                        "yet): acknowledged unlearned", entry_id,
                        extra={"trace_id": fields.get("trace_id"),
                               "tenant": fields.get("tenant"), "kind": fields.get("kind")})
            self.failed("trace_missing")
        await self._redis.xack(self._stream, keys.TRACE_GROUP, entry_id)

    def _claim_key(self, fields: dict[str, str]) -> str | None:
        tenant, trace_id = fields.get("tenant"), fields.get("trace_id")
        if not tenant or not trace_id:
            return None  # nothing to key it by: the learner finds no trace either
        return keys.trace_learned(tenant, trace_id, fields.get("kind", "trace"))

    async def _first_for_trace(self, entry_id: str, fields: dict[str, str]) -> bool:
        """Whether `entry_id` is the entry its trace is learned from (see the module doc)."""
        key = self._claim_key(fields)
        if key is None:
            return True
        first = await self._claim_trace(keys=[key],
                                        args=[entry_id, self._settings.trace_ttl_s])
        return bool(first)

    async def _give_back(self, entry_id: str, fields: dict[str, str]) -> None:
        """`entry_id` learned nothing (its trace is not stored): its claim is given back."""
        key = self._claim_key(fields)
        if key is not None:
            await self._release_trace(keys=[key], args=[entry_id])

    async def dead_letter(self, entry_id: str, fields: dict[str, str], reason: str) -> None:
        parked = {**fields, "entry_id": entry_id, "reason": reason[:500],
                  "consumer": self.name, "ts": repr(time.time())}
        await self._redis.xadd(self._dead, parked,  # type: ignore[arg-type]
                               maxlen=DEAD_LETTER_MAXLEN, approximate=True)
        await self._redis.xack(self._stream, keys.TRACE_GROUP, entry_id)
        self.failed(reason.split(":", 1)[0])

    def failed(self, reason: str) -> None:
        """Counted on `ctxgate_worker_failures_total{reason}` (and per shard)."""
        if self._metrics is not None:
            self._metrics.worker_failure(reason, self.shard)

    async def report_depth(self) -> None:
        if self._metrics is None or time.monotonic() - self._depth_reported < DEPTH_EVERY_S:
            return
        self._depth_reported = time.monotonic()
        if self.shard != 0:
            return  # one gauge for the whole queue: shard 0's consumer sums every shard
        set_queue_depths(self._metrics,
                         await trace_queue_depths(self._redis, self._settings.trace_shards))

    async def run(self, stop: asyncio.Event, burst: bool) -> None:
        await ensure_group(self._redis, self.shard)
        while not stop.is_set():
            if self._throttle is not None:  # before taking entries: none waits unheartbeated
                await self._throttle.rest()
            entries = await self.reclaim()
            if not entries:
                entries = await self.read_new(None if burst else self._block_ms)
            if not entries and burst:
                return
            for entry_id, fields in entries:
                if stop.is_set():
                    break  # not started: left pending, reclaimed by the next worker
                self.in_flight = entry_id
                try:
                    await self.process(entry_id, fields)
                finally:
                    self.in_flight = None
            await self.report_depth()


def default_consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


async def run_worker(
    services: Services,
    *,
    stop: asyncio.Event,
    burst: bool = False,
    consumer: str | None = None,
    grace_s: float = 5.0,
    throttle: Throttle | None = None,
    warm: bool = False,
) -> None:
    """Consume the trace stream until `stop` is set (or, in burst mode, until it is empty).

    With `warm` the embedding model is loaded before any entry is taken (`warm_up`, the
    module docstring says why; `ctxgate worker` calls it first itself, then opens its
    metrics port).

    Once `stop` is set no new entry is taken; the one in flight may finish within `grace_s`,
    after which it is cancelled and handed back: left pending, never acknowledged, so
    another worker reclaims it (the merge is atomic and idempotent, so a job cancelled after
    its merge is merely applied once more as duplicates).
    """
    if warm and not await warm_up(services, stop):
        return
    llm = build_llm(services)
    settings = learner_settings(services.settings)
    learner = build_learner(services, llm)
    name = consumer or default_consumer_name()
    block_ms = blocking_ms(services.settings, 1000)
    workers = [StreamConsumer(services.redis, learner, settings, name, services.metrics, shard,
                              throttle, block_ms) for shard in range(settings.trace_shards)]
    consuming = asyncio.create_task(_consume_all(workers, stop, burst))
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({consuming, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not consuming.done():
            if any(w.in_flight is not None for w in workers):
                await asyncio.wait({consuming}, timeout=grace_s)
            if not consuming.done():
                for worker in workers:
                    if worker.in_flight is not None:
                        log.warning("stopping: handing back %s of %s for redelivery",
                                    worker.in_flight, keys.trace_stream(worker.shard))
                consuming.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await consuming
    finally:
        stopping.cancel()
        consuming.cancel()
        await llm.aclose()


async def warm_up(services: Services, stop: asyncio.Event) -> bool:
    """Load the embedding model before any entry is taken (see the module docstring);
    False when `stop` came first. A model that fails to load is logged and left to load
    on first use, as before: the worker still learns."""
    started = time.monotonic()
    warming = asyncio.ensure_future(services.embedder.warm())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({warming, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not warming.done():
        warming.cancel()  # its thread finishes the load; nothing waits for it
        return False
    if warming.exception() is not None:
        log.error("embedding model warm-up failed; it loads on first use instead",
                  exc_info=warming.exception())
    else:
        log.info("embedding model warm",
                 extra={"seconds": round(time.monotonic() - started, 1)})
    return True


async def _consume_all(workers: list[StreamConsumer], stop: asyncio.Event, burst: bool) -> None:
    """Every shard at once: one consumer per shard, each in its shard's order."""
    await asyncio.gather(*(_consume(worker, stop, burst) for worker in workers))


async def _consume(worker: StreamConsumer, stop: asyncio.Event, burst: bool) -> None:
    """`worker.run` until it returns; whatever ends it otherwise is waited out and run again
    (the policy of the module docstring). Burst mode raises: its caller wants the cause."""
    pause, last_error = RETRY_S, -CALM_S
    while True:
        try:
            await worker.run(stop, burst)
            return
        except Exception as exc:
            if burst:
                raise
            if stop.is_set():
                return  # shutting down: whatever is pending is redelivered later
            if isinstance(exc, STORE_ERRORS):
                log.warning("worker lost Redis; retrying in %.0f s", RETRY_S, exc_info=True)
                worker.failed("store_unavailable")
                wait = RETRY_S
            else:
                calm = time.monotonic() - last_error >= CALM_S
                pause = RETRY_S if calm else min(pause * 2, RETRY_MAX_S)
                last_error = time.monotonic()
                log.exception("worker loop failed (shard %d); resuming in %.0f s",
                              worker.shard, pause)
                worker.failed("error")
                wait = pause
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)  # a stop meanwhile ends the wait
        if stop.is_set():
            return
