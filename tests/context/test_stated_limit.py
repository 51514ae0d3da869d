"""A maximum of steps stated up front ("The maximum number of steps you can take is 20", in
the system prompt or the first user turn) bounds the calls a step's rewrites can repay
over: the limit less the turns made, and the session's age rather than at least
`repay_calls` (`steps.stated_left`, `steps.unrepaid`). A data-science agent's runs of 3-20
calls took an aging step on a quarter of their calls, each re-sending more than it saved
(bench/README.md, "Short runs with a stated step limit")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item
from gateway.context.steps import limited_calls, stated_left, system_stated, unrepaid
from gateway.context.taskclass import Compaction
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

from .conftest import with_compaction

LIMIT = "The maximum number of steps you can take is 20."
SYSTEM = ("You are a data scientist. Act with Bash(code=\"...\"), Python(file_path=\"...\") "
          "or SQL(file_path=\"...\", command=\"...\", output=\"direct\"); each action is "
          "answered with an Observation. {limit}\n# TASK #\nSum the units of every station "
          "and write them to result.csv.")


def test_the_stated_maximum_less_the_turns_made() -> None:
    system = {"role": "system", "content": LIMIT}
    assert stated_left([system, {"role": "user", "content": "go"}]) == 20
    turns = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "a"},
             {"role": "user", "content": "Observation: ok"}, {"role": "assistant", "content": "b"},
             {"role": "user", "content": "Observation: ok"}]
    assert stated_left([system, *turns]) == 18
    # in the first user turn (a harness without a system message), in parts, other wordings
    parts = [{"type": "text", "text": "Solve it. You have 5 chances to interact."}]
    assert stated_left([{"role": "user", "content": parts}]) == 5
    assert stated_left([{"role": "user", "content": "Use at most 30 turns."}, *turns[1:]]) == 28
    assert stated_left([{"role": "system", "content": "The step limit is 12. Max turns: 9"},
                        {"role": "user", "content": "go"}]) == 9
    # none stated, a count per turn or of what is left, a later turn's, or outlived: none
    reproduce = "Steps to reproduce: 1) run it 3 times"
    assert stated_left([{"role": "user", "content": reproduce}]) is None
    assert stated_left([{"role": "system", "content": "Make up to 5 tool calls per turn."},
                        {"role": "user", "content": "You have 4 steps left."}]) is None
    assert stated_left([{"role": "user", "content": "go"}, {"role": "assistant", "content": "a"},
                        {"role": "user", "content": LIMIT}]) is None
    assert stated_left([{"role": "system", "content": "You have 2 attempts."}, *turns]) is None
    assert stated_left([]) is None
    # stated by the system message (the harness's, for the session) or by a user turn
    assert system_stated([system, {"role": "user", "content": "go"}])
    assert not system_stated([{"role": "user", "content": LIMIT}])


def _item(index: int, text: str, tokens: int) -> Item:
    return Item(id=f"m{index}", kind="user" if index % 2 == 0 else "assistant",
                unit=f"m{index}", message_index=index, segment=0, text=text, tokens=tokens,
                fixed_tokens=0, turn=(index + 1) // 2, pinned=False, rewritable=True)


def test_a_stated_limit_weighs_a_step_over_the_session_age() -> None:
    c = Compaction(repay_calls=20, early_max_tokens=8000)
    before = [_item(0, "task", 100), _item(1, "turn", 1000), _item(2, "output", 500)]
    after = [_item(0, "task", 100), _item(1, "digest", 200), _item(2, "output", 500)]
    assert unrepaid(before, after, 3, 3, c) == set()  # repays over 20 calls to come
    assert unrepaid(before, after, 3, 3, c, stated=18) == {1}  # not over the 3 so far
    assert unrepaid(before, after, 3, 30, c, stated=18) == set()  # over 8 to come it does
    assert unrepaid(before, after, 3, 30, c, stated=2) == {1}  # nor over the 2 left


def test_a_stated_limit_weighs_the_mean_calls_to_come_below_it() -> None:
    # the age's guess while far from the limit, fewer calls as the session nears it
    assert [limited_calls(n, 21 - n) for n in (1, 4, 10, 15, 19, 20)] == [3, 5, 5, 3, 1, 1]
    c = Compaction(repay_calls=20, early_max_tokens=8000)
    before = [_item(0, "task", 100), _item(1, "turn", 1000), _item(2, "output", 500)]
    after = [_item(0, "task", 100), _item(1, "digest", 200), _item(2, "output", 500)]
    # ten calls made, eleven left by the limit: the run ends about five calls from now, and
    # the step does not repay over those (it did over the ten of its age)
    assert unrepaid(before, after, 3, 10, c) == set()
    assert unrepaid(before, after, 3, 10, c, stated=11, limited=True) == {1}
    # a limit only the first user turn states (a queue's first task's, maybe): as before
    assert unrepaid(before, after, 3, 10, c, stated=11) == set()


def test_a_stated_limit_weighs_a_large_call_too() -> None:
    # a call over early_max_tokens is not weighed (a long session's steps keep their cuts),
    # but a session whose limit leaves it one call is no long one: its step cannot repay
    c = Compaction(repay_calls=20, early_max_tokens=1000)
    before = [_item(0, "task", 100), _item(1, "turn", 3000), _item(2, "output", 500)]
    after = [_item(0, "task", 100), _item(1, "digest", 200), _item(2, "output", 500)]
    assert unrepaid(before, after, 3, 20, c) == set()
    assert unrepaid(before, after, 3, 20, c, left=1) == set()  # a harness's count: as before
    assert unrepaid(before, after, 3, 20, c, stated=1, limited=True) == {1}
    assert unrepaid(before, after, 3, 20, c, stated=1) == set()  # in a user turn: as before


def _action(k: int) -> str:
    lines = "".join(f"    total += table['station_{k}_{i}'].sum() * weight_{i}\n"
                    for i in range(25))
    return (f"Thought: I sum table {k} with its weights.\n\nAction: Python(file_path="
            f"\"./sum_{k}.py\"):\n```python\nimport pandas as pd\ntable = pd.read_csv("
            f"'table_{k}.csv')\ntotal = 0\n{lines}print(total)\n```")


def _run(limit: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM.format(limit=limit)},
        {"role": "user", "content": "Observation: You are in the folder now."}]
    for k in range(8):
        messages.append({"role": "assistant", "content": _action(k)})
        rows = "".join(f"station_{k}_{i}: {i * 37 + k} units\n" for i in range(5))
        messages.append({"role": "user", "content": f"Observation: {rows}"})
    messages.append({"role": "assistant",
                     "content": "Thought: done.\n\nAction: Terminate(output=\"result.csv\")"})
    return messages


async def _prefix_changes(engine: ContextEngine, messages: list[dict[str, Any]], sid: str) -> int:
    """Calls that changed a message the previous call sent (an aging step)."""
    headers = {"x-ctxgate-session-id": sid, "x-ctxgate-task-class": "data_sql"}
    sent: list[str] | None = None
    changes = 0
    for end in [i for i, m in enumerate(messages) if m["role"] == "assistant"]:
        fitted = await engine.fit({"messages": messages[:end]},
                                  CallContext("t-limit", "s", headers))
        now = [str(m["content"]) for m in fitted.body["messages"]]
        if sent is not None and now[: len(sent)] != sent:
            changes += 1
        sent = now
    return changes


@pytest.fixture
async def engine_without_ahead(
    settings: Settings, redis_client: aioredis.Redis, embedder: Embedder, drop_log_path: Path
) -> AsyncIterator[ContextEngine]:
    """`engine` with a step ahead of the share weighed as any other (`repay_ahead_share`
    off): the run below is short enough for that rule alone to leave its second step out."""
    metrics = Metrics()
    log = DropLog(str(drop_log_path), "hash", metrics)
    yield ContextEngine(with_compaction(settings, repay_ahead_share=0), redis_client, metrics,
                        log, embedder)
    log.close()


async def test_a_run_with_a_stated_limit_keeps_its_prefix_longer(
        engine_without_ahead: ContextEngine) -> None:
    engine = engine_without_ahead
    unstated = await _prefix_changes(engine, _run(""), "unstated")
    assert unstated > 0  # steps taken, weighed over at least 20 calls to come
    assert await _prefix_changes(engine, _run(LIMIT), "stated") < unstated
