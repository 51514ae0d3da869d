"""The Reflector's view of a step: its messages as lines of text, the first one and the
newest within a budget of characters.

The trace writer keeps a stored trace's messages to those this view can show
(`keep_recent` in `traces.py` walks back with `line` and `shown_budget`), so what the
gateway stores per call and what the Reflector reads follow one rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from gateway.learner.signals import text_of

ELIDE_AT = 4000  # characters of one message's text shown (its middle elided past that)
ELIDED = "[...earlier messages elided...]"


def line(message: Mapping[str, Any]) -> str:
    """One message as the Reflector reads it."""
    role = message.get("role", "?")
    text = text_of(message.get("content"))
    if message.get("tool_calls"):
        text += "\nTOOL CALLS: " + orjson.dumps(message["tool_calls"]).decode()
    return f"[{role}] {_elide(text, ELIDE_AT)}"


def shown_budget(first_line: str, max_chars: int) -> int:
    """The characters left for the newest messages' lines after the first's (its head)."""
    return max_chars - len(first_line[: max_chars // 4])


def transcript(messages: Sequence[Mapping[str, Any]], max_chars: int) -> str:
    """The step as text; the system prompt and the newest messages win the space."""
    lines = [line(message) for message in messages]
    if not lines:
        return ""
    head, body = lines[0][: max_chars // 4], lines[1:]
    budget, kept = shown_budget(lines[0], max_chars), []
    for text in reversed(body):
        if len(text) > budget:
            kept.append(ELIDED)
            break
        kept.append(text)
        budget -= len(text)
    return "\n".join([head, *reversed(kept)])


def _elide(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters elided ...]\n{text[-half:]}"
