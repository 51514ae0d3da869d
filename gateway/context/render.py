"""Render the fitted items back into a valid message list.

Messages whose items all survive unchanged are the client's own objects; a rewritten message
is a shallow copy with new `content`; a message none of whose items survive is left out
(units make tool calls and their results leave together). Order is never changed.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from gateway.context.apply import CutCalls, cut_calls
from gateway.context.items import Item
from gateway.context.session import Decision

Plan = list[tuple[int, str | None]]  # per rendered message: its index, new content or None
MARK_EVERY = 16  # plan entries between two marks


@dataclass(frozen=True, slots=True)
class Mark:
    """A render's state before its plan entry `pos` (message `index`): a later render of
    the same messages whose items are sent alike up to `index` resumes here (`render_from`)."""

    pos: int
    index: int
    rolling: Any  # the rolling digest before the entry (a copy: never updated)
    changed: bool  # whether a message before it was rewritten or left out


@dataclass(frozen=True, slots=True)
class Rendered:
    messages: list[Mapping[str, Any]]
    changed: bool
    digests: list[str]  # rolling digest after each rendered message (prefix identity)
    plan: Plan = field(default_factory=list)
    rolling: Any = None  # the rolling hash after the last message: a next call continues it
    marks: list[Mark] = field(default_factory=list)  # every MARK_EVERY plan entries
    # The rewritten messages `messages` holds, by index (`materialize`'s `copies`): the
    # session's prefix keeps them, so its next calls make only the new ones.
    copies: dict[int, Mapping[str, Any]] = field(default_factory=dict)


def render_messages(
    messages: Sequence[Mapping[str, Any]], original: Sequence[Item], final: Sequence[Item],
    earlier: Mapping[int, Mapping[str, Any]] | None = None,
) -> Rendered:
    """`earlier`: the rewritten messages of an earlier render of these messages (the
    session's prefix's `copies`), each taken again where it is what this render makes
    (`materialize`)."""
    marks: list[Mark] = []
    copies: dict[int, Mapping[str, Any]] = {}
    plan, changed, digests, rolling = render_plan(messages, original, final, 0, None, marks)
    return Rendered(materialize(messages, plan, copies, earlier), changed, digests, plan,
                    rolling, marks, copies)


def render_from(
    messages: Sequence[Mapping[str, Any]], original: Sequence[Item], final: Sequence[Item],
    mark: Mark, earlier: tuple[Plan, list[str], list[Mark]],
    copies: Mapping[int, Mapping[str, Any]] | None = None,
) -> Rendered:
    """`render_messages(messages, ...)` where an `earlier` render of the same messages (its
    plan, digests and marks) sent the same items up to `mark.index`, one of its marks: only
    the items of messages from there on are read (`original`, `final`: those items only).
    `copies`: the rewritten messages of the earlier render's plan (`materialize`); those
    before the mark are taken, not made again, those after it where they are what this
    render makes."""
    plan, digests, marks = earlier
    marks = marks[: bisect_left(marks, mark.pos, key=lambda m: m.pos)]
    part, changed, added, rolling = render_plan(
        messages, original, final, mark.index, mark.rolling.copy(), marks, mark.pos,
        mark.changed)
    plan = plan[: mark.pos] + part
    kept = {i: c for i, c in copies.items() if i < mark.index} if copies else {}
    return Rendered(materialize(messages, plan, kept, copies), changed,
                    digests[: mark.pos] + added, plan, rolling, marks, kept)


def materialize(
    messages: Sequence[Mapping[str, Any]], plan: Plan,
    copies: dict[int, Mapping[str, Any]] | None = None,
    earlier: Mapping[int, Mapping[str, Any]] | None = None,
) -> list[Mapping[str, Any]]:
    """The message list a plan describes, made of `messages`' own objects. `copies`: the
    rewritten messages made for earlier calls of the same plan, by index (kept by the
    caller while the plan only grows and the messages it covers are byte for byte the same,
    as the session's prefix does, `prefix.py`): only the new ones are made. `earlier`: the
    rewritten messages of an earlier plan of the same messages (a step's render): one is
    taken again where it is the very copy this plan makes (`_made_from`), so that a step
    forwards the same objects for what it sends alike (the body encoder's runs, the short
    ids' memo and the trace's runs go by identity)."""
    if copies is None:
        return [messages[i] if text is None else {**messages[i], "content": text}
                for i, text in plan]
    return [messages[i] if text is None
            else copies.get(i) or _copy(copies, messages[i], i, text, earlier)
            for i, text in plan]


@dataclass(slots=True)
class Picks:
    """What `materialize` took for the first `planned` entries of a plan that only grows
    (the session's prefix's, between steps): per entry, the index of its message, or for a
    rewritten one -(k + 1), k the number of its copy in `copies` (in the order made)."""

    planned: int = 0
    indexes: list[int] = field(default_factory=list)
    copies: list[Mapping[str, Any]] = field(default_factory=list)


def materialize_picked(
    messages: Sequence[Mapping[str, Any]], plan: Plan, copies: dict[int, Mapping[str, Any]],
    picks: Picks,
) -> list[Mapping[str, Any]]:
    """`materialize(messages, plan, copies)`, the very same objects, for a plan whose first
    `picks.planned` entries are the ones `picks` was made from (the caller keeps it with
    the plan, which it only appends to): only the new entries are read; the list is taken
    from `messages` and the copies by one C-speed `itemgetter`, not a pass per entry."""
    indexes, made = picks.indexes, picks.copies
    for i, text in plan[picks.planned:]:
        if text is None:
            indexes.append(i)
        else:
            made.append(copies.get(i) or _copy(copies, messages[i], i, text))
            indexes.append(-len(made))
    picks.planned = len(plan)
    if len(indexes) < 2:
        return materialize(messages, plan, copies)
    source = [*messages, *reversed(made)]  # copy k at -(k + 1)
    return list(itemgetter(*indexes)(source))


def _copy(copies: dict[int, Mapping[str, Any]], msg: Mapping[str, Any], i: int, text: str,
          earlier: Mapping[int, Mapping[str, Any]] | None = None) -> Mapping[str, Any]:
    copy = copies[i] = with_content(msg, text, earlier.get(i) if earlier else None)
    return copy


def with_content(msg: Mapping[str, Any], text: str,
                 old: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """`{**msg, "content": text}`, or `old` when it is that very copy (`_made_from`): an
    earlier call's rewritten message handed on (the fold's notes, `fold.FoldMemo.users`)."""
    return old if old is not None and _made_from(old, msg, text) else {**msg, "content": text}


def _made_from(old: Mapping[str, Any], msg: Mapping[str, Any], text: str) -> bool:
    """Whether `old` is `{**msg, "content": text}` to the byte: the same keys in the same
    order, `content` equal to `text`, every other value the very same object."""
    return old.get("content") == text and _same_but(old, msg, "content")


def _same_but(old: Mapping[str, Any], msg: Mapping[str, Any], name: str) -> bool:
    """Whether `old` is `{**msg, name: ...}` but for that value: the same keys in the same
    order, every other value the very same object."""
    if len(old) != len(msg) + (name not in msg):
        return False
    # past msg's keys `old` holds one more only when msg has no `name`: that one, last
    return name in old and all(key == was and (key == name or old[key] is value)
                               for (key, value), was in zip(msg.items(), old, strict=False))


def render_plan(
    messages: Sequence[Mapping[str, Any]],
    original: Sequence[Item],
    final: Sequence[Item],
    start: int,
    rolling: Any,
    marks: list[Mark] | None = None,
    pos: int = 0,
    changed: bool = False,
) -> tuple[Plan, bool, list[str], Any]:
    """How messages[start:] render, given their original and final items; `rolling` is the
    prefix digest so far (None: start one). `marks`: where to add a mark every MARK_EVERY
    plan entries, `pos` entries and `changed` (a message rewritten or left out) before
    messages[start]; the flag returned counts those before too."""
    by_message: dict[int, list[Item]] = {}
    for item in final:
        by_message.setdefault(item.message_index, []).append(item)
    originals = {item.id: item for item in original}
    plan: Plan = []
    digests: list[str] = []
    if rolling is None:
        rolling = hashlib.blake2b(digest_size=12)
    segments_of: dict[int, int] = {}
    for item in original:
        segments_of[item.message_index] = segments_of.get(item.message_index, 0) + 1
    for i in range(start, len(messages)):
        kept = by_message.get(i)
        if not kept:
            changed = True
            continue
        if marks is not None and (pos + len(plan)) % MARK_EVERY == 0:
            marks.append(Mark(pos + len(plan), i, rolling.copy(), changed))
        same = len(kept) == segments_of.get(i, 0) and all(
            originals[item.id].text is item.text or originals[item.id].text == item.text
            for item in kept
        )
        if same:
            plan.append((i, None))
        else:
            changed = True
            plan.append((i, "".join(item.text for item in kept)))
        for item in kept:
            rolling.update(item.id.encode())
            if not same:
                rolling.update(hashlib.blake2b(item.text.encode(), digest_size=8).digest())
            if item.fixed_tokens != originals[item.id].fixed_tokens:  # its calls' arguments cut
                rolling.update(b"args %d" % item.fixed_tokens)
        digests.append(rolling.hexdigest())
    return plan, changed, digests, rolling


def args_cuts(decisions: Mapping[str, Decision]) -> list[CutCalls]:
    """The cuts of the `args` decisions among `decisions` (the budget ladder's)."""
    return [cut_calls(d) for d in decisions.values() if d.method == "args"]


def with_cut_calls(
    messages: Sequence[Mapping[str, Any]], plan: Plan | None, decisions: Mapping[str, Decision],
    cuts: Sequence[CutCalls] | None = None, memo: CutMemo | None = None,
) -> tuple[list[Mapping[str, Any]], dict[str, str]] | None:
    """`messages` (rendered by `plan`; None: all as sent) with the tool calls of the old
    exchanges the budget ladder cut sent with their cut arguments (`args` decisions: the
    items already count them so), and per call id the arguments it is sent with, for the
    wire adapters. None when no decision cuts a call of a message sent. `cuts`:
    `args_cuts(decisions)`, when known. `memo`: the last call's cut messages, each taken
    again where it is the very copy made (`with_cut`), and replaced by this call's."""
    if cuts is None:
        cuts = args_cuts(decisions)
    if not cuts:
        if memo is not None:
            memo.made = {}
        return None
    where = {i: k for k, (i, _) in enumerate(plan)} if plan is not None else None
    out = list(messages)
    arguments: dict[str, str] = {}
    last = memo.made if memo is not None else {}
    made: dict[tuple[int, tuple[str | None, ...]], Mapping[str, Any]] = {}
    for cut in cuts:
        k = cut.index if where is None else where.get(cut.index)
        calls = out[k].get("tool_calls") if k is not None and k < len(out) else None
        if k is None or not isinstance(calls, list) or len(calls) != len(cut.arguments):
            continue  # dropped since (a later step), or not the message it was made for
        for c, raw in enumerate(cut.arguments):
            if raw is not None:
                arguments[str(calls[c].get("id", ""))] = raw
        key = (cut.index, cut.arguments)
        out[k] = made[key] = with_cut(out[k], cut.arguments, last.get(key))
    if memo is not None:
        memo.made = made
    return (out, arguments) if arguments else None


@dataclass(slots=True)
class CutMemo:
    """The messages one call's `with_cut_calls` sent with cut arguments, by client index and
    cut arguments: the next call takes one again where it is the very copy it makes
    (`with_cut`), so the body encoder's runs and the pointers' and short ids' memos find the
    same object. Only the last call's are kept (kept with the session's prefix)."""

    made: dict[tuple[int, tuple[str | None, ...]], Mapping[str, Any]] = field(
        default_factory=dict)


def with_cut(msg: Mapping[str, Any], arguments: Sequence[str | None],
             old: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    """`msg` with its tool calls sent with `arguments` (per call; None: as sent), or `old`
    when it is that very copy (`_cut_from`)."""
    if old is not None and _cut_from(old, msg, arguments):
        return old
    calls = msg["tool_calls"]
    new = list(calls)
    for c, raw in enumerate(arguments):
        if raw is not None:
            new[c] = {**calls[c], "function": {**calls[c]["function"], "arguments": raw}}
    return {**msg, "tool_calls": new}


def _cut_from(old: Mapping[str, Any], msg: Mapping[str, Any],
              arguments: Sequence[str | None]) -> bool:
    """Whether `old` is `with_cut(msg, arguments)` to the byte: every call sent as is the
    very same object, every cut one `{**call, "function": {**function, "arguments": raw}}`
    (`_same_but` at each level), every other value of `msg` the very same object."""
    calls, sent = msg["tool_calls"], old.get("tool_calls")
    if not isinstance(sent, list) or len(sent) != len(calls) or not _same_but(
            old, msg, "tool_calls"):
        return False
    for call, was, raw in zip(calls, sent, arguments, strict=True):
        if raw is None:
            if was is not call:
                return False
            continue
        function = was.get("function") if isinstance(was, Mapping) else None
        if not isinstance(function, Mapping) or function.get("arguments") != raw or not (
                _same_but(was, call, "function")
                and _same_but(function, call["function"], "arguments")):
            return False
    return True
