"""The yardstick of issue 7: how much of a call was cut, and whether what the agent needed next
survived. Pure functions over OpenAI chat messages; independent of the engine on purpose (it
judges the engine): of the gateway it imports only the needed-value extraction
(`gateway/context/needed.py`), which the live fidelity signals share, so that the offline
and the live recall cannot drift apart.

- A *call* is each prefix of a session that ends right before an assistant message
  (`call_ends`), or, for a session recorded per call, each message list as the client sent
  it, with the assistant message that answered it (`bench.corpora.session_calls`); *late*
  calls are the last third of a session's calls, rounded up
  (`late_calls`).
- *Size* of a message: the characters of its text content plus those of the JSON of its
  `tool_calls` (`message_chars`); *reduction* of a call = 1 − forwarded / sent.
- *Needed values* of a call (`needed_values`): from the assistant message that followed it,
  every string leaf of ≥ 4 characters of its parsed tool-call arguments and every number
  ≥ 100; when it made no tool call, every token of its text matching `[A-Za-z0-9_./:-]{4,}`
  that contains a digit, `/` or `_`. Only values that occur (as substrings) in an earlier
  non-system message count.
- *Recall* of a call (`recall`): the share of its needed values present as substrings in the
  forwarded messages. A call with no needed values has no recall (left out of the mean).

Where the issue leaves a detail open, the choice made here:
- text content: a string as is; a list of parts joins the `text` of its text parts with "\\n";
- "the JSON of its tool_calls": `json.dumps(tool_calls)` (Python's default separators);
- where a value is searched for (earlier messages, forwarded messages), a message reads as its
  text content, then per tool call its name, its raw `arguments` string and the leaves of the
  parsed arguments (so a multi-line or escaped argument is found as the agent wrote it);
- arguments that are not valid JSON yield no values (the call could not have run as written).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from gateway.context.needed import (
    TEXT_TOKEN,
    Message,
    action_values,
    haystack,
    is_system,
    needed_values,
    recall,
    searchable_text,
    text_content,
)

__all__ = ["TEXT_TOKEN", "action_values", "billed", "cached_chars", "call_chars", "call_ends",
           "common_prefix_chars", "haystack", "late_calls", "message_chars", "needed_values",
           "needed_with_system_results", "recall", "reduction", "searchable_text", "serialized",
           "text_content"]


def needed_with_system_results(assistant: Message, earlier: Sequence[Message]) -> set[str]:
    """Needed values with system messages after the first other message counted as sources.

    Not the issue's yardstick, which skips every system message as a source (there for the
    system prompt's instructions): a client that sends its tools' results back as mid-chat
    system messages (AutoGPT, gptme) has values the yardstick never asks for. This check
    sizes that blind spot (`bench.replay --system-results`); the leading system messages
    are still skipped.
    """
    values = action_values(assistant)
    first = next((i for i, m in enumerate(earlier) if not is_system(m)), len(earlier))
    found = haystack(earlier[first:])
    return {v for v in values if v in found}


def message_chars(msg: Message) -> int:
    """Size of a message: its text content plus the JSON of its tool calls."""
    calls = msg.get("tool_calls")
    return len(text_content(msg.get("content"))) + (len(json.dumps(calls)) if calls else 0)


def call_chars(messages: Sequence[Message]) -> int:
    return sum(message_chars(m) for m in messages)


def call_ends(messages: Sequence[Message]) -> list[int]:
    """Indexes of the assistant messages each call ends before (a call = messages[:i])."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]


def late_calls(n_calls: int) -> list[bool]:
    """Per call of a session with n_calls calls: whether it is in the last third, rounded
    up (calls k ≥ ⌊2n/3⌋; 10 calls: the last 4). Rounding down instead (the last 3 of 10)
    reproduces none of the issue's figures; rounding up reproduces them all."""
    first_late = (2 * n_calls) // 3
    return [k >= first_late for k in range(n_calls)]


def reduction(sent: Sequence[Message], forwarded: Sequence[Message]) -> float:
    before = call_chars(sent)
    return 1.0 - call_chars(forwarded) / before if before else 0.0


def common_prefix_chars(a: str, b: str) -> int:
    """Length of the longest common prefix of two strings (binary search over C compares)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def serialized(messages: Sequence[Message]) -> list[str]:
    """A call as a prompt cache sees it, one string per message: role, text content and
    tool-calls JSON, closed by a separator (so a message never runs into the next)."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        out.append(
            f"{m.get('role')}\x00{text_content(m.get('content'))}"
            f"\x00{json.dumps(calls) if calls else ''}\x01"
        )
    return out


def cached_chars(previous: Sequence[str] | None, current: Sequence[str]) -> int:
    """Characters of the current call's serialization (the concatenation of its messages')
    that repeat the previous call's from its start: what a provider's prompt cache serves."""
    if previous is None:
        return 0
    shared = 0
    for a, b in zip(previous, current, strict=False):
        if a == b:
            shared += len(b)
            continue
        return shared + common_prefix_chars(a, b)
    return shared


def billed(size: int, cached: int, rate: float) -> float:
    """Input cost of a call of `size` characters, `cached` of them billed at `rate`."""
    return size - cached + rate * cached
