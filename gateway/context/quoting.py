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

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gateway.context.items import content_text
from gateway.context.needed import arguments, tool_calls

# A quote is two or more lines, this long or more: a shorter one is a line and its break
QUOTE_MIN_CHARS = 24
# A file named by a call: a path or a file name with an extension, no spaces (a command
# line is not a path: `cat x.json` names a command)
_FILE = re.compile(r"^[~./\\\w:-]*[\w-]\.\w{1,8}$")
_PATH = re.compile(r"^[~.]?/\S+$")  # a path a call names (`/home/u/bin/toggle-theme`)
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


def call_files(msg: Mapping[str, Any]) -> set[str]:
    """The files the arguments of an assistant message's tool calls name (`_FILE`)."""
    return {s for call in tool_calls(msg) for s in _strings(arguments(call)[1])
            if _FILE.match(s)}


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


def _replaces(call: Mapping[str, Any], outputs: Sequence[str], proper: bool = False) -> bool:
    """Whether a call's arguments quote two or more lines of an output in `outputs`, exactly,
    beside another string that shares a line with the quote: the text put in its place (an
    edit keeps lines around what it changes). A file written whole from a result it copies
    has no such pair. `proper`: a part of an output, not all of it."""
    strings = list(_strings(arguments(call)[1]))
    for s in strings:
        if len(s) < QUOTE_MIN_CHARS or "\n" not in s.strip():
            continue
        kept = _lines(s)
        if any(t != s and kept & _lines(t) for t in strings) and any(
                s in out and not (proper and s == out) for out in outputs):
            return True
    return False


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


def _texts(call: Mapping[str, Any]) -> list[str]:
    """A call's texts of two or more lines (`QUOTE_MIN_CHARS` or more)."""
    return [v for v in _strings(arguments(call)[1])
            if len(v) >= QUOTE_MIN_CHARS and "\n" in v.strip()]


def _whole(texts: Sequence[str]) -> list[str]:
    """Of a call's `texts`, those written whole: sharing no line with another of them (an
    edit's quote and the text put in its place share one)."""
    return [v for v in texts if not any(t != v and _lines(v) & _lines(t) for t in texts)]


def first_quote_edit(messages: Sequence[Mapping[str, Any]], end: int) -> int:
    """The first assistant message before `end` that edits, by exact text, a part of a text
    the agent wrote whole (`_whole`: a file, a script) in a turn before its previous one: a
    call of it replaces two or more lines (`_replaces`) that such a text carries and is
    not (a quote of all of it is a retry of the call that wrote it). An agent that does
    so goes back to texts older than the live tail, which a fold has taken; one that
    edits what it just wrote, or the files it reads, does not; -1: none."""
    written: list[str] = []  # texts written whole before the previous turn
    last: list[str] = []  # the previous turn's
    for at, msg in enumerate(messages[:end]):
        if msg.get("role") != "assistant":
            continue
        calls = tool_calls(msg)
        if written and any(_replaces(call, written, proper=True) for call in calls):
            return at
        written += last
        last = [v for call in calls for v in _whole(_texts(call))]
    return -1


def spent_texts(messages: Sequence[Mapping[str, Any]], start: int,
                end: int) -> list[tuple[str, bool]]:
    """The texts the calls of `messages[start:end]` wrote that no later edit quotes, in the
    order of the calls, each with whether a value follows it in its call: a text a call
    that names no file (`_FILE`, `_PATH`) wrote whole (a command: run, not kept in a
    file). (An edit's quote is not one: a failed edit leaves it in the file, and the
    agent quotes it again.)"""
    spent: list[tuple[str, bool]] = []
    for msg in messages[start:end]:
        if msg.get("role") != "assistant":
            continue
        for call in tool_calls(msg):
            whole = _whole(_texts(call))
            if whole and not any(_FILE.match(v) or _PATH.match(v)
                                 for v in _strings(arguments(call)[1])):
                spent += ((v, False) for v in whole)
    return spent
