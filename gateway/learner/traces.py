"""Trace events: what each call forwarded and got back, for the learner.

The HTTP layer calls `TraceSink.publish` after every non-bypass chat completion. Publishing
never delays the response: the Redis writes run in a background task (a bounded set; past
the bound events are shed and counted). Each event is kept in a tenant-scoped hash with the
learner's TTL (so `POST /v1/feedback` can find it, and only for its own tenant), but it is
announced on the trace stream that the workers consume only when it may teach something
(`signals.may_teach`: a trailing tool exchange in a class with a playbook). A call with no
signal costs the learner nothing; explicit feedback on it queues it later
(`record_feedback`). While Redis is down, traces are held in memory (bounded: `outage.py`)
and written back in order once it answers; shutdown waits a few seconds for that.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
from array import array
from bisect import bisect_left
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import accumulate, compress, count, islice
from operator import is_not
from typing import TYPE_CHECKING, Any, cast

import orjson

from gateway.learner.outage import OutageBuffer, TraceRecord
from gateway.learner.signals import may_teach
from gateway.learner.transcript import line, shown_budget
from gateway.observability.explain import ACCOUNT_FIELD, Pieces, read_pieces
from gateway.playbook.config import ClassPlaybook, class_playbook, learner_settings
from gateway.services import Services
from gateway.store import STORE_DOWN, keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.observability.metrics import Metrics
    from gateway.settings import Settings

log = logging.getLogger(__name__)

BATCH = 64  # traces per pipeline: one round trip carries many under load
RETRY_FIRST_S = 0.5  # first wait before writing held traces back; doubles up to
RETRY_MAX_S = 10.0  # this while Redis stays down
SHUTDOWN_WAIT_S = 5.0  # how long shutdown keeps trying to write held traces
EVENT_FIELD = "event"
MESSAGE_RUN = 16  # a stored trace's messages per piece (`split_messages`)
PIECES_REMEMBERED = 16_384  # account pieces this process knows it wrote (~4 MB, most recent)
RUNS_REMEMBERED = 1024  # message runs kept serialised (`MessageRuns`), most recently used
SIZES_REMEMBERED = 8192  # messages whose sizes `keep_recent` measured (`MessageSizes`)
# A piece's TTL is twice the trace's; this process refreshes one it wrote only once its last
# refresh is older than this share of the trace's TTL (`_queue_pieces` says why it is safe).
REFRESH_SHARE = 0.5
FEEDBACK_FIELD = "feedback"


@dataclass(frozen=True)
class TraceEvent:
    tenant: str
    task_class: str
    session_id: str
    trace_id: str
    messages: list[dict[str, Any]]  # what was forwarded
    response: dict[str, Any]  # {"content", "tool_calls", "finish_reason", "usage"}
    injected_bullet_ids: list[str] = field(default_factory=list)
    ts: float = 0.0
    account: bytes | None = None  # the explainer's record (JSON), stored beside the event
    pieces: Pieces = ()  # the runs of entries `account` names (`split_account`)
    # As stored: the messages kept after `messages` (the first one and the note), named as
    # runs of MESSAGE_RUN stored once each (`split_messages`); None when all are inline.
    tail: dict[str, Any] | None = None

    def to_json(self) -> bytes:
        return orjson.dumps(self)  # orjson serialises dataclasses natively, without a copy

    @classmethod
    def from_json(cls, raw: bytes | str) -> TraceEvent:
        return cls.from_record(orjson.loads(raw))

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TraceEvent:
        return cls(
            tenant=record["tenant"], task_class=record["task_class"],
            session_id=record["session_id"], trace_id=record["trace_id"],
            messages=list(record.get("messages") or []),
            response=dict(record.get("response") or {}),
            injected_bullet_ids=list(record.get("injected_bullet_ids") or []),
            ts=float(record.get("ts") or 0.0),
        )


class MessageRuns:
    """The runs `split_messages` stores, remembered by the identity of the messages they
    hold: a session's next trace holds the same message objects (its body decoded from the
    last call's, `api/bodies.py`; the engine's rewritten copies kept by its prefix), so a
    run none of whose messages is new is neither serialised nor hashed again. Exact: a
    remembered run holds its messages, so their ids cannot be reused while it is kept, and
    nothing writes to a request's messages once decoded."""

    def __init__(self, size: int = RUNS_REMEMBERED) -> None:
        self._size = size
        self._runs: OrderedDict[tuple[int, ...], tuple[list[Any], str, bytes]] = OrderedDict()

    def run(self, first: int, messages: list[dict[str, Any]]) -> tuple[str, bytes]:
        """The hash and JSON of the run `[first, messages]`."""
        key = (first, *map(id, messages))
        known = self._runs.get(key)
        if known is not None:
            self._runs.move_to_end(key)
            return known[1], known[2]
        raw = orjson.dumps([first, messages])
        digest = hashlib.blake2b(raw, digest_size=16).hexdigest()
        self._runs[key] = (messages, digest, raw)
        if len(self._runs) > self._size:
            self._runs.popitem(last=False)
        return digest, raw


