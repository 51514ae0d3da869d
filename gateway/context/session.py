"""Per-session state: the decided task class and the remembered compaction decisions.

Remembered decisions make compaction stable: an item masked or summarised once is rendered
the same way on every later call, so consecutive calls share their rendered prefix.

Redis: one hash per session. Each decision is a field of its own (`d:<item id>`), and a
`decisions_version` token changes whenever they do, so that neither side of a call grows
with the session: a read is one HMGET of the small fields (the decisions come from this
process's decoded copy while the token is the same; another HGETALL only when it is not;
the fidelity record and `lost`, tens of kB on a long session, likewise under
`record_version`), a write sends only the fields that changed, and only when something
changed. A step's decisions go through one Lua script (`session_save.lua`): HSET of those
it changed, HDEL of those no longer in force, applied only if the stored token is still the
one the call read; if another call changed them meanwhile, the step writes its decisions
whole instead, so the last writer wins as with the single blob before. A session stored by
an earlier version as one `decisions` blob is read from it and moved to fields by its next
change of decisions.
`MemorySessionStore` keeps the same fields in a dict and serves `ctxgate replay` without a
server.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, Protocol, cast

import orjson

from gateway.store import keys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

SESSION_TTL_S = 7 * 86400


@dataclass(frozen=True, slots=True)
class Decision:
    """How one item is rendered from now on; re-applied verbatim on every later call."""

    stage: str
    action: str  # drop | mask | compress | dedup
    reason: str
    method: str  # drop | mask | summary | dedup | strip
    level: int = 1
    arg: str | None = None  # dedup: the representative's id; strip: the pattern
    # summary: the rendered text, fixed when decided (it depends on what the model saw
    # before the item at that time), so every later call and every replica sends it as is.
    text: str | None = None
    step: int = 0  # the session's compaction step that took it (the drop log's `step`)

    def dump(self) -> list[Any]:
        return [self.stage, self.action, self.reason, self.method, self.level, self.arg,
                self.text, self.step]

    @classmethod
    def load(cls, raw: list[Any]) -> Decision:
        return cls(
            str(raw[0]),
            str(raw[1]),
            str(raw[2]),
            str(raw[3]),
            int(raw[4]),
            raw[5],
            raw[6] if len(raw) > 6 else None,
            int(raw[7]) if len(raw) > 7 else 0,
        )


PLAYBOOK_PIN_FIELD = b"playbook"  # the field gateway/playbook/inject.py pins a block in
VERSION_FIELD = b"decisions_version"  # a new token whenever the decisions change
DECISION_PREFIX = b"d:"  # one field per decision: d:<item id>
LEGACY_FIELD = b"decisions"  # all decisions in one JSON blob (sessions stored before fields)
# The fidelity record and `lost` (fidelity.py): tens of kB on a long session (`lost` holds
# every rewritten message's text), read by value only when `RECORD_VERSION_FIELD` is not
# the token of the copy this process wrote or read last (`Records`).
RECORD_FIELDS = (b"fidelity", b"lost", b"calls")
RECORD_VERSION_FIELD = b"record_version"  # a new token whenever either of them changes
RECORD_DIRT = frozenset({"fidelity", "lost"})
LOST_RUN = 64  # messages per stored run of `lost` (`lost_runs`); the `lost` field lists them
LOST_RUN_PREFIX = b"lost:"
# The fidelity record's tool calls (`fidelity.py`), in runs of CALL_RUN calls numbered from
# the session's first (`calls:<run>`; the `calls` field lists them): a call writes the run
# its new calls went to, not the 256 calls indexed.
CALL_RUN = 32
CALL_RUN_PREFIX = b"calls:"
SMALL_FIELDS = (b"class", b"horizon", b"prefix", PLAYBOOK_PIN_FIELD, VERSION_FIELD, LEGACY_FIELD,
                RECORD_VERSION_FIELD)


@dataclass
class SessionState:
    task_class: str | None = None
    decisions: dict[str, Decision] = field(default_factory=dict)
    horizon: int = 0  # messages before this index went through an age-based step
    calls: int = 0  # calls seen, and aging steps taken (they change the prefix)
    steps: int = 0
    # Calls the session made before it aged, recognised late (`engine.resend_aging`): each
    # kept its prefix, so they count towards the steps' instability budget.
    stable_calls: int = 0
    # A step left out its digests' mask batch, in whole or in part (`steps.unrepaid`), and
    # no batch has come since: the next one is late (`compress._expired_digests`).
    late_batch: bool = False
    prefix: str = ""  # "<messages>:<rolling hash>" of the last rendered request
    # The playbook block pinned for this session (written by the playbook, read-only here):
    # loaded with the rest of the session, so an open session's block costs no round trip.
    playbook_pin: bytes | None = None
    # The fidelity signals' record of the last call (`fidelity.py`), kept as stored: what
    # was forwarded of it (`lost`, rewritten only when that changes) and the tool calls so far.
    fidelity: bytes | None = None
    lost: bytes | None = None
    # The fidelity record's runs of tool calls (run number -> JSON), written with `fidelity`:
    # a run whose bytes are the ones stored (the same object, kept) is not written again.
    indexed_runs: Mapping[int, bytes] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)
    # The decisions as stored (fields `d:<id>`; empty for a legacy blob) and their token:
    # a save writes only what differs from them.
    stored: Mapping[str, Decision] = field(default_factory=dict)
    version: bytes | None = None
    record_version: bytes | None = None  # token of `fidelity` and `lost` as last saved
    legacy: bool = False  # stored as one blob: the next change of decisions rewrites all
    # `lost` (the very bytes object) with its runs and their hashes (`lost_runs`,
    # `run_hashes`), when the fidelity signals made them from what they kept of the last
    # call's (`fidelity.Haystack.found_runs`): a save need not decode `lost` again.
    lost_split: tuple[bytes, dict[int, bytes], dict[int, bytes]] | None = None
    # What the last `decide` said: `decisions` (the dict, by identity) differs from `stored`
    # (likewise) at most at these ids; `changes` then compares those alone.
    delta: tuple[Mapping[str, Decision], Mapping[str, Decision], Collection[str]] | None = None
    # The session's agent's record as of this call, never stored with the session: its
    # sessions that reached each of `agents.RUN_MARKS` calls (`agents.AgentRunStore`).
    agent_runs: tuple[int, ...] | None = None
    # Likewise its harness's (the agent's system prompt, whatever tools a task brings:
    # `engine._session_agent`), for an agent that calls tools through the API.
    harness_runs: tuple[int, ...] | None = None

    def decide(self, decisions: dict[str, Decision], ids: Collection[str]) -> None:
        """`decisions` in force from now on, differing from the current ones at most at
        `ids` (`apply.changed_decisions`, or the ids a call added). The dict is not changed
        in place afterwards (`DecodedDecisions`)."""
        exact = self.decisions is self.stored and not self.legacy
        self.delta = (self.stored, decisions, ids) if exact else None
        self.decisions = decisions
        self.dirty.add("decisions")

    def encode(self, name: str) -> bytes:
        if name == "class":
            return (self.task_class or "").encode()
        if name == "horizon":
            late = ":1" if self.late_batch else ""
            stable = f"{late or ':'}:{self.stable_calls}" if self.stable_calls else late
            return f"{self.horizon}:{self.calls}:{self.steps}{stable}".encode()
        if name in ("fidelity", "lost"):
            return getattr(self, name) or b""
        return self.prefix.encode()

    @classmethod
    def decode(cls, raw: Mapping[bytes, bytes]) -> SessionState:
        """The state from the session hash's small fields (decisions are read apart)."""
        state = cls()
        if not raw:
            return state
        state.task_class = raw.get(b"class", b"").decode() or None
        horizon, _, counts = raw.get(b"horizon", b"0").decode().partition(":")
        state.horizon = int(horizon)
        if counts:
            calls, _, rest = counts.partition(":")
            steps, _, rest = rest.partition(":")
            late, _, stable = rest.partition(":")
            state.calls, state.steps = int(calls), int(steps or 0)
            state.late_batch = late == "1"
            state.stable_calls = int(stable or 0)
        state.prefix = raw.get(b"prefix", b"").decode()
        state.playbook_pin = raw.get(PLAYBOOK_PIN_FIELD)
        state.fidelity, state.lost = raw.get(b"fidelity"), raw.get(b"lost")
        state.version = raw.get(VERSION_FIELD)
        state.record_version = raw.get(RECORD_VERSION_FIELD)
        return state

    def changes(self) -> tuple[dict[bytes, bytes], list[bytes]]:
        """The fields to write and the fields to delete for what is dirty; a new token
        when the decisions changed (`self.version`)."""
        mapping = {name.encode(): self.encode(name) for name in self.dirty if name != "decisions"}
        deleted: list[bytes] = []
        if "decisions" in self.dirty:
            stored = {} if self.legacy else self.stored
            ids = self._changed_ids()
            walked = self.decisions if ids is None else {i: self.decisions[i] for i in ids}
            for item_id, decision in walked.items():
                old = stored.get(item_id)
                if old is not decision and old != decision:
                    mapping[DECISION_PREFIX + item_id.encode()] = orjson.dumps(decision.dump())
            if ids is None:
                deleted = [DECISION_PREFIX + k.encode() for k in stored
                           if k not in self.decisions]
            if self.legacy:
                deleted.append(LEGACY_FIELD)
            self.version = os.urandom(8).hex().encode()
            mapping[VERSION_FIELD] = self.version
        if not self.dirty.isdisjoint(RECORD_DIRT):
            self.record_version = os.urandom(8).hex().encode()
            mapping[RECORD_VERSION_FIELD] = self.record_version
        return mapping, deleted

    def saved(self) -> None:
        """What `changes` described is stored now."""
        if "decisions" in self.dirty:
            self.stored, self.legacy = self.decisions, False
        self.delta = None
        self.dirty.clear()

    def _changed_ids(self) -> list[str] | None:
        """The ids whose decision may differ from the stored one, in `decisions`' order
        (`changes` writes them in it, as a walk of every decision does), when the last
        `decide` said which and none of them was undone and they sit among the last ones
        (a call adds its decisions at the end): the walk back from the end stops once it
        found them. None: walk every decision."""
        delta, decisions = self.delta, self.decisions
        if (delta is None or self.legacy or delta[0] is not self.stored
                or delta[1] is not decisions):
            return None
        want = set()
        for item_id in delta[2]:
            if item_id in decisions:
                want.add(item_id)
            elif item_id in self.stored:
                return None  # undone: the deleted fields come in the stored order
        found: list[str] = []
        limit = 2 * len(want) + 8
        for n, item_id in enumerate(reversed(decisions)):
            if not want:
                break
            if n >= limit:
                return None
            if item_id in want:
                want.discard(item_id)
                found.append(item_id)
        if want:
            return None
        found.reverse()
        return found


