"""A ticket queue's current task keeps its digests out of the digests' mask batches until
it has lasted `mask_task_from_turns` turns, as a run of that task alone would
(`compress._young_task`) — the real engine on the embedded Redis, the shipped
configuration, and the same with the gate off."""

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
# the first task's turns: its digests start the batches, one of which comes in the second
# task's 15th turn (ungated, it masks the second task's digests 10+ turns old)
FIRST_TURNS = 20
SECOND_TURNS = 19  # the current task's turns: it never reaches 20


def _ungated(settings: Settings) -> Settings:
    classes = copy.deepcopy(settings.task_classes)
    classes["agent"]["stages"]["compress"]["mask_task_from_turns"] = None
    # and the done-task rule (`done_task_turns`), which masks the first ticket's outputs at
    # the second's first step, so no later batch of theirs can start in the second ticket
    classes["agent"]["stages"]["compress"]["done_task_turns"] = None
    # and the current task's own later join (`mask_current_turns`), which keeps the second
    # ticket's outputs out of the batches past its 20th turn too
    classes["agent"]["stages"]["compress"]["mask_current_turns"] = None
    return settings.model_copy(update={"task_classes": classes})


async def _second_task(engine: ContextEngine, session: str) -> tuple[int, int]:
    """Over the second ticket's calls: how many sent one of its own outputs as a
    placeholder, and how many sent one of the first ticket's as one."""
    messages = ticket_queue(FIRST_TURNS, SECOND_TURNS)
    start = next(i for i, m in enumerate(messages) if m.get("content") == (
        "Ticket T-200: audit the orders."))
    own = {m["tool_call_id"] for m in messages[start:] if m["role"] == "tool"}
    fits = await fit_each_call(engine, messages, TOOLS, "t-young", session)
    assert all(drops_add_up(fit) for fit in fits)
    mine = earlier = 0
    for fit in fits:
        sent = fit.body["messages"]
        if not any(m.get("content") == messages[start]["content"] for m in sent):
            continue
        masked = {m["tool_call_id"] for m in sent if m["role"] == "tool"
                  and str(m["content"]).startswith("[ctxgate: omitted")}
        mine += bool(masked & own)
        earlier += bool(masked - own)
    return mine, earlier


async def test_the_current_task_keeps_its_digests_until_it_has_lasted(
    engine: ContextEngine, settings: Settings, redis_client: aioredis.Redis,
    embedder: Embedder, drop_log_path: Path,
) -> None:
    assert settings.task_classes["agent"]["stages"]["compress"]["mask_task_from_turns"] == 20
    mine, earlier = await _second_task(engine, "young-gated")
    assert (mine, earlier > 0) == (0, True)  # the earlier ticket's batches still went
    metrics = Metrics()
    log = DropLog(str(drop_log_path), "hash", metrics)
    ungated = ContextEngine(_ungated(settings), redis_client, metrics, log, embedder)
    try:
        mine, earlier = await _second_task(ungated, "young-ungated")
    finally:
        log.close()
    # without the gate a batch the first ticket's digests start masks the second's too
    assert mine > 0 and earlier > 0
