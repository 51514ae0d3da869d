"""An agent whose sessions so far all ended young (a tenant's same system prompt and tool
set, `classify.agent_fingerprint`) has a step weighed over the calls its longest session
still had left at this one's age, not over at least `repay_calls` (`steps.agent_left`,
`agents.AgentRunStore`). Reflexion's HotpotQA runs of 2-6 calls took 59 of their 99 aging
steps on a run's last call, weighed over 20 calls to come: cost @0.1 below no gateway's
(bench/README.md, "A fifteenth agent kind ... (gen57)")."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from gateway.context.agents import MemoryAgentRunStore, RedisAgentRunStore
from gateway.context.classify import agent_fingerprint
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item
from gateway.context.steps import agent_left, unrepaid
from gateway.context.taskclass import Compaction
from gateway.store import keys

C = Compaction(repay_calls=20, early_max_tokens=8000, repay_agent_runs=5)


def test_the_longest_session_bounds_the_calls_to_come() -> None:
    assert agent_left(3, C, (7, 6)) == 4  # the longest ran 6: calls 3-6 to come
    assert agent_left(6, C, (7, 6)) == 1
    assert agent_left(7, C, (7, 7)) == 1  # this session is the longest: at least this call
    assert agent_left(3, C, (5, 6)) is None  # 4 earlier sessions: no evidence yet
    assert agent_left(3, C, (9, 20)) is None  # one ran as long as repay_calls: long-running
    assert agent_left(3, C, None) is None
    assert agent_left(3, C.model_copy(update={"repay_agent_runs": 0}), (9, 6)) is None


def _item(index: int, text: str, tokens: int) -> Item:
    return Item(id=f"m{index}", kind="tool" if index % 2 == 0 else "assistant",
                unit=f"m{index}", message_index=index, segment=0, text=text, tokens=tokens,
                fixed_tokens=0, turn=(index + 1) // 2, pinned=False, rewritable=True)


def test_a_step_on_a_young_agents_last_calls_does_not_repay() -> None:
    before = [_item(0, "task", 100), _item(1, "turn", 1000), _item(2, "output", 500)]
    after = [_item(0, "task", 100), _item(1, "digest", 200), _item(2, "output", 500)]
    assert unrepaid(before, after, 3, 3, C) == set()  # repays over 20 calls to come
    assert unrepaid(before, after, 3, 3, C, runs=(4, 4)) == set()  # too few sessions seen
    assert unrepaid(before, after, 3, 3, C, runs=(8, 4)) == {1}  # 2 calls left: it does not
    assert unrepaid(before, after, 3, 3, C, runs=(8, 40)) == set()  # a long-running agent


def test_a_step_that_repays_in_part_is_weighed_as_before() -> None:
    """Over the 2 calls left only the newest rewrite repays: the step is taken, and weighed
    over at least 20 calls, keeps its early rewrite too (left out, it came back in a later
    step: one more prefix change)."""
    before = [_item(0, "task", 100), _item(1, "turn", 1000), _item(2, "output", 500),
              _item(3, "turn", 1000)]
    after = [_item(0, "task", 100), _item(1, "digest", 200), _item(2, "output", 500),
             _item(3, "digest", 100)]
    assert unrepaid(before, after, 4, 3, C.model_copy(update={"repay_calls": 2})) == {1}
    assert unrepaid(before, after, 4, 3, C, runs=(8, 4)) == set()


async def test_the_stores_count_sessions_and_the_longest(redis_client: aioredis.Redis) -> None:
    for store in (MemoryAgentRunStore(), RedisAgentRunStore(redis_client)):
        await redis_client.delete(keys.agent_runs("t-runs", "fp"))
        assert await store.note("t-runs", "fp", 1) == (1, 1)
        assert await store.note("t-runs", "fp", 2) == (1, 2)
        assert await store.note("t-runs", "fp", 3) == (1, 3)
        assert await store.note("t-runs", "fp", 1) == (2, 3)  # a new session
        assert await store.note("t-runs", "fp", 2) == (2, 3)
        assert await store.note("t-runs", "other", 1) == (1, 1)


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
    """Each session of one agent (same tenant, system prompt and tools) counts once, and
    the longest in calls is kept: the record a step on its next sessions is weighed by."""
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
    assert record == {b"sessions": b"3", b"longest": b"6"}


async def test_a_system_message_a_session_appends_makes_its_calls_another_agents(
    engine: ContextEngine, redis_client: aioredis.Redis,
) -> None:
    """The agent is read from every system message of a call, also where the call only
    appends to the session's last one (the fingerprint is then carried over from it, unless
    a system message is among the new messages): the calls after one is appended count for
    the agent the whole request names, as `agent_fingerprint` reads it."""
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
    assert first is not None and later is not None and first != later
    assert await redis_client.hgetall(keys.agent_runs(tenant, first)) == {
        b"sessions": b"1", b"longest": b"2"}
    assert (await redis_client.hgetall(keys.agent_runs(tenant, later)))[b"longest"] == b"5"
