"""The session store on real Redis writes and reads what changed, not the whole session:
one field per decision, a version token, the decoded copy reused while it holds; a session
stored as one blob by an earlier version is read and moved to fields on its next change."""

from __future__ import annotations

import uuid

import orjson
import redis.asyncio as aioredis

from gateway.context.fidelity import MAX_INDEXED_CALLS, observe
from gateway.context.session import (
    CALL_RUN,
    CALL_RUN_PREFIX,
    LOST_RUN,
    Decision,
    MemorySessionStore,
    RedisSessionStore,
    SessionState,
)
from gateway.store import keys

MASK = Decision("compress", "mask", "aged", "mask", step=1)
DROP = Decision("select", "drop", "recency", "drop", step=1)
SUMMARY = Decision("compress", "compress", "aged", "summary", text="digest", step=2)


async def _saved(store: RedisSessionStore, session: str, decisions: dict[str, Decision],
                 ) -> SessionState:
    state = await store.load("t1", session)
    state.decisions = decisions
    state.dirty.add("decisions")
    await store.save("t1", session, state)
    return state


async def test_a_step_writes_only_the_decisions_it_changed(
        redis_client: aioredis.Redis) -> None:
    store, session = RedisSessionStore(redis_client), uuid.uuid4().hex
    key = keys.session("t1", session)
    first = await _saved(store, session, {"a": MASK, "b": DROP})
    assert set(await redis_client.hkeys(key)) == {b"d:a", b"d:b", b"decisions_version"}
    state = await store.load("t1", session)
    assert state.decisions is first.decisions  # same version: this process's copy
    state.decisions = {"a": state.decisions["a"], "c": SUMMARY}
    state.dirty.add("decisions")
    mapping, deleted = state.changes()
    assert set(mapping) == {b"d:c", b"decisions_version"} and deleted == [b"d:b"]
    await store.save("t1", session, state)
    assert set(await redis_client.hkeys(key)) == {b"d:a", b"d:c", b"decisions_version"}
    replica = await RedisSessionStore(redis_client).load("t1", session)  # no decoded copy
    assert replica.decisions == {"a": MASK, "c": SUMMARY}
    assert replica.version == state.version != first.version


async def test_a_replica_reads_decisions_another_one_changed(
        redis_client: aioredis.Redis) -> None:
    one, two, session = RedisSessionStore(redis_client), RedisSessionStore(redis_client), \
        uuid.uuid4().hex
    await _saved(one, session, {"a": MASK})
    assert (await two.load("t1", session)).decisions == {"a": MASK}  # two caches it
    await _saved(one, session, {"a": MASK, "b": DROP})
    assert (await two.load("t1", session)).decisions == {"a": MASK, "b": DROP}


async def test_a_session_stored_as_one_blob_is_read_and_moved_to_fields(
        redis_client: aioredis.Redis) -> None:
    session = uuid.uuid4().hex
    key = keys.session("t1", session)
    blob = orjson.dumps({"a": MASK.dump(), "b": DROP.dump()})
    await redis_client.hset(key, mapping={b"class": b"coding_agent", b"decisions": blob,
                                          b"horizon": b"7:20:3"})
    store = RedisSessionStore(redis_client)
    state = await store.load("t1", session)
    assert state.decisions == {"a": MASK, "b": DROP} and state.legacy
    assert (state.task_class, state.horizon, state.calls, state.steps) == (
        "coding_agent", 7, 20, 3)
    state.decisions = {**state.decisions, "c": SUMMARY}
    state.dirty.add("decisions")
    await store.save("t1", session, state)
    fields = set(await redis_client.hkeys(key))
    assert b"decisions" not in fields and {b"d:a", b"d:b", b"d:c"} <= fields
    again = await RedisSessionStore(redis_client).load("t1", session)
    assert again.decisions == {"a": MASK, "b": DROP, "c": SUMMARY} and not again.legacy


