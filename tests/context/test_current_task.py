"""In a session of 2+ user messages, the current task's outputs join the digests' mask
batches only once they are `mask_current_turns` turns old, and start one only
`mask_after_turns` turns later, so its batches keep their hysteresis
(`compress._current_task`) — the real engine on the embedded Redis, the shipped
configuration, and the same with the setting off."""

from __future__ import annotations

import copy
from pathlib import Path

import redis.asyncio as aioredis

from gateway.context.engine import ContextEngine
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import fit_each_call, ticket_queue

TOOLS = [{"type": "function", "function": {"name": "read_page",
                                           "parameters": {"type": "object"}}}]
FIRST_TURNS = 24
SECOND_TURNS = 80  # the current ticket outlasts `mask_current_turns` + `mask_after_turns`
SECOND = "Ticket T-200: audit the orders."


def _off(settings: Settings) -> Settings:
    classes = copy.deepcopy(settings.task_classes)
    classes["agent"]["stages"]["compress"]["mask_current_turns"] = None
    return settings.model_copy(update={"task_classes": classes})


async def _masked_ages(engine: ContextEngine, session: str) -> list[int]:
    """Over the second ticket's calls, the age in turns (assistant messages after it) of
    each of its own outputs a call sent as a placeholder."""
    messages = ticket_queue(FIRST_TURNS, SECOND_TURNS)
    start = next(i for i, m in enumerate(messages) if m.get("content") == SECOND)
    own = {m["tool_call_id"]: i for i, m in enumerate(messages)
           if i > start and m["role"] == "tool"}
    ends = [end for end in range(3, len(messages)) if messages[end]["role"] == "assistant"]
    fits = await fit_each_call(engine, messages, TOOLS, "t-current", session)
    assert len(fits) == len(ends)
    ages = []
    for end, fit in zip(ends, fits, strict=True):
        for m in fit.body["messages"]:
            if (m["role"] == "tool" and m["tool_call_id"] in own
                    and str(m["content"]).startswith("[ctxgate: omitted")):
                ages.append(sum(1 for x in messages[own[m["tool_call_id"]]:end]
                                if x["role"] == "assistant"))
    return ages


async def test_the_current_tasks_outputs_are_masked_only_when_old(
    engine: ContextEngine, settings: Settings, redis_client: aioredis.Redis,
    embedder: Embedder, drop_log_path: Path,
) -> None:
    compress = settings.task_classes["agent"]["stages"]["compress"]
    least = compress["mask_current_turns"]
    assert least == 60 and compress["mask_after_turns"] == 10
    ages = await _masked_ages(engine, "current-on")
    # the current ticket's outputs are masked, but none younger than the setting
    assert ages and min(ages) >= least
    metrics = Metrics()
    log = DropLog(str(drop_log_path), "hash", metrics)
    off = ContextEngine(_off(settings), redis_client, metrics, log, embedder)
    try:
        ages = await _masked_ages(off, "current-off")
    finally:
        log.close()
    # without it the batches mask the current ticket's outputs 10+ turns old
    assert min(ages) < least
