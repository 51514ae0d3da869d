"""In a text-tool agent's queue of short tasks (2-3 calls each, every task stated as the first
was), the results of the tasks before the current one are done with once it has lasted a
turn (`compress._done_results`, `done_results_turns`): they go as gists at the next step,
where `done_task_turns` waits for a task of 20 turns and they stayed verbatim — the real
engine on the embedded Redis, the shipped configuration, and the same with the rule off.
A made-up fixture."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from gateway.context.engine import ContextEngine
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import drops_add_up, fit_each_call

SYSTEM = ("You solve tasks by writing Python between '<code>' and '</code>'. What it prints "
          "appears after 'Observation:'. Answer with final_answer(value).")
TASKS = 12


def _observation(task: int, step: int) -> str:
    return "Observation:\n" + "".join(
        f"Row {j} of lot {task}-{step}: weight {100 + j * task} kg, shelf S-{task}-{j}, "
        f"batch b{task}{step}{j}x, inspected by crew {j % 7}.\n" for j in range(25))


def _queue(later: str = "") -> list[dict[str, Any]]:
    """TASKS tasks one after the other, each two code steps answered by `Observation:` and a
    closing answer; each task stated as `New task:` and its question (each later one's with
    `later` after it)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for task in range(TASKS):
        messages.append({"role": "user", "content": (
            f"New task:\nHow heavy is the heaviest row of lot {task}? Give the weight in kg "
            f"as a number, read from the inventory tables.{later if task else ''}")})
        for step in range(2):
            messages.append({"role": "assistant", "content": (
                f"Thought: I read lot {task}-{step}.\n<code>\nprint(read_lot('{task}-{step}'))"
                "\n</code>")})
            messages.append({"role": "user", "content": _observation(task, step)})
        messages.append({"role": "assistant", "content": (
            f"Thought: I have it.\n<code>\nfinal_answer({100 + 24 * task})\n</code>")})
    return messages


def _off(settings: Settings) -> Settings:
    classes = copy.deepcopy(settings.task_classes)
    classes["agent"]["stages"]["compress"]["done_results_turns"] = None
    return settings.model_copy(update={"task_classes": classes})


async def _first_results(engine: ContextEngine, session: str, later: str = "") -> list[str]:
    """The first task's results as the queue's last call sends them."""
    messages = _queue(later)
    fits = await fit_each_call(engine, messages, [], "t-done-results", session)
    assert all(drops_add_up(fit) for fit in fits)
    sent = fits[-1].body["messages"]
    assert len(sent) == len(messages) - 1  # nothing dropped: the first results at 3 and 5
    return [str(sent[i]["content"]) for i in (3, 5)]


async def test_a_short_tasks_results_go_as_gists_once_the_queue_moves_on(
    engine: ContextEngine, settings: Settings, redis_client: aioredis.Redis,
    embedder: Embedder, drop_log_path: Path,
) -> None:
    assert settings.task_classes["agent"]["stages"]["compress"]["done_results_turns"] == 1
    on = await _first_results(engine, "done-results-on")
    assert len(on) == 2 and all(text.startswith("[ctxgate: omitted") for text in on)
    metrics = Metrics()
    log = DropLog(str(drop_log_path), "hash", metrics)
    off = ContextEngine(_off(settings), redis_client, metrics, log, embedder)
    try:
        kept = await _first_results(off, "done-results-off")
    finally:
        log.close()
    # without the rule no task lasts `done_task_turns`: the results go as the agent read them
    assert kept == [_observation(0, 0), _observation(0, 1)]


async def test_a_result_the_current_task_names_a_value_of_stays(engine: ContextEngine) -> None:
    # every later task names a batch only the first task's first result holds: that result
    # is what the agent will copy from, the first task's other result is done with
    sent = await _first_results(engine, "done-results-named", " Leave out batch b005x.")
    assert sent[0] == _observation(0, 0)
    assert sent[1].startswith("[ctxgate: omitted")