async def test_the_memory_store_keeps_the_same_fields() -> None:
    store = MemorySessionStore()
    state = await store.load("t1", "s")
    state.decisions, state.task_class = {"a": MASK, "b": DROP}, "x"
    state.dirty |= {"decisions", "class"}
    await store.save("t1", "s", state)
    state = await store.load("t1", "s")
    state.decisions = {"b": DROP}
    state.dirty.add("decisions")
    await store.save("t1", "s", state)
    assert set(store._raw[("t1", "s")]) == {b"class", b"d:b", b"decisions_version"}
    assert (await store.load("t1", "s")).decisions == {"b": DROP}


async def test_two_replicas_stepping_at_once_leave_the_last_writers_decisions(
        redis_client: aioredis.Redis) -> None:
    one, two, session = RedisSessionStore(redis_client), RedisSessionStore(redis_client), \
        uuid.uuid4().hex
    await _saved(one, session, {"a": MASK})
    first, second = await one.load("t1", session), await two.load("t1", session)
    first.decisions = {"a": MASK, "b": DROP}  # both read the same version, then step
    second.decisions = {"c": SUMMARY}
    for store, state in ((one, first), (two, second)):
        state.dirty.add("decisions")
        await store.save("t1", session, state)
    fields = set(await redis_client.hkeys(keys.session("t1", session)))
    assert fields == {b"d:c", b"decisions_version"}  # the later delta did not merge
    assert (await one.load("t1", session)).decisions == {"c": SUMMARY}
    assert (await RedisSessionStore(redis_client).load("t1", session)).decisions == {
        "c": SUMMARY}


class _Counting:
    """A Redis client that records the fields of each HMGET (what a load read)."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self.redis, self.read = redis, []  # type: list[list[bytes]]

    def __getattr__(self, name: str) -> object:
        return getattr(self.redis, name)

    async def hmget(self, key: str, fields: list[bytes]) -> list[bytes | None]:
        self.read.append(list(fields))
        return await self.redis.hmget(key, fields)  # type: ignore[no-any-return]


async def _recorded(store: RedisSessionStore, session: str, fidelity: bytes,
                    lost: bytes | None) -> SessionState:
    state = await store.load("t1", session)
    state.fidelity, state.lost = fidelity, lost
    state.dirty.update(("fidelity", "lost"))
    await store.save("t1", session, state)
    return state


async def test_the_fidelity_record_is_read_by_value_only_when_another_process_wrote_it(
        redis_client: aioredis.Redis) -> None:
    """`fidelity` and `lost` grow with a long session (tens of kB): a call reads them only
    when the stored token is not the one of this process's copy."""
    counting = _Counting(redis_client)
    one, two = RedisSessionStore(counting), RedisSessionStore(redis_client)  # type: ignore[arg-type]
    session, lost = uuid.uuid4().hex, orjson.dumps({"3": "digest " * 2000})
    saved = await _recorded(one, session, b'{"n": 4}', lost)
    counting.read.clear()
    state = await one.load("t1", session)
    assert state.lost is saved.lost and state.fidelity is saved.fidelity  # the same bytes
    assert [b"lost" not in fields and b"fidelity" not in fields for fields in counting.read] \
        == [True]  # one HMGET, of the small fields only
    await _recorded(two, session, b'{"n": 6}', None)  # another replica: no `lost` now
    state = await one.load("t1", session)
    assert (state.fidelity, state.lost) == (b'{"n": 6}', None)
    counting.read.clear()
    await one.load("t1", session)  # remembered under the replica's token
    assert len(counting.read) == 1
    # A session stored before the token (an earlier version) is read by value.
    key = keys.session("t1", session)
    await redis_client.hdel(key, "record_version")
    await redis_client.hset(key, "lost", lost)
    assert (await one.load("t1", session)).lost == lost


