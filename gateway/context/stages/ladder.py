"""The budget ladder: what a compaction step aims at, and cutting just enough to get there.

Target. A session's first call has no prompt cache to protect, so it aims at the budget
itself; a later call's step aims at the class's low-water mark (hysteresis: the next calls
then reuse the step's prefix). Neither ever aims below what the pinned content needs plus
the most recent exchange, nor above the budget.

Cut. Candidates are ordered least useful first (lowest rerank score, oldest, the task
statement last; a first call's cut to a budget: oldest turn first, by score within a turn;
the most recent exchange only once all else is cut, but for a first call's digests of
its tool outputs, which come before any drop, and the task statement, which it digests
and masks with the old turns but drops only after the most recent exchange's results);
pass k of the ladder
summary → strict summary → digest → mask → (under a budget) arguments → drop takes every
candidate that stands above rung k down to it, stopping as soon as the total is at the
target: everything is digested before anything is masked, masked before anything is
dropped, and no more is cut than needed. The arguments rung cuts the long string values of
an old exchange's tool calls (`calls.cut_to_save`; the open exchange's never): on agents
whose exchanges are mostly arguments (intercode's queries) dropping the whole exchange was
the only cut left, and it overshot. A rewrite that would land far below the target
becomes an excerpt (head and tail) of just the size needed; drops go to small units
first, and drops a later large one made needless come back. A drop takes the item's whole
unit (a tool call goes with its results), or becomes a mask where part of the unit is
pinned.

Values a turn leaned on. A summary leaves out what the model reads above it; when the agent's
own turn is summarised so (its plan repeats a file name from an email), a later rewrite of the
text above that takes the value away keeps it: a mask or digest of the source lists it after
its own text, a drop of the source's unit lists it in the turn's summary instead (agentdojo
`workspace/user_task_19` at 60%: the email masked, the plan's `feedback.xlsx` gone with it).

The task statement. It is not pinned (ARCHITECTURE: the latest user message's words are;
an agent's first user message is the task only until another comes) and goes last. Its
values are the session's `known` ones, which a summary need not list while the task is sent
whole; cut, every rewrite of it (summary, excerpt, mask) ends with a mentions line of its
identifiers (notable values: hosts, ports, paths, ids) that it no longer shows and the
system prompt does not: the port only the task names is what the agent connects to later
(swe-agent `ctf__crypto__katy` at 70%).

Texts too short to digest. A text under `MIN_REWRITE` tokens is not worth a digest on its
own, but before a drop that would land far below the target (the one cut left), such texts
are digested or masked where that saves tokens: on calls of a few hundred tokens the band is
narrower than an exchange (intercode's exchanges of a sentence, a command and an error).

O(n log n) in the number of items: one sort, and each rewrite looks only at the item's own
values (what the model reads before an item is kept, per value, as a heap of positions).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import replace

from gateway.context.apply import CutCalls, apply_decision
from gateway.context.calls import call_arguments, cut_to_save
from gateway.context.items import Item
from gateway.context.lines import MINIFIED_JSON, MINIFIED_KEPT
from gateway.context.session import Decision
from gateway.context.stages.base import StageContext, item_values, unit_pinned
from gateway.context.summarize import MENTION_CAP, mentions_line, notable, summarize, whole_links
from gateway.context.summarize import values as item_values_ordered
from gateway.context.taskclass import TaskClass
from gateway.context.tokens import TokenCounter

LADDER = (
    ("compress", "summary", 1),
    ("compress", "summary", 2),
    ("compress", "summary", 3),
    ("mask", "mask", 1),
    ("compress", "args", 1),  # an old exchange's tool-call arguments cut (under a budget)
    ("drop", "drop", 1),
)
MASK, ARGS, DROP = 3, 4, 5
TRIM = -1  # not a rung: `cut`'s pass of excerpts before the drops that would overshoot
# Texts shorter than this (tokens) are not worth a digest or a placeholder: only dropped.
MIN_REWRITE = 24
# A step may land this share of the total below the target; one that would land lower cuts
# an excerpt of its item instead (a large output digested in one go would overshoot).
LANDING = 0.04
# A value shorter than this a summary left out as read above is not kept when its source
# goes ("00" of a time, "id_"): names and ids an agent re-types are longer.
LEANED_MIN = 4
# The task statement's identifiers a rewrite of it lists at most (in the task's order).
GOAL_MENTION_CAP = 24
# A path in the task statement longer than a notable value (a traceback's frame under a
# virtualenv, 114 characters) is listed by its last components within this many characters:
# the file and the package it sits in (`django/core/management/__init__.py`), what the agent
# opens next (mini-SWE-agent `django__django-15973` at 60%: the path, not notable, was in no
# list, and `__init__.py` went with the traceback's digest).
GOAL_TAIL_CHARS = 40
EXCERPT_MIN = 32  # tokens an excerpt keeps at least, else the rung's own rewrite stands
# An excerpt that lists values it cut (a task statement's identifiers) is made again this many
# times at most, shorter by what the list overshot (the values lost change with the cut).
EXCERPT_TRIES = 4


def excerpt(text: str, keep: int, counter: TokenCounter, encoding: str) -> str | None:
    """The head and the tail of `text` in about `keep` tokens, the middle marked omitted;
    None when the text is not longer than that."""
    enc = counter.encoding(encoding)
    tokens = enc.encode_ordinary(text)
    for room in (keep - 12, keep - 24):  # the marker and re-tokenising at the seams
        if room <= 0 or room >= len(tokens):
            return None
        head, tail = enc.decode(tokens[: room - room // 3]), enc.decode(tokens[-(room // 3) :])
        omitted = len(tokens) - room
        out = f"{head}\n[ctxgate: {omitted} tokens omitted]\n{tail}"
        if counter.count(out, encoding) <= keep:
            return out
    return None


def rung(decision: Decision | None) -> int:
    """Where on the ladder an item stands (-1: untouched)."""
    if decision is None or decision.reason in (MINIFIED_JSON, MINIFIED_KEPT):  # the same JSON
        return -1
    for i, (_, method, level) in enumerate(LADDER):
        if decision.method == method and decision.level == level:
            return i
    return MASK if decision.method in ("strip", "dedup") else DROP


def latest_exchange(items: Sequence[Item]) -> frozenset[str]:
    """Units of the step the model has just taken: its latest unpinned assistant message
    (with its tool results) and whatever unpinned followed it."""
    pinned = unit_pinned(list(items))
    free = [i for i in items if not i.pinned and i.unit not in pinned]
    turns = [i.message_index for i in free if i.kind in ("assistant", "tool_call")]
    if not turns:
        return frozenset({free[-1].unit}) if free else frozenset()
    return frozenset(i.unit for i in free if i.message_index >= turns[-1])


def step_target(
    items: Sequence[Item], cls: TaskClass, budget: int, fixed: int, first_call: bool
) -> int:
    """What a compaction step under budget pressure cuts down to (see the module doc)."""
    aim = budget if first_call else int(cls.compaction.low_water * budget)
    recent = latest_exchange(items)
    floor = fixed + sum(i.tokens for i in items if i.pinned or i.unit in recent)
    return min(budget, max(aim, floor))


class _Values:
    """Which values the model reads before each position, as items are rewritten: per value,
    a heap of the positions whose current text has it (stale entries popped lazily)."""

    def __init__(
        self, items: Sequence[Item | None], ctx: StageContext, known: frozenset[str]
    ) -> None:
        self._ctx = ctx
        self._known = known
        self._at: list[frozenset[str]] = []
        self._where: dict[str, list[int]] = {}
        for p, item in enumerate(items):
            found = item_values(item.text, ctx) if item is not None else frozenset()
            self._at.append(found)
            for v in found:
                self._where.setdefault(v, []).append(p)  # ascending: already a heap

    def set(self, p: int, item: Item | None) -> None:
        found = item_values(item.text, self._ctx) if item is not None else frozenset()
        for v in found - self._at[p]:
            heapq.heappush(self._where.setdefault(v, []), p)
        self._at[p] = found

    def before(self, v: str, p: int) -> bool:
        heap = self._where.get(v, [])
        while heap and v not in self._at[heap[0]]:
            heapq.heappop(heap)
        return bool(heap) and heap[0] < p

    def at(self, p: int) -> frozenset[str]:
        """The values of the current text at `p`."""
        return self._at[p]

    def seen(self, text: str, p: int) -> frozenset[str]:
        """Those values of `text` the model has read before position `p`."""
        known = self._known
        return frozenset(v for v in item_values(text, self._ctx) if v in known or self.before(v, p))


class Ladder:
    """One cut over a list of items; `kept()` and `made` are the result."""

    def __init__(
        self, items: list[Item], ctx: StageContext, tolerance: int = 0, links: bool = False
    ) -> None:
        self.ctx = ctx
        self.tolerance = tolerance  # how far below the target a step may land
        # a mentions line names a value its text wrote as a link by the whole link
        # (`_mentioned`): on a first call's cut to a budget
        self.links = links
        self.current: list[Item | None] = list(items)
        self.made: dict[str, Decision] = {}
        # Units dropped, each as (position, item, decision) before the drop, least useful first
        self._dropped: list[list[tuple[int, Item, Decision | None]]] = []
        self._values: _Values | None = None  # built when a first summary needs it
        # Notable values a summary at a position left out because the model read them
        # above it, and per value the positions that did: a rewrite of the text above that
        # takes such a value away keeps it in a mentions line (the turn leaned on it).
        self._leaned: dict[int, frozenset[str]] = {}
        self._leaning: dict[str, list[int]] = {}
        self._units: dict[str, list[int]] = {}
        for p, item in enumerate(items):
            self._units.setdefault(item.unit, []).append(p)
        self._pinned_units = unit_pinned(items)
        self._known = ctx.known
        self._goal_ids: dict[int, frozenset[str]] = {}  # per task-statement position

    def kept(self) -> list[Item]:
        return [item for item in self.current if item is not None]

    def step(
        self,
        p: int,
        to: int,
        reason: str,
        counted: Callable[[Item], bool],
        need: int,
        fine: bool = False,
        short: bool = False,
    ) -> int:
        """Take the item at `p` down to rung `to` if it stands above it; returns the counted
        tokens saved. A text too short to digest or mask only takes the drop rung, unless
        `short` (then only a rewrite that saves tokens is kept). A rewrite that would save
        far more than the `need`ed tokens becomes an excerpt that saves just those; a unit
        whose drop would is left alone when `fine`."""
        item = self.current[p]
        if item is None:
            return 0
        before = self.ctx.decisions.get(item.id)
        if to == ARGS:
            return self._cut_arguments(p, item, before, reason, need) if counted(item) else 0
        if rung(before) >= to:
            return 0
        if to < DROP and item.tokens - item.fixed_tokens < MIN_REWRITE:
            if not short or not counted(item):
                return 0
            made = self.made.get(item.id)
            action, method, level = LADDER[to]
            short_cut = Decision("compress", action, reason, method, level)
            saved = self._set(p, short_cut, counted)
            if saved <= 0:  # nothing saved: undone
                self._undo(p, item, before, made)
            return max(saved, 0)
        action, method, level = LADDER[to]
        if method == "drop" and (
            (item.kind == "knowledge" and item.segment == 0)
            or (item.kind != "knowledge" and item.unit in self._pinned_units)
        ):  # the message (or its unit) must stay: mask the text instead
            if before is not None and before.method == "mask":
                return 0
            action, method, level = LADDER[MASK]
        decision = Decision("compress", action, reason, method, level)
        if method == "drop" and item.kind != "knowledge":
            unit = [q for q in self._units[item.unit] if self.current[q] is not None]
            if fine and self._tokens(unit, counted) > need + self.tolerance:
                return 0  # would land far below the target: smaller units first
            before_drop = [(q, self.current[q]) for q in unit]
            self._dropped.append(
                [(q, i, self.ctx.decisions.get(i.id)) for q, i in before_drop if i is not None]
            )
            return sum(self._set(q, decision, counted) for q in unit)
        made, leaned = self.made.get(item.id), self._leaned.get(p)
        saved = self._set(p, decision, counted)
        if saved < 0 and counted(item):  # a mentions line longer than what the rung cut
            self._undo(p, item, before, made)
            if leaned is not None:
                self._leaned[p] = leaned
            return 0
        if saved > need + self.tolerance and counted(item):
            saved = self._excerpt(p, item, reason, need, saved)
        return saved

    def trim(self, p: int, reason: str, counted: Callable[[Item], bool], need: int) -> int:
        """Instead of a drop of the unit at `p` that would land far below the target, its
        item's text an excerpt that saves about `need` tokens: a task statement that every
        rung left a little too long (its mentions line as long as what the rung cut).
        Returns the counted tokens saved."""
        item = self.current[p]
        if item is None or not counted(item) or item.tokens - item.fixed_tokens < MIN_REWRITE:
            return 0
        if self.unit_tokens(p, counted) <= need + self.tolerance:
            return 0  # the drop lands in the band
        return max(self._excerpt(p, item, reason, need, 0), 0)

    def _undo(self, p: int, item: Item, before: Decision | None, made: Decision | None) -> None:
        """The item at `p` back as `item`, under its decisions `before` (the session's) and
        `made` (this cut's)."""
        self.current[p] = item
        for decisions, old in ((self.ctx.decisions, before), (self.made, made)):
            if old is None:
                decisions.pop(item.id, None)
            else:
                decisions[item.id] = old
        if self._values is not None:
            self._values.set(p, item)
        self._leaned.pop(p, None)

    def restore(self, room: int, counted: Callable[[Item], bool]) -> int:
        """Undo drops, most useful first, that fit in `room` tokens (a later, larger drop
        made them unneeded); returns the counted tokens put back."""
        back = 0
        for unit in reversed(self._dropped):
            tokens = sum(item.tokens for _, item, _ in unit if counted(item))
            if tokens > room - back:
                continue
            for q, item, decision in unit:
                self.current[q] = item
                if decision is None:
                    del self.ctx.decisions[item.id]
                    self.made.pop(item.id, None)
                else:
                    self.ctx.decisions[item.id] = decision
                    if item.id in self.made:
                        self.made[item.id] = decision
                if self._values is not None:
                    self._values.set(q, item)
            back += tokens
        return back

    def unit_tokens(self, p: int, counted: Callable[[Item], bool]) -> int:
        """The counted tokens the unit of the item at `p` is sent with now."""
        item = self.current[p]
        return 0 if item is None else self._tokens(self._units[item.unit], counted)

    def _tokens(self, positions: list[int], counted: Callable[[Item], bool]) -> int:
        return sum(
            item.tokens
            for item in (self.current[q] for q in positions)
            if item is not None and counted(item)
        )

    def _cut_arguments(
        self, p: int, item: Item, before: Decision | None, reason: str, need: int
    ) -> int:
        """The tool calls of the message at `p` sent with their long string values cut,
        to save about `need` tokens (`calls.cut_to_save`); its text stays as it is now."""
        if item.kind != "tool_call" or rung(before) >= ARGS or (
            before is not None and before.method == "dedup"
        ):
            return 0
        i = item.message_index
        messages = self.ctx.messages
        calls = messages[i].get("tool_calls") if i < len(messages) else None
        raws = [call_arguments(call) for call in calls or ()]
        if not raws or any(raw is None for raw in raws):
            return 0
        counter, encoding = self.ctx.counter, self.ctx.encoding
        found = cut_to_save(
            [raw for raw in raws if raw is not None], need,
            lambda text: counter.count(text, encoding),
        )
        if found is None:
            return 0
        arguments, tokens = found
        original = self.ctx.originals.get(item.id, item)
        text = None if item.text == original.text else item.text
        arg = CutCalls(i, tuple(arguments), tokens).dump()
        decision = Decision("compress", "compress", reason, "args", 1, arg=arg, text=text)
        return self._set(p, decision, lambda _: True)

    def _excerpt(self, p: int, item: Item, reason: str, need: int, saved: int) -> int:
        """Instead of the rewrite just made at `p` (saving `saved`), the original's head and
        tail cut to save about `need` tokens, when that is shorter than the item."""
        original = self.ctx.originals.get(item.id, item)
        keep = item.tokens - need - original.fixed_tokens
        new: Item | None = None
        for attempt in range(EXCERPT_TRIES):  # again, shorter, when its mentions line overshoots
            if not original.rewritable or keep <= EXCERPT_MIN:
                break
            text = excerpt(original.text, keep, self.ctx.counter, self.ctx.encoding)
            if text is None:
                break
            decision = Decision("compress", "compress", reason, "summary", 1, text=text)
            bare = apply_decision(original, decision, self.ctx.counter, self.ctx.encoding)
            if bare is None:
                break
            made, new = self._keep_leaned(p, original, decision, bare)
            over = new.tokens - (item.tokens - need)
            if over > 0 and (attempt == EXCERPT_TRIES - 1 or keep - over - 1 <= EXCERPT_MIN):
                # No shorter excerpt is left to try: its mentions line listing fewer values
                # instead, so that the cut still lands (a text that is all identifiers).
                if self._values is not None:
                    self._values.set(p, self.current[p])
                made, new = self._keep_leaned(p, original, decision, bare, item.tokens - need)
            decision = made
            if over <= 0 or attempt == EXCERPT_TRIES - 1 or keep - over - 1 <= EXCERPT_MIN:
                break
            keep -= over + 1
            if self._values is not None:  # as it stood before this attempt
                self._values.set(p, self.current[p])
        if new is None or new.tokens >= item.tokens:
            if self._values is not None:
                self._values.set(p, item)
            return saved
        self.ctx.decisions[item.id] = self.made[item.id] = decision
        self.current[p] = replace(new, score=item.score)
        if self._values is not None:
            self._values.set(p, self.current[p])
        return item.tokens - new.tokens

    def _set(self, p: int, decision: Decision, counted: Callable[[Item], bool]) -> int:
        item = self.current[p]
        if item is None:
            return 0
        original = self.ctx.originals.get(item.id, item)
        seen: frozenset[str] | None = None
        if decision.method == "summary" and original.rewritable:
            # A summary need not repeat what the model has already read above it.
            if self._values is None:
                self._values = _Values(self.current, self.ctx, self._known)
            seen = self._values.seen(original.text, p)
            # The task statement's own values are `known` (it is the session's constant
            # context) until it is cut: its identifiers are listed by `_keep_leaned`.
            listed = item_values(original.text, self.ctx) if original.goal else seen
            text = summarize(original.text, original.kind, decision.level, listed,
                             periods=original.periods)
            decision = replace(decision, text=text)
        ctx = self.ctx
        new = apply_decision(
            original, decision, ctx.counter, ctx.encoding, ctx.known, ctx.caches.rewritten
        )
        added = self._lean_back(p, counted) if new is None else 0
        if new is not None:
            decision, new = self._keep_leaned(p, original, decision, new)
            if new.score != item.score:
                new = replace(new, score=item.score)
        self.ctx.decisions[item.id] = self.made[item.id] = decision
        self.current[p] = new
        if self._values is not None:
            self._values.set(p, new)
        self._lean(p, seen, new)
        if not counted(item):
            return -added
        return item.tokens - (new.tokens if new is not None else 0) - added

    def _lean(self, p: int, seen: frozenset[str] | None, new: Item | None) -> None:
        """Note the notable values the summary now at `p` left out as read above it, when
        it is the agent's own turn (its plan repeating a name it read); an output repeating
        an earlier one (a dump printed twice) leans on nothing: the agent did not name it."""
        leaned: frozenset[str] = frozenset()
        if seen is not None and new is not None and new.kind in ("assistant", "tool_call"):
            left_out = seen - self._known - item_values(new.text, self.ctx)
            leaned = frozenset(v for v in left_out if len(v) >= LEANED_MIN and notable(v))
        self._leaned[p] = leaned
        for v in leaned:
            self._leaning.setdefault(v, []).append(p)

    def _lost(self, p: int, new: Item | None) -> dict[str, int]:
        """The values the rewrite `new` (None: a drop) of the item at `p` takes away that a
        summary below it left out as read above, nothing else above that summary showing
        them any more; each with the first such summary still sent (outside `p`'s unit)."""
        values, item = self._values, self.current[p]
        if values is None or item is None or not self._leaning:
            return {}
        gone = values.at(p) - (item_values(new.text, self.ctx) if new is not None else set())
        leaning = sorted(
            ((q, v) for v in gone for q in self._leaning.get(v, ()) if q > p), key=lambda x: x[0]
        )
        if not leaning:
            return {}
        values.set(p, new)  # the caller sets it again to what it keeps
        unit = self._units[item.unit]
        lost: dict[str, int] = {}
        for q, v in leaning:
            if v in lost or v not in self._leaned.get(q, ()) or values.before(v, q):
                continue
            if self.current[q] is not None and q not in unit:
                lost[v] = q
        return lost

    def _mentioned(
        self, original: Item, decision: Decision, text: str, lost: set[str],
        cap: int = MENTION_CAP[1],
    ) -> Decision:
        """`decision` rendering `text` and a mentions line of the `lost` values of `original`
        (in their order there; unchanged when it names none of them)."""
        kept = [v for v in goal_values(original.text) if v in lost]
        if not kept:  # a marker's own number ("[…16 lines]"), not the item's
            return decision
        if self.links:  # as the digests list them (`summarize.whole_links`)
            whole = whole_links(original.text)
            kept = list(dict.fromkeys(whole.get(v, v) for v in kept))
        return replace(decision, text=f"{text}\n{mentions_line(kept, cap)}")

    def _goal_lost(self, p: int, original: Item, new: Item) -> set[str]:
        """The task statement's identifiers its rewrite `new` takes away (`goal_ids`)."""
        if not original.goal:
            return set()
        if self._values is None:
            self._values = _Values(self.current, self.ctx, self._known)
        values = self._values
        ids = self._goal_ids.get(p)
        if ids is None:  # once per item: the cut stays O(n) in item visits
            ids = self._goal_ids[p] = goal_ids(original.text, self.ctx)
        return {v for v in ids if v not in new.text and not values.before(v, p)}

    def _keep_leaned(
        self, p: int, original: Item, decision: Decision, new: Item, room: int | None = None
    ) -> tuple[Decision, Item]:
        """The rewrite `new` of the item at `p` with a mentions line of the values it takes
        away that a summary below it left out as read above (and nothing else above it
        still shows): a turn that repeated a file name from an email keeps it when the
        email is masked. With `room`, the line lists only as many values as keep the
        rewrite within `room` tokens (none: `new` as it is), the most that do: halving the
        list overshot a cut by as much as it saved on a text of identifiers (a task
        statement of random ids: 307 tokens asked, 228 made, the call 15 under its band)."""
        lost = set(self._lost(p, new))
        goal = self._goal_lost(p, original, new)
        if not lost and not goal:
            return decision, new
        ctx, values = self.ctx, lost | goal

        def listing(cap: int) -> tuple[Decision, Item | None]:
            made = self._mentioned(original, decision, new.text, values, cap)
            return made, apply_decision(original, made, ctx.counter, ctx.encoding, ctx.known)

        hi = GOAL_MENTION_CAP if goal else MENTION_CAP[1]
        made, kept = listing(hi)
        if kept is None:
            return made, new
        if room is None or kept.tokens <= room:
            return made, kept
        best: tuple[Decision, Item] = (decision, new)
        lo, hi = 1, hi - 1  # the longest list that fits: a line's tokens grow with its values
        while lo <= hi:
            cap = (lo + hi) // 2
            made, kept = listing(cap)
            if kept is None:
                return made, new
            if kept.tokens <= room:
                best, lo = (made, kept), cap + 1
            else:
                hi = cap - 1
        return best

    def _lean_back(self, p: int, counted: Callable[[Item], bool]) -> int:
        """Before the item at `p` is dropped: the values it takes away that a summary below
        left out as read above, listed in that summary instead; returns the counted tokens
        that adds."""
        by_summary: dict[int, set[str]] = {}
        for v, q in self._lost(p, None).items():
            by_summary.setdefault(q, set()).add(v)
        if self._values is None or not by_summary:
            return 0
        self._values.set(p, self.current[p])
        added, ctx = 0, self.ctx
        for q, lost in by_summary.items():
            item = self.current[q]
            made = ctx.decisions.get(item.id) if item is not None else None
            if item is None or made is None or made.method != "summary":
                continue
            original = ctx.originals.get(item.id, item)
            decision = self._mentioned(original, made, item.text, lost)
            new = apply_decision(original, decision, ctx.counter, ctx.encoding, ctx.known)
            if new is None or decision is made:
                continue
            ctx.decisions[item.id] = self.made[item.id] = decision
            self.current[q] = replace(new, score=item.score)
            self._values.set(q, self.current[q])
            self._leaned[q] = self._leaned.get(q, frozenset()) - lost
            added += new.tokens - item.tokens if counted(item) else 0
        return added


def goal_ids(text: str, ctx: StageContext) -> frozenset[str]:
    """The identifiers of a task statement (notable values: hosts, ports, paths, ids). Those
    a rewrite of it takes away (no longer in its text) and the model does not read above it
    (the system prompt) are listed after the rewrite (`GOAL_MENTION_CAP`): a port only the
    task names is what the agent connects to steps later (swe-agent `ctf__crypto__katy`)."""
    tails = (path_tail(v) for v in item_values(text, ctx))
    return frozenset(v for v in tails if len(v) >= LEANED_MIN and notable(v))


def goal_values(text: str) -> list[str]:
    """The values of `text` in order (`summarize.values`), a path longer than a notable
    value as its tail (`path_tail`)."""
    return list(dict.fromkeys(path_tail(v) for v in item_values_ordered(text)))


def path_tail(value: str) -> str:
    """`value`, or when it is a path too long to be notable, its last components within
    GOAL_TAIL_CHARS characters (its last alone when that is longer)."""
    if "/" not in value or notable(value):
        return value
    parts = value.split("/")
    tail = parts[-1]
    for part in reversed(parts[:-1]):
        if len(part) + 1 + len(tail) > GOAL_TAIL_CHARS:
            break
        tail = f"{part}/{tail}"
    return tail


def usefulness(item: Item) -> tuple[bool, float, int, int]:
    """Sort key, least useful first: the task statement last, then by rerank score, then
    oldest first."""
    return (item.goal, item.score, -item.age, item.message_index)


def oldest_first(item: Item) -> tuple[bool, int, float, int]:
    """Sort key of a first call's cut to a budget, least useful first: the task statement
    last, then the oldest turn first, and within one turn (the results of one batch of
    parallel tool calls, the parts of one message) the lowest rerank score first. The next
    action's values sit in the newest outputs more than in the ones most like its request:
    cut by score, a call's digests fell on a newer output the agent was about to copy from
    while an older, larger one stayed whole (Toolathlon runs at 80%: the plain fit, masking
    oldest first, kept 96.1% of the values against 93.4%). But a turn's results are all of
    one age: ordered by position, the first of a batch was masked and a lower-scored one
    after it digested (tau2 retail: the order list the agent was about to act on)."""
    return (item.goal, -item.age, item.score, item.message_index)


def result(item: Item) -> bool:
    """Whether `item` is a call's result: a tool message, or in a session whose agent writes
    its calls in its turns (`Clock.text_calls`), a user turn after one (or a document in
    it) that is not the task statement."""
    if item.kind == "tool_result":
        return True
    clock = item.clock
    return (item.kind in ("user", "knowledge") and not item.goal and clock is not None
            and clock.text_calls)


def later_start(items: Sequence[Item]) -> int:
    """The message index of the current task's statement in a queue whose agent calls its
    tools through the API (`Clock.task_statement`), -1 on a first task or a conversation."""
    clock = next((item.clock for item in items), None)
    if clock is None or not clock.api_calls:
        return -1
    return clock.task_statement


def cut(
    items: list[Item],
    ctx: StageContext,
    reason: str,
    target: int,
    counted: Callable[[Item], bool] = lambda _: True,
    offset: int = 0,
    above: int | None = None,
    arguments: bool = False,
) -> tuple[list[Item], dict[str, Decision]]:
    """`items` cut down the ladder until `offset` + the tokens of the counted items is at
    most `target` (or nothing is left to cut), and the decisions made. Nothing is cut unless
    that total is over `above` (default: the target): a hysteresis mark. `arguments`: old
    exchanges' tool-call arguments may be cut (the rung before drop; the exchange still
    open is pinned: its calls stay whole), and on a session's first call candidates go
    oldest first (`oldest_first`: a budget's cut; the caps keep the score order)."""
    total = offset + sum(i.tokens for i in items if counted(i))
    if total <= (target if above is None else above):
        return items, {}
    recent = latest_exchange(items)
    # Oldest first only on a session's first call: a later call's step keeps the order its
    # prefix was cut in (the unbudgeted yardstick's steps, measured in that order).
    by_age = arguments and ctx.first_call
    rank: Callable[[Item], tuple[object, ...]] = oldest_first if by_age else usefulness
    free = sorted(
        (p for p, i in enumerate(items) if not i.pinned and counted(i)),
        key=lambda p: rank(items[p]),
    )
    ladder = Ladder(items, ctx, tolerance=int(LANDING * total), links=by_age)
    # Each rung in turn, over everything but the latest exchange, then over that; drops
    # first only of units small enough not to land far below the target. A drop that would
    # (a unit whose tool-call arguments cannot be digested) comes last of all, the smallest
    # such unit first: cutting the latest exchange a little lands in the band, dropping a
    # large unit far under it (and `restore` then brings back what fits).
    old = [p for p in free if items[p].unit not in recent]
    latest = [p for p in free if items[p].unit in recent]
    # Before such a drop, texts too short for a digest are digested or masked where that
    # saves tokens (a sentence before a call): the finer cut that lands in the band.
    rungs = [to for to in (0, 1, 2, MASK, DROP, ARGS) if to != ARGS or arguments]
    # A first call's cut to a budget digests the latest exchange's tool outputs before it
    # drops any older unit (their masks still after them): a digest keeps a text's
    # identifiers, a drop loses every value of its unit, the agent's own words among them.
    # Kept whole until then, a large newest output took the whole budget and every older
    # turn went (tau-bench airline `trial3-task33` at 60%: a 2,420-token flight search
    # sent digested, the agent's summary of the reservations dropped with its turn). So
    # does it a text tool's result (`result`: a user turn answering a call the agent wrote
    # in its turn) when an older turn is there to drop: a large page read last went whole
    # while every older turn was dropped (smolagents `tool-calling-gaia/030` at 80%: the
    # link the agent had visited lost). With none (the task statement and the latest
    # exchange only), the result and the agent's own turn go by score as before: digested
    # first, an AutoCodeRover search result lost the file the next turn named.
    outputs = [p for p in latest if items[p].kind == "tool_result"]
    # The history cap on a queue's later task (`later_start`): the earlier tasks' old
    # exchanges go down every rung, drops among them, before the current task's are cut at
    # all. By rung over all old items, the mask rung reached the current task's outputs
    # before any earlier unit was dropped, while the earlier tasks' residue (fold notes,
    # done tasks' scripts as tool-call arguments) held most of the history: Toolathlon
    # deepseek queues' holdout recall 98.67 -> 98.87%, the page ids of a listing the agent
    # then wrote to kept (bench/README.md, "Toolathlon queues' recall, part thirty"). Not
    # on the budget's cut: there the earlier drops moved a step's phase onto an output the
    # agent was about to copy from (claude queues' tune recall 99.10 -> 98.91%).
    start = later_start(items) if reason == "history_cap" and not by_age else -1
    earlier = [p for p in old if items[p].message_index < start]
    # A budget's cut digests and masks the task statement with the old items (a rewrite of
    # it lists its identifiers) but drops it only after the latest exchange's results have
    # gone down the rungs (the agent's own latest turn still after it): among the old items
    # it was dropped while a large newest text result stood whole (AutoCodeRover
    # `django-12470` at 80%: the issue text gone, a 4,157-token search result sent nearly
    # whole). Behind the agent's turn too, a first user turn that is no task (DA-Code's
    # "You are in the folder now.") took the place of the turn naming the files.
    dropped = latest
    if by_age:
        goals = [p for p in old if items[p].goal]
        own = [p for p in latest if items[p].kind in ("assistant", "tool_call")]
        dropped = [*(p for p in latest if p not in own), *goals, *own]
        latest = [*latest, *goals]
        old, digest_old = [p for p in old if not items[p].goal], old
        if old:
            outputs = [p for p in latest if result(items[p])]
    passes = (
        [*((digest_old, to, True, False) for to in rungs if to <= MASK),
         *((outputs, to, True, False) for to in rungs if to < MASK),
         *((old, to, True, False) for to in rungs if to > MASK),
         *((dropped if to == DROP else latest, to, True, False) for to in rungs)]
        if by_age else
        [*((earlier, to, True, False) for to in rungs),
         (earlier, DROP, False, False),
         *((old, to, True, False) for to in rungs),
         *((latest, to, True, False) for to in rungs)]
    )
    # Before any such drop, a text every rung left a little too long is cut to an excerpt
    # of just what is needed (`Ladder.trim`).
    for order, to, only_fine, short in [
        *passes,
        *((old, to, True, True) for to in (2, MASK)),
        *((latest, to, True, True) for to in (2, MASK)),
        (old, TRIM, True, False),
        (latest, TRIM, True, False),
        (old, DROP, False, False),
        (latest, DROP, False, False),
    ]:
        if not only_fine:
            order = sorted(order, key=lambda p: ladder.unit_tokens(p, counted))
        for p in order:
            if total <= target:
                break
            if to == TRIM:
                total -= ladder.trim(p, reason, counted, total - target)
            else:
                total -= ladder.step(p, to, reason, counted, total - target, only_fine, short)
    if total <= target:  # a large drop came last: smaller ones before it may come back
        ladder.restore(target - total, counted)
    return ladder.kept(), ladder.made


def give_back(before: list[Item], after: list[Item], ctx: StageContext, target: int) -> list[Item]:
    """After a step that cut well below `target` (duplicates folded, rules applied), the
    step's own decisions undone, newest unit first, while the total stays at most `target`:
    a session's first call is cut just enough. `before`: the items as they were before the
    step, so only the step's decisions are undone. The newest unit that does not fit back
    whole comes back with its longest text an excerpt of what room is left (its other
    items whole: a tool call comes back with its results)."""
    room = target - ctx.total(after)
    if room <= LANDING * ctx.total(before):
        return after
    now = {item.id: item for item in after}
    units: dict[str, list[Item]] = {}
    for item in before:
        if item.id in ctx.decisions and now.get(item.id) is not item:
            units.setdefault(item.unit, []).append(item)
    partial: list[Item] | None = None  # the newest unit that did not fit back whole
    for unit in sorted(units.values(), key=lambda u: -u[-1].message_index):
        tokens = sum(_regained(i, now) for i in unit)
        if tokens > room:
            partial = partial or unit
            continue
        for item in unit:
            now[item.id] = item
            del ctx.decisions[item.id]
        room -= tokens
    if partial is not None and room > LANDING * ctx.total(before):
        _excerpt_back(partial, now, ctx, room)
    return [now[item.id] for item in before if item.id in now]


def _regained(item: Item, now: dict[str, Item]) -> int:
    """Tokens `item` takes back when it is sent whole again."""
    return item.tokens - (now[item.id].tokens if item.id in now else 0)


def _excerpt_back(unit: list[Item], now: dict[str, Item], ctx: StageContext, room: int) -> None:
    """`unit` back in `room` tokens: its longest rewritable text as an excerpt, the rest
    whole; left as it is when that does not fit."""
    texts = [i for i in unit if i.rewritable]
    if not texts:
        return
    longest = max(texts, key=lambda i: i.tokens)
    others = sum(_regained(i, now) for i in unit if i is not longest)
    current = now[longest.id].tokens if longest.id in now else 0
    keep = current + room - others - longest.fixed_tokens
    if keep <= EXCERPT_MIN:
        return
    text = excerpt(longest.text, keep, ctx.counter, ctx.encoding)
    if text is None:
        return
    if longest.goal:  # the task statement keeps its identifiers (Ladder._goal_lost)
        above = {v for i in now.values() if i.message_index < longest.message_index
                 for v in item_values(i.text, ctx)}
        lost = {v for v in goal_ids(longest.text, ctx) if v not in text and v not in above}
        kept = [v for v in goal_values(longest.text) if v in lost]
        if kept:
            text = f"{text}\n{mentions_line(kept, GOAL_MENTION_CAP)}"
    filled = Decision("compress", "compress", "over_budget", "summary", 1, text=text)
    new = apply_decision(longest, filled, ctx.counter, ctx.encoding)
    if new is None or not current < new.tokens <= current + room - others:
        return
    for item in unit:
        if item is not longest:
            now[item.id] = item
            del ctx.decisions[item.id]
    now[longest.id] = new
    ctx.decisions[longest.id] = filled
