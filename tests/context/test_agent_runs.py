"""An agent whose sessions mostly end young (a tenant's same system prompt and tool set,
`classify.agent_fingerprint`) has a step weighed over the calls a share of its sessions
that reached this one's age still had left, not over at least `repay_calls`
(`steps.agent_left`, `agents.AgentRunStore`: the sessions that reached each of
`agents.RUN_MARKS` calls). Reflexion's HotpotQA runs of 2-6 calls took 59 of their 99
aging steps on a run's last call, weighed over 20 calls to come: cost @0.1 below no
gateway's (bench/README.md, "A fifteenth agent kind ... (gen57)")."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from gateway.context.agents import RUN_MARKS, MemoryAgentRunStore, RedisAgentRunStore
from gateway.context.classify import agent_fingerprint
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item
from gateway.context.steps import agent_left, unrepaid
from gateway.context.taskclass import Compaction
from gateway.store import keys

C = Compaction(repay_calls=20, early_max_tokens=8000, repay_agent_runs=5)


def _record(lengths: list[int]) -> tuple[int, ...]:
    """The record of sessions of these lengths in calls: how many reached each mark."""
    return tuple(sum(1 for n in lengths if n >= mark) for mark in RUN_MARKS)


def test_the_share_of_sessions_bounds_the_calls_to_come() -> None:
    assert agent_left(3, C, _record([5] * 7)) == 3  # all ran 5: calls 3-5 to come
    assert agent_left(5, C, _record([5] * 7)) == 1
    assert agent_left(7, C, _record([5] * 6 + [7])) == 1  # it ends by 7, the mark 8's last
    assert agent_left(3, C, _record([5] * 5)) is None  # 4 earlier sessions: no evidence yet
    assert agent_left(3, C, _record([5] * 5 + [20] * 4)) is None  # long-running
    assert agent_left(3, C, None) is None
    assert agent_left(3, C.model_copy(update={"repay_agent_runs": 0}), _record([6] * 9)) is None


def test_one_long_session_does_not_set_the_agents_estimate() -> None:
    """One session of 21 calls among 29 of 5: nine in ten of the agent's sessions ended by
    5, so a session at its 3rd call has 3 to come (the longest session set it at 19)."""
    assert agent_left(3, C, _record([5] * 29 + [21])) == 3
    assert agent_left(3, C.model_copy(update={"repay_agent_quantile": 1.0}),
                      _record([5] * 29 + [21])) is None


def test_a_session_that_outlived_most_is_weighed_by_those_that_did() -> None:
    """Of the sessions that reached this one's age: 40 of 5 calls, 4 of 15. At call 3 nine
    in ten ended by 5; at call 10 the ones still running ran to 15."""
    record = _record([5] * 40 + [15] * 4)
    assert agent_left(3, C, record) == 3
    assert agent_left(10, C, record) == 6  # 10-15 to come


def _item(index: int, text: str, tokens: int) -> Item:
    return Item(id=f"m{index}", kind="tool" if index % 2 == 0 else "assistant",
                unit=f"m{index}", message_index=index, segment=0, text=text, tokens=tokens,
                fixed_tokens=0, turn=(index + 1) // 2, pinned=False, rewritable=True)


def test_a_step_on_a_young_agents_last_calls_does_not_repay() -> None:
    before = [_item(0, "task", 100), _item(1, "turn", 1000), _item(2, "output", 500)]
    after = [_item(0, "task", 100), _item(1, "digest", 200), _item(2, "output", 500)]
    assert unrepaid(before, after, 3, 3, C) == set()  # repays over 20 calls to come
    assert unrepaid(before, after, 3, 3, C, runs=_record([4] * 4)) == set()  # too few seen
    assert unrepaid(before, after, 3, 3, C, runs=_record([4] * 8)) == {1}  # 2 calls left
    assert unrepaid(before, after, 3, 3, C, runs=_record([4] * 4 + [40] * 4)) == set()


def test_a_step_that_repays_in_part_is_weighed_as_before() -> None:
    """Over the 2 calls left only the newest rewrite repays: the step is taken, and weighed
    over at least 20 calls, keeps its early rewrite too (left out, it came back in a later
    step: one more prefix change)."""
    before = [_item(0, "task", 100), _item(1, "turn", 1000), _item(2, "output", 500),
              _item(3, "turn", 1000)]
    after = [_item(0, "task", 100), _item(1, "digest", 200), _item(2, "output", 500),
             _item(3, "digest", 100)]
    assert unrepaid(before, after, 4, 3, C.model_copy(update={"repay_calls": 2})) == {1}
    assert unrepaid(before, after, 4, 3, C, runs=_record([4] * 8)) == set()


async def test_the_stores_count_the_sessions_that_reach_each_mark(
    redis_client: aioredis.Redis,
) -> None:
    """A session counts at its first call and at each mark it reaches (1-10, 12, ...);
    records are per tenant and agent (`keys.agent_runs`)."""
    for store in (MemoryAgentRunStore(), RedisAgentRunStore(redis_client)):
        for tenant, fingerprint in (("t-runs", "fp"), ("t-runs", "other"), ("t-else", "fp")):
            await redis_client.delete(keys.agent_runs(tenant, fingerprint))
        for calls in range(1, 10):  # a session of 9 calls
            await store.note("t-runs", "fp", calls)
        assert await store.note("t-runs", "fp", 1) == _record([9, 1])  # a new session
        assert await store.note("t-runs", "fp", 2) == _record([9, 2])
        assert await store.note("t-runs", "fp", 11) == _record([9, 2])  # 11: no mark
        assert await store.note("t-runs", "other", 1) == _record([1])
        assert await store.note("t-else", "fp", 1) == _record([1])  # another tenant's


SYSTEM = "You answer questions with search(entity) over an encyclopedia. Answer with finish."
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
         for name in ("search", "finish")]


def _run(k: int, calls: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": f"Question {k}: who?"}]
    for n in range(calls):
        messages.append({"role": "assistant", "content": f"I search entity {k}-{n}.",
                         "tool_calls": [{"id": f"c{k}-{n}", "type": "function", "function": {
                             "name": "search", "arguments": f'{{"entity": "e{k}-{n}"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{k}-{n}",
                         "content": f"Entity {k}-{n} was founded in {1900 + k + n}."})
    messages.append({"role": "assistant", "content": "Done.", "tool_calls": [{
        "id": f"c{k}-end", "type": "function",
        "function": {"name": "finish", "arguments": '{"answer": "x"}'}}]})
    return messages


async def test_the_engine_records_how_long_an_agents_sessions_run(
    engine: ContextEngine, redis_client: aioredis.Redis,
) -> None:
    """Each session of one agent (same tenant, system prompt and tools) counts once at
    each mark it reaches: the record a step on its next sessions is weighed by."""
    tenant = f"t-runs-{id(engine)}"
    for k, calls in enumerate((2, 5, 3)):
        messages = _run(k, calls)
        for end in [i for i, m in enumerate(messages) if m["role"] == "assistant"]:
            await engine.fit({"messages": messages[:end], "tools": TOOLS},
                             CallContext(tenant, "s", {"x-ctxgate-session-id": f"r{k}"}))
    fingerprint = agent_fingerprint({"messages": [{"role": "system", "content": SYSTEM}],
                                     "tools": TOOLS})
    assert fingerprint is not None
    record = await redis_client.hgetall(keys.agent_runs(tenant, fingerprint))
    assert record == {f"reached:{mark}".encode(): str(n).encode()
                      for mark, n in zip(RUN_MARKS, _record([3, 6, 4]), strict=True) if n}


async def test_a_system_message_a_session_appends_leaves_its_agent_as_it_was(
    engine: ContextEngine, redis_client: aioredis.Redis,
) -> None:
    """The agent is read from the request's leading system prompt (and tools) only, also
    where the call only appends to the session's last one (the fingerprint is then carried
    over from it): a system message appended mid-conversation (a note, a harness's result)
    leaves the calls after it counting for the same agent, as `agent_fingerprint` reads
    it (bench/README.md, "Results sent back as system messages")."""
    tenant = f"t-appended-{id(engine)}"
    messages = _run(7, 4)
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    note = {"role": "system", "content": "Budget note: 3 searches left."}
    headers = {"x-ctxgate-session-id": "appended"}
    for n, end in enumerate(ends):
        sent = messages[:end] if n < 2 else [*messages[:ends[1]], note, *messages[ends[1]:end]]
        await engine.fit({"messages": sent, "tools": TOOLS}, CallContext(tenant, "s", headers))
    first = agent_fingerprint({"messages": messages[:1], "tools": TOOLS})
    later = agent_fingerprint({"messages": [messages[0], note], "tools": TOOLS})
    assert first is not None and first == later
    assert await redis_client.hgetall(keys.agent_runs(tenant, first)) == {
        b"reached:1": b"1", b"reached:2": b"1", b"reached:3": b"1", b"reached:4": b"1",
        b"reached:5": b"1"}
