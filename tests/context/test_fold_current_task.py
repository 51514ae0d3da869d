"""The fold leaves a young task the agent is still working on alone (`fold.task_bound`): in
a queue of tasks one after another in one conversation (mini-SWE-agent's queues: one bash
block a turn, each task's statement from one template), the fold stops at the start of the
task the horizon is in while the horizon is fewer than `mask_current_turns` (60) turns into
it (the first task, before any later one came, folds as before). It folded the current
task's 64-message blocks as the horizon entered them, every step anew (bench/README.md,
"The fold leaves the current task alone")."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.fold import TURNS_REASON, task_bound
from gateway.context.items import Layout

TEMPLATE = "<pr_description>\nConsider the following PR description:\n"
FORMAT_ERROR = ("Please always provide EXACTLY ONE action in triple backticks, found 2 "
                "actions.\n\nPlease format your action in triple backticks as shown in the "
                "instructions.")


def _call(session: str) -> CallContext:
    return CallContext("t-fold-task", "tr", {"x-ctxgate-session-id": session,
                                              "x-ctxgate-task-class": "default"})


def _statement(t: int) -> str:
    return (f"{TEMPLATE}Module mod_{t} raises KeyError in parse_{t}() on an empty header.\n"
            + "Steps to reproduce and the expected behaviour follow. " * 20)


def _turn(t: int, k: int) -> list[dict[str, Any]]:
    command = f"grep -n 'def helper_{t}_{k}' src/mod_{t}.py && sed -n '{100 + k},{130 + k}p' x"
    output = "\n".join(f"{1800 + 10 * k + i}:    value_{t}_{k}_{i} = table_{t}[{i}]"
                       for i in range(30))
    return [
        {"role": "assistant", "content": f"THOUGHT: look at helper_{t}_{k}.\n\n"
                                         f"```bash\n{command}\n```"},
        {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n{output}\n</output>"},
    ]


def _queue(tasks: int, turns: int) -> tuple[list[dict[str, Any]], list[int]]:
    """A shell agent's queue: the system prompt, then per task its statement, `turns`
    commands answered by the harness (one of them twice, rejected by a format error), the
    submit command; the next task's statement follows its last reply. Also the starts."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a shell agent."}]
    starts = []
    for t in range(tasks):
        starts.append(len(messages))
        messages.append({"role": "user", "content": _statement(t)})
        for k in range(turns):
            if k == turns // 2:  # the harness's reply to a turn of two blocks: no new task
                messages.append({"role": "assistant",
                                 "content": "```bash\nls\n```\n```bash\npwd\n```"})
                messages.append({"role": "user", "content": FORMAT_ERROR})
            messages.extend(_turn(t, k))
        messages.append({"role": "assistant", "content": (
            "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A\n```")})
    return messages[:-1], starts  # the last call ends with a harness's answer


def test_the_fold_stops_at_the_start_of_a_young_task_the_horizon_is_in() -> None:
    turns = list(range(1, 400, 2))  # an assistant message every other one
    assert task_bound(300, [], turns, 60) == 300  # the first task: up to the horizon
    assert task_bound(300, [120, 250, 400], turns, 60) == 250  # 25 turns into it
    assert task_bound(250, [120, 250, 400], turns, 60) == 250  # 65 turns: up to the horizon
    assert task_bound(250, [120, 250, 400], turns, 70) == 120
    assert task_bound(100, [120, 250], turns, 60) == 100
    assert task_bound(300, [120, 250, 400], turns, None) == 300  # no such rule: no bound


def test_later_tasks_start_where_a_statement_opens_as_the_first_did() -> None:
    messages, starts = _queue(3, 12)
    layout = Layout()
    layout.extend(messages)
    assert layout.task_starts == starts[1:]  # the harness's format errors start none
    # an agent that speaks first (tau2-bench's greeting): its first user message starts no
    # later task, a later one opening as that one did does
    talk = [{"role": "assistant", "content": "Hi! How can I help?"},
            {"role": "user", "content": "Hi there! My phone has no signal.\nSince today."},
            {"role": "assistant", "content": "Let me check."},
            {"role": "user", "content": "It says No Service."},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "Hi there! My phone has no signal.\nAgain."}]
    layout = Layout()
    layout.extend(talk)
    assert layout.task_starts == [5]


async def test_a_queue_folds_its_earlier_tasks_never_its_later_current_one(
    engine: ContextEngine,
) -> None:
    messages, starts = _queue(5, 45)  # 47 turns a task
    folded_current = folded_earlier = 0
    fitted = None
    for end in (i + 1 for i, m in enumerate(messages) if m["role"] == "user" and i > 1):
        fitted = await engine.fit({"messages": messages[:end]}, _call("fold-task"))
        current = max(s for s in starts if s < end)  # the first task folds as before
        for d in fitted.drops:
            if d.reason == TURNS_REASON and d.message_index is not None:
                if d.message_index >= current > starts[0]:
                    folded_current += 1
                else:
                    folded_earlier += 1
        assert (sum(d.tokens_saved for d in fitted.drops)
                == fitted.tokens_before - fitted.tokens_after)
    assert fitted is not None and fitted.task_class == "default"
    assert folded_earlier > 0  # the earlier tasks still fold
    assert folded_current == 0  # a later task the agent is on never does
