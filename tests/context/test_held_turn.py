"""The turn a weighed step left verbatim as the latest answer (`steps.horizon_after`: a
young session's large call reaches only its latest turn) keeps its commands whole when a
later step digests it (`StageContext.held_turn`, `engine._held_turn`): digested on time,
one of the agent's latest turns, it would have kept them for good (bench/README.md,
"Short runs' cost @0.1, part eight")."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import _held_turn
from gateway.context.items import parse_request
from gateway.context.session import Decision, SessionState
from gateway.context.stages.base import StageContext, decide
from gateway.context.taskclass import Compaction, task_class
from gateway.context.tokens import TokenCounter

COUNTER = TokenCounter()
YOUNG = Compaction(verbatim_tokens_high=1000, verbatim_tokens_low=0, max_step_share=0.2,
                   repay_calls=20, early_max_tokens=500, repay_young_calls=40)
PATCH = ("I will make the legend picklable.\n\n```python\nclass Legend:\n"
         + "".join(f"    line_{k} = {k}\n" for k in range(12))
         + "    def __getstate__(self):\n        state = self.__dict__.copy()\n"
         "        return state\n```\n\nThis patch adds custom pickling.")


def _messages() -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                  {"role": "user", "content": "fix the pickling bug"}]
    for k in range(3):
        call = {"id": f"c{k}", "type": "function",
                "function": {"name": "read", "arguments": f'{{"path": "f{k}.py"}}'}}
        msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"c{k}", "content": f"code {k} " * 200}]
    msgs.append({"role": "assistant", "content": PATCH})  # message 8: the held turn
    for k in range(3, 6):  # a few turns later, on the same task
        call = {"id": f"c{k}", "type": "function",
                "function": {"name": "apply", "arguments": f'{{"try": {k}}}'}}
        msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"c{k}", "content": "did not apply"}]
    return msgs


def _digest(held: int) -> str:
    items = parse_request({"messages": _messages()}, COUNTER, "o200k_base").items
    patch = next(i for i in items if i.message_index == 8)
    assert patch.age > 1  # no longer one of the latest turns
    cls = task_class("t", {"compaction": YOUNG.model_dump()})
    ctx = StageContext(task_class=cls, counter=COUNTER, encoding="o200k_base", embedder=None,
                       fixed_tokens=3, horizon=14, query="", decisions={},
                       originals={i.id: i for i in items}, held_turn=held)
    aged = Decision("compress", "compress", "aged", "summary", 3)
    result = decide(items, {patch.id: aged}, ctx)
    return next(i.text for i in result.items if i.message_index == 8)


def test_the_held_turn_keeps_its_commands_whole() -> None:
    assert "self.__dict__.copy()" in _digest(8)
    assert "This patch adds" not in _digest(8)  # still a digest: its prose goes


def test_another_old_turn_keeps_a_short_command() -> None:
    assert "self.__dict__.copy()" not in _digest(-1)
    assert "line_0" in _digest(-1)  # the command's shape: its first lines


def test_only_a_weighed_session_holds_a_turn() -> None:
    items = parse_request({"messages": _messages()}, COUNTER, "o200k_base").items
    assert sum(i.tokens for i in items) > YOUNG.early_max_tokens
    state = SessionState(horizon=8, calls=5, steps=1)
    assert _held_turn(items, state, YOUNG, forced=False) == 8
    assert _held_turn(items, state, YOUNG, forced=True) == -1  # over the budget
    assert _held_turn(items, state, YOUNG.model_copy(update={"repay_young_calls": 0}),
                      forced=False) == -1  # the shipped config: no young window
    assert _held_turn(items, state, YOUNG.model_copy(update={"early_max_tokens": 10**6}),
                      forced=False) == -1  # a small call: its step reached every turn
    assert _held_turn(items, SessionState(horizon=8, calls=50, steps=5), YOUNG,
                      forced=False) == -1  # past the young window
