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
from dataclasses import dataclass, field
from typing import Any

from gateway.context.items import content_text
from gateway.context.needed import arguments, tool_calls

# A quote is two or more lines, this long or more: a shorter one is a line and its break
QUOTE_MIN_CHARS = 24
# A file named by a call: a path or a file name with an extension, no spaces (a command
# line is not a path: `cat x.json` names a command)
_FILE = re.compile(r"^[~./\\\w:-]*[\w-]\.\w{1,8}$")
# A path a call writes to: the above, or a name under a folder (`~/.local/bin/tool`)
_PATH = re.compile(r"^[~.]{0,2}/?(?:[\w.@+-]+/)+[\w.@+-]+$")
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


# A file's texts as an exact-text editor's calls left it (`standing`): at most this many
# texts a file (its latest)
STANDING_TEXTS = 4


def _text(s: str) -> bool:
    """Whether an argument string is a text of lines a later quote can take from: two or
    more lines, `QUOTE_MIN_CHARS` or longer."""
    return len(s) >= QUOTE_MIN_CHARS and "\n" in s.strip()


def _pair(strings: Sequence[str]) -> tuple[str, str] | None:
    """An edit's two texts among a call's argument strings: a text of lines and another
    string sharing a line with it (`_replaces`' shape), in argument order; None: none."""
    for i, s in enumerate(strings):
        if not _text(s):
            continue
        kept = _lines(s)
        for j, t in enumerate(strings):
            if j != i and t != s and kept & _lines(t):
                return (s, t) if i < j else (t, s)
    return None


@dataclass(slots=True)
class Standing:
    """What the calls of a stretch of messages left written, per file they name (`_FILE`):
    a file written whole is its text; an edit's new text replaces its quote where a text
    of the file has it, else joins the file's texts (the latest `STANDING_TEXTS`).
    `edits`: whether a call of the stretch replaced a quote an earlier message carries (an
    output it read, or a text a call wrote) — an agent that edits by exact text."""

    files: dict[str, list[str]] = field(default_factory=dict)
    edits: bool = False
    first_edit: int = -1  # the message of the first such call (-1: none)
    # per file, the calls' texts as written that the file still holds some of: a write's
    # text until the file is written again, an edit's new text until a later edit's
    # quote takes all of it (the latest `STANDING_TEXTS`)
    written: dict[str, list[str]] = field(default_factory=dict)


def standing(messages: Sequence[Mapping[str, Any]], start: int, end: int) -> Standing:
    """`Standing` of the calls in `messages[start:end]` (the messages before searched for
    a quote too)."""
    out = Standing()
    files, written = out.files, out.written
    said: list[str] = []  # the earlier messages' outputs and call texts a quote is from
    for msg in messages[:start]:
        if msg.get("role") == "tool":
            said.append(content_text(msg.get("content")))
        elif msg.get("role") == "assistant":
            said += (s for call in tool_calls(msg) for s in _strings(arguments(call)[1])
                     if _text(s))
    for at, msg in enumerate(messages[start:end], start):
        if msg.get("role") == "tool":
            said.append(content_text(msg.get("content")))
            continue
        if msg.get("role") != "assistant":
            continue
        for call in tool_calls(msg):
            strings = list(_strings(arguments(call)[1]))
            named = [s for s in strings if _FILE.match(s) or _PATH.match(s)]
            texts = [s for s in strings if _text(s)]
            if not named or not texts:
                continue
            file = named[0]
            held = files.setdefault(file, [])
            verbatim = written.setdefault(file, [])
            pair = _pair(strings)
            if pair is None:  # a file written whole
                held[:] = [texts[0]]
                verbatim[:] = [texts[0]]
            else:
                quote, new = pair
                if not any(quote in t for t in held) and any(new in t for t in held):
                    quote, new = new, quote  # the text the file holds is the quote
                elif not any(quote in t for t in held) and not any(quote in t for t in said) \
                        and any(new in t for t in said):
                    quote, new = new, quote
                if not out.edits and any(quote in t for t in (*held, *said)):
                    out.edits, out.first_edit = True, at
                hit = next((k for k, t in enumerate(held) if quote in t), None)
                if hit is not None:
                    held[hit] = held[hit].replace(quote, new, 1)
                else:
                    held[:] = [*[t for t in held if t not in new][1 - STANDING_TEXTS:], new]
                verbatim[:] = [t for t in verbatim if t not in quote][1 - STANDING_TEXTS:]
                if _text(new):
                    verbatim.append(new)
            said += texts
            files[file] = files.pop(file)  # the latest touched last
            written[file] = written.pop(file)
    return out
