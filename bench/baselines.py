"""What the engine is compared with: observation masking and a plain budget fit.

- `mask_keep(messages, k)`: tool outputs, and user turns after the first, older than the last
  k are replaced by a one-line placeholder (the issue's *masking keep-K*).
- `plain_fit(...)`: the plainest way to fit a budget. Replace the oldest tool outputs by the
  placeholder, then drop the oldest whole turns (an assistant message with its tool results
  is one unit), only until the call fits; the first user message (the task) goes last.
  Never touched: what the engine pins (system messages, the latest user message) and the
  call's last turn (the latest user message, or the latest assistant message with the tool
  results the call ends on). When those alone do not fit, the fit refuses (returns None), as
  the engine does with `context_budget_exceeded`: both refuse on the same calls (issue 7: a
  refusal only when the pinned content itself does not fit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench.yardstick import text_content

Message = Mapping[str, Any]


def placeholder(msg: Message) -> dict[str, Any]:
    lines = text_content(msg.get("content")).count("\n") + 1
    return {**msg, "content": f"Old environment output: ({lines} lines omitted)"}


def _first_user(messages: Sequence[Message]) -> int:
    return next((i for i, m in enumerate(messages) if m.get("role") == "user"), -1)


def observations(messages: Sequence[Message]) -> list[int]:
    """Indexes of tool outputs and of user turns after the first user turn."""
    first = _first_user(messages)
    return [
        i
        for i, m in enumerate(messages)
        if m.get("role") == "tool" or (m.get("role") == "user" and i > first)
    ]


def mask_keep(messages: Sequence[Message], keep: int) -> list[Message]:
    obs = observations(messages)
    old = set(obs[: max(len(obs) - keep, 0)])
    return [placeholder(m) if i in old else m for i, m in enumerate(messages)]


def pinned_indexes(messages: Sequence[Message]) -> set[int]:
    """System messages, the latest user message and the call's last turn: never touched."""
    pinned = {i for i, m in enumerate(messages) if m.get("role") in ("system", "developer")}
    pinned.add(max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1))
    last = len(messages) - 1
    while last > 0 and messages[last].get("role") == "tool":
        last -= 1  # the tool results the call ends on go with the call that asked for them
    pinned.update(range(max(last, 0), len(messages)))
    return pinned


def turn_units(messages: Sequence[Message], pinned: set[int]) -> list[list[int]]:
    """Droppable turns, oldest first: an assistant message with its tool results is one."""
    units: list[list[int]] = []
    for i, m in enumerate(messages):
        if i in pinned:
            continue
        if m.get("role") == "tool" and units and messages[units[-1][0]].get("role") == "assistant":
            units[-1].append(i)
        else:
            units.append([i])
    return units


def plain_fit(
    messages: Sequence[Message],
    budget: int,
    base_tokens: int,
    sizes: Sequence[int],
    placeholder_sizes: Sequence[int],
) -> list[Message] | None:
    """The call fitted to `budget` tokens, or None (refused). `sizes[i]` is message i's token
    count, `placeholder_sizes[i]` that of its placeholder (`mask_keep(messages, 0)`), both
    counted by the engine's own counter, so budgets mean the same for both."""
    out: list[Message | None] = list(messages)
    size = list(sizes)
    total = base_tokens + sum(size)
    pinned = pinned_indexes(messages)
    for i in observations(messages):
        if total <= budget:
            break
        if i not in pinned and placeholder_sizes[i] < size[i]:
            out[i] = placeholder(messages[i])
            total -= size[i] - placeholder_sizes[i]
            size[i] = placeholder_sizes[i]
    task = _first_user(messages)
    units = turn_units(messages, pinned | {task})
    if task >= 0 and task not in pinned:
        units.append([task])
    for unit in units:
        if total <= budget:
            break
        for i in unit:
            out[i] = None
            total -= size[i]
    if total > budget:
        return None
    return [m for m in out if m is not None]