class MessageSizes:
    """What `keep_recent` measures of a message (its JSON's length, its transcript line's
    width), remembered by the message's identity: a long session's traces walk back over
    the same newest few hundred message objects call after call (1 ms a call at call 300
    of the synthetic session, where the engine's digests are short and many fit), so only
    the new ones are measured. Exact as `MessageRuns`: a remembered message is held, so its
    id cannot be reused while it is kept, and nothing writes to a message once decoded or
    rendered. Both the loop and the fitting thread trim: a lock."""

    def __init__(self, size: int = SIZES_REMEMBERED) -> None:
        self._size = size
        self._known: OrderedDict[int, tuple[dict[str, Any], int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, message: dict[str, Any]) -> tuple[int, int]:
        """`len(orjson.dumps(message))` and `len(line(message))`."""
        with self._lock:
            known = self._known.get(id(message))
            if known is not None:
                self._known.move_to_end(id(message))
                return known[1], known[2]
        size, width = len(orjson.dumps(message)), len(line(message))
        with self._lock:
            self._known[id(message)] = (message, size, width)
            if len(self._known) > self._size:
                self._known.popitem(last=False)
        return size, width


def split_messages(messages: list[dict[str, Any]], kept: list[dict[str, Any]],
                   runs: MessageRuns | None = None
                   ) -> tuple[list[dict[str, Any]], dict[str, Any] | None, Pieces]:
    """`kept` (`keep_recent(messages, ...)`) as a trace stores it: the first message and the
    note inline, the newest ones as the runs of MESSAGE_RUN messages (by their number in
    `messages`) that hold them, each stored once under its hash like the account's pieces
    (`keys.account_piece`) and named in `tail` with the number of the first one kept. A
    session's consecutive traces keep mostly the same messages: between steps they share
    every run but the last, so a call writes its new messages, not the Reflector's 24,000
    characters again. The first run holds the messages before the first kept too (the
    reader leaves them out), so that it stays the same while the window slides."""
    body = len(kept) - 2  # after the first message and the note
    if kept is messages or body < 2 * MESSAGE_RUN:
        return kept, None, ()
    start, end = len(messages) - body, len(messages)
    names, pieces = [], []
    runs = runs or MessageRuns(0)
    for run in range(start // MESSAGE_RUN, (end - 1) // MESSAGE_RUN + 1):
        lo = run * MESSAGE_RUN
        digest, raw = runs.run(lo, messages[lo:min(lo + MESSAGE_RUN, end)])
        names.append(digest)
        pieces.append((digest, raw))
    return kept[:2], {"from": start, "pieces": names}, tuple(pieces)


async def _joined_tail(redis: aioredis.Redis, tenant: str, tail: dict[str, Any]
                       ) -> list[dict[str, Any]] | None:
    """The messages `tail` names, from the first kept on; None when a run has expired."""
    raws = await read_pieces(redis, tenant, tail["pieces"])
    if raws is None:
        return None
    start, out = int(tail["from"]), []
    for raw in raws:
        first, messages = orjson.loads(raw)
        out += messages[max(0, start - first):]
    return out


def keep_recent(messages: list[dict[str, Any]], max_chars: int,
                shown_chars: int | None = None,
                sizes: MessageSizes | None = None) -> list[dict[str, Any]]:
    """The first message and the newest ones within `max_chars` of JSON and, with
    `shown_chars` (the Reflector's `max_trace_chars`), only those its transcript can show
    (`transcript.py`: the newest lines within that budget after the first message's): the
    learner never reads more, so a long session's traces need not keep its whole history.
    With `sizes`, each message is measured once across calls (`MessageSizes`)."""
    if len(messages) < 3:
        return messages
    # Sized from the newest back, only as far as they fit: a long session's trace costs
    # what it keeps, not its whole history.
    budget, start = max_chars - len(orjson.dumps(messages[0])), len(messages)
    shown = None if shown_chars is None else shown_budget(line(messages[0]), shown_chars)
    while start > 1:
        if sizes is not None:
            size, width = sizes.of(messages[start - 1])
        else:
            size, width = len(orjson.dumps(messages[start - 1])), -1
        if size > budget:
            break
        if shown is not None:
            if width < 0:
                width = len(line(messages[start - 1]))
            if width > shown:
                break
            shown -= width
        start -= 1
        budget -= size
    return _kept(messages, start)


def _kept(messages: list[dict[str, Any]], start: int) -> list[dict[str, Any]]:
    """What `keep_recent` keeps when messages[start:] are the newest that fit."""
    if start == 1:  # every message fits
        return messages
    start = min(start, len(messages) - 1)  # the newest message is always kept
    while start > 1 and messages[start].get("role") == "tool":
        start -= 1  # never cut a tool exchange from the call that asked for it
    note = {"role": "system", "content": f"[{start - 1} earlier messages not kept]"}
    return [messages[0], note, *messages[start:]]


@dataclass(slots=True)
class _Window:
    """What `TraceWindows` remembers of a session's latest trace."""

    messages: tuple[Any, ...]  # its messages (held: their ids cannot be another's)
    base: int  # the first message measured (>= 1)
    # sizes[k], widths[k]: the JSON sizes and transcript widths of messages[base:base + k]
    sizes: array[int]
    widths: array[int]
    runs: dict[int, tuple[int, str, bytes]]  # a run's first message -> (its end, hash, JSON)


class TraceWindows:
    """`split_messages(messages, keep_recent(messages, ...), runs)` for a session's
    consecutive traces, remembering per session (a bounded LRU) its latest trace's messages,
    the sizes of the newest ones summed from the first measured, and its runs. The start a
    trace shares with the session's last one, the very same objects (compared by identity at
    C speed: between steps a session traces the same message objects again), keeps its
    sums, so a trace measures its new messages and finds where the kept ones start by
    bisection, where `keep_recent` walked back over every message that fits (hundreds of
    short digests late in a long session); a run of shared messages ending where it ended
    keeps its hash and JSON without its key being built again. When every message measured
    fits and some before them were not measured (the start may lie further back), or the
    shared start ends before the first one measured (a step rewrote them), the walk is
    `keep_recent`'s. Exact: the sums are of the
    same objects' sizes, and nothing writes to a message once decoded or rendered. Used by
    the loop's writer task alone."""

    def __init__(self, sessions: int = 256) -> None:
        self._sessions = sessions
        self._last: OrderedDict[Any, _Window] = OrderedDict()

    def split(self, key: Any, messages: list[dict[str, Any]], max_chars: int,
              shown_chars: int | None, sizes: MessageSizes, runs: MessageRuns
              ) -> tuple[list[dict[str, Any]], dict[str, Any] | None, Pieces]:
        last = self._last.pop(key, None)
        n = len(messages)
        if n < 3:
            return split_messages(messages, messages, runs)
        same = 0 if last is None else next(compress(count(), map(is_not, messages,
                                                                  last.messages)),
                                           min(n, len(last.messages)))
        first_size, first_width = sizes.of(messages[0])
        budget = max_chars - first_size
        shown = (None if shown_chars is None
                 else shown_chars - min(first_width, shown_chars // 4))  # `shown_budget`
        window = None if last is None or same <= last.base else self._extend(
            last, same, messages, sizes)
        if window is not None:
            total, wide = window.sizes[-1], window.widths[-1]
            if total > budget or (shown is not None and wide > shown):
                # the first message fitting is after the first measured: the smallest k
                # whose messages from base + k on fit both budgets
                k = bisect_left(window.sizes, total - budget)
                if shown is not None:
                    k = max(k, bisect_left(window.widths, wide - shown))
                start = min(window.base + k, n)
            elif window.base == 1:  # every message fits
                start = 1
            else:  # every message measured fits: the start may lie further back
                window = None
        if window is None:
            start, window = self._walk(messages, budget, shown, sizes)
        kept = _kept(messages, start)
        body = len(kept) - 2  # after the first message and the note
        made: dict[int, tuple[int, str, bytes]] = {}
        names, pieces, tail = [], [], None
        if kept is not messages and body >= 2 * MESSAGE_RUN:
            first, end = n - body, n
            for run in range(first // MESSAGE_RUN, (end - 1) // MESSAGE_RUN + 1):
                lo = run * MESSAGE_RUN
                hi = min(lo + MESSAGE_RUN, end)
                known = last.runs.get(lo) if last is not None and hi <= same else None
                if known is not None and known[0] == hi:  # the same objects as then
                    digest, raw = known[1], known[2]
                else:
                    digest, raw = runs.run(lo, messages[lo:hi])
                made[lo] = (hi, digest, raw)
                names.append(digest)
                pieces.append((digest, raw))
            kept, tail = kept[:2], {"from": first, "pieces": names}
        window.runs = made
        self._last[key] = window
        if len(self._last) > self._sessions:
            self._last.popitem(last=False)
        return kept, tail, tuple(pieces)

    @staticmethod
    def _extend(last: _Window, same: int, messages: list[dict[str, Any]],
                sizes: MessageSizes) -> _Window:
        """`last`'s sums kept up to the first message not the same object, the rest
        measured (`same` > `last.base`)."""
        k = same - last.base
        sums, widths = last.sizes[:k + 1], last.widths[:k + 1]
        size, width = sums[-1], widths[-1]
        for message in islice(messages, same, None):
            grew, wider = sizes.of(message)
            size += grew
            width += wider
            sums.append(size)
            widths.append(width)
        return _Window(tuple(messages), last.base, sums, widths, {})

    @staticmethod
    def _walk(messages: list[dict[str, Any]], budget: int, shown: int | None,
              sizes: MessageSizes) -> tuple[int, _Window]:
        """`keep_recent`'s walk back from the newest message (its start), with the sums of
        what it measured: from the first that did not fit (or message 1) on."""
        start, measured = len(messages), []
        while start > 1:
            size, width = sizes.of(messages[start - 1])
            measured.append((size, width))
            if size > budget:
                break
            if shown is not None:
                if width > shown:
                    break
                shown -= width
            start -= 1
            budget -= size
        measured.reverse()
        base = len(messages) - len(measured)
        sums = array("q", accumulate((m[0] for m in measured), initial=0))
        widths = array("q", accumulate((m[1] for m in measured), initial=0))
        return start, _Window(tuple(messages), base, sums, widths, {})


# A check queued for pieces this process wrote: (True, [piece]) an `EXPIRE` (it refreshes),
# (False, pieces) one tenant's `EXISTS` (the reply counts those still there).
_Check = tuple[bool, list[tuple[str, str]]]


def _lost_pieces(checks: list[_Check], replies: list[Any]) -> list[tuple[str, str]]:
    """The pieces `checks` found gone. An `EXISTS` short of its count does not say which:
    all it named are written again (the same bytes: a piece is named by its hash)."""
    lost: list[tuple[str, str]] = []
    for (_, named), reply in zip(checks, replies, strict=False):
        if int(reply) < len(named):
            lost += named
    return lost


class TeachingFilter:
    """`may_teach` for trace events, with each class's playbook settings resolved once."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._classes: dict[str, ClassPlaybook] = {}

    def __call__(self, event: TraceEvent) -> bool:
        cls = self._classes.get(event.task_class)
        if cls is None:
            cls = self._classes[event.task_class] = class_playbook(self._settings,
                                                                   event.task_class)
        return may_teach(event.messages, event.injected_bullet_ids, cls)


class TraceSink:
    """Writes trace events to Redis in the background, batched; `aclose` flushes them.

    `teaches` decides which events are queued for the workers (all of them when None);
    every event is stored for feedback either way. While Redis is down, traces wait in a
    bounded `OutageBuffer` and are written back in order, with backoff, once it answers;
    newer traces queue behind them so that a session's traces stay in order.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        metrics: Metrics | None = None,
        *,
        ttl_s: int = 86400,
        stream_maxlen: int = 100_000,
        max_pending: int = 1000,
        keep_chars: int = 48_000,
        shown_chars: int | None = 24_000,
        teaches: Callable[[TraceEvent], bool] | None = None,
        shards: int = 1,
        outage_traces: int = 5000,
        outage_bytes: int = 64 << 20,
    ) -> None:
        self._redis = redis
        self._shards = shards
        self._metrics = metrics
        self._ttl_s = ttl_s
        self._maxlen = stream_maxlen
        self._max_pending = max_pending
        self._keep_chars, self._shown_chars = keep_chars, shown_chars
        self._teaches = teaches
        self._queue: deque[tuple[TraceEvent, bool, bool]] = deque()
        self._in_flight = 0
        self._writer: asyncio.Task[None] | None = None
        self._held = OutageBuffer(outage_traces, outage_bytes)
        self._writing_back = asyncio.Lock()  # one write-back at a time, in order
        self._retrier: asyncio.Task[None] | None = None
        # Account pieces this process wrote (tenant, hash), most recent last (`_queue_pieces`),
        # and when it last set its TTL (monotonic): a later call naming one refreshes it only
        # when that is old, and otherwise only checks that it is still there.
        self._written: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._runs = MessageRuns()  # the loop's writer task alone serialises runs
        self._sizes = MessageSizes()  # what `trim` measured of the newest messages
        self._windows = TraceWindows()  # the loop's writer task alone splits traces

    @classmethod
    def from_services(cls, services: Services) -> TraceSink:
        """The app's sink, with its limits from the `learner:` settings."""
        learner = learner_settings(services.settings)
        return cls(services.redis, services.metrics, ttl_s=learner.trace_ttl_s,
                   stream_maxlen=learner.stream_maxlen, max_pending=learner.pending_tasks,
                   keep_chars=2 * learner.max_trace_chars,
                   shown_chars=learner.max_trace_chars,
                   teaches=TeachingFilter(services.settings), shards=learner.trace_shards,
                   outage_traces=learner.outage_buffer_traces,
                   outage_bytes=learner.outage_buffer_bytes)

    def trim(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`messages` as a stored trace keeps them: for a caller that trims them itself,
        off the event loop (a large call's), and publishes with `trimmed=True`."""
        return keep_recent(messages, self._keep_chars, self._shown_chars, self._sizes)

    def publish(self, event: TraceEvent, *, trimmed: bool = False) -> None:
        """Queue `event` (its messages already `trim`med, or not); one writer task sends
        queued events in batched pipelines."""
        if len(self._queue) + self._in_flight >= self._max_pending:
            if self._metrics is not None:  # Redis is slower than traffic: shed, never block
                self._metrics.worker_failure(
                    "trace_shed", keys.trace_shard(event.tenant, self._shards))
            return
        self._queue.append((event, self._teaches is None or self._teaches(event), trimmed))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        """Write until the queue is empty: under load, many traces share one round trip."""
        while self._queue:
            batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
            self._in_flight = len(batch)
            try:
                records = [self._record(*queued) for queued in batch]
                del batch
                if self._holding:  # older traces wait for the store: these go after them
                    self._hold(records)
                else:
                    await self._write(records)
            finally:
                self._in_flight = 0

    def _record(self, event: TraceEvent, teaches: bool, trimmed: bool) -> TraceRecord:
        """The bytes the stored trace holds: messages trimmed (the newest as shared runs),
        the account beside them."""
        inline, tail, runs = event.messages, None, cast(Pieces, ())
        if not trimmed:
            inline, tail, runs = self._windows.split(
                (event.tenant, event.session_id), event.messages, self._keep_chars,
                self._shown_chars, self._sizes, self._runs)
        kept = replace(event, account=None, pieces=(), messages=inline, tail=tail)
        return TraceRecord(event.tenant, event.trace_id, kept.to_json(), event.account, teaches,
                           event.pieces + runs)

    async def _write(self, records: list[TraceRecord]) -> None:
        try:
            await self._send(records)
        except STORE_DOWN:  # kept until Redis answers again
            self._hold(records)
        except Exception:  # a lost trace costs a lesson, never a response
            log.warning("%d traces not recorded", len(records), exc_info=True)
            self._count("trace_write", records)

    async def _send(self, records: list[TraceRecord]) -> None:
        """Store `records` (their pieces, then the traces), and only then announce the ones
        that teach on the trace stream (`_announce`): a worker must never take an entry
        whose trace it cannot read yet. One pipeline for both is ordered on one Redis (one
        connection), not on a cluster: the stream and the tenant's keys live on different
        nodes, written at once, a failed node's commands retried apart. An entry read before
        its trace was stored (the trace's node restarting; its connection still connecting)
        was learned as "expired" and acknowledged, and it had claimed the trace
        (`keys.trace_learned`): the entry the write-back queued again was skipped as a
        duplicate, and the citation credit was lost (bench/README.md, "Redis Cluster: a
        trace announced before it was stored"). A write that fails after its entries landed
        is held and written again: the entries it adds are duplicates of a stored trace."""
        pieces: dict[tuple[str, str], bytes] = {}  # the batch's account pieces, once each
        now = time.monotonic()  # before any command is sent: a refresh happens after it
        async with self._redis.pipeline(transaction=False) as pipe:
            checks = self._queue_pieces(pipe, records, pieces, now)
            for record in records:
                trace_key = keys.trace(record.tenant, record.trace_id)
                pipe.hset(trace_key, EVENT_FIELD, record.event)
                if record.account is not None:
                    pipe.hset(trace_key, ACCOUNT_FIELD, record.account)
                    pipe.set(keys.trace_owner(record.trace_id), record.tenant, ex=self._ttl_s)
                pipe.expire(trace_key, self._ttl_s)
            replies = await pipe.execute()
        lost = _lost_pieces(checks, replies)
        if lost:  # gone since this process wrote them (restart, flush, eviction): again
            async with self._redis.pipeline(transaction=False) as pipe:
                for tenant, digest in lost:
                    pipe.set(keys.account_piece(tenant, digest), pieces[tenant, digest],
                             ex=2 * self._ttl_s)
                await pipe.execute()
        refreshed = {piece for check in checks if check[0] for piece in check[1]}
        for piece in pieces:
            if piece in refreshed or piece not in self._written or piece in lost:
                self._written[piece] = now  # its TTL (2 × the trace's) started after `now`
            self._written.move_to_end(piece)
        while len(self._written) > PIECES_REMEMBERED:
            self._written.popitem(last=False)
        await self._announce([record for record in records if record.teaches])

    async def _announce(self, records: list[TraceRecord]) -> None:
        """Queue `records` for the workers, once every one of them is stored (`_send`)."""
        if not records:
            return  # stored for feedback; nothing for a worker to do now
        async with self._redis.pipeline(transaction=False) as pipe:
            for record in records:
                pipe.xadd(
                    keys.trace_stream(keys.trace_shard(record.tenant, self._shards)),
                    {"kind": "trace", "tenant": record.tenant, "trace_id": record.trace_id},
                    maxlen=self._maxlen, approximate=True,
                )
            await pipe.execute()

    def _queue_pieces(self, pipe: Any, records: list[TraceRecord],
                      pieces: dict[tuple[str, str], bytes], now: float) -> list[_Check]:
        """Queue the batch's account pieces first in `pipe`: a piece this process did not
        write gets a `SET`; one it wrote gets an `EXPIRE` (no bytes sent, its TTL starts
        again) when its last refresh is older than REFRESH_SHARE of the trace's TTL, and
        otherwise is only checked to be there, with one `EXISTS` per tenant for all such.
        Safe: a piece refreshed at r lives until r + 2 × ttl at least; a trace written now
        naming it lives until now + ttl; a piece not refreshed has now − r ≤ ttl / 2, so
        it outlives the trace by ttl / 2 or more (the pipeline's own delay is far less).
        Returns the checks queued, in order: their replies, the first in the pipeline's,
        say which pieces are gone (`_lost_pieces`)."""
        for record in records:
            for digest, raw in record.pieces:
                pieces.setdefault((record.tenant, digest), raw)
        due = now - REFRESH_SHARE * self._ttl_s
        checks: list[_Check] = []
        present: dict[str, list[tuple[str, str]]] = {}
        for piece in pieces:
            refreshed = self._written.get(piece)
            if refreshed is None:
                continue
            if refreshed < due:
                checks.append((True, [piece]))
                pipe.expire(keys.account_piece(*piece), 2 * self._ttl_s)
            else:
                present.setdefault(piece[0], []).append(piece)
        for tenant, named in present.items():  # one tenant's keys share a hash slot
            checks.append((False, named))
            pipe.exists(*(keys.account_piece(tenant, digest) for _, digest in named))
        for piece, raw in pieces.items():
            if piece not in self._written:
                pipe.set(keys.account_piece(*piece), raw, ex=2 * self._ttl_s)
        return checks

    @property
    def _holding(self) -> bool:
        """Traces wait for the store (or are being written back): newer ones queue behind."""
        return bool(self._held) or self._writing_back.locked()

    def _hold(self, records: list[TraceRecord]) -> None:
        """Keep `records` for when Redis answers (the oldest shed past the bounds)."""
        self._update(self._held.extend(records))
        if self._retrier is None or self._retrier.done():
            log.warning("redis unavailable: keeping traces in memory until it answers",
                        extra={"buffered": len(self._held)})
            self._retrier = asyncio.get_running_loop().create_task(self._retry())

    def _update(self, shed: list[TraceRecord] | None = None) -> None:
        """Count the traces shed from the buffer, and show what it holds."""
        if shed:
            self._count("trace_outage_shed", shed)
        if self._metrics is not None:
            self._metrics.trace_outage_buffered.set(len(self._held))
            self._metrics.trace_outage_buffered_bytes.set(self._held.bytes)

    def _count(self, reason: str, records: list[TraceRecord]) -> None:
        if self._metrics is None:
            return
        per_shard = Counter(keys.trace_shard(r.tenant, self._shards) for r in records)
        for shard, n in sorted(per_shard.items()):
            self._metrics.worker_failure(reason, shard, n)

    async def _retry(self) -> None:
        """Write the held traces back once Redis answers, backing off while it does not."""
        delay = RETRY_FIRST_S
        while True:
            await asyncio.sleep(delay)
            if await self._write_back():
                return
            delay = min(delay * 2, RETRY_MAX_S)

    async def _write_back(self) -> bool:
        """Write the held traces, oldest first; False when Redis still does not answer."""
        async with self._writing_back:
            written = 0
            while self._held:
                batch = self._held.take(BATCH)
                try:
                    await self._send(batch)
                except STORE_DOWN:
                    self._update(self._held.put_back(batch))
                    return False
                except asyncio.CancelledError:  # shutdown's wait ran out: still held
                    self._held.put_back(batch)
                    raise
                except Exception:
                    log.warning("%d traces not recorded", len(batch), exc_info=True)
                    self._count("trace_write", batch)
                written += len(batch)
                self._update()
            if written:
                log.info("redis answers again: held traces written", extra={"traces": written})
            return True

    @property
    def pending(self) -> int:
        """Traces published but not yet in Redis (held through an outage included)."""
        return len(self._queue) + self._in_flight + len(self._held)

    async def flush(self) -> None:
        """Wait until every trace published so far has been written or given up on, and
        try once to write back the traces held through an outage."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)
        if self._held:
            await self._write_back()

    async def aclose(self, timeout_s: float = SHUTDOWN_WAIT_S) -> None:
        """Flush, retrying the held traces for at most `timeout_s`; count what is left."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.flush()
                while self._held and not await self._write_back():
                    await asyncio.sleep(RETRY_FIRST_S)
        except TimeoutError:
            pass
        finally:
            if self._retrier is not None:  # its batch in flight goes back to the buffer
                self._retrier.cancel()
                await asyncio.gather(self._retrier, return_exceptions=True)
            if self._held:
                left = self._held.take(len(self._held))
                log.warning("%d traces not recorded: redis did not answer before shutdown",
                            len(left))
                self._update()
                self._count("trace_outage_shed", left)


async def load_trace(
    redis: aioredis.Redis, tenant: str, trace_id: str
) -> tuple[TraceEvent, dict[str, Any] | None] | None:
    """The trace event and its explicit feedback (if any), or None when unknown."""
    raw = await redis.hmget(keys.trace(tenant, trace_id), [EVENT_FIELD, FEEDBACK_FIELD])
    if not raw[0]:
        return None
    record = orjson.loads(raw[0])
    if record.get("tail"):  # the newest messages, stored as shared runs
        tail = await _joined_tail(redis, tenant, record["tail"])
        if tail is None:  # a run has expired (or was lost): the trace cannot be read whole
            return None
        record["messages"] = [*record["messages"], *tail]
    feedback = orjson.loads(raw[1]) if raw[1] else None
    return TraceEvent.from_record(record), feedback


async def record_feedback(
    redis: aioredis.Redis, tenant: str, trace_id: str, feedback: dict[str, Any],
    stream_maxlen: int = 100_000, shards: int = 1,
) -> bool:
    """Attach explicit feedback to a trace and queue it; False when the trace is unknown."""
    trace_key = keys.trace(tenant, trace_id)
    if not await redis.hexists(trace_key, EVENT_FIELD):
        return False
    await redis.hset(trace_key, FEEDBACK_FIELD, orjson.dumps(feedback))
    await redis.xadd(
        keys.trace_stream(keys.trace_shard(tenant, shards)),
        {"kind": "feedback", "tenant": tenant, "trace_id": trace_id},
        maxlen=stream_maxlen, approximate=True,
    )
    return True
