"""The stage seam: every stage is `async (items, budget, ctx) -> StageResult`.

Stages are pure over their inputs: they return the kept (possibly rewritten) items and the
decisions that produced them; the engine remembers the decisions per session and writes one
drop-log line per affected item, so a decision made once is rendered the same way later.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from gateway.context.apply import PERIODS, apply_decision, kept_cells, placeholder
from gateway.context.caches import ContextCaches, SeenHead
from gateway.context.forecast import Budget
from gateway.context.items import Item
from gateway.context.listing import (
    aged_listing,
    failed_listing,
    failed_paths,
    listed_names,
    listed_paths,
)
from gateway.context.needed import haystack, tool_calls
from gateway.context.quoting import call_files, named_files
from gateway.context.session import Decision
from gateway.context.summarize import summarize, values
from gateway.context.taskclass import TaskClass
from gateway.context.tokens import TokenCounter

if TYPE_CHECKING:
    from gateway.embeddings import Embedder


# A digested turn among the agent's latest this many keeps its commands whole: the code it
# just wrote is what it edits next, and the digest is kept for good (swe7b, bench/README.md).
# So does the turn a weighed step left verbatim as the latest answer (`StageContext.held_turn`,
# `steps.horizon_after`): digested a few turns later by the next step, it lost the commands
# it would have kept on time (acr-run-1-queue tune, q3 call 58: a patch's
# `self.__dict__.copy`; bench/README.md, "Short runs' cost @0.1, part eight").
RECENT_COMMAND_TURNS = 1


@dataclass
class StageContext:
    task_class: TaskClass
    counter: TokenCounter
    encoding: str
    embedder: Embedder | None
    fixed_tokens: int  # tokens outside the items (priming, tools, playbook block)
    horizon: int  # age-based rules apply to messages before this index
    query: str  # the current step: latest result and latest request
    originals: Mapping[str, Item]  # items as the client sent them, by id
    decisions: dict[str, Decision]  # remembered and made so far; stages add to it
    target: int | None = None  # over the high-water mark: cut down to this many tokens
    first_call: bool = False  # the session's first call: no prompt cache to protect
    known: frozenset[str] = frozenset()  # values of the session's system prompt and task
    focus: frozenset[str] = frozenset()  # terms of the task and the latest calls (focus.py)
    # the same without the current task's statement (a queue's later task): what a masked
    # content block's placeholder keeps cells by (`apply.kept_cells`)
    mask_focus: frozenset[str] | None = None  # None: `focus`
    caches: ContextCaches = field(default_factory=ContextCaches)  # the engine's memos
    # the client's messages (the budget ladder reads old exchanges' tool-call arguments)
    messages: Sequence[Mapping[str, Any]] = ()
    calls: int = 0  # the session's calls so far, this one included (0: not counted)
    late_batch: bool = False  # the session's last mask batch was left out (`SessionState`)
    # the turn the last step left verbatim as the latest answer, when the session's large
    # calls are weighed (`steps.young`): its digest keeps its commands whole (-1: none)
    held_turn: int = -1
    # the conversation's text, built on first use (`conversation`)
    _conversation: str | None = field(default=None, init=False, repr=False, compare=False)

    def total(self, items: list[Item]) -> int:
        return self.fixed_tokens + sum(item.tokens for item in items)

    def conversation(self) -> str:
        """What the conversation says: the text of the client's user and assistant messages
        as the yardstick reads them (content, then each tool call's name and arguments).
        Built once per call, on the first aged path listing that asks (`_aged_listing`)."""
        if self._conversation is None:
            self._conversation = haystack(
                [m for m in self.messages if m.get("role") in _CONVERSATION]
            )
        return self._conversation


@dataclass(frozen=True, slots=True)
class StageResult:
    items: list[Item]
    decisions: dict[str, Decision]


class Stage(Protocol):
    async def __call__(
        self, items: list[Item], budget: Budget, ctx: StageContext
    ) -> StageResult: ...


def _by_unit(items: list[Item], chosen: Mapping[str, Decision]) -> dict[str, Decision]:
    """The decisions as they apply: a drop takes its whole unit, or becomes a mask where
    the message (or part of its unit) must stay."""
    chosen = dict(chosen)
    if all(decision.method != "drop" for decision in chosen.values()):
        return chosen  # no drop: nothing below changes (a step's digests and masks)
    for item in items:
        decision = chosen.get(item.id)
        if (
            decision is not None
            and decision.method == "drop"
            and item.kind == "knowledge"
            and item.segment == 0
        ):  # the message's head: keep the message, mask the text
            chosen[item.id] = replace(decision, action="mask", method="mask")
    # A retrieved document is dropped alone; anything else takes its whole unit with it,
    # unless part of the unit is pinned: then it is masked instead.
    pinned_units = unit_pinned(items)
    for item in items:
        decision = chosen.get(item.id)
        if (
            decision is not None
            and decision.method == "drop"
            and item.unit in pinned_units
            and item.kind != "knowledge"
        ):
            chosen[item.id] = replace(decision, action="mask", method="mask")
    unit_drops = {
        item.unit: chosen[item.id]
        for item in items
        if item.id in chosen and chosen[item.id].method == "drop" and item.kind != "knowledge"
    }
    decisions = dict(chosen)
    for item in items:
        if item.unit in unit_drops:
            decisions[item.id] = unit_drops[item.unit]
    return decisions


def decide(items: list[Item], chosen: Mapping[str, Decision], ctx: StageContext) -> StageResult:
    """Apply new decisions (to the original items) and drop whole units where asked."""
    if not chosen:
        return StageResult(items, {})
    decisions = _by_unit(items, chosen)
    until = _last_summary(items, decisions, ctx)  # no summary after it reads `seen`
    # the items before the first decision are kept as they are: their values counted from
    # the last step's (a step decides a few young items; its head differs by a few texts)
    head = 0
    if until > 0:
        head = next(pos for pos, item in enumerate(items) if item.id in decisions)
    kept: list[Item] = items[:head]
    seen: set[str] = set(ctx.known)  # values the model reads before the current item
    seen.update(_head_values(items, head, ctx))
    # the latest talk turn, aged on a small call with no target, keeps its lines closing on the
    # current step's values (summarize._valued)
    small = ctx.total(items) <= ctx.task_class.compaction.early_max_tokens
    step = frozenset(values(ctx.query)) if ctx.target is None and small else frozenset()
    talk = [item.message_index for item in items if item.kind == "assistant"]
    # an agent whose tools are text (its class digests no user turn, `text_tools_aging`): an
    # aged turn's digest keeps the lines of code its prose named (`summarize.line_refs`)
    opts = ctx.task_class.stages.compress
    text_tools = opts is not None and "user" not in opts.kinds
    latest_talk = talk[-1] if talk else -1
    working: frozenset[str] | None = None  # the files the agent's newest call names
    for pos in range(head, len(items)):
        item = items[pos]
        decision = decisions.get(item.id)
        if decision is None:
            kept.append(item)
            if pos < until:
                seen |= item_values(item.text, ctx)
            continue
        original = ctx.originals.get(item.id, item)
        listing = _aged_listing(item, decision, ctx)
        if listing is not None:
            # An aged path listing keeps the paths its conversation names (digested, the
            # shallowest others too): the files an agent opens many calls later.
            decision = decisions[item.id] = replace(decision, text=listing)
        elif _needs_summary(item, decision, ctx):
            # A summary need not repeat what the model has already read above it.
            decision = replace(
                decision,
                text=summarize(
                    original.text, original.kind, decision.level, frozenset(seen), ctx.focus,
                    whole_commands=(item.age <= RECENT_COMMAND_TURNS
                                    or item.message_index == ctx.held_turn),
                    step=step if item.message_index == latest_talk else frozenset(),
                    named_lines=text_tools,
                    periods=original.periods or decision.arg == PERIODS,
                    # a quoted command an earlier text sent carries is not listed again
                    said=lambda text: any(text in before.text for before in kept),
                ),
            )
            if working is None:
                working = _working_files(ctx.messages)
            if _saves_little(item, decision, ctx):
                # the output goes as it is sent; the decision still counts as a digest
                # for the mask batches (`compress._expired_digests`), so no step moves
                decision = replace(decision, text=item.text)
            elif _on_working_file(original, decision, ctx, working):
                # as the client sent it: lines a newer output repeated went out as markers
                decision = replace(decision, text=original.text)
            else:
                # a folder's listing of bare names keeps its files' names instead
                files = _aged_names(original, decision, ctx)
                if files is not None:
                    decision = replace(decision, text=files)
            decisions[item.id] = decision
        elif _keeps_cells(item, decision, ctx):
            # An aged content block keeps the cells its task and latest calls name.
            opts = ctx.task_class.stages.compress
            # the cells naming its records too, in a session of fewer than
            # `whole_block_turns` turns: a long session's (a queue's) later masks stay short
            names = opts is not None and item.clock.turns < opts.whole_block_turns
            text = kept_cells(ctx.originals.get(item.id, item), _mask_focus(ctx), frozenset(seen),
                              names)
            if text is not None:
                decision = decisions[item.id] = replace(decision, text=text)
        ctx.decisions[item.id] = decision
        new = apply_decision(
            original, decision, ctx.counter, ctx.encoding, ctx.known, ctx.caches.rewritten
        )
        if new is not None:
            kept.append(new if new.score == item.score else replace(new, score=item.score))
            if pos < until:
                seen |= item_values(new.text, ctx)
    return StageResult(kept, decisions)


def _saves_little(item: Item, decision: Decision, ctx: StageContext) -> bool:
    """Whether an aged tool result's digest keeps at least `whole_digest_share` of its
    characters as sent: a failed command's error whose digest cuts the command the agent
    re-types later, for a few dozen tokens. It is sent as it is instead."""
    opts = ctx.task_class.stages.compress
    share = opts.whole_digest_share if opts is not None else None
    return (share is not None and item.kind == "tool_result" and decision.reason == "aged"
            and decision.text is not None and len(decision.text) >= share * len(item.text))


# Tokens of an aged output that goes whole while the agent works on its file (below): a code
# search's hits, a short read; an edit of that file quotes its lines a call or two later.
WORKING_MAX_TOKENS = 400


def _working_files(messages: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The files the agent's newest tool-calling turn names (`quoting.call_files`)."""
    for msg in reversed(messages):
        if msg.get("role") == "assistant" and tool_calls(msg):
            return frozenset(call_files(msg))
    return frozenset()


def _on_working_file(item: Item, decision: Decision, ctx: StageContext,
                     working: frozenset[str]) -> bool:
    """Whether an aged tool result, `WORKING_MAX_TOKENS` or shorter, answered a call naming a
    file the agent's newest call names too (`working`) and does not name that file itself:
    lines of the file the agent is working on (a `grep` in it, a short read), not a report
    about it (an edit's acknowledgment names the file it changed). An exact-text editor
    quotes those lines in its next edits: digested at the step, the 12 signatures a search
    printed were gone while the agent renamed them one edit at a time (Claude Code runs,
    bench/README.md, "Session 73, cc73"). It goes whole, counted as a digest for the mask
    batches."""
    if not (working and item.kind == "tool_result" and decision.reason == "aged"
            and item.tokens <= WORKING_MAX_TOKENS):
        return False
    files = working.intersection(named_files(ctx.messages, item.message_index))
    return bool(files) and not any(f in item.text for f in files)


def _needs_summary(item: Item, decision: Decision | None, ctx: StageContext) -> bool:
    return (decision is not None and decision.method == "summary" and decision.text is None
            and ctx.originals.get(item.id, item).rewritable)


def _keeps_cells(item: Item, decision: Decision | None, ctx: StageContext) -> bool:
    """Whether `decision` masks an aged tool result whose placeholder may keep cells of it
    (`apply.kept_cells`: an MCP content block's, when the session has focus terms)."""
    if (decision is None or decision.method != "mask" or decision.arg is not None
            or decision.reason != "aged" or decision.text is not None or not _mask_focus(ctx)
            or item.kind != "tool_result"):
        return False
    original = ctx.originals.get(item.id, item)
    return original.rewritable and original.text.lstrip()[:8].startswith(_BLOCK_HEADS)


def _aged_listing(item: Item, decision: Decision | None, ctx: StageContext) -> str | None:
    """What an aged tool result that lists paths becomes (`listing.aged_listing`; a listing
    of paths that failed alike, `listing.failed_listing`) when `decision` digests it or
    masks it to a plain placeholder (None: it lists no paths, or the decision is another)."""
    if item.kind != "tool_result" or decision is None or decision.text is not None:
        return None
    digest = _needs_summary(item, decision, ctx)
    if not digest and not (decision.method == "mask" and decision.arg is None
                           and decision.reason == "aged"):
        return None
    original = ctx.originals.get(item.id, item)
    if not original.rewritable:
        return None
    paths = listed_paths(original.text)
    if paths is not None:
        return aged_listing(placeholder(original), paths, ctx.conversation(), digest)
    failed = failed_paths(original.text)  # each path with the same error: its folders
    if failed is not None:
        return failed_listing(placeholder(original), *failed)
    return None if digest else _masked_names(original, ctx)


# Characters of a folder's listing by bare name (`listing.listed_names`) whose mask keeps its
# files' names: a short listing's names cost a few dozen tokens a call, a long one's (a
# `system32` of 24,000 characters) are not the agent's next file. At 400, four project
# listings of one Gemini CLI queue (211-388 characters) cost its tune split's cost @0.1
# 0.137 point for no value; at 300, 0.065 (bench/README.md, "Session 76, gem76").
MASKED_NAMES_CHARS = 300


def _masked_names(original: Item, ctx: StageContext) -> str | None:
    """What the mask of a short folder listing by bare name (`MASKED_NAMES_CHARS`) is: its
    head and its files' names the conversation has not written, as its digest keeps them
    (`_aged_names`); None: it is not one, or a longer one keeps its plain placeholder. A
    finished task's mask had cut `.gemini`'s 261-character listing to
    `[ctxgate: omitted Directory listin…]`, and the next task read `GEMINI.md`, a name no
    other message held (Gemini CLI queues, bench/README.md, "Session 76, gem76")."""
    if len(original.text) > MASKED_NAMES_CHARS:
        return None
    folder = listed_names(original.text)
    if folder is None:
        return None
    head, names = folder
    return aged_listing(placeholder(original), names, ctx.conversation(), True, head)


def _aged_names(original: Item, decision: Decision, ctx: StageContext) -> str | None:
    """What the digest of a tool result listing a folder's entries by bare name
    (`listing.listed_names`) is instead (None: it is not one, or the generic digest goes):
    its head and the files' names the conversation has not written, as an aged path
    listing's digest keeps its paths. Only where a digest is sent at all (`_saves_little`:
    a short listing goes as it is, as before), and only where it is no shorter than the
    generic digest (`decision.text`) it replaces: a shorter one moves the session's later
    steps, which the base's sizes placed (a 309-character home listing's shorter digest
    moved a Gemini CLI queue's three cache breaks, +26k characters billed for no value;
    bench/README.md, "Session 73, gem73" and "Session 74, gem74")."""
    if original.kind != "tool_result" or decision.text is None:
        return None
    folder = listed_names(original.text)
    if folder is None:
        return None
    head, names = folder
    text = aged_listing(placeholder(original), names, ctx.conversation(), True, head)
    return text if text is not None and len(text) >= len(decision.text) else None


_CONVERSATION = ("user", "assistant")


def _mask_focus(ctx: StageContext) -> frozenset[str]:
    return ctx.focus if ctx.mask_focus is None else ctx.mask_focus


_BLOCK_HEADS = ('{"type"', '[{"type"')  # how an MCP content block's JSON starts


def _last_summary(items: list[Item], decisions: Mapping[str, Decision], ctx: StageContext
                  ) -> int:
    """The position of the last item `decide` summarises (-1: none): the values the model
    read above it matter to it, those of the items after it to nothing."""
    for pos in range(len(items) - 1, -1, -1):
        item = items[pos]
        decision = decisions.get(item.id)
        if _needs_summary(item, decision, ctx) or _keeps_cells(item, decision, ctx):
            return pos
    return -1


def item_values(text: str, ctx: StageContext) -> frozenset[str]:
    memo = ctx.caches.values
    found = memo.get(text)
    if found is None:
        found = memo[text] = frozenset(values(text))
    return found


def _head_values(items: list[Item], head: int, ctx: StageContext) -> Counter[str]:
    """The values of `items[:head]`'s texts, each with how many of them hold it: the union
    `decide` would make item by item. Counted from the session's last head (`SeenHead`, by
    its constant values) when few texts left or came since; else from the texts."""
    if head == 0:
        return Counter()
    texts = Counter(item.text for item in items[:head])
    last = ctx.caches.seen_heads.get(ctx.known)
    if last is not None:
        gone = last.texts - texts
        came = texts - last.texts
        if gone.total() + came.total() < texts.total() // 2:
            counts = last.counts.copy()
            for text, n in gone.items():
                for value in item_values(text, ctx):
                    left = counts[value] - n
                    if left:
                        counts[value] = left
                    else:
                        del counts[value]
            for text, n in came.items():
                for _ in range(n):
                    counts.update(item_values(text, ctx))
            ctx.caches.seen_heads[ctx.known] = SeenHead(texts, counts)
            return counts
    counts = Counter()
    for text, n in texts.items():
        for _ in range(n):
            counts.update(item_values(text, ctx))
    ctx.caches.seen_heads[ctx.known] = SeenHead(texts, counts)
    return counts


def unit_pinned(items: list[Item]) -> set[str]:
    return {item.unit for item in items if item.pinned}
