"""Tool-call arguments rendered shorter, still a JSON object with the same keys.

An assistant turn's tool calls are sent as the model wrote them; on agents that re-run the
same command (intercode: 38.5% of a late call's characters are tool-call JSON) they are what
is left once old outputs are digested. Two renderings, both pure and deterministic, both
valid for every wire format (Chat `arguments` string, Responses `function_call.arguments`,
Anthropic `tool_use.input`: the result parses to a JSON object with the original keys):

- `repeat_pointer`: a call whose arguments repeat, byte for byte, an earlier call's of the
  same request: each string value becomes a pointer to that call. Nothing is lost while the
  earlier call is sent as it came (its copy is in the same request), and nothing sent before
  changes (the first copy stays; a repeat is known from the earlier messages alone).
- `cut_arguments`: long string values of an aged call cut to their start with a marker
  saying how much was cut; values a later call repeats are kept whole.

`repeated_calls` finds the repeats of a chat message list; `point_repeats` applies them to
a fitted call (the engine, with `cluster.on_arrival`, on every call after the fit): the
forwarded messages with the pointers, the arguments per call id for the wire adapters, and
the drop events, so that the log still adds up. The repeats are found in the forwarded
messages alone, which a session only appends to between steps: a call's rendering never
changes once sent. `cut_arguments` does not age calls on every call (`bench/call_args.py`:
that costs the prefix cache more than it saves); the budget ladder uses it, through
`cut_to_save`, as the rung before dropping an old exchange whose arguments are most of it.
"""

from __future__ import annotations

from array import array
from bisect import insort_right
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import orjson

from gateway.context.call_ids import short_id
from gateway.context.items import PINNED, content_text, message_id
from gateway.observability.droplog import DropEvent

T = TypeVar("T")

REPEAT_MIN_CHARS = 120  # shorter arguments stay: a pointer is ~50 characters
CUT_KEEP_CHARS = 40
CUT_MARGIN = 40  # a value is cut only when it is this much longer than what it keeps


def _object(arguments: str) -> dict[str, Any] | None:
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _map_strings(value: Any, change: Any) -> Any:
    """`value` with every string leaf (not the keys) passed through `change`."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {k: _map_strings(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, change) for v in value]
    return value


def repeat_pointer(arguments: str, call_id: str) -> str | None:
    """The arguments of a call repeating call `call_id`'s: each string value a pointer to
    it. None when the arguments are not a JSON object."""
    parsed = _object(arguments)
    if parsed is None:
        return None
    note = f"[ctxgate: same as call {call_id}]"
    return orjson.dumps(_map_strings(parsed, lambda _s: note)).decode()


def cut_arguments(
    arguments: str, max_chars: int, keep: Collection[str] = (), keep_chars: int = CUT_KEEP_CHARS
) -> str | None:
    """The arguments with string values over `max_chars` cut to their first `keep_chars`
    and a marker; values in `keep` stay whole. None when nothing is cut or the arguments
    are not a JSON object."""
    parsed = _object(arguments)
    if parsed is None:
        return None

    cuts = 0

    def cut(s: str) -> str:
        nonlocal cuts
        if len(s) <= max_chars or s in keep:
            return s
        cuts += 1
        return f"{s[:keep_chars]}…[ctxgate: {len(s) - keep_chars} chars cut]"

    out = orjson.dumps(_map_strings(parsed, cut)).decode()
    return out if cuts and len(out) < len(arguments) else None


def cut_to_save(
    raws: Sequence[str], need: int, count: Callable[[str], int]
) -> tuple[list[str | None], int] | None:
    """One message's calls' `arguments` (`raws`) cut to save about `need` tokens: every
    call's long string values cut to the same length, the longest that still saves `need`
    (all to `CUT_KEEP_CHARS` when even that saves less). Per call its new arguments (None:
    as sent) and the tokens saved; None when nothing can be cut. Each result parses to a
    JSON object with the original keys (`cut_arguments`)."""

    def at(keep: int) -> tuple[list[str | None], int]:
        cuts = [cut_arguments(raw, keep + CUT_MARGIN, keep_chars=keep) for raw in raws]
        saved = sum(count(raw) - count(c) for raw, c in zip(raws, cuts, strict=True) if c)
        return cuts, saved

    most = at(CUT_KEEP_CHARS)
    if most[1] <= 0:
        return None
    if most[1] <= need:
        return most
    low, high = CUT_KEEP_CHARS, max(len(raw) for raw in raws)  # saves >= need / < need
    while high - low > 8:
        mid = (low + high) // 2
        if at(mid)[1] >= need:
            low = mid
        else:
            high = mid
    return at(low)


def call_arguments(call: Any) -> str | None:
    """A chat tool call's `arguments` string (None: not one)."""
    if not isinstance(call, Mapping):
        return None
    function = call.get("function")
    raw = function.get("arguments") if isinstance(function, Mapping) else None
    return raw if isinstance(raw, str) else None