async def test_lost_is_stored_in_runs_and_a_step_rewrites_only_those_it_changed(
        redis_client: aioredis.Redis) -> None:
    """`lost` (every rewritten message of the session) is stored in runs of LOST_RUN
    messages: a change near the end rewrites the last run, and a replica reads it whole."""
    store, session = RedisSessionStore(redis_client), uuid.uuid4().hex
    key = keys.session("t1", session)
    lost = {str(i): f"digest of message {i} " * 20 for i in range(0, 3 * LOST_RUN, 2)}
    await _recorded(store, session, b'{"n": 1}', orjson.dumps(lost))
    assert await redis_client.hget(key, "lost") == b"[0,1,2]"
    state = await store.load("t1", session)
    read_at = state.record_version
    state.fidelity, state.lost = b'{"n": 2}', orjson.dumps({**lost, "191": None})
    state.dirty.update(("fidelity", "lost"))
    written, _, _ = store._changes(("t1", session), state, read_at)
    assert {name for name in written if name.startswith(b"lost:")} == {b"lost:2"}
    state.record_version = read_at
    await store.save("t1", session, state)
    replica = await RedisSessionStore(redis_client).load("t1", session)
    assert orjson.loads(replica.lost or b"") == {**lost, "191": None}
    assert replica.fidelity == b'{"n": 2}'


def _tool_session(turns: int) -> list[dict[str, object]]:
    msgs: list[dict[str, object]] = [{"role": "system", "content": "agent"},
                                     {"role": "user", "content": "fix the build"}]
    for i in range(turns):
        args = orjson.dumps({"cmd": f"cat src/module_{i % 37}.py"}).decode()
        msgs += [{"role": "assistant", "content": None, "tool_calls": [
                     {"id": f"c{i}", "type": "function",
                      "function": {"name": "run", "arguments": args}}]},
                 {"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i} of output"}]
    return msgs


async def test_the_fidelity_record_is_written_as_its_new_run_and_a_replica_continues_it(
        redis_client: aioredis.Redis) -> None:
    """The record's 256 indexed tool calls are stored in runs of CALL_RUN: a call writes the
    run its new call went to (not every call indexed), old runs are deleted as the window
    moves, and two processes taking turns on the session give the signals and the record
    one process gives (another replica reads the runs it did not write)."""
    msgs, session = _tool_session(300), uuid.uuid4().hex
    one, two, alone = (RedisSessionStore(redis_client), RedisSessionStore(redis_client),
                       MemorySessionStore())
    key = keys.session("t1", session)
    for n, end in enumerate(range(4, len(msgs) + 1, 2)):
        store = one if (n // 5) % 2 == 0 else two  # five calls each, in turn
        signals = []
        for each in (store, alone):
            state = await each.load("t1", session)
            state.dirty.clear()
            signals.append(observe(state, msgs[:end], None, task_class="c", mode="bypass"))
            if each is one and n == 280:  # a call between others of the same process
                read_at = state.record_version
                mapping, deleted, _ = one._changes(("t1", session), state, read_at)
                runs = {name for name in mapping if name.startswith(CALL_RUN_PREFIX)}
                assert runs == {CALL_RUN_PREFIX + str(280 // CALL_RUN).encode()}
                assert len(mapping[b"fidelity"]) < 100 and not deleted
                state.record_version = read_at
            await each.save("t1", session, state)
        assert signals[0] == signals[1]
    stored = await redis_client.hgetall(key)
    runs = sorted(int(k[len(CALL_RUN_PREFIX):]) for k in stored if k.startswith(CALL_RUN_PREFIX))
    assert runs == list(range((300 - MAX_INDEXED_CALLS) // CALL_RUN, 299 // CALL_RUN + 1))
    assert orjson.loads(stored[b"fidelity"])["k"] == MAX_INDEXED_CALLS
    fresh = await RedisSessionStore(redis_client).load("t1", session)
    mine = await alone.load("t1", session)
    assert fresh.fidelity == mine.fidelity and dict(fresh.indexed_runs) == dict(mine.indexed_runs)
