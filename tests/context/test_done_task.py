"""Once a user message closes a task that lasted `done_task_turns` turns, the earlier task's
outputs go to their last form (placeholders) at one step, not one batch at a time over the
new task's turns (`compress._done_task`): each change to them re-sends everything after it
— the real engine on the embedded Redis, the shipped configuration, and the same with the
rule off."""

from __future__ import annotations

import copy
from pathlib import Path

import redis.asyncio as aioredis

from gateway.context.engine import ContextEngine
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import drops_add_up, fit_each_call, ticket_queue

TOOLS = [{"type": "function", "function": {"name": "read_page",
                                           "parameters": {"type": "object"}}}]
FIRST_TURNS = 24  # the first ticket lasts more than `done_task_turns` (20)
SECOND_TURNS = 30
SECOND = "Ticket T-200: audit the orders."


def _off(settings: Settings) -> Settings:
    classes = copy.deepcopy(settings.task_classes)
    classes["agent"]["stages"]["compress"]["done_task_turns"] = None
    return settings.model_copy(update={"task_classes": classes})


async def _first_ticket_changes(engine: ContextEngine, session: str) -> tuple[int, bool]:
    """Over the second ticket's calls: on how many the first ticket's outputs were sent
    otherwise than on the call before, and whether they all end as placeholders."""
    messages = ticket_queue(FIRST_TURNS, SECOND_TURNS)
    start = next(i for i, m in enumerate(messages) if m.get("content") == SECOND)
    first = {m["tool_call_id"] for m in messages[:start] if m["role"] == "tool"}
    fits = await fit_each_call(engine, messages, TOOLS, "t-done", session)
    assert all(drops_add_up(fit) for fit in fits)
    changes, last = 0, None
    for fit in fits:
        sent = fit.body["messages"]
        seen = {m["tool_call_id"]: str(m["content"]) for m in sent
                if m["role"] == "tool" and m["tool_call_id"] in first}
        if any(m.get("content") == SECOND for m in sent):
            changes += last is not None and seen != last
        last = seen
    assert last is not None and set(last) == first
    return changes, all(text.startswith("[ctxgate: omitted") for text in last.values())


async def test_a_done_tasks_outputs_go_to_placeholders_at_one_step(
    engine: ContextEngine, settings: Settings, redis_client: aioredis.Redis,
    embedder: Embedder, drop_log_path: Path,
) -> None:
    assert settings.task_classes["agent"]["stages"]["compress"]["done_task_turns"] == 20
    changes, masked = await _first_ticket_changes(engine, "done-on")
    assert (changes, masked) == (1, True)
    metrics = Metrics()
    log = DropLog(str(drop_log_path), "hash", metrics)
    off = ContextEngine(_off(settings), redis_client, metrics, log, embedder)
    try:
        changes, masked = await _first_ticket_changes(off, "done-off")
    finally:
        log.close()
    # without the rule the first ticket's digests are masked batch by batch as they age
    assert changes >= 2
