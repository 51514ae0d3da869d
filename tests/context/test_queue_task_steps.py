"""In a text-tool agent's queue of short tasks (eight code steps each, every task stated as the
first was), a later task takes one aging step, once it has lasted `done_results_turns`
turns, and no other while it is younger than `queue_step_turns` (`steps.waits_for_task`):
a step in the middle of a task re-sent that task's results verbatim at full price; only while
the results since the task before's start reach `queue_wait_tokens` (1000 here: the shipped
8000 would need tables past the budget, whose forced steps never wait). The real engine on the
embedded Redis, the shipped configuration with that bound, and the same with the wait off. A
made-up fixture."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from gateway.context.engine import ContextEngine
from gateway.context.items import Clock
from gateway.context.session import SessionState
from gateway.context.steps import waits_for_task
from gateway.context.taskclass import Compaction, CompressOptions, Stages, TaskClass
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.conftest import with_compaction
from tests.context.sessions import drops_add_up, fit_each_call

SYSTEM = ("You solve tasks by writing Python between '<code>' and '</code>'. What it prints "
          "appears after 'Observation:'. Answer with final_answer(value).")
TASKS = 5
STEPS = 8


def _observation(task: int, step: int) -> str:
    return "Observation:\n" + "".join(
        f"Row {j} of lot {task}-{step}: weight {100 + j * task} kg, shelf S-{task}-{j}, "
        f"batch b{task}{step}{j}x, inspected by crew {j % 7}.\n" for j in range(25))


def _queue() -> list[dict[str, Any]]:
    """TASKS tasks one after the other, each STEPS code steps answered by `Observation:` and
    a closing answer, each stated as `New task:` and its question."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for task in range(TASKS):
        messages.append({"role": "user", "content": (
            f"New task:\nHow heavy is the heaviest row of lot {task}? Give the weight in kg "
            "as a number, read from the inventory tables.")})
        for step in range(STEPS):
            messages.append({"role": "assistant", "content": (
                f"Thought: I read lot {task}-{step} and compare its heaviest row with the rows "
                f"of the lots before it; the crews inspect in turn, so the shelves of lot "
                f"{task}-{step} may list a heavier batch than the ones I printed so far, and I "
                "keep the largest weight seen in a variable for the final answer.\n<code>\n"
                f"rows_{step} = read_lot('{task}-{step}')\nprint(rows_{step})\n</code>")})
            messages.append({"role": "user", "content": _observation(task, step)})
        messages.append({"role": "assistant", "content": (
            f"Thought: I have it.\n<code>\nfinal_answer({100 + 24 * task})\n</code>")})
    return messages


async def _steps_by_task(engine: ContextEngine, session: str) -> dict[int, list[int]]:
    """For each later task, the turns it had lasted on the calls that changed the prefix
    the session's previous call had sent (its aging steps)."""
    messages = _queue()
    fits = await fit_each_call(engine, messages, [], "t-queue-steps", session)
    assert all(drops_add_up(fit) for fit in fits)
    ends = [end for end in range(3, len(messages)) if messages[end]["role"] == "assistant"]
    steps: dict[int, list[int]] = {}
    for before, after, end in zip(fits, fits[1:], ends[1:], strict=False):
        sent, now = before.body["messages"], after.body["messages"]
        if now[: len(sent)] == sent:
            continue
        starts = [i for i in range(end) if str(messages[i]["content"]).startswith("New task")]
        task = len(starts) - 1
        age = sum(1 for i in range(starts[-1], end) if messages[i]["role"] == "assistant")
        if task:
            steps.setdefault(task, []).append(age)
    return steps


async def test_a_later_task_steps_once_it_has_lasted_a_turn_and_not_again(
    settings: Settings, redis_client: aioredis.Redis,
    embedder: Embedder, drop_log_path: Path,
) -> None:
    assert settings.task_classes["agent"]["compaction"]["queue_step_turns"] == 10
    metrics = Metrics()
    log = DropLog(str(drop_log_path), "hash", metrics)
    on = ContextEngine(with_compaction(settings, queue_wait_tokens=1000), redis_client,
                       metrics, log, embedder)
    steps = await _steps_by_task(on, "queue-steps-on")
    # one step per later task at most, never on the call that brings its statement
    assert steps and all(len(ages) == 1 and ages[0] >= 1 for ages in steps.values())
    off = ContextEngine(with_compaction(settings, queue_step_turns=None), redis_client,
                        metrics, log, embedder)
    try:
        free = await _steps_by_task(off, "queue-steps-off")
    finally:
        log.close()
    # without the wait, the share's steps land anywhere in a task, some twice in one
    assert any(len(ages) > 1 or 0 in ages for ages in free.values())


