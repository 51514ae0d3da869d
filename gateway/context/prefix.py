"""The previous call's work on a session, reused while the session only appends messages.

Between compaction steps an agent's next call is its previous call's messages plus a few new
ones, rendered under the same remembered decisions. `Prefix` keeps what the previous call
computed for its messages (token sums, pins that may lapse, the render plan, the rolling
prefix digest, the drop events) so that such a call parses, applies and renders only its new
messages. A call reuses it only when it is safe to: the old messages are byte-for-byte the
same (a 128-bit XXH3 of their JSON, never object identity), and the session's decisions are the
very ones the prefix was rendered under; anything else (a step, another class, encoding or
history) takes the engine's full path, which builds a new prefix. The cache is one process's
shortcut: Redis stays the source of truth, and a replica without it renders the same bytes.

Items kept here carry the pin they had when parsed, and read their age from the layout's
clock (`items.Clock`), which the next call's messages move on: only pins (of the latest user
message and the open tool exchange) can lapse, and `Layout.restate` brings those up to date.
"""

from __future__ import annotations

import secrets
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
import xxhash
from cachetools import LRUCache

from gateway.context.apply import CutCalls, apply_decisions, drop_events, pointer
from gateway.context.caches import ContextCaches
from gateway.context.call_ids import ShortIds
from gateway.context.calls import RepeatScan
from gateway.context.classify import RequestScan
from gateway.context.fidelity import Haystack
from gateway.context.fold import FoldMemo
from gateway.context.items import (
    Item,
    Layout,
    ParsedRequest,
    Part,
    appended_result,
    message_items,
)
from gateway.context.lines import (
    MINIFIED_JSON,
    LineIndex,
    arrival_item,
    arrival_new,
    arrival_turn,
    index_lines,
    lines_decision,
    minified_decision,
    verbatim_index,
    verbatim_items,
)
from gateway.context.quoting import keeps_layout
from gateway.context.render import CutMemo, Mark, Picks, Plan, Rendered, render_plan
from gateway.context.session import Decision, SessionState
from gateway.context.steps import (
    ages_out,
    horizon_after,
    lagging_tokens,
    on_first_task,
    open_tokens,
    runs_of_one,
    stale_tokens,
    takes_credit,
    undecided,
    waits_for_task,
)
from gateway.context.taskclass import CompressOptions, TaskClass
from gateway.context.tokens import TokenCounter
from gateway.observability.droplog import DropEvent

MAX_SEGMENTS = 16  # digest segments (one per reusing call) before the digest is redone whole
# Segments a prefix extended by proven calls only (`Lineage`) may hold before its digest is
# redone whole: such calls hash their new messages alone, so a segment costs them nothing;
# a later unproven call hashes one slice per segment, then folds them into one.
MAX_PROVEN_SEGMENTS = 4096
# The byte check hashes the whole body on every call: XXH3-128 reads it ~70x faster than
# SHA-256 here (0.013 against 0.98 ms for 777 KB). It need not resist forgery: a prefix is
# only ever compared with its own (tenant, session)'s next call, so a client that forged a
# collision would get back its own earlier messages; the per-process seed keeps accidental
# and precomputed collisions out.
_SEED = secrets.randbits(64)


@dataclass(frozen=True, slots=True)
class Lineage:
    """What the gateway proved of a call's messages before the engine saw them
    (`gateway/api/bodies.py`: a session's body decoded from where its last one's ended).
    `body`: the number the gateway gave this call's body (unique in the process). `after`:
    the number of a body whose raw bytes this one's start repeats, up to and including its
    `count` messages: so this call's messages[:count] are byte for byte that body's
    messages (they decoded from the very bytes; the decoded objects are shared and nothing
    writes to them). None: nothing proven, the engine checks the bytes itself."""

    body: int
    after: int | None = None
    count: int = 0


def _hasher(messages: Sequence[Mapping[str, Any]]) -> Any:
    """XXH3-128 (seeded) fed the JSON of `messages`, or None when they are not JSON (a
    caller's own objects: no reuse). Its `digest()` is the prefix's fingerprint; a later
    segment is hashed on from a `copy()` of it."""
    try:
        raw = orjson.dumps(messages)
    except TypeError:
        return None
    h = xxhash.xxh3_128(seed=_SEED)
    h.update(raw)
    return h


