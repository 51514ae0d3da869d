"""Agents that edit by exact text: whether a new JSON output keeps its layout on arrival.

Coding agents edit a file by quoting the lines to replace (`old_string`, `old_str`,
`oldText`): the arguments re-type, byte for byte, several lines of an earlier read,
indentation included. A file's JSON read minified on arrival (`lines.minified`) no longer
carries those lines (`"hideTips": true,\\n    "hideBanner": false` became
`"hideTips":true,"hideBanner":false`), and the edit's anchor is gone from the context. So
a JSON output keeps its layout when it answers a call that names a file and either the
file is a JSON file (the output is that file as laid out on disk: a configuration file an
agent reads to change) or the agent of its session has already replaced two or more lines
of an earlier output, quoted exactly, by a text that keeps a line of them: an agent that
edits that way. An agent that only reads JSON records and API answers, or writes a file
whole from a result, still gets them minified.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gateway.context.items import content_text
from gateway.context.needed import arguments, searchable_text, tool_calls

# A quote is two or more lines, this long or more: a shorter one is a line and its break
QUOTE_MIN_CHARS = 24
# A file named by a call: a path or a file name with an extension, no spaces (a command
# line is not a path: `cat x.json` names a command)
_FILE = re.compile(r"^[~./\\\w:-]*[\w-]\.\w{1,8}$")
_JSON_FILE = re.compile(r"\.json[c5]?$", re.IGNORECASE)  # a file that is JSON itself


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _call_strings(msg: Mapping[str, Any], call_id: str) -> Iterator[str]:
    """The string leaves of the arguments of a message's tool call `call_id`."""
    for call in tool_calls(msg):
        if call.get("id") == call_id:
            yield from _strings(arguments(call)[1])


def named_files(messages: Sequence[Mapping[str, Any]], index: int) -> list[str]:
    """The files named by the arguments of the call the tool message at `index` answers."""
    call_id = messages[index].get("tool_call_id")
    if not isinstance(call_id, str):
        return []
    for i in range(index - 1, -1, -1):
        msg = messages[i]
        if msg.get("role") == "assistant" and any(
                c.get("id") == call_id for c in tool_calls(msg)):
            return [s for s in _call_strings(msg, call_id) if _FILE.match(s)]
    return []


def _lines(text: str) -> set[str]:
    return {line for line in text.splitlines() if line.strip()}


def _replaces(call: Mapping[str, Any], outputs: Sequence[str]) -> bool:
    """Whether a call's arguments quote two or more lines of an output in `outputs`, exactly,
    beside another string that shares a line with the quote: the text put in its place (an
    edit keeps lines around what it changes). A file written whole from a result it copies
    has no such pair."""
    strings = list(_strings(arguments(call)[1]))
    for s in strings:
        if len(s) < QUOTE_MIN_CHARS or "\n" not in s.strip():
            continue
        kept = _lines(s)
        if any(t != s and kept & _lines(t) for t in strings) and any(
                s in out for out in outputs):
            return True
    return False


@functools.lru_cache(maxsize=4096)
def _edits(raw: str) -> tuple[tuple[str, str], ...]:
    strings = list(_strings(arguments({"function": {"arguments": raw}})[1]))
    quotes = [(n, _lines(s)) for n, s in enumerate(strings)
              if len(s) >= QUOTE_MIN_CHARS and "\n" in s.strip()]
    out: dict[str, str] = {}  # the later string -> the earlier one (the first it pairs with)
    for n, t in enumerate(strings):
        for q, lines in quotes:
            if q < n and strings[q] != t and lines & _lines(t):
                out.setdefault(t, strings[q])
                break
    return tuple((first, second) for second, first in out.items())


def edits(call: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """An exact-text edit call's pairs of strings, in their order in its arguments: each
    string that shares a line with an earlier one of two or more lines, `QUOTE_MIN_CHARS`
    or more (an edit keeps lines around what it changes, `_replaces`), after that one. One
    of each pair is the quote, the other the text put in its place (`Edits` tells which).
    A call that writes a file whole, a command, a message has no such pair."""
    raw = arguments(call)[0]
    return _edits(raw) if raw else ()


class Edits:
    """The exact-text edits of a client's messages, each as (quote, new text): of a pair
    (`edits`), the quote is the one an earlier message carries and the new text the one
    none does (an agent writes its arguments in any order: Gemini CLI's `new_string` comes
    first in some calls); where both or neither do (a read shown with line numbers), the
    first. The new text is the lines the file holds after the edit, which the agent's next
    edit of them quotes as its old text. The earlier messages are read as the yardstick
    searches them (`needed.searchable_text`), once each, only as far as an edit needs."""

    def __init__(self, messages: Sequence[Mapping[str, Any]]) -> None:
        self.messages = messages
        self._text = ""  # the messages read so far, each after a line break
        self._ends: list[int] = []  # per message read: where its text ends in `_text`

    def _earlier(self, value: str, index: int) -> bool:
        """Whether a message before `index` carries `value`."""
        if len(self._ends) < index:
            parts = []
            end = len(self._text)
            for msg in self.messages[len(self._ends):index]:
                parts.append(f"\n{searchable_text(msg)}")
                end += len(parts[-1])
                self._ends.append(end)
            self._text += "".join(parts)
        return self._text.find(value, 0, self._ends[index - 1] if index > 0 else 0) >= 0

    def of(self, index: int) -> tuple[tuple[str, str], ...]:
        """The edits of the message at `index`, as (quote, new text)."""
        out = []
        for call in tool_calls(self.messages[index]):
            for first, second in edits(call):
                swap = self._earlier(second, index) and not self._earlier(first, index)
                out.append((second, first) if swap else (first, second))
        return tuple(out)


def quotes_outputs(messages: Sequence[Mapping[str, Any]], before: int) -> bool:
    """Whether an assistant message before `before` edits by exact text: a call of it
    replaces two or more lines of a tool output above it (`_replaces`)."""
    outputs: list[str] = []
    for msg in messages[:before]:
        role = msg.get("role")
        if role == "tool":
            outputs.append(content_text(msg.get("content")))
        elif role == "assistant" and outputs and any(
                _replaces(call, outputs) for call in tool_calls(msg)):
            return True
    return False


def keeps_layout(messages: Sequence[Mapping[str, Any]], index: int) -> bool:
    """Whether a new JSON output at message `index` goes out as laid out (see the module)."""
    if not (0 <= index < len(messages) and messages[index].get("role") == "tool"):
        return False
    files = named_files(messages, index)
    return bool(files) and (any(_JSON_FILE.search(f) for f in files)
                            or quotes_outputs(messages, index))
