"""What the agent is working on: the terms of its task statement and the values of its
recent tool calls. A digest of an old output keeps the lines that carry them (plan-aware, as
in PAACE): the row naming the product the task asks about, the line with the id the agent just
passed to a tool; a random number in a log line is left to the value list."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

from gateway.context.items import content_text

RECENT_CALLS = 3  # assistant turns whose tool-call arguments are the current step
TASK_MESSAGES = 3  # user messages in a row read as the current task's statement
_TERM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-/@]*[A-Za-z0-9_]")
# Words every task statement has: they carry no focus.
_COMMON = frozenset(
    [
        "about", "above", "after", "again", "all", "also", "and", "any", "are", "because", "been",
        "before", "being", "below", "between", "both", "but", "can", "could", "did", "does",
        "doing", "done", "down", "during", "each", "either", "else", "every", "few", "find",
        "first", "for", "from", "further", "give", "given", "had", "has", "have", "having",
        "here", "how", "into", "its", "just", "last", "least", "like", "list", "make", "many",
        "more", "most", "much", "must", "need", "next", "not", "now", "off", "once", "only",
        "other", "our", "out", "over", "own", "please", "same", "show", "should", "since", "some",
        "such", "than", "that", "the", "their", "them", "then", "there", "these", "they", "this",
        "those", "through", "too", "under", "until", "upon", "use", "used", "user", "using",
        "very", "want", "was", "way", "well", "were", "what", "when", "where", "which", "while",
        "who", "whom", "why", "will", "with", "within", "without", "would", "you", "your",
    ]
)


# A link's scaffolding: its scheme, `www`, the common top-level domains. A task statement
# holding a URL names none of them, yet as focus terms they would make every link in an
# output "name the task" (the scheme is a token of its own: `:` ends a term).
_SCAFFOLD = frozenset(["ftp", "http", "https", "www", "com", "org", "net", "edu", "gov"])


def _terms(text: str) -> set[str]:
    return {
        t.lower()
        for t in _TERM.findall(text)
        if len(t) >= 3 and t.lower() not in _COMMON and t.lower() not in _SCAFFOLD
    }


def _argument_leaves(raw: str) -> list[str]:
    try:
        value: Any = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return [raw]
    out: list[str] = []
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif node is not None and not isinstance(node, bool):
            out.append(str(node))
    return out


class Focus(frozenset[str]):
    """A digest's focus terms and, apart, `lead`: those a capped value list ranks its values
    by (the first task's and the latest calls'). The rest (a queue's current task's, see
    `task_focus`, `current_terms`) choose lines and add a few values after a capped list
    (`summarize._extra`): a value list is the one its lead gives, so a later task's words push
    out no value the list kept without them (claude queues' tune split lost one:
    bench/README.md, "part twenty-four"; "part twenty-six")."""

    lead: frozenset[str]

    def __new__(cls, terms: Iterable[str], lead: frozenset[str] | None = None) -> Focus:
        self = super().__new__(cls, terms)
        self.lead = frozenset(self) if lead is None else lead
        return self


def lead_terms(focus: frozenset[str]) -> frozenset[str]:
    """The terms a capped value list ranks values by (`Focus.lead`; a plain set: all)."""
    return focus.lead if isinstance(focus, Focus) else focus


def current_terms(focus: frozenset[str]) -> frozenset[str]:
    """The current task's own terms: those `Focus.lead` lacks (a plain set: none)."""
    return focus - focus.lead if isinstance(focus, Focus) else frozenset()


def task_focus(
    messages: Sequence[Mapping[str, Any]], task_start: int = -1
) -> frozenset[str]:
    """Lower-cased terms of the task statement (the first user message), of the current
    task's (`task_start`: the user message that started it, in a session whose agent had
    answered before — a queue's later task, `Clock.task_start`; -1: none) and of the
    arguments of the latest tool calls. Walks those user messages and the last few turns
    only. Without the current task's terms a queue's later task kept the lines and values
    that named its first task's."""
    terms: set[str] = set()
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    if first_user is not None:
        terms |= _terms(content_text(first_user.get("content"))[:4000])
    current: set[str] = set()
    if task_start > 0:
        for msg in messages[task_start:task_start + TASK_MESSAGES]:
            if msg.get("role") != "user":
                break  # the task statement: the user messages that start the task
            current |= _terms(content_text(msg.get("content"))[:4000])
    seen = 0
    for msg in reversed(messages):
        if msg.get("role") != "assistant":
            continue
        for call in msg.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(fn, Mapping):
                for leaf in _argument_leaves(str(fn.get("arguments") or "")):
                    terms |= _terms(leaf[:2000])
        seen += 1
        if seen >= RECENT_CALLS:
            break
    if current - terms:
        return Focus(terms | current, frozenset(terms))
    return frozenset(terms)


def focus_hits(line: str, focus: frozenset[str]) -> int:
    """How many distinct focus terms a line carries."""
    return len({t.lower() for t in _TERM.findall(line)} & focus) if focus else 0


# A name's parts: a path's segments (`mcptester0606/Annoy-PyEdu-Rs-Raw` ->
# `annoy-pyedu-rs-raw`), and the words a snake-, kebab- or dotted name joins
# (`critical_academic_warnings` -> `academic`; `_pages/publications.html` -> `publications`).
_SEGMENT = re.compile(r"[/:@]")
_PART = re.compile(r"[/:@._\-]")


def focus_parts(value: str, focus: frozenset[str]) -> int:
    """How many distinct focus terms `value`'s names carry as parts (a path's segments, the
    words of a joined name), whole terms included: a value that names what the task names
    inside a longer identifier (`…/Annoy-PyEdu-Rs-Raw`, `critical_academic_warnings`), which
    `focus_hits` reads as one term that no task states."""
    if not focus:
        return 0
    parts: set[str] = set()
    for term in _TERM.findall(value):
        term = term.lower()
        parts.add(term)
        parts.update(_SEGMENT.split(term))
        parts.update(_PART.split(term))
    return len({p for p in parts if len(p) >= 3} & focus)