def _compactable(items: Sequence[Item]) -> int:
    return sum(i.tokens for i in items if not (i.pinned or i.goal or i.kind == "system"))


def _pinned_tokens(items: Sequence[Item]) -> int:
    return sum(i.tokens for i in items if i.pinned and i.kind != "system")


def _watched(group: Sequence[Item]) -> bool:
    return any(x.pinned and x.kind != "system" for x in group)


@dataclass
class _Derived:
    """What a prefix keeps of its items alone (not of the decisions they are sent under)."""

    item_tokens: int
    system_tokens: int
    watched: dict[int, list[Item]]
    goal_items: list[Item]
    compactable: list[int]


def _derived(items: Sequence[Item], count: int, start: int = 0) -> _Derived:
    """`_Derived` of the items of messages[start:count] (`compactable` from `start`)."""
    by_message: list[list[Item]] = [[] for _ in range(start, count)]
    for item in items:
        by_message[item.message_index - start].append(item)
    return _Derived(
        item_tokens=sum(i.tokens for i in items),
        system_tokens=sum(i.tokens for i in items if i.kind == "system"),
        watched={i: group for i, group in enumerate(by_message, start) if _watched(group)},
        goal_items=[i for i in items if i.goal],
        compactable=[_compactable(group) for group in by_message],
    )


def _derived_from(extended: Prefix, items: Sequence[Item], count: int) -> _Derived:
    """`_derived(items, count)` for the items of a prefix that `extended` (its items, pins
    now restated: `items`) took up to its new messages: only those and the messages it
    watches are read. A pin never comes to an old message (the latest user message and the
    open exchange move on to new ones), so the messages pinned now are among those; the
    others keep the compactable tokens `extended` found (`_restate_pins` brought those
    whose pin lapsed up to date)."""
    start = extended.start
    cut = bisect_left(items, start, key=lambda item: item.message_index)
    tail = items[cut:]
    compactable = extended.compactable[:start]
    watched: dict[int, list[Item]] = {}
    for i in sorted(extended.watched):
        if i < start:
            group = _group(items, i)
            compactable[i] = _compactable(group)
            if _watched(group):
                watched[i] = group
    new = _derived(tail, count, start)
    compactable += new.compactable
    watched.update(new.watched)
    return _Derived(
        item_tokens=extended.item_tokens,
        system_tokens=extended.system_tokens + new.system_tokens,
        watched=watched,
        goal_items=extended.goal_items + new.goal_items,
        compactable=compactable,
    )


def _group(items: Sequence[Item], i: int) -> list[Item]:
    """The items of message `i` (items run in message order)."""
    lo = bisect_left(items, i, key=lambda item: item.message_index)
    hi = bisect_right(items, i, lo=lo, key=lambda item: item.message_index)
    return list(items[lo:hi])


@dataclass
class Reuse:
    """What a call that reused its session's prefix sends and logs."""

    tokens_after: int
    plan: Plan
    changed: bool
    digests: list[str]
    events: list[DropEvent]


