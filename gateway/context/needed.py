"""The values an agent's action used, and where they can be found: issue 7's yardstick.

One implementation for the offline yardstick (`bench/yardstick.py` imports it) and the live
fidelity signals (`fidelity.py`), so that the two cannot drift. Pure functions over OpenAI
chat messages (the wire adapters' chat views are that shape).

- *Action values* of an assistant message (`action_values`): every string leaf of ≥ 4
  characters of its parsed tool-call arguments and every number ≥ 100; when it made no tool
  call, every token of its text matching `[A-Za-z0-9_./:-]{4,}` that contains a digit, `/`
  or `_`.
- *Needed values* (`needed_values`): the action values that occur (as substrings) in an
  earlier non-system message.
- *Recall* (`recall`): the share of the needed values present as substrings in the
  forwarded messages; None when nothing was needed.

Details: text content is a string as is, or a list of parts' `text` joined with "\\n"; a
message is searched as its text content, then per tool call its name, its raw `arguments`
string and the leaves of the parsed arguments; arguments that are not valid JSON yield no
values (the call could not have run as written).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from gateway.context.items import TEXT_PARTS, content_text

Message = Mapping[str, Any]

TEXT_TOKEN = re.compile(r"[A-Za-z0-9_./:-]{4,}")
_TEXT_TOKEN_MARK = re.compile(r"[0-9/_]")
SEPARATOR = "\n\x00"  # between messages in a haystack: no value spans two messages
SYSTEM_ROLES = ("system", "developer")


def text_content(content: Any) -> str:
    """A message's text content as the yardstick reads it: parts with no `type` count too."""
    return content_text(content, (*TEXT_PARTS, None))


def leaves(value: Any) -> Iterator[str]:
    """String leaves of ≥ 4 characters and numbers ≥ 100 of parsed JSON."""
    if isinstance(value, str):
        if len(value) >= 4:
            yield value
    elif isinstance(value, bool):
        return
    elif isinstance(value, int | float):
        if value >= 100:
            yield str(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from leaves(v)


def arguments(call: Mapping[str, Any]) -> tuple[str, Any]:
    """A tool call's raw arguments string and its parsed value (None when not JSON)."""
    function = call.get("function")
    raw = function.get("arguments", "") if isinstance(function, Mapping) else ""
    if not isinstance(raw, str):
        return json.dumps(raw), raw
    try:
        return raw, json.loads(raw)
    except ValueError:
        return raw, None


def tool_name(call: Mapping[str, Any]) -> str:
    function = call.get("function")
    return str(function.get("name", "")) if isinstance(function, Mapping) else ""


def tool_calls(msg: Message) -> list[Mapping[str, Any]]:
    """The well-formed tool calls of a message."""
    return [c for c in msg.get("tool_calls") or () if isinstance(c, Mapping)]


def action_values(assistant: Message) -> set[str]:
    """The values an assistant message used (before the earlier-message filter)."""
    calls = tool_calls(assistant)
    if calls:
        out: set[str] = set()
        for call in calls:
            out.update(leaves(arguments(call)[1]))
        return out
    text = text_content(assistant.get("content"))
    return {t for t in TEXT_TOKEN.findall(text) if _TEXT_TOKEN_MARK.search(t)}


def searchable_text(msg: Message) -> str:
    """What a value is searched in: text content, then each tool call's name, raw arguments
    and argument leaves."""
    parts = [text_content(msg.get("content"))]
    for call in tool_calls(msg):
        raw, parsed = arguments(call)
        parts.append(tool_name(call))
        parts.append(raw)
        parts.extend(leaves(parsed))
    return "\n".join(parts)


def is_system(msg: Message) -> bool:
    return msg.get("role") in SYSTEM_ROLES


def join(texts: Iterable[str]) -> str:
    return SEPARATOR.join(texts)


def haystack(messages: Sequence[Message], *, skip_system: bool = False) -> str:
    return join(searchable_text(m) for m in messages if not (skip_system and is_system(m)))


def needed_values(assistant: Message, earlier: Sequence[Message]) -> set[str]:
    """Values the assistant message used that occur in an earlier non-system message."""
    values = action_values(assistant)
    if not values:
        return values
    found = haystack(earlier, skip_system=True)
    return {v for v in values if v in found}


def recall(needed: set[str], forwarded: Sequence[Message] | str) -> float | None:
    """Share of the needed values present in the forwarded messages (None: nothing needed)."""
    if not needed:
        return None
    found = forwarded if isinstance(forwarded, str) else haystack(forwarded)
    return sum(v in found for v in needed) / len(needed)