def decode_decisions(raw: bytes) -> dict[str, Decision]:
    """A legacy `decisions` blob."""
    return {k: Decision.load(v) for k, v in orjson.loads(raw).items()}


def decision_fields(raw: Mapping[bytes, bytes]) -> dict[str, Decision]:
    """The decisions among a session hash's fields."""
    n = len(DECISION_PREFIX)
    return {k[n:].decode(): Decision.load(orjson.loads(v))
            for k, v in raw.items() if k.startswith(DECISION_PREFIX)}


Chunks = dict[int, bytes]  # run number -> hash of its JSON
Read = Callable[[list[bytes]], Awaitable[list[bytes | None]]]  # HMGET of the session hash


def lost_runs(raw: bytes | None) -> dict[int, bytes]:
    """`lost` (a JSON object: message index -> the text sent in its place) cut into runs of
    `LOST_RUN` messages, each stored in a field of its own (`lost:<run>`): a step rewrites
    the runs from its first change on, not every digest of the session."""
    runs: dict[int, dict[str, Any]] = {}
    for index, text in (orjson.loads(raw) if raw else {}).items():
        runs.setdefault(int(index) // LOST_RUN, {})[index] = text
    return {run: orjson.dumps(entries) for run, entries in runs.items()}


def run_hashes(runs: Mapping[int, bytes]) -> Chunks:
    return {run: run_hash(raw) for run, raw in runs.items()}


def run_hash(raw: bytes) -> bytes:
    return hashlib.blake2b(raw, digest_size=16).digest()


def _run_field(prefix: bytes, run: int) -> bytes:
    return prefix + str(run).encode()


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """The fidelity record and `lost` as stored under one token: `fields` holds `fidelity`
    and `lost` (whole: the runs joined), `lost_runs` the hashes of `lost`'s runs, `calls`
    the runs of tool calls."""

    fields: dict[bytes, bytes]
    lost_runs: Chunks
    calls: Mapping[int, bytes]

    @property
    def size(self) -> int:
        return sum(map(len, self.fields.values())) + sum(map(len, self.calls.values()))


async def read_record(read: Read) -> StoredRecord:
    """The record by value: its fields, then the runs they list (one more HMGET)."""
    values = await read(list(RECORD_FIELDS))
    fields = {name: v for name, v in zip(RECORD_FIELDS, values, strict=True) if v}
    lost = fields.get(b"lost", b"{")
    lost_numbers = orjson.loads(lost) if lost.startswith(b"[") else []  # else one object
    call_numbers = orjson.loads(fields.pop(b"calls", b"[]"))
    wanted = [_run_field(LOST_RUN_PREFIX, n) for n in lost_numbers]
    wanted += [_run_field(CALL_RUN_PREFIX, n) for n in call_numbers]
    raws = await read(wanted) if wanted else []
    runs = {n: raw for n, raw in zip(lost_numbers, raws, strict=False) if raw}
    calls = {n: raw for n, raw in zip(call_numbers, raws[len(lost_numbers):], strict=True)
             if raw}
    if lost_numbers:
        fields[b"lost"] = orjson.dumps(
            {k: v for raw in runs.values() for k, v in orjson.loads(raw).items()})
    return StoredRecord(fields, run_hashes(runs), calls)


def record_changes(state: SessionState, mapping: dict[bytes, bytes], deleted: list[bytes],
                   before: StoredRecord | None) -> StoredRecord:
    """Add to `state.changes()`'s `mapping` and `deleted` the runs of `lost` and of calls
    that differ from those stored under the token read (`before`, when this process knows
    it: else every run is written), with the lists naming them; the record as it will be
    stored."""
    hashes = before.lost_runs if before is not None else {}
    if b"lost" in mapping:
        split = state.lost_split
        if split is not None and split[0] is state.lost:
            runs, hashes = split[1], split[2]
        else:
            runs = lost_runs(state.lost)
            hashes = run_hashes(runs)
        for run, raw in runs.items():
            if before is None or before.lost_runs.get(run) != hashes[run]:
                mapping[_run_field(LOST_RUN_PREFIX, run)] = raw
        deleted += [_run_field(LOST_RUN_PREFIX, run) for run in hashes_of(before)
                    if run not in runs]
        mapping[b"lost"] = orjson.dumps(sorted(runs)) if runs else b""
    old = before.calls if before is not None else None
    if b"fidelity" in mapping:
        for run, raw in state.indexed_runs.items():
            if old is None or old.get(run) != raw:  # identical bytes: not written again
                mapping[_run_field(CALL_RUN_PREFIX, run)] = raw
        deleted += [_run_field(CALL_RUN_PREFIX, run) for run in old or ()
                    if run not in state.indexed_runs]
        if old is None or old.keys() != state.indexed_runs.keys():
            listed = sorted(state.indexed_runs)
            mapping[b"calls"] = orjson.dumps(listed) if listed else b""
    fields = {name: value for name, value in zip(
        RECORD_FIELDS, (state.fidelity, state.lost), strict=False) if value}
    return StoredRecord(fields, hashes, state.indexed_runs)


def hashes_of(record: StoredRecord | None) -> Chunks:
    return {} if record is None else record.lost_runs


class Records:
    """The session's fidelity record and `lost` as this process last wrote or read them,
    under their version token (a bounded LRU, by bytes): a call reads them by value only
    when another process changed them. The bytes handed out are the ones remembered, so
    that `fidelity.Haystack` finds them identical to what it decoded."""

    def __init__(self, max_bytes: int = 32 << 20) -> None:
        self._max_bytes, self._bytes = max_bytes, 0
        self._by_session: OrderedDict[Any, tuple[bytes, StoredRecord]] = OrderedDict()

    def get(self, key: Any, version: bytes | None) -> StoredRecord | None:
        hit = self._by_session.get(key)
        if hit is None or version is None or hit[0] != version:
            return None
        self._by_session.move_to_end(key)
        return hit[1]

    def put(self, key: Any, version: bytes, record: StoredRecord) -> None:
        self._drop(key)
        self._by_session[key] = (version, record)
        self._bytes += record.size
        while self._bytes > self._max_bytes and len(self._by_session) > 1:
            self._drop(next(iter(self._by_session)))

    def _drop(self, key: Any) -> None:
        old = self._by_session.pop(key, None)
        if old is not None:
            self._bytes -= old[1].size


class DecodedDecisions:
    """Decoded decisions per session while their version token stays the same (a bounded
    LRU on the store): a call neither reads nor decodes what the session's previous call
    saved or read. The dicts handed out are shared, so they are never changed in place
    (the engine replaces a session's decisions, it does not edit them)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._by_session: OrderedDict[Any, tuple[bytes, dict[str, Decision]]] = OrderedDict()

    def get(self, key: Any, version: bytes) -> dict[str, Decision] | None:
        hit = self._by_session.get(key)
        if hit is None or hit[0] != version:
            return None
        self._by_session.move_to_end(key)
        return hit[1]

    def put(self, key: Any, version: bytes, decisions: dict[str, Decision]) -> None:
        self._by_session[key] = (version, decisions)
        self._by_session.move_to_end(key)
        if len(self._by_session) > self._size:
            self._by_session.popitem(last=False)


def _with_decisions(
    state: SessionState, raw: Mapping[bytes, bytes], decisions: dict[str, Decision] | None
) -> SessionState:
    """`state` given its decisions: the cached ones, else those of `raw` (legacy blob, or
    the `d:` fields of a full read)."""
    if decisions is None:
        blob = raw.get(LEGACY_FIELD)
        if state.version is None and blob is not None:
            decisions, state.legacy = decode_decisions(blob), True
        else:
            decisions = decision_fields(raw)
    state.decisions = decisions
    state.stored = {} if state.legacy else decisions
    return state


class SessionStore(Protocol):
    async def load(self, tenant: str, session_id: str) -> SessionState: ...
    async def save(self, tenant: str, session_id: str, state: SessionState) -> None: ...


class _Stored:
    """What both stores share: the decisions decoded and the record known per token."""

    def __init__(self) -> None:
        self._decoded = DecodedDecisions()
        self._records = Records()

    async def _record(self, memo: Any, small: dict[bytes, bytes], read: Read) -> SessionState:
        """The state from its small fields and its record: this process's copy while the
        stored token is its own, else read (another replica wrote it, an earlier version
        stored it without a token, or the session is new)."""
        version = small.get(RECORD_VERSION_FIELD)
        record = self._records.get(memo, version)
        if record is None:
            record = await read_record(read)
            if version is not None:
                self._records.put(memo, version, record)
        state = SessionState.decode({**small, **record.fields})
        state.indexed_runs = record.calls
        return state

    def _changes(self, memo: Any, state: SessionState, read_at: bytes | None
                 ) -> tuple[dict[bytes, bytes], list[bytes], StoredRecord | None]:
        """`state.changes()`, the record stored as its runs (`record_changes`), and the
        record as stored after (None: not changed)."""
        mapping, deleted = state.changes()
        if state.dirty.isdisjoint(RECORD_DIRT):
            return mapping, deleted, None
        before = self._records.get(memo, read_at)
        return mapping, deleted, record_changes(state, mapping, deleted, before)

    def _saved(self, memo: Any, state: SessionState, record: StoredRecord | None) -> None:
        if "decisions" in state.dirty and state.version is not None:
            self._decoded.put(memo, state.version, state.decisions)
        if record is not None and state.record_version is not None:
            self._records.put(memo, state.record_version, record)
        state.saved()


class RedisSessionStore(_Stored):
    def __init__(self, redis: aioredis.Redis) -> None:
        super().__init__()
        self._redis = redis
        source = resources.files("gateway.context").joinpath("session_save.lua").read_text()
        self._save = redis.register_script(source)

    async def load(self, tenant: str, session_id: str) -> SessionState:
        key, memo = keys.session(tenant, session_id), (tenant, session_id)
        values = cast(list[bytes | None], await self._redis.hmget(key, list(SMALL_FIELDS)))
        small = {name: v for name, v in zip(SMALL_FIELDS, values, strict=True) if v is not None}

        async def read(fields: list[bytes]) -> list[bytes | None]:
            return cast(list[bytes | None], await self._redis.hmget(key, fields))

        state = await self._record(memo, small, read)
        if state.version is None:  # no decisions, or a legacy blob (read above)
            return _with_decisions(state, small, None)
        decisions = self._decoded.get(memo, state.version)
        if decisions is None:
            full = cast(dict[bytes, bytes], await self._redis.hgetall(key))
            state.version = full.get(VERSION_FIELD)  # as read with the decisions
            decisions = decision_fields(full)
            if state.version is not None:
                self._decoded.put(memo, state.version, decisions)
        return _with_decisions(state, small, decisions)

    async def save(self, tenant: str, session_id: str, state: SessionState) -> None:
        if not state.dirty:
            return
        key, memo = keys.session(tenant, session_id), (tenant, session_id)
        read_at, record_read_at = state.version, state.record_version
        mapping, deleted, record = self._changes(memo, state, record_read_at)
        if "decisions" not in state.dirty:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.hset(key, mapping=mapping)  # type: ignore[arg-type]
                if deleted:
                    pipe.hdel(key, *deleted)
                pipe.expire(key, SESSION_TTL_S)
                await pipe.execute()
        elif not await self._save_decisions(key, read_at, "delta", mapping, deleted):
            # Another call changed the decisions since this one read them: write them whole.
            state.legacy = True
            state.record_version = record_read_at
            mapping, deleted, record = self._changes(memo, state, record_read_at)
            await self._save_decisions(key, read_at, "all", mapping, deleted)
        self._saved(memo, state, record)

    async def _save_decisions(self, key: str, read_at: bytes | None, mode: str,
                              mapping: dict[bytes, bytes], deleted: list[bytes]) -> bool:
        pairs = [part for item in mapping.items() for part in item]
        args: list[bytes | str | int] = [read_at or b"", mode, SESSION_TTL_S, len(mapping),
                                         *pairs, *deleted]
        return bool(await self._save(keys=[key], args=args))


class MemorySessionStore(_Stored):
    """A throwaway store for replays: the same fields as in Redis (the record in runs,
    written as changed), in this object only."""

    def __init__(self) -> None:
        super().__init__()
        self._raw: dict[tuple[str, str], dict[bytes, bytes]] = {}

    async def load(self, tenant: str, session_id: str) -> SessionState:
        memo = (tenant, session_id)
        raw = self._raw.get(memo, {})

        async def read(fields: list[bytes]) -> list[bytes | None]:
            return [raw.get(name) for name in fields]

        small = {name: raw[name] for name in SMALL_FIELDS if name in raw}
        state = await self._record(memo, small, read)
        cached = None
        if state.version is not None:
            cached = self._decoded.get(memo, state.version)
        return _with_decisions(state, raw, cached)

    async def save(self, tenant: str, session_id: str, state: SessionState) -> None:
        memo = (tenant, session_id)
        raw = self._raw.setdefault(memo, {})
        mapping, deleted, record = self._changes(memo, state, state.record_version)
        raw.update(mapping)
        for name in deleted:
            raw.pop(name, None)
        self._saved(memo, state, record)