@dataclass
class Prefix:
    encoding: str
    task_class: str
    decisions: dict[str, Decision]  # the session's decisions this was rendered under
    known: frozenset[str]
    bounds: list[int]  # message counts at which the digest's segments end
    digest: bytes
    layout: Layout
    item_tokens: int  # all items as parsed
    final_tokens: int  # all items as sent
    system_tokens: int  # system items: always pinned
    watched: dict[int, list[Item]]  # items of pinned non-system messages: their pin may lapse
    goal_items: list[Item]
    compactable: list[int]  # per message: tokens of items neither pinned, goal nor system
    plan: Plan
    changed: bool
    digests: list[str]
    rolling: Any
    # The drops in force: handed to every call that reuses this prefix as the same list,
    # never changed in place (the drop log summarises a list it has seen by a lookup).
    events: list[DropEvent]
    # The lines of the outputs sent verbatim (cluster.arrival_lines), and the least length
    # of a run of them a new output sends as a marker (lines.py); None: off.
    lines: LineIndex | None = None
    lines_min: int = 0
    # With cluster.arrival_from_turns, `lines` holds the assistant's turns too, each line
    # under the latest item that has it (`lines.index_lines`).
    lines_turns: bool = False
    # With cluster.arrival_json, the least new output sent minified (lines.minified); None: off.
    json_min: int | None = None
    # With cluster.on_arrival, the items a new repeat is pointed to, as the full path's
    # `arrival_duplicates` finds them: by original text, the first sent as the client sent it
    # (or minified; `verbatim_items`), and its `arrival_min_chars`. None: off.
    verbatim: dict[str, Item] | None = None
    arrival_min: int = 0
    tail: list[Item] | None = None  # the new messages' items, between `extend` and `reuse`
    # The items that can lag behind the horizon undecided (`steps.lagging_tokens`): those
    # aging would take but no decision has, and those whose pin lapsed since (the exchange
    # that was open at the last step).
    lagging: list[Item] = field(default_factory=list)
    start: int = 0  # where the new messages start
    # The messages' searchable texts the fidelity signals read (fidelity.py), which these
    # messages' checked bytes make safe to keep for the next call.
    haystack: Haystack | None = None
    # The repeated tool calls of the messages calls reusing this prefix forwarded (these
    # only extend from one such call to the next; `calls.point_repeats`).
    calls: RepeatScan | None = None
    # The messages those calls forwarded, before and after their tool-call ids were
    # shortened (`call_ids.ShortIds`): the next call renames only its new messages.
    ids: ShortIds | None = None
    # The last call's old exchanges folded (`fold.FoldMemo`): a call between steps takes it.
    folds: FoldMemo | None = None
    # The `args` cuts (`render.args_cuts`) of the decisions calls reusing this prefix were
    # fitted with, and those decisions: the same object (a session's decisions are replaced,
    # never changed in place, as `reuse` relies on) has the same cuts.
    cuts: tuple[Mapping[str, Decision], list[CutCalls]] | None = None
    # The messages the last of those calls sent with cut arguments (`render.with_cut_calls`).
    cut: CutMemo | None = None
    # The rewritten messages calls reusing this prefix forwarded, by index (`materialize`).
    copies: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    # What those calls' `materialize` took of `plan` (which they only append to).
    picks: Picks = field(default_factory=Picks)
    # Every item of the messages, with the age and pin it had when parsed: a step call
    # restates them (`parsed`) instead of parsing its whole history again.
    items: list[Item] = field(default_factory=list)
    # The items as `plan` sends them, and the plan's marks: a step call renders and logs
    # only from the last mark before its first change (`resume`).
    final: list[Item] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    # The names of the tools the calls defined (`known` holds them, engine.tool_names): a
    # call defining others does not extend this prefix.
    tools: frozenset[str] = frozenset()
    built: int = 0  # the messages it was built with
    # XXH3 after every segment (`digest` is its digest): a proven call hashes on from a
    # copy of it, its new messages only.
    hasher: Any = None
    # The number of the body (`Lineage.body`) whose messages these are, when the gateway
    # gave one (set by the engine when it keeps the prefix): a call whose body the gateway
    # proved to repeat that one's needs no byte check.
    body: int | None = None
    proven: int = 0  # calls extended without the byte check (read by tests and benches)
    # The latest step among `decisions` (arrival cuts are numbered after it), with the
    # decisions it is of (replaced, never changed in place: the same object, the same step).
    latest: tuple[Mapping[str, Decision], int] | None = None
    # What the class's choice of aging read of the messages (`classify.RequestScan`, set by
    # the engine): a call extending this prefix reads on from there.
    scan: RequestScan | None = None

    @classmethod
    def build(
        cls,
        messages: Sequence[Mapping[str, Any]],
        items: list[Item],
        final: list[Item],
        layout: Layout,
        rendered: Rendered,
        events: list[DropEvent],
        decisions: dict[str, Decision],
        known: frozenset[str],
        task_class: str,
        encoding: str,
        extended: Prefix | None = None,
        ages: CompressOptions | None = None,
        lines_min: int | None = None,
        json_min: int | None = None,
        arrival_min: int | None = None,
        turns: bool = False,
    ) -> Prefix | None:
        """`extended`: the session's previous prefix extended by these messages, whose
        fingerprint it already holds (else it is taken here). `ages`: the class's aging
        (None: it does not age). `lines_min`: with `cluster.arrival_lines`, its
        `arrival_min_chars` (the outputs' lines are kept). `arrival_min`: with
        `cluster.on_arrival`, its `arrival_min_chars` (the items a repeat points to are kept).
        `turns`: with `lines_min`, `cluster.arrival_from_turns` (the turns' lines are kept)."""
        if extended is not None and extended.bounds[-1] == len(messages):
            hasher, digest = extended.hasher, extended.digest
            bounds = list(extended.bounds)
        else:
            hasher, bounds = _hasher(messages), [len(messages)]
            extended = None
            if hasher is None:
                return None
            digest = hasher.digest()
        if extended is not None and len(extended.items) == len(items):
            derived = _derived_from(extended, items, len(messages))
        else:
            derived = _derived(items, len(messages))
        return cls(
            encoding=encoding,
            task_class=task_class,
            decisions=decisions,
            known=known,
            bounds=bounds,
            digest=digest,
            layout=layout,
            item_tokens=derived.item_tokens,
            final_tokens=sum(i.tokens for i in final),
            system_tokens=derived.system_tokens,
            watched=derived.watched,
            goal_items=derived.goal_items,
            compactable=derived.compactable,
            plan=list(rendered.plan),
            changed=rendered.changed,
            digests=list(rendered.digests),
            rolling=rendered.rolling,
            events=events,
            lagging=[] if ages is None else [
                i for i in items if undecided(i, decisions) and ages_out(i, ages)
            ],
            lines=None if lines_min is None
            else verbatim_index(final, decisions, lines_min, layout.pins, turns),
            lines_min=lines_min or 0,
            lines_turns=lines_min is not None and turns,
            json_min=json_min,
            verbatim=None if arrival_min is None
            else verbatim_items(items, final, decisions, arrival_min, layout.pins),
            arrival_min=arrival_min or 0,
            items=list(items),
            final=list(final),
            built=len(messages),
            marks=list(rendered.marks),
            copies=rendered.copies,
            hasher=hasher,
            proven=0 if extended is None else extended.proven,
        )

    def extend(
        self,
        messages: Sequence[Mapping[str, Any]],
        encoding: str,
        counter: TokenCounter,
        memo: MutableMapping[tuple[Any, ...], list[Part]],
        lineage: Lineage | None = None,
    ) -> bool:
        """Whether `messages` continue this prefix; if so, parse the new ones. The old
        messages are proven unchanged by their bytes (the JSON of each segment hashed
        again), unless `lineage` says the gateway proved them so: they are the very
        messages of the body this prefix was last extended with (or built from)."""
        start = self.layout.count
        if encoding != self.encoding or len(messages) < start:
            return False
        proven = (lineage is not None and lineage.after is not None
                  and lineage.after == self.body and lineage.count == start
                  and self.bounds[-1] == start and self.hasher is not None)
        bounds = self.bounds
        try:
            if proven:
                h = self.hasher.copy()
                h.update(orjson.dumps(messages[start:]))
                if len(bounds) >= MAX_PROVEN_SEGMENTS:
                    h, bounds = _hasher(messages), []
            else:
                h = xxhash.xxh3_128(seed=_SEED)
                lo = 0
                for hi in self.bounds:
                    h.update(orjson.dumps(messages[lo:hi]))
                    lo = hi
                if h.digest() != self.digest:
                    return False
                if len(bounds) >= MAX_SEGMENTS:
                    h, bounds = _hasher(messages), []
                else:
                    h.update(orjson.dumps(messages[start:]))
        except TypeError:
            return False
        if h is None:
            return False
        self.proven += proven
        self.hasher, self.digest = h, h.digest()
        if bounds is self.bounds:
            bounds.append(len(messages))
        else:  # redone whole: one segment
            self.bounds = [len(messages)]
        units = self.layout.extend(messages)
        self.tail = message_items(messages, start, units, self.layout, counter, encoding, memo)
        self.start = start
        self.item_tokens += sum(i.tokens for i in self.tail)
        self.items += self.tail
        return True

    def parsed(self, base_tokens: int) -> ParsedRequest:
        """The extended messages parsed, as `parse_request` parses them: the items kept,
        with the pins they have now (the layout walked every message; their ages read its
        clock), restated only where a pin may have lapsed."""
        restate, current = self.layout.restate, self.layout.current
        return ParsedRequest([item if current(item) else restate(item) for item in self.items],
                             base_tokens, self.encoding, self.layout)

    def reuse(
        self,
        messages: Sequence[Mapping[str, Any]],
        state: SessionState,
        cls: TaskClass,
        budget_input: int,
        fixed: int,
        counter: TokenCounter,
        caches: ContextCaches,
    ) -> Reuse | None:
        """The call rendered from this prefix, or None when it needs the full path (its
        decisions or class differ, a compaction step is due, or it is over a mark)."""
        tail, decisions = self.tail, state.decisions
        if tail is None or decisions is not self.decisions or cls.name != self.task_class:
            return None
        if cls.select_every_call:
            return None  # select runs on every call of such a class
        if any(i.kind == "system" or i.goal for i in tail):
            return None  # the session's constant context changed
        if not self._restate_pins(decisions):
            return None  # a remembered decision applies to an item whose pin lapsed
        arrival = self._arrival_cuts(messages, tail, decisions, cls)
        if arrival is None:
            return None  # cluster.on_arrival decides on the full path
        cuts, repeats, pending = arrival
        if cuts:
            decisions = {**decisions, **cuts}
        self._add_tail(messages, tail)
        pinned = fixed + self.system_tokens
        pinned += sum(_pinned_tokens(group) for group in self.watched.values())
        if pinned > budget_input:
            return None
        limit = min(cls.compaction.high_water * budget_input, budget_input)
        if repeats:  # the full path weighs a step before its arrival decisions
            plain = apply_decisions(
                tail, self.decisions, counter, self.encoding, self.known, caches.rewritten
            )
            if fixed + self.final_tokens + sum(i.tokens for i in plain) > limit:
                return None
        final = apply_decisions(
            tail, decisions, counter, self.encoding, self.known, caches.rewritten
        )
        self.final_tokens += sum(i.tokens for i in final)
        total = fixed + self.final_tokens
        if total > cls.compaction.high_water * budget_input or total > budget_input:
            return None
        if cls.compaction.ages and self._step_due(messages, state, cls, caches):
            return None
        if cuts:  # remembered like any decision; the next call reuses this prefix with them
            state.decide(decisions, cuts.keys())
            self.decisions = decisions
            # the cuts, of items without a decision, took the step after the latest
            self.latest = (decisions, max(cut.step for cut in cuts.values()))
        if pending and self.verbatim is not None:
            # a new output sent minified is named, from the next call on, as it is sent
            ids = {item.id for item in pending.values()}
            sent = {i.id: i for i in final if i.id in ids}
            for text, item in pending.items():
                if self.verbatim.get(text) is item and item.id in sent:
                    self.verbatim[text] = sent[item.id]
        return self._render(messages, tail, final, decisions, total)

    def resume(
        self, final: Sequence[Item], decisions: Mapping[str, Decision],
        originals: Mapping[str, Item], changed: Collection[str] | None = None,
    ) -> Mark | None:
        """For a step call of these messages (its items as sent, `final`, under `decisions`):
        the last mark before the first message it sends or decides otherwise than this
        prefix did, where its render and drop events may start (`render.render_from`).
        `changed`: the ids whose decision differs from this prefix's (made, changed or
        undone: `apply.changed_decisions`), when the caller knows them."""
        old = self.final
        k, n = 0, min(len(old), len(final))
        while k < n:
            a, b = old[k], final[k]
            if a is not b and (a.id != b.id or a.tokens != b.tokens or (
                    a.text is not b.text and a.text != b.text)):
                break
            k += 1
        first = min([self.start, *(x[k].message_index for x in (old, final) if k < len(x))])
        if changed is None:
            was = self.decisions
            changed = [item_id for item_id, made in decisions.items()
                       if made is not was.get(item_id) and made != was.get(item_id)]
            changed += was.keys() - decisions.keys()
        for item_id in changed:  # made, or undone
            item = originals.get(item_id)
            first = min(first, item.message_index) if item is not None else first
        at = bisect_right(self.marks, first, key=lambda m: m.index) - 1
        return self.marks[at] if at >= 0 else None

    def applied(
        self, items: list[Item], decisions: Mapping[str, Decision], known: frozenset[str],
        counter: TokenCounter, caches: ContextCaches,
    ) -> list[Item] | None:
        """`apply_decisions(items, decisions, ...)` for a step call of these messages
        (`items`: as `parsed` restates them), or None unless `decisions` are the ones this
        prefix sends its items under: its items as sent, restated; applied anew only the
        new messages' and those whose pin lapsed (a pinned item is sent as is)."""
        if decisions is not self.decisions or known != self.known:
            return None
        restate, current = self.layout.restate, self.layout.current
        out: list[Item] = []
        for sent in self.final:
            if current(sent):
                out.append(sent)
                continue
            now = restate(sent)
            if (now.pinned != sent.pinned and sent.id in decisions
                    and decisions[sent.id].method != "dedup"):
                # its pin lapsed (pins only lapse as messages are added): it was sent as is,
                # and its decision applies from now on (a dedup one applied to it pinned)
                out += apply_decisions((now,), decisions, counter, self.encoding, known,
                                       caches.rewritten)
                continue
            out.append(now)
        tail = items[bisect_left(items, self.start, key=lambda item: item.message_index):]
        return out + apply_decisions(tail, decisions, counter, self.encoding, known,
                                     caches.rewritten)

    def events_before(self, index: int) -> list[DropEvent]:
        """The drops in force among messages[:index] (the drop events run in item order)."""
        events = self.events
        return events[: bisect_left(events, index, key=lambda e: e.message_index or 0)]

    def _restate_pins(self, decisions: Mapping[str, Decision]) -> bool:
        """Bring the watched pins up to date with the new messages; False when one that
        lapsed has a remembered decision (it applies from now on: the full path's work)."""
        for i in list(self.watched):
            old = self.watched[i]
            now = [self.layout.restate(x) for x in old]
            lapsed = [y for x, y in zip(old, now, strict=True) if x.pinned and not y.pinned]
            if any(x.id in decisions and decisions[x.id].method != "dedup" for x in lapsed):
                return False
            self.lagging += lapsed
            self.compactable[i] = _compactable(now)
            if any(y.pinned and y.kind != "system" for y in now):
                self.watched[i] = now
            else:
                del self.watched[i]
        return True

    def _arrival_cuts(
        self, messages: Sequence[Mapping[str, Any]], tail: list[Item],
        decisions: Mapping[str, Decision], cls: TaskClass,
    ) -> tuple[dict[str, Decision], int, dict[str, Item]] | None:
        """The new items' decisions on arrival, as the full path's `arrival_duplicates`
        decides them (`cluster.on_arrival`): a new output repeating one sent verbatim above
        it pointed to that one, its runs of repeated lines as markers and its JSON minified
        (`lines.py`); the others join the indexes. With the number of repeats pointed, and
        the outputs sent minified by their text (`verbatim` names them as sent from the next
        call on). None: undecided here (the full path decides)."""
        opts = cls.stages.cluster
        verbatim = self.verbatim
        turns = opts is not None and opts.on_arrival and opts.arrival_lines and (
            opts.arrival_from_turns)
        if turns != self.lines_turns:
            return None  # the lines were indexed otherwise: the full path indexes them anew
        if opts is None or not opts.on_arrival:
            verbatim = None
        elif verbatim is None or self.arrival_min != opts.arrival_min_chars:
            return None
        index, json_min = self.lines, self.json_min
        if verbatim is None and index is None and json_min is None:
            return {}, 0, {}
        least = (self.arrival_min if verbatim is not None
                 else self.lines_min if index is not None else json_min or 0)
        start = next((i for i in range(len(messages) - 1, -1, -1)
                      if messages[i].get("role") == "assistant"), len(messages) - 1)
        cuts: dict[str, Decision] = {}
        pending: dict[str, Item] = {}
        repeats = 0
        step = 0
        for item in tail:
            made = decisions.get(item.id)
            if made is not None and (verbatim is None or made.reason != MINIFIED_JSON):
                continue
            if verbatim is not None and item.kind == "assistant" and (
                    item.message_index >= start and appended_result(item.text, least)):
                return None  # a result appended to a new turn: the full path weighs it
            if not arrival_item(item, least, self.layout.pins):
                if turns and made is None and arrival_turn(item, least, self.layout.pins):
                    index_lines(index, item, latest=True)  # type: ignore[arg-type]
                continue
            if made is not None:  # sent minified: a repeat of it points to it
                verbatim.setdefault(item.text, item)  # type: ignore[union-attr]
                continue
            new = item.message_index >= start and arrival_new(item)
            rep = verbatim.get(item.text) if verbatim is not None else None
            if new and rep is not None:
                cut: Decision | None = Decision("cluster", "dedup", "duplicate", "dedup",
                                                arg=rep.id, text=pointer(rep))
                repeats += 1
            else:
                cut = lines_decision(item.text, index, least) if new and index else None
                if cut is None and new and json_min is not None:
                    cut = minified_decision(item.text)
                    if cut is not None and keeps_layout(messages, item.message_index):
                        cut = None  # as the full path (`quoting.keeps_layout`)
                    if cut is not None and verbatim is not None:
                        pending.setdefault(item.text, verbatim.setdefault(item.text, item))
            if cut is None:
                if verbatim is not None:
                    verbatim.setdefault(item.text, item)
                if index is not None:
                    index_lines(index, item, latest=turns)
                continue
            if not step:  # numbered as the full path's _stamp_step numbers a call's decisions
                step = 1 + self._latest_step(decisions)
            cuts[item.id] = replace(cut, step=step)
        return cuts, repeats, pending

    def _latest_step(self, decisions: Mapping[str, Decision]) -> int:
        """The latest step among `decisions` (0: none), kept for the next call."""
        if self.latest is None or self.latest[0] is not decisions:
            self.latest = (decisions, max((d.step for d in decisions.values()), default=0))
        return self.latest[1]

    def _add_tail(self, messages: Sequence[Mapping[str, Any]], tail: list[Item]) -> None:
        by_message: dict[int, list[Item]] = {}
        for item in tail:
            by_message.setdefault(item.message_index, []).append(item)
        for i in range(self.start, len(messages)):
            group = by_message.get(i, [])
            self.compactable.append(_compactable(group))
            if any(x.pinned and x.kind != "system" for x in group):
                self.watched[i] = group

    def _step_due(
        self, messages: Sequence[Mapping[str, Any]], state: SessionState, cls: TaskClass,
        caches: ContextCaches,
    ) -> bool:
        """Whether this call's messages take the session past a mark of age-based compaction."""
        layout, horizon, n_messages = self.layout, state.horizon, len(messages)
        goal = [layout.restate(i) for i in self.goal_items]
        stale = stale_tokens(goal, state, cls, caches.stale)
        stale += lagging_tokens(self.lagging, state, cls, messages, self.known,
                                call_tokens=self.item_tokens)
        turns = layout.turns[bisect_left(layout.turns, horizon) :]
        tokens_from = {
            i: self.compactable[i] for i in range(horizon, n_messages) if self.compactable[i]
        }
        unanswered = sum(open_tokens(group) for group in self.watched.values())
        return horizon_after(turns, tokens_from, n_messages, state, cls, stale,
                             call_tokens=self.item_tokens, unanswered=unanswered,
                             first_task=on_first_task(
                                 clock=layout.clock, through=runs_of_one(
                                     state.calls + 1, cls.compaction, state.agent_runs)),
                             credit=takes_credit(clock=layout.clock),
                             task_wait=waits_for_task(state, cls, layout.clock, tokens_from,
                                                       turns)) != horizon

    def _render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tail: list[Item],
        final: list[Item],
        decisions: Mapping[str, Decision],
        total: int,
    ) -> Reuse:
        plan, self.changed, digests, self.rolling = render_plan(
            messages, tail, final, self.start, self.rolling, self.marks, len(self.plan),
            self.changed,
        )
        self.plan += plan
        self.digests += digests
        self.final += final
        added = drop_events(tail, final, decisions)
        if added:  # a new list: the one handed out before is never changed
            self.events = self.events + added
        self.tail = None
        return Reuse(
            tokens_after=total,
            plan=self.plan,
            changed=self.changed,
            digests=self.digests,
            events=self.events,
        )


class PrefixCache:
    """Per (tenant, session): the last call's prefix; a bounded LRU on the engine (size 0:
    none kept). A call takes its session's entry out and puts back the one it leaves, so
    concurrent calls of a session never share one."""

    def __init__(self, size: int = 256) -> None:
        self._entries: LRUCache[tuple[str, str], Prefix] | None = (
            LRUCache(maxsize=size) if size > 0 else None
        )
        self.reused = 0  # calls rendered from their session's previous call

    def take(self, tenant: str, session_id: str) -> Prefix | None:
        if self._entries is None:
            return None
        return self._entries.pop((tenant, session_id), None)

    def put(self, tenant: str, session_id: str, prefix: Prefix) -> None:
        if self._entries is not None:
            self._entries[(tenant, session_id)] = prefix
