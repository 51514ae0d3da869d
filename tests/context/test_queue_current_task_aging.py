"""In a text-tool agent's queue of tasks (mini-SWE-agent's: one bash block a turn, answered
by a user message; each task's statement from one template) the masking rules of a queue's
tasks read the task start the layout found by its statement (`Clock.queue_starts`), not the
latest user message: there every command's result is one, so the current task was "the
latest result", its items aged as any (masked 10 turns old in a batch an earlier task's
digest started) and a finished task was never done with (bench/README.md, "A text-tool
queue's current task ages from its start")."""

from __future__ import annotations

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item, Layout
from gateway.context.stages.compress import _current_task, _done_task, _queue_task, _young_task
from gateway.context.taskclass import CompressOptions
from tests.context.test_fold_current_task import _queue

OPTS = CompressOptions(mask_task_from_turns=20, mask_current_turns=60, done_task_turns=20)


def _call(session: str) -> CallContext:
    return CallContext("t-queue-aging", "tr", {"x-ctxgate-session-id": session,
                                                "x-ctxgate-task-class": "default"})


def test_the_queue_rules_read_the_task_start_of_a_text_tool_queue() -> None:
    messages, starts = _queue(3, 30)  # 32 turns a task
    layout = Layout()
    units = layout.extend(messages)
    assert [i for i, _ in layout.clock.queue_starts] == starts[1:]
    assert layout.clock.queue_starts[0][1] == 32  # the first task's turns, format error too
    items = [Item(f"i{i}", "user" if m["role"] == "user" else "assistant", units[i], i, 0,
                  str(m["content"]), 10, 4, 0, False, True, False, 0.0, layout.clock)
             for i, m in enumerate(messages) if m["role"] != "system"]
    assert _queue_task(items) == (starts[2], 64, 32)
    assert _current_task(items, OPTS) == starts[2]  # not the latest result
    assert _done_task(items, OPTS) == starts[2]  # the task before lasted 32 turns
    assert _young_task(items, OPTS) is None  # this one has lasted 31 turns
    assert _young_task(items, OPTS.model_copy(update={"mask_task_from_turns": 40})) == starts[2]
    layout.clock.api_calls = True  # an API agent's queue: main's reading, unchanged
    assert _queue_task(items) is None
    assert _current_task(items, OPTS) == items[-1].message_index


async def test_a_later_task_young_items_are_not_masked(engine: ContextEngine) -> None:
    messages, starts = _queue(4, 45)  # 47 turns a task
    masked_young = masked_earlier = 0
    for end in (i + 1 for i, m in enumerate(messages) if m["role"] == "user" and i > 1):
        fitted = await engine.fit({"messages": messages[:end]}, _call("queue-aging"))
        current = max(s for s in starts if s < end)
        turns = sum(1 for m in messages[:end] if m["role"] == "assistant")
        for d in fitted.drops:
            if d.action != "mask" or d.message_index is None:
                continue
            age = turns - sum(1 for m in messages[:d.message_index + 1]
                              if m["role"] == "assistant")
            if d.message_index > current > starts[0] and age < 60:
                masked_young += 1
            elif d.message_index < current:
                masked_earlier += 1
        assert (sum(d.tokens_saved for d in fitted.drops)
                == fitted.tokens_before - fitted.tokens_after)
    assert masked_earlier > 0  # the earlier tasks are still masked
    assert masked_young == 0  # a later task's own items, younger than 60 turns, never
