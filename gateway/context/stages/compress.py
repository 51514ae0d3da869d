"""compress: what is left and still too large is rewritten shorter, pinned items never.

1. Age (regardless of budget): items of the kinds in `kinds`, at least `min_tokens` long,
   in messages the current step covers, are summarised extractively (see summarize.py);
   the goal (the task statement) is kept. Aged summaries `mask_after_turns` old become
   one-line placeholders.
2. Caps: retrieved documents over the class's knowledge cap, and history over its history
   cap, are cut lowest-importance first.
3. Budget: over the high-water mark, items are cut down the budget ladder (`stages/ladder.py`)
   until the total is at the step's target.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import replace

from gateway.context.apply import (
    GIST,
    LISTING_HEAD_CHARS,
    PERIODS,
    apply_decision,
    placeholder,
    placeholder_saves,
)
from gateway.context.classify import RESTATED_CHARS, long_lines, superseded
from gateway.context.drawing import drawn_from, later_task_outputs
from gateway.context.forecast import Budget
from gateway.context.items import OWN_TURN_KINDS, Item, content_text, text_tool_result
from gateway.context.lines import MINIFIED_JSON, MINIFIED_KEPT, STILL_AGES
from gateway.context.segments import find_documents, in_code_block
from gateway.context.session import Decision
from gateway.context.stages.base import StageContext, StageResult, decide
from gateway.context.stages.ladder import cut
from gateway.context.steps import (
    ages_out,
    source_block,
    text_tools_now,
    undecided,
    whole_block,
)
from gateway.context.summarize import (
    cited_lines,
    notable,
    numbered_listing,
    shell_digest,
    shell_values,
    values,
)
from gateway.context.taskclass import CompressOptions

EXPIRED_MIN_TOKENS = 60  # a shorter digest is left as it is: a placeholder saves too little
# User turns only: old assistant answers masked too lost recall on the values the agent
# re-tells (bench/README.md, "Old customer turns as gists").
TURN_KINDS = frozenset({"user"})
# An aged output sent minified stays so unless its digest is this much shorter (0: shorter
# at all). tau-bench's 11-call runs, cost saved @0.1 / late reduction (bench/README.md,
# "Short runs' cost with prompt caching"): always digest -0.8 / 16.1%, 0 -0.7 / 16.2%, 0.15
# -0.4 / 15.9% but its 300-call queues' late calls 0.005 point less reduced (tune), 0.2
# -0.2 / 15.6% (main: 15.7%).
KEEP_MINIFIED = 0.0
TURN_MASK_MARGIN = 16  # characters a turn's placeholder must save at least


def _expired_digests(
    items: list[Item], ctx: StageContext, opts: CompressOptions,
    due: frozenset[str] = frozenset(),
) -> dict[str, Decision]:
    """Aged summaries old enough to be masked (the decision replaces the summary). In
    batches, as hysteresis: once a digest is twice `mask_after_turns` old, every digest at
    least `mask_after_turns` old is masked, so the rendered prefix changes this far back
    only once in that many turns. With `mask_turns_min_tokens`, old user turns too short
    for a digest, or left as a short one, join the batch as gists: on long sessions of many
    short exchanges (a support agent working a queue) they were most of what went verbatim.
    A gist joins a batch, never starts one: the prefix changes no more often than without
    (bench/README.md, "Short tool-call ids, and old customer turns as gists on long
    sessions": a gist starting batches took tau-bench's queue holdout recall to 98.98%),
    but where user turns are never digested and no digest of the request could start one
    (a text-tool agent of one-line calls), an earlier task's result gist does.
    In a session of 2+ user messages the current task's items join `mask_current_turns`
    old and start a batch `mask_after_turns` later (they age that much slower)."""
    after = opts.mask_after_turns
    from_turns = opts.mask_turns_from_turns
    text = text_tools_now(ctx.task_class, items)
    if text is not None:  # a text-tool agent's run of one task: its results join earlier
        after = after if text.mask_after_turns is None else text.mask_after_turns
        from_turns = from_turns if text.mask_turns_from_turns is None else (
            text.mask_turns_from_turns)
    if after is None or not ctx.task_class.compaction.ages:
        return {}
    # the items due, each with its mask's form (a gist's `arg`; `commands`: the text
    # `_masked_commands` gives it), made into decisions only when the batch comes (a step
    # walks every digest of the history, and most steps mask none)
    expired: dict[str, tuple[Item, str | None, bool]] = {}
    oldest = 0
    task = _young_task(items, opts)
    done = _done_task(items, opts)
    closed = _done_results(items, opts)
    named = _task_named(items, ctx) if closed is not None else frozenset()
    current = _current_task(items, opts)
    reading = _reading_task(items, ctx)
    drawn = _drawn_blocks(items, ctx, opts)
    typed = functools.cache(lambda: _typed(items, ctx))
    # read only where a result's gist may start a batch (a pass over the history otherwise)
    digests = functools.cache(lambda: any(
        _aged_digest(ctx.decisions.get(item.id)) and item.tokens >= EXPIRED_MIN_TOKENS
        for item in items))
    decisions = ctx.decisions
    for item in items:
        made = decisions.get(item.id)
        if (made is not None and made.reason not in STILL_AGES and made.reason != MINIFIED_KEPT
                and not (made.method == "summary" and made.reason == "aged")
                and item.id not in due):
            # decided for good (masked, pointed to, dropped) and no digest: none of the
            # branches below takes it (a step walks the whole history, mostly such items)
            continue
        # a result of a task the queue has moved on from (`_done_results`)
        result = (closed is not None and item.kind == "user" and item.message_index < closed
                  and _answers_call(item, ctx) and not _holds(item, named, ctx))
        before = (done is not None and item.message_index < done) or result
        # the current task's items age slower: they join at `mask_current_turns`
        aged = (item.age - (opts.mask_current_turns or 0) + after
                if current is not None and item.message_index > current else item.age)
        if ((aged < after and not before) or item.pinned
                or (task is not None and item.message_index > task)
                or (reading is not None and item.message_index > reading
                    and item.kind == "tool_result")):
            continue
        if before and item.id in due and item.tokens >= EXPIRED_MIN_TOKENS:
            # a finished task's shell turn keeps its command lines as an aged one does: the
            # fold's notes of earlier tasks carry what their masks name, and a later task
            # re-types a script's name, a `sed` range (mini-SWE-agent queues: recall +0.03,
            # cost @0.1 -0.03; bench/README.md, "A finished task's masked shell turns")
            expired[item.id] = (item, None, True)
            oldest = max(oldest, 2 * after)
            continue
        digest = made is not None and (
            (made.method == "summary" and made.reason == "aged") or made.reason == MINIFIED_KEPT)
        # an output kept as first sent counts as the client sent it: leaving out its layout
        # and null members (`lines.minified`) does not exempt it from the batch
        size = (ctx.originals.get(item.id, item).tokens if made is not None
                and made.reason == MINIFIED_KEPT else item.tokens)
        if digest and size >= EXPIRED_MIN_TOKENS:
            expired[item.id] = (item, None, True)
            oldest = max(oldest, 2 * after if before else aged)
        elif (item.tokens >= EXPIRED_MIN_TOKENS and item.message_index < ctx.horizon
              and undecided(item, ctx.decisions) and item.rewritable
              and whole_block(item, opts) and item.id not in drawn):
            # a short content block sent whole (`whole_block_tokens`) joins a batch as a
            # digest would, never starts one: the prefix changes no more often than without
            expired[item.id] = (item, None, False)
        elif _old_turn(item, ctx, opts, digest, 0 if result else from_turns):
            # joins a batch, never starts one...
            expired[item.id] = (item, GIST, False)
            if result and "user" not in opts.kinds:
                # ... but a done task's result, never digested, starts one as a done
                # task's digest does
                oldest = max(oldest, 2 * after)
            elif ("user" not in opts.kinds and not digests()
                    and item.message_index < item.clock.task_start):
                # ... but where user turns are never digested (a text-tool agent's results,
                # `text_tools_aging`), a result's gist starts the batch its digest would
                # have: an agent whose own turns are one-line calls (MedAgentBench's
                # `GET http://…`) has no digest long enough to start one (bench/README.md,
                # "MedAgentBench queues: where a late call's characters go")
                oldest = max(oldest, aged)
    if oldest < 2 * after:
        return {}
    c = ctx.task_class.compaction
    if ctx.late_batch and c.repay_young_calls and ctx.calls <= c.repay_young_calls + 1:
        # A step weighed by the repay rule (`steps.unrepaid`, a large call in the young
        # window, `steps.young`) left out the batch (the session records it,
        # `SessionState.late_batch`); when a later step catches up (at the latest the
        # window's exit), the batch comes with it. Such a late batch masks what it would
        # have on time, when its oldest digest was twice `after` old: the digests at least
        # `oldest - after` old; younger ones wait for the next batch, as they would have.
        # A batch no step left out masks every digest due, however long since the last:
        # on a long session's tail, where steps come every few calls, thinning those too
        # cost the Toolathlon queues 0.5-0.6 points of cost @0.1 (bench/README.md, "Short
        # runs' cost @0.1, part five").
        least = oldest - after
        age = {item.id: item.age for item in items}
        expired = {k: v for k, v in expired.items() if age[k] >= least}
    return {k: Decision("compress", "mask", "aged", "mask", 1, arg=arg,
                        text=(_masked_commands(item, opts, ctx, typed) if commands else None)
                        or _masked_citations(item, arg, ctx))
            for k, (item, arg, commands) in expired.items()}


def _masked_citations(item: Item, arg: str | None, ctx: StageContext) -> str | None:
    """What an aged turn of the agent's prose whose mask is a plain placeholder is masked as
    when it cites files by line (`core/bun.lock:41`, `summarize.cited_lines`): its
    placeholder, then those citations. A coding agent's answer or plan names the lines it
    changed or will change, and a later turn re-types them (OpenCode's `AGENTS.md:76` in a
    sub-agent's brief, `README.md:5` in the plan a later step carries out); its digest
    kept them, its mask did not (bench/README.md, "Session 70, oc70"). None for any other
    item (a plain placeholder)."""
    if item.kind != "assistant" or arg is not None:
        return None
    cited = cited_lines(ctx.originals.get(item.id, item).text, ctx.known)
    if not cited:
        return None
    head = placeholder(item)
    return f"{head[:-1]}; cites: {' '.join(cited)}]"


def _masked_commands(item: Item, opts: CompressOptions, ctx: StageContext,
                     typed: Callable[[], dict[str, int]]) -> str | None:
    """What an aged turn of an agent whose tools are text (`text_tools_aging`: its results,
    the user turns, are not digested) is masked as when it ran shell commands in fenced
    blocks: its placeholder, then those commands as its digest kept them (a long block's
    first and last lines), then the notable values of its blocks' other lines (a heredoc
    script's) that an earlier turn's blocks carried too (`typed`: each value's first turn),
    as a value list (`summarize.shell_digest`). The prose goes, the commands stay, as an API
    agent's aged turn keeps its tool calls (bench/README.md, "Aged turns that made tool
    calls"); a finished task's turns too, masked together as the task ends. None (a plain
    placeholder) for any other item."""
    if item.kind != "assistant" or "user" in opts.kinds:
        return None
    blocks = shell_digest(item.text, ctx.known, ctx.originals.get(item.id, item).text,
                          lambda v: typed().get(v, item.message_index) < item.message_index)
    return f"{placeholder(item)}\n{blocks}" if blocks else None


def _typed(items: list[Item], ctx: StageContext) -> dict[str, int]:
    """Each value the agent's turns typed in a shell block's body, by its first turn."""
    first: dict[str, int] = {}
    for item in items:
        if item.kind == "assistant":
            for value in shell_values(ctx.originals.get(item.id, item).text):
                if item.message_index < first.get(value, item.message_index + 1):
                    first[value] = item.message_index
    return first


def _aged_digest(made: Decision | None) -> bool:
    """Whether `made` is an aged item's digest (one that can start a mask batch)."""
    return made is not None and made.method == "summary" and made.reason == "aged"


def _drawn_blocks(items: list[Item], ctx: StageContext, opts: CompressOptions) -> set[str]:
    """The short content blocks sent whole (`whole_block`) behind the horizon that the agent
    is drawing from (`drawing.py`): they stay out of the digests' mask batch until it stops,
    as a due output stays out of a step (a file of records the agent works through one row
    a call: the names it searches for next are in the rows it has not reached)."""
    if not opts.drawn_turns:
        return set()
    blocks = [item for item in items
              if item.kind == "tool_result" and item.message_index < ctx.horizon
              and item.age >= (opts.mask_after_turns or 0) and not item.pinned
              and undecided(item, ctx.decisions) and whole_block(item, opts)]
    if not blocks:
        return set()
    # every result since the first of them, read as sent: a value is credited to the latest
    first = blocks[0].message_index
    sources = [ctx.originals.get(item.id, item) for item in items
               if item.kind == "tool_result" and item.message_index >= first]
    return drawn_from(sources, ctx.messages, opts.drawn_turns, ctx.known) & {
        item.id for item in blocks}


def _queue_task(items: list[Item]) -> tuple[int, int, int] | None:
    """In a text-tool agent's queue of tasks (no tool call through the API, later tasks
    found by their statement, `Clock.queue_starts`): the current task's first message, the
    turns walked when it came, and those when the task before it came (0: the first task).
    None elsewhere. There every command's result is a user message, so "the latest user
    message" the queue rules below read was the latest result: the current task's items aged
    as any (masked 10 turns old in a batch an earlier task's digest started) and a finished
    task was never done with. With the task start: mini-SWE-agent queues' tune split 91.54 /
    98.08 / 79.22 -> 89.92 / 98.66 / 77.99 (late / recall / cost @0.1; bench/README.md, "A
    text-tool queue's current task ages from its start"). API agents (the gate of
    `fold.task_bound`) keep the latest user message: their results are tool messages."""
    clock = next((item.clock for item in items), None)
    if clock is None or clock.api_calls or not clock.queue_starts:
        return None
    start, turns = clock.queue_starts[-1]
    return start, turns, clock.queue_starts[-2][1] if len(clock.queue_starts) > 1 else 0


def _young_task(items: list[Item], opts: CompressOptions) -> int | None:
    """The index of the latest user message when the task it starts has lasted fewer than
    `mask_task_from_turns` turns: the items after it stay out of the digests' batches, as
    they would in a run of that task alone (None: no item is held back)."""
    least = opts.mask_task_from_turns
    if least is None:
        return None
    queued = _queue_task(items)
    if queued is not None:
        start, turns, _ = queued
        return start if items[0].clock.turns - turns < least else None
    latest = next((item for item in reversed(items) if item.kind == "user"), None)
    return None if latest is None or latest.age >= least else latest.message_index


def _current_task(items: list[Item], opts: CompressOptions) -> int | None:
    """The index of the latest user message of a session of 2+ (the current task's start)
    when `mask_current_turns` is set: the items after it join the digests' batches only
    once that many turns old (None: no such message, or no such rule)."""
    if opts.mask_current_turns is None:
        return None
    queued = _queue_task(items)
    if queued is not None:
        return queued[0]
    users = [item for item in items if item.kind == "user" and item.segment == 0]
    return users[-1].message_index if len(users) >= 2 else None


def _reading_task(items: list[Item], ctx: StageContext) -> int | None:
    """The index of the latest user message when the task it states is a reading task: no
    call of the agent since passes a text of more than one line (nothing written or
    edited), and one of the task's outputs is a file read with numbered lines
    (`summarize.numbered_listing`). Such a task ends in a prose report on what it read: a
    delegated sub-agent's final answer names the functions, types and files of every
    output of its task (Claude Code's sub-agent chats: 32 of 93 tune misses, 13 of 24 and
    19 of 29 values of two final reports, each read masked in a batch three calls before
    the report). Its outputs stay digests, out of the mask batches, while it lasts; the
    first call that writes ends it, and its digests join the next batch. None elsewhere."""
    latest = next((item for item in reversed(items)
                   if item.kind == "user" and item.segment == 0), None)
    if latest is None:
        return None
    start = latest.message_index
    if not any(item.kind == "tool_result" and item.message_index > start
               and numbered_listing(
                   ctx.originals.get(item.id, item).text[:LISTING_HEAD_CHARS].splitlines())
               for item in items):
        return None
    for msg in ctx.messages[start + 1:]:
        if msg.get("role") != "assistant":
            continue
        for call in msg.get("tool_calls") or ():
            args = (call.get("function") or {}).get("arguments")
            # a text of lines is `\n` inside the JSON string: parsed only when it has one
            if isinstance(args, str) and "\\n" in args and _written(args):
                return None
    return start


def _written(arguments: str) -> bool:
    """Whether a call's JSON arguments pass a string of more than one line."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return True
    stack = [parsed]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if "\n" in value.strip():
                return True
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _done_task(items: list[Item], opts: CompressOptions) -> int | None:
    """The index of the latest user message when the task before it (from the user
    message before) lasted at least `done_task_turns` turns: the items before it are done
    with and go to their last form together (None: no such message)."""
    least = opts.done_task_turns
    if least is None:
        return None
    queued = _queue_task(items)
    if queued is not None:
        start, turns, before = queued
        return start if turns - before >= least else None
    users = [item for item in items if item.kind == "user" and item.segment == 0]
    if len(users) < 2 or users[-2].age - users[-1].age < least:
        return None
    return users[-1].message_index


def _done_results(items: list[Item], opts: CompressOptions) -> int | None:
    """In a text-tool agent's queue of tasks (`_queue_task`), the start of the latest task
    that has lasted `done_results_turns` turns: the results of the tasks before it are done
    with (None: no such task, or no such rule). A queue of short tasks (2-10 calls) never
    meets `done_task_turns`, so its earlier tasks' results, most of a late call, went
    verbatim, and each step re-sent them; once the next task is under way the agent has
    moved on from them (smolagents queues' tune split, late / recall / cost @0.1: 40.50 /
    99.368 / 10.25 -> 77.26 / 99.419 / 43.93; bench/README.md, "smolagents queues: a done
    task's results")."""
    least = opts.done_results_turns
    if least is None or _queue_task(items) is None:
        return None
    clock = items[0].clock
    held = clock.turns - least
    return next((i for i, turns in reversed(clock.queue_starts) if turns <= held), None)


def _task_named(items: list[Item], ctx: StageContext) -> frozenset[str]:
    """The notable values (`summarize.notable`: ids, numbers, paths) the current task's
    statement names, in a text-tool agent's queue (`_queue_task`)."""
    queued = _queue_task(items)
    if queued is None:
        return frozenset()
    text = content_text(ctx.messages[queued[0]].get("content"))
    return frozenset(v for v in values(text) if notable(v))


def _answers_call(item: Item, ctx: StageContext) -> bool:
    """Whether a user turn is the result of a call the assistant turn right before it wrote
    in its text (`items.text_tool_result`): a task's statement or a harness's prompt for the
    next step is not a result, and is not done with as one. A JSON step's observation
    (`json_step_result`) is left out: with it, TapeAgents' queues' holdout recall fell
    99.261 -> 99.211 (bench/README.md, "smolagents queues: a done task's results")."""
    i = item.message_index
    before = ctx.messages[i - 1] if 0 < i <= len(ctx.messages) - 1 else None
    if before is None or before.get("role") != "assistant" or before.get("tool_calls"):
        return False
    said = content_text(before.get("content"))
    text = content_text(ctx.messages[i].get("content"))
    return bool(said) and text_tool_result(said, text)


def _holds(item: Item, named: frozenset[str], ctx: StageContext) -> bool:
    """Whether an earlier task's result, as the client sent it, holds a value the current
    task's statement names: the task is not done with it (a queue of patients' records
    whose later task names a patient an earlier one looked up: the agent copies the
    record's reference from that result)."""
    return bool(named) and not named.isdisjoint(values(ctx.originals.get(item.id, item).text))


def _old_turn(item: Item, ctx: StageContext, opts: CompressOptions, digest: bool,
              from_turns: int) -> bool:
    """A user turn `_expired_digests` masks with the digests: its text at least
    `mask_turns_min_tokens` long and longer than its placeholder, sent verbatim (behind the
    horizon) or as a digest, in a session of `from_turns` turns or more
    (`mask_turns_from_turns`, or the policy's `text_tools` on a text-tool agent's run of
    one task, `steps.text_tools_now`); also
    where `kinds` digests no user turn (a text-tool agent's results, `text_tools_aging`)."""
    least = opts.mask_turns_min_tokens
    if (
        least is None
        or item.kind not in TURN_KINDS
        or item.clock.turns < from_turns
        or item.goal
        or not item.rewritable
        or item.tokens - item.fixed_tokens < least
        or not placeholder_saves(item, TURN_MASK_MARGIN)
    ):
        return False
    return digest or (undecided(item, ctx.decisions) and item.message_index < ctx.horizon)


def _superseded_turns(due: list[Item], ctx: StageContext,
                      aged: Mapping[str, Decision]) -> dict[str, Decision]:
    """The due user turns (not the task) that later user turns re-send
    (`classify.superseded`), masked to their placeholder rather than digested: their digest
    kept the phase's head and tail lines and the words it named, seven times a placeholder,
    on every call to come (ChatDev runs, bench/README.md, "A harness that re-sends its
    state, part two")."""
    turns = [item for item in due if item.kind == "user" and item.id in aged
             and not item.goal and item.rewritable]
    if not turns:
        return {}
    by_index = {item.message_index: item for item in turns}
    later: set[str] = set()  # the lines of the user turns after the one read
    masked = {}
    for index in range(len(ctx.messages) - 1, min(by_index) - 1, -1):
        item = by_index.get(index)
        if item is not None and superseded(ctx.originals.get(item.id, item).text, later):
            masked[item.id] = Decision("compress", "mask", "aged", "mask", 1)
        if ctx.messages[index].get("role") == "user":
            later.update(long_lines(content_text(ctx.messages[index].get("content"))))
    return masked


def _restated_turns(items: list[Item], ctx: StageContext, opts: CompressOptions,
                    kept: frozenset[str]) -> dict[str, Decision]:
    """The agent's own turns behind the horizon that a later own turn restates
    (`classify.superseded` at `RESTATED_CHARS`), digested though `kinds` leaves its turns
    as written (`restated_turns`): a new plan written on the old one's template holds what
    the agent works from now; the old one's own lines are a finished task's (Magentic-One
    queues: earlier tasks' plans, 13% of a late call; bench/README.md, "Magentic-One's late
    gap to keep-2")."""
    turns = {item.message_index: item for item in items
             if item.kind in OWN_TURN_KINDS and item.message_index < ctx.horizon
             and item.id not in kept and undecided(item, ctx.decisions) and not item.pinned
             and not item.goal and item.rewritable and item.tokens >= opts.min_tokens}
    if not turns:
        return {}
    later: set[str] = set()  # the lines of the agent's turns after the one read
    aged = {}
    for index in range(len(ctx.messages) - 1, min(turns) - 1, -1):
        item = turns.get(index)
        if item is not None and superseded(ctx.originals.get(item.id, item).text, later,
                                           RESTATED_CHARS):
            aged[item.id] = Decision("compress", "compress", "aged", "summary", opts.level,
                                     PERIODS)
        if ctx.messages[index].get("role") == "assistant":
            later.update(long_lines(content_text(ctx.messages[index].get("content"))))
    return aged


def _code_section(item: Item, ctx: StageContext, opts: CompressOptions) -> bool:
    """In a re-sending session's aging (`superseded_turns`), a prompt's section that opens
    inside a fenced code block (`segments.in_code_block`): the parser split the code at a
    comment line, and the code is what the agent's replies copy verbatim. It is not
    digested, as a prompt's sections never were before they aged (ChatDev queues'
    holdout recall 99.841 -> 99.395 with every section digested; bench/README.md,
    "Fresh-prompt queues, part three"); its prompt's markdown sections still are."""
    if not opts.superseded_turns or item.kind != "knowledge":
        return False
    msg = ctx.messages[item.message_index]
    text = content_text(msg.get("content"))
    spans = find_documents(text, sections=msg.get("role") == "user")
    return item.segment < len(spans) and in_code_block(text, spans[item.segment].start)


def _keep_minified(
    items: list[Item], decisions: dict[str, Decision], minified: Mapping[str, Decision],
    ctx: StageContext,
) -> list[Item]:
    """Aged outputs sent minified (`lines.minified`) whose digest would save less than
    `KEEP_MINIFIED` of that text stay as they were sent: the change would cost the step a
    re-send of everything after it for next to nothing. They are masked with the digests."""
    out = list(items)
    for pos, item in enumerate(items):
        was = minified.get(item.id)
        made = decisions.get(item.id)
        if was is None or made is None or made.method != "summary" or was.text is None:
            continue
        if len(item.text) < (1 - KEEP_MINIFIED) * len(was.text):
            continue
        kept = replace(was, reason=MINIFIED_KEPT)
        decisions[item.id] = ctx.decisions[item.id] = kept
        original = ctx.originals.get(item.id, item)
        again = apply_decision(original, kept, ctx.counter, ctx.encoding, ctx.known,
                               ctx.caches.rewritten)
        if again is not None:
            out[pos] = again if again.score == item.score else replace(again, score=item.score)
    return out


def _drawn(items: list[Item], due: list[Item], ctx: StageContext,
           opts: CompressOptions) -> set[str]:
    """The due outputs the agent is still drawing from (`drawing.py`): left as they are by
    this step. The sources read are the due ones and the undecided ones since the horizon:
    what the turns since the last step added, and what earlier steps kept."""
    if not opts.drawn_turns or not due:
        return set()
    # read as the client sent them: a newer output whose repeated lines went out as markers
    # (`lines.py`) still is where the agent read them
    sources = [ctx.originals.get(item.id, item) for item in (*due, *(
        item for item in items if item.message_index >= ctx.horizon
        and item.kind == "tool_result" and undecided(item, ctx.decisions)))]
    eager = {item.id for item in sources if source_block(item, opts)}
    return drawn_from(sources, ctx.messages, opts.drawn_turns, ctx.known, eager,
                      later_task_outputs(sources))


async def compress_items(items: list[Item], budget: Budget, ctx: StageContext) -> StageResult:
    opts = ctx.task_class.stages.compress or CompressOptions()
    ages = ctx.task_class.compaction.ages
    due = [
        item for item in items
        if ages and undecided(item, ctx.decisions) and item.message_index < ctx.horizon
        and ages_out(item, opts) and not _code_section(item, ctx, opts)
    ]
    kept = _drawn(items, due, ctx, opts)
    aged = {
        item.id: Decision("compress", "compress", "aged", "summary", opts.level)
        for item in due
        if item.id not in kept
    }
    if opts.superseded_turns:
        aged.update(_superseded_turns(due, ctx, aged))
    if opts.restated_turns:
        aged.update(_restated_turns(items, ctx, opts, frozenset(kept)))
    minified = {i: was for i in aged if (was := ctx.decisions.get(i)) is not None
                and was.reason == MINIFIED_JSON}
    aged.update(_expired_digests(items, ctx, opts, frozenset(aged)))
    result = decide(items, aged, ctx)
    items, decisions = result.items, dict(result.decisions)
    if minified:
        items = _keep_minified(items, decisions, minified, ctx)
    low = ctx.task_class.compaction.low_water
    caps: list[tuple[str, Callable[[Item], bool], int]] = [
        ("knowledge_cap", lambda i: i.kind == "knowledge", budget.split.knowledge),
        ("history_cap", lambda i: i.kind not in ("system", "knowledge"), budget.split.history),
    ]
    for reason, part, cap in caps:
        aim = cap if ctx.first_call else int(cap * low)
        items, made = cut(items, ctx, reason, aim, part, above=cap)
        decisions.update(made)
    if ctx.target is not None:
        items, made = cut(
            items, ctx, "over_budget", ctx.target, offset=ctx.fixed_tokens, arguments=True
        )
        decisions.update(made)
    return StageResult(items, decisions)