QUEUE = TaskClass(name="q", compaction=Compaction(verbatim_tokens_high=500, queue_step_turns=10,
                                                   queue_wait_tokens=2000),
                  stages=Stages(compress=CompressOptions(done_results_turns=1)))
# still verbatim from message 12 on: the agent's turns (odd) and the results (even), a later
# task stated at message 20: results of 2,500 tokens
TURNS = [13, 15, 17, 19, 21]
LARGE = {i: 2500 for i in range(12, 23)}


def _clock(turns: int, starts: list[tuple[int, int]]) -> Clock:
    """A text-tool queue's clock: `turns` walked, later tasks opened at `starts`."""
    clock = Clock(turns)
    clock.text_calls = True
    clock.queue_starts = starts
    return clock


def test_the_wait_reads_the_tasks_age_and_its_step() -> None:
    starts = [(20, 5)]  # the previous task (the first) lasted 5 turns
    growing = SessionState(horizon=12, calls=5)
    assert waits_for_task(growing, QUEUE, _clock(5, starts), LARGE, TURNS)  # its statement's
    assert not waits_for_task(replace(growing, calls=6), QUEUE, _clock(6, starts), LARGE,
                              TURNS)
    stepped = SessionState(horizon=22, calls=7)  # the task took its step
    assert waits_for_task(stepped, QUEUE, _clock(7, starts), LARGE, TURNS)
    assert not waits_for_task(replace(stepped, calls=15), QUEUE, _clock(15, starts), LARGE,
                              TURNS)  # 10 turns
    off = QUEUE.model_copy(update={"compaction": Compaction(verbatim_tokens_high=500)})
    assert not waits_for_task(growing, off, _clock(5, starts), LARGE, TURNS)


def test_a_task_that_could_not_step_leaves_its_step_to_the_next_tasks_first_call() -> None:
    # the previous task lasted one turn: it had no call at which it had lasted one
    starts = [(20, 5), (23, 6)]
    assert not waits_for_task(SessionState(horizon=12, calls=6), QUEUE, _clock(6, starts),
                              LARGE, TURNS)
    # ... unless it stepped on its own first call
    assert waits_for_task(SessionState(horizon=21, calls=6), QUEUE, _clock(6, starts), LARGE,
                          TURNS)


def test_a_session_of_fresh_prompts_does_not_wait() -> None:
    # more calls than turns: each call a fresh prompt, the agent's steps inside it
    assert not waits_for_task(SessionState(horizon=12, calls=9), QUEUE, _clock(5, [(20, 5)]),
                              LARGE, TURNS)


def test_an_agent_of_json_steps_does_not_wait() -> None:
    clock = _clock(5, [(20, 5)])
    clock.json_steps = True  # its done tasks' results are not gisted: nothing to wait for
    assert not waits_for_task(SessionState(horizon=12, calls=5), QUEUE, clock, LARGE, TURNS)


def test_a_client_of_system_results_does_not_wait() -> None:
    clock = _clock(5, [(20, 5)])
    clock.system_results = True  # it breaks its own cached prefix: no step to hold back
    assert not waits_for_task(SessionState(horizon=12, calls=5), QUEUE, clock, LARGE, TURNS)


def test_a_task_of_small_results_does_not_wait() -> None:
    # the same tasks, their results under queue_wait_tokens: a step in a task's middle
    # re-sends little, and the wait would leave the results to a done task's gists
    state, clock = SessionState(horizon=12, calls=5), _clock(5, [(8, 3), (20, 5)])
    assert waits_for_task(state, QUEUE, clock, LARGE, TURNS)
    small = {i: (600 if i in TURNS else 100) for i in range(12, 23)}
    assert not waits_for_task(state, QUEUE, clock, small, TURNS)
    # the results of the tasks before the previous one (message 8 on) count none
    assert not waits_for_task(state, QUEUE, clock, {i: 5000 for i in range(1, 8)}, TURNS)