def _call_ids(
    messages: Sequence[Mapping[str, Any]], start: int = 0
) -> tuple[dict[str, int], set[str]]:
    """Call ids seen (each with the index of its first message, from `start`, in that
    order), and those among them that name more than one call (an adapter finds a call by
    its id: only those naming one call each count)."""
    seen: dict[str, int] = {}
    twice: set[str] = set()
    for i, msg in enumerate(messages, start):
        for call in msg.get("tool_calls") or ():
            cid = call.get("id") if isinstance(call, Mapping) else None
            if isinstance(cid, str) and cid:
                if cid in seen:
                    twice.add(cid)
                else:
                    seen[cid] = i
    return seen, twice


def _indexes(plan: Sequence[tuple[int, str | None]] | None, start: int, end: int) -> array[int]:
    """The client message each of the forwarded messages[start:end] renders."""
    if plan is None:
        return array("l", range(start, end))
    return array("l", [i for i, _ in plan[start:end]])


def common_start(a: Sequence[T], b: Sequence[T]) -> int:
    """The length of the longest common start of `a` and `b` (slices compared at C speed)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class RepeatScan:
    """`repeated_calls` of a session's forwarded messages, carried from call to call: a call
    reads only the messages added since the last one, and a step call (whose forwarded list
    is not the last one extended) only those from the first message that renders another
    client message than the one read there. A forwarded message's calls are its client
    message's (a rewritten message is a copy with new `content`), so messages that render
    the same client messages hold the same calls; the caller keeps the scan with what
    guarantees that those client messages are the ones read before (the engine: the
    session's prefix, `prefix.py`, whose byte check they passed). A new call id that an
    earlier call already has changes which calls count: then all is read anew."""

    min_chars: int = REPEAT_MIN_CHARS
    count: int = 0  # messages read
    seen: dict[str, int] = field(default_factory=dict)  # call id -> its message, in order
    twice: set[str] = field(default_factory=set)
    first: dict[str, str] = field(default_factory=dict)  # arguments -> first call's id
    first_at: array[int] = field(default_factory=lambda: array("l"))  # `first`'s messages
    found: dict[tuple[int, int], str] = field(default_factory=dict)
    indexes: array[int] = field(default_factory=lambda: array("l"))  # client message of each
    visited: int = 0  # messages the latest `scan` read (what a call's work grows with)
    # The drop events `point_repeats` made on the latest call, to hand the next the same
    # objects where they are equal (`PointedEvents`: the drop log reads a call's leading
    # events that are the previous call's very objects as logged, without a walk).
    events: PointedEvents = field(default_factory=lambda: PointedEvents())

    def scan(
        self, messages: Sequence[Mapping[str, Any]],
        plan: Sequence[tuple[int, str | None]] | None = None, extends: bool = True,
    ) -> dict[tuple[int, int], str]:
        """The repeats of `messages`, as `repeated_calls` finds them (the same dict while
        no new repeat is found: never changed in place once handed out). `plan`: the client
        message each renders (`render.Plan`; None: message i renders client message i).
        `extends`: `messages` are the list read before, extended (a call that reused the
        session's prefix); else what they share with it from the start is kept."""
        if not extends:
            self._cut(common_start(self.indexes, _indexes(plan, 0, len(messages))))
        new = messages[self.count:]
        seen, twice = _call_ids(new, self.count)
        if len(messages) < self.count or not self.seen.keys().isdisjoint(seen):
            self._cut(0)
            new, (seen, twice) = messages, _call_ids(messages)
        start, self.visited = self.count, len(new)
        added = _repeats(new, start, seen.keys() - twice, self.first, self.min_chars,
                         self.first_at)
        if added:
            self.found = {**self.found, **added}
        self.seen.update(seen)
        self.twice |= twice
        self.indexes += _indexes(plan, start, len(messages))
        self.count = len(messages)
        return self.found

    def _cut(self, n: int) -> None:
        """Forget the messages from the `n`th on (all of them while an id names two calls:
        which calls count could change)."""
        if n >= self.count:
            return
        if self.twice:
            n = 0
        seen, first, at = self.seen, self.first, self.first_at
        if n == 0:
            seen.clear()
            first.clear()
            del at[:]
            self.twice = set()
        while seen and next(reversed(seen.values())) >= n:
            seen.popitem()
        while at and at[-1] >= n:
            first.popitem()
            at.pop()
        self.found = {k: v for k, v in self.found.items() if k[0] < n}
        del self.indexes[n:]
        self.count = n


def _repeats(
    messages: Sequence[Mapping[str, Any]], start: int, ids: Collection[str],
    first: dict[str, str], min_chars: int, first_at: array[int] | None = None,
) -> dict[tuple[int, int], str]:
    """Per (index from `start`, call index): the pointer of each call among `messages`
    whose arguments repeat an earlier call's (`first`: arguments -> the first call's id,
    updated; `first_at`: the message of each of its entries, in order, updated)."""
    out: dict[tuple[int, int], str] = {}
    for i, msg in enumerate(messages, start):
        if msg.get("role") != "assistant":
            continue
        for k, call in enumerate(msg.get("tool_calls") or ()):
            raw = call_arguments(call)
            if raw is None or len(raw) < min_chars or call.get("id") not in ids:
                continue
            earlier = first.get(raw)
            if earlier is None:
                first[raw] = str(call["id"])
                if first_at is not None:
                    first_at.append(i)
                continue
            # the earlier call is named as it is sent (a managed call's ids go short)
            pointer = None if msg.get(PINNED) else repeat_pointer(raw, short_id(earlier))
            if pointer is not None and len(pointer) < len(raw):
                out[(i, k)] = pointer
    return out


def repeated_calls(
    messages: Sequence[Mapping[str, Any]], min_chars: int = REPEAT_MIN_CHARS
) -> dict[tuple[int, int], str]:
    """Per (message index, call index): the arguments a repeated call is sent with, for
    every call whose arguments (`min_chars` or more) repeat an earlier call's. Only calls
    with an id of their own count; messages a wire adapter pinned are never rewritten."""
    seen, twice = _call_ids(messages)
    return _repeats(messages, 0, seen.keys() - twice, {}, min_chars)


@dataclass
class PointedEvents:
    """The events one call's `point_repeats` made, each by what made it: an event with a
    repeat's saving added, by the event it came from (kept, as identity is checked) and the
    saving; a repeat's own `dedup` event, by its fields. A call takes the events it makes
    again from the previous call's, equal by construction; it keeps only those it used.

    Also the call's events as given (`given`), those with the savings added in message order
    (`ordered`), their message indexes (`decided`) and the savings (`savings`): a call whose
    events extend `given` (equal values) merges only the new ones (`_extension`)."""

    merged: dict[tuple[int, int, int, str], tuple[DropEvent, DropEvent]] = field(
        default_factory=dict)
    dedups: dict[tuple[int, int, int, str, str], DropEvent] = field(default_factory=dict)
    given: list[DropEvent] = field(default_factory=list)
    ordered: list[DropEvent] = field(default_factory=list)
    decided: set[int] = field(default_factory=set)
    savings: dict[int, tuple[int, int, str]] = field(default_factory=dict)
    # Each message the call rewrote, by its forwarded message's id: that message (kept, as
    # identity is checked), its pointers and the rewritten copy, which the next call takes
    # again for the very same message with the same pointers (the encoder's runs and the
    # short ids' memo then find the same object; `BodyEncoder`, `ShortIds`).
    pointed: dict[int, tuple[Mapping[str, Any], tuple[tuple[int, str], ...],
                             Mapping[str, Any]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Pointed:
    """A fitted call with its repeated calls' arguments as pointers."""

    messages: list[Mapping[str, Any]]
    arguments: dict[str, str]  # call id -> the arguments it is sent with
    events: list[DropEvent]
    saved: int  # tokens


def point_repeats(
    forwarded: Sequence[Mapping[str, Any]],
    indexes: Sequence[int],
    events: list[DropEvent],
    count: Callable[[str], int],
    min_chars: int = REPEAT_MIN_CHARS,
    repeats: Mapping[tuple[int, int], str] | None = None,
    memo: PointedEvents | None = None,
) -> Pointed | None:
    """`forwarded` (message k is the client's message `indexes[k]`) with repeated calls'
    arguments as pointers, and `events` with each such message's saving: added to its
    event when it has one (its text was rewritten too), else a `dedup` event of its own
    (tokens: of the arguments). None when no call repeats. `repeats`: those of `forwarded`
    when already found (`RepeatScan`). `memo`: the previous call's events (`RepeatScan.events`),
    taken where equal and replaced by this call's."""
    if repeats is None:
        repeats = repeated_calls(forwarded, min_chars)
    if not repeats:
        return None
    messages = list(forwarded)
    arguments: dict[str, str] = {}
    saving: dict[int, tuple[int, int, str]] = {}  # client index -> before, after, sent text
    per_message: dict[int, list[tuple[int, str]]] = {}  # k -> its calls' pointers, in order
    for (k, c), pointer in repeats.items():
        per_message.setdefault(k, []).append((c, pointer))
    made = PointedEvents()
    last = memo.pointed if memo is not None else {}
    for k, pairs in per_message.items():
        msg = forwarded[k]
        pointers = tuple(pairs)
        hit = last.get(id(msg))
        calls = list(msg["tool_calls"])
        for c, pointer in pairs:
            raw = calls[c]["function"]["arguments"]
            calls[c] = {**calls[c], "function": {**calls[c]["function"], "arguments": pointer}}
            arguments[str(calls[c]["id"])] = pointer
            before, after, text = saving.get(k, (0, 0, ""))
            saving[k] = (before + count(raw), after + count(pointer), text or raw)
        # the last call's copy of the very same message with the same pointers: equal
        copy = hit[2] if hit is not None and hit[0] is msg and hit[1] == pointers else {
            **msg, "tool_calls": calls}
        messages[k] = copy
        made.pointed[id(msg)] = (msg, pointers, copy)
    by_index = {indexes[k]: v for k, v in saving.items()}
    grown = _extension(events, by_index, memo) if memo is not None else None
    if grown is None:
        merged, decided = _merged(
            events, by_index, memo.merged if memo is not None else {}, made.merged)
        ordered, earlier = sorted(merged, key=_at), decided
        decided = set()
    else:  # `decided`: the new events' indexes; `earlier`: the last call's, kept
        ordered, decided, made.merged = grown
        earlier = memo.decided if memo is not None else set()
    dedups: list[DropEvent] = []
    for k, (before, after, text) in saving.items():
        if indexes[k] not in decided and indexes[k] not in earlier:
            msg = forwarded[k]
            item_id = message_id(indexes[k], "assistant", content_text(msg.get("content")), msg)
            key = (indexes[k], before, after, text, item_id)
            event = memo.dedups.get(key) if memo is not None else None
            if event is None:
                event = DropEvent(
                    stage="cluster", action="dedup", reason="repeated_call", item_id=item_id,
                    kind="tool_call", message_index=indexes[k], tokens_before=before,
                    tokens_after=after, text=text)
            made.dedups[key] = event
            dedups.append(event)
    if memo is not None:
        earlier |= decided  # every event's message index
        memo.merged, memo.dedups, memo.given = made.merged, made.dedups, list(events)
        memo.ordered, memo.decided, memo.savings = ordered, earlier, by_index
        memo.pointed = made.pointed
    # in message order, a repeat's own event after the events of its message (a stable
    # sort of the merged events followed by the dedup events)
    out = list(ordered)
    for event in dedups:
        insort_right(out, event, key=_at)
    return Pointed(messages, arguments, out,
                   sum(before - after for before, after, _ in saving.values()))


def _at(event: DropEvent) -> int:
    return -1 if event.message_index is None else event.message_index


def _extension(
    events: list[DropEvent], by_index: Mapping[int, tuple[int, int, str]], memo: PointedEvents,
) -> tuple[list[DropEvent], set[int], dict[tuple[int, int, int, str],
                                          tuple[DropEvent, DropEvent]]] | None:
    """When `events` are the last call's (`memo.given`, equal values) with events added, the
    messages of those events have the same savings, and the added ones come at or after the
    last one in message order: the merged events in message order (the last call's followed
    by the added ones'), the message indexes of the added events, and the merged-event memo
    (the last call's with the added ones'). Else None: the caller merges them all."""
    given = memo.given
    n = len(given)
    if len(events) < n or events[:n] != given:
        return None
    old = memo.savings
    for index in by_index.keys() | old.keys():
        if index in memo.decided and by_index.get(index) != old.get(index):
            return None
    made: dict[tuple[int, int, int, str], tuple[DropEvent, DropEvent]] = {}
    added, decided = _merged(events[n:], by_index, memo.merged, made)
    added.sort(key=_at)
    ordered = memo.ordered
    if added and ordered and _at(added[0]) < _at(ordered[-1]):
        return None
    return ordered + added, decided, {**memo.merged, **made} if made else memo.merged


def _merged(
    events: list[DropEvent], by_index: Mapping[int, tuple[int, int, str]],
    old: Mapping[tuple[int, int, int, str], tuple[DropEvent, DropEvent]],
    made: dict[tuple[int, int, int, str], tuple[DropEvent, DropEvent]],
) -> tuple[list[DropEvent], set[int]]:
    """`events` with the savings of `by_index` added to the events of those messages (an
    event `old` made from the very same event with the same saving is taken from it; the
    ones made are added to `made`), and the message indexes that have an event."""
    out = list(events)
    decided = set()
    for pos, event in enumerate(events):
        index = event.message_index
        if index is None:
            continue
        decided.add(index)
        extra = by_index.get(index)
        if extra is None:
            continue
        key = (id(event), *extra)
        hit = old.get(key)
        if hit is not None and hit[0] is event:
            new = hit[1]
        else:
            new = replace(event, tokens_after=max(event.tokens_after - extra[0] + extra[1], 0))
        made[key] = (event, new)
        out[pos] = new
    return out, decided
