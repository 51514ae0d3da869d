"""A harness that counts the calls its agent has left ("You have 2 steps left") bounds the
calls a step's rewrites can repay over (`steps.calls_left`, `steps.unrepaid`): on a short
run's last calls a step re-sends more at full price than it saves, so the prefix stays
(bench/README.md, "Short code-acting runs: a step weighed over the calls the harness says
are left")."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Item
from gateway.context.steps import calls_left, unrepaid
from gateway.context.taskclass import Compaction

RULES = ("Solve the task with Python: write your code in <execute> </execute> and receive "
         "its output, or answer in <solution> </solution>. You have 5 chances to interact "
         "with the environment.\n")


def _turn(k: int) -> str:
    lines = "".join(f"    total_{k} += table[{i}] * weight_{i}  # station {k}-{i}, hour {i}\n"
                    for i in range(40))
    return (f"<thought> I sum table {k} with its weights. </thought>\n<execute>\n"
            f"def total_{k}(table):\n    total_{k} = 0\n{lines}    return total_{k}\n"
            f"print(total_{k}(load_table({k})))\n</execute>\n")


def _observation(k: int, left: int) -> str:
    rows = "".join(f"station {k}-{i}: {i * 37 + k} units\n" for i in range(40))
    return (f"Observation:\n{rows}You have {left} steps left and 2 chances to propose "
            "solution left.\n")


def _run(counted: bool) -> list[dict[str, Any]]:
    # uncounted: no count in the turns, nor a maximum stated up front (`stated_left`)
    rules = RULES if counted else RULES.replace(" You have 5 chances to interact "
                                                "with the environment.", "")
    messages: list[dict[str, Any]] = [{"role": "user", "content": rules + "Task: sum the units."}]
    for k in range(5):
        messages.append({"role": "assistant", "content": _turn(k)})
        text = _observation(k, 4 - k)
        if not counted:
            text = text.replace(f"You have {4 - k} steps left and 2 chances to propose "
                                "solution left.\n", "")
        messages.append({"role": "user", "content": text})
    return messages


def test_the_harness_count_is_read_from_the_latest_user_message() -> None:
    assert calls_left([{"role": "user", "content": "Observation:\n3\nYou have 2 steps left."}]) == 2
    assert calls_left([{"role": "user", "content": "Observation: ok. 4 turns remaining"},
                       {"role": "assistant", "content": "<execute>print(1)</execute>"}]) == 4
    parts = [{"type": "text", "text": "1 more call left"}]
    assert calls_left([{"role": "user", "content": parts}]) == 1
    # an earlier count, a count of other things, or none: not the calls left
    assert calls_left([{"role": "user", "content": "You have 4 steps left."},
                       {"role": "assistant", "content": "x"},
                       {"role": "user", "content": "Observation: done"}]) is None
    assert calls_left([{"role": "user", "content": "3 apples left in the basket"}]) is None
    assert calls_left([]) is None


def _item(index: int, text: str, tokens: int) -> Item:
    return Item(id=f"m{index}", kind="user" if index % 2 == 0 else "assistant",
                unit=f"m{index}", message_index=index, segment=0, text=text, tokens=tokens,
                fixed_tokens=0, turn=(index + 1) // 2, pinned=False, rewritable=True)


def test_a_step_is_weighed_over_the_calls_left_at_most() -> None:
    c = Compaction(repay_calls=10, early_max_tokens=8000)
    before = [_item(0, "task", 100), _item(1, "turn", 1000), _item(2, "output", 500)]
    after = [_item(0, "task", 100), _item(1, "digest", 100), _item(2, "output", 500)]
    assert unrepaid(before, after, 3, 3, c) == set()  # repays over 10 calls to come
    assert unrepaid(before, after, 3, 3, c, left=2) == {1}  # not over the 2 left
    assert unrepaid(before, after, 3, 3, c, left=20) == set()


async def _prefix_changes(engine: ContextEngine, messages: list[dict[str, Any]], sid: str) -> int:
    """Calls that changed a message before the last one the previous call sent (a step; a
    counted run's tail rewrite of that last one, `engine._tail_masks`, is not counted)."""
    headers = {"x-ctxgate-session-id": sid, "x-ctxgate-task-class": "default"}
    sent: list[str] | None = None
    changes = 0
    for end in [i for i, m in enumerate(messages) if m["role"] == "assistant"]:
        fitted = await engine.fit({"messages": messages[:end]}, CallContext("t-left", "s", headers))
        now = [str(m["content"]) for m in fitted.body["messages"]]
        if sent is not None and now[: len(sent) - 1] != sent[:-1]:
            changes += 1
        sent = now
    return changes


async def test_a_counted_short_run_keeps_its_prefix(engine: ContextEngine) -> None:
    assert await _prefix_changes(engine, _run(counted=False), "uncounted") > 0  # steps taken
    assert await _prefix_changes(engine, _run(counted=True), "counted") == 0
