"""When a session takes a compaction step: hysteresis between high- and low-water marks.

Between steps a session's calls only re-apply remembered decisions, so consecutive calls
share their rendered prefix (the provider's prompt cache keeps hitting); a step moves the
horizon of age-based compaction forward far enough to last a while.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from itertools import accumulate
from math import ceil
from operator import attrgetter
from typing import Any

from gateway.context.agents import RUN_MARKS
from gateway.context.drawing import drawn_from, later_task_outputs
from gateway.context.items import Clock, Item, content_text
from gateway.context.lines import STILL_AGES
from gateway.context.session import Decision, SessionState
from gateway.context.stale import stale_rule
from gateway.context.summarize import envelope
from gateway.context.taskclass import Compaction, CompressOptions, TaskClass, TextTools


def stale_tokens(
    items: list[Item],
    state: SessionState,
    cls: TaskClass,
    memo: MutableMapping[tuple[str, str], bool],
) -> int:
    """Tokens of task-statement blocks (a demonstration, generic instructions) that the class's
    stale rules would now cut: reclaimable like aged turns, so they count toward a step."""
    rules = cls.stale_rules
    return sum(
        item.tokens
        for item in items
        if item.goal
        and not item.pinned
        and item.id not in state.decisions
        and stale_rule(item, rules, memo) is not None
    )


def ages_out(item: Item, opts: CompressOptions) -> bool:
    """Whether compress's aging digests this item once it is behind the horizon."""
    return (not item.pinned and not item.goal and item.kind in opts.kinds
            and item.tokens >= opts.min_tokens and item.rewritable
            and not whole_block(item, opts) and not queue_statement(item))


def queue_statement(item: Item) -> bool:
    """Whether `item` is of the current task's statement in a text-tool agent's queue
    (`Clock.text_queue`: the message its latest task opened with). It is not digested while
    that task lasts, as the first task's statement (`Item.goal`) never is: a later task's
    statement is split into sections (its issue's code blocks, `### Steps to Reproduce`)
    that a step digested a few turns in, while the agent still copied their names. Once
    the next task opens, it ages as any earlier task's message. mini-SWE-agent queues, late /
    recall / cost @0.1, tune 89.86 / 98.78 / 78.10 -> 89.77 / 98.88 / 78.14, holdout 89.56 /
    98.71 / 77.53 -> 89.43 / 98.82 / 77.56 (bench/README.md, "A text-tool queue's current
    task keeps its statement"). So is any user message of the current task (of a run: of
    the session) that opens as that statement did (`Clock.template_turns`): a harness that
    sends each node of its agent its own step schema, opening with the statement's
    template, re-sends it with every task (bench/README.md, "The ninth agent kind, part
    two")."""
    clock = item.clock
    if clock.api_calls or item.message_index not in clock.template_turns:
        return False
    return item.message_index >= (clock.queue_starts[-1][0] if clock.queue_starts else 0)


def whole_block(item: Item, opts: CompressOptions) -> bool:
    """A short tool result that is an MCP content block carrying text, not JSON (a file, a
    page, an e-mail; `whole_block_tokens`), in a session of fewer than `whole_block_turns`
    turns: never digested, masked with the digests' batches (`compress._expired_digests`).
    A JSON payload (records, acknowledgements) is left to its digest: kept whole too, it
    bought the Toolathlon runs 0.0-0.5 point more recall for 0.2-1.6 more cost @0.1.
    A longer one that is a document the task names (`source_block`) is kept so while it is
    younger than `drawn_turns` turns: after that, only while the agent copies from it; so is
    one up to `source_block_tokens` a queue's later task names past `whole_block_turns`."""
    if not (item.kind == "tool_result" and item.tokens > 0):
        return False
    if (item.tokens > opts.whole_block_tokens or item.clock.turns >= opts.whole_block_turns
        ) and not (item.age < opts.drawn_turns and source_block(item, opts)):
        return False
    return _text_block(item)


def source_block(item: Item, opts: CompressOptions) -> bool:
    """A tool result that is an MCP content block of text longer than `whole_block_tokens`
    and at most `source_block_tokens`, answering a call whose arguments name a file the task
    statement names (`Clock.named`): the document the task works from (a biography to
    transcribe into a page, a template to fill), copied from piece by piece over the calls
    after the step that would digest it. It is kept whole for its first `drawn_turns` turns
    (`whole_block`), and after that while one of the last `drawn_turns` tool-calling turns
    drew from it (`drawing.drawn_from`'s `eager`), where another output needs two."""
    clock = item.clock
    if not (item.kind == "tool_result" and item.message_index in clock.named
            and item.tokens <= opts.source_block_tokens):
        return False
    if clock.turns < opts.whole_block_turns:
        young = item.tokens > opts.whole_block_tokens  # a shorter one is a `whole_block`
    else:  # a queue's later task: a document it names, while that task is young
        young = (item.tokens > 0 and item.message_index > clock.task_start >= 0
                 and clock.turns - clock.task_turns < opts.whole_block_turns)
    return young and _text_block(item)


def _text_block(item: Item) -> bool:
    payload = envelope(item.text)
    return payload is not None and payload.lstrip()[:1] not in ("{", "[")


def undecided(item: Item, decisions: Mapping[str, Decision]) -> bool:
    """No decision yet, or only its repeated lines cut or its JSON minified on arrival (it
    still ages)."""
    made = decisions.get(item.id)
    return made is None or made.reason in STILL_AGES


def open_tokens(items: Iterable[Item]) -> int:
    """Tokens of the exchange the model has not answered yet (pinned, not the task, not a
    system message): what a step taken now leaves verbatim behind it (`horizon_after`)."""
    return sum(i.tokens for i in items if i.pinned and not i.goal and i.kind != "system")


def lagging_tokens(
    items: Iterable[Item], state: SessionState, cls: TaskClass,
    messages: Sequence[Mapping[str, Any]] = (), known: frozenset[str] = frozenset(),
    call_tokens: int = 0,
) -> int:
    """Tokens behind the horizon that no step has aged yet: the exchange still unanswered
    (pinned) when the last step ran waits verbatim in the cached prefix until the next one.
    Like a stale block, a large one can repay an early step (`stale_cut_repays`): an 8k
    file view the agent has read waits, cached, 4 calls for the next step; a step now
    re-sends the little after it. `items`: all of a call's, or any superset of those that
    can lag (the incremental path's candidates, `prefix.py`). An output a step left as it
    is because the agent was drawing from it (`drawing.py`) does not lag while the latest
    calls (`messages`) still draw from it: it would only hasten a step that keeps it.
    `call_tokens`: all of the call's tokens (a young session's large call, below)."""
    opts = cls.stages.compress
    if opts is None or not cls.compaction.ages:
        return 0
    waiting = [item for item in items
               if undecided(item, state.decisions) and ages_out(item, opts)]
    behind = [item for item in waiting if item.message_index < state.horizon]
    c = cls.compaction
    if (behind and messages and call_tokens > c.early_max_tokens
            and young(state.calls + 1, c, on_first_task(
                behind, through=runs_of_one(state.calls + 1, c, state.agent_runs)))):
        # While a large call's step is weighed too (`unrepaid`), what a step left out did
        # not repay over the calls estimated to come: it does not hasten the next step on
        # its own, only the exchange that was open at the last one does. Counted, a left-out
        # multi-thousand-token output moved a long session's next step a few calls earlier,
        # onto outputs its next calls still read (Toolathlon queues; bench/README.md,
        # "Short runs' cost @0.1 against masking at a matching recall"). A small call's
        # steps were weighed before the young window (`unrepaid`), its left-out outputs
        # lagging: there they still do (counted as not lagging, tau2 retail gpt-4.1 runs'
        # holdout recall fell 100 -> 99.87%, tau-bench runs' cost @0.1 7.2 -> 6.7%;
        # bench/README.md, "Short runs' cost @0.1: a young session's large calls").
        # a client that went back (redid a step) may send fewer messages than the horizon
        opened = next((i for i in range(min(state.horizon, len(messages)) - 1, -1, -1)
                       if messages[i].get("role") == "assistant"), 0)
        behind = [item for item in behind if item.message_index >= opened]
    if not behind:
        return 0
    eager = {item.id for item in waiting if source_block(item, opts)}
    kept = (drawn_from(waiting, messages, opts.drawn_turns, known, eager,
                       later_task_outputs(waiting)) if messages else set())
    return sum(item.tokens for item in behind if item.id not in kept)


def step_horizon(
    messages: list[Mapping[str, Any]],
    items: list[Item],
    state: SessionState,
    cls: TaskClass,
    stale: int = 0,
    forced: bool = False,
) -> int:
    """Where age-based compaction reaches after this call (unchanged when no step is due).

    Verbatim = turns at or after the horizon. A step is due when they pass a high-water mark
    (in turns or in tokens of compactable items, `stale` tokens of the task statement
    included); it moves the horizon forward as far as needed to bring them to the low-water
    marks. `forced`: the call takes a step anyway (over the budget's high-water mark), so
    the instability budget does not hold back an aging step up to its latest turn."""
    if not cls.compaction.ages:
        return state.horizon
    # Only what is at or after the horizon counts (`horizon_after`): a late step call reads
    # the verbatim turns, not its whole history (`items` run in message order).
    start = state.horizon
    turns = [i for i in range(start, len(messages)) if messages[i].get("role") == "assistant"]
    tokens_from: dict[int, int] = {}
    for item in items[bisect_left(items, start, key=attrgetter("message_index")):]:
        if not (item.pinned or item.goal or item.kind == "system"):
            tokens_from[item.message_index] = tokens_from.get(item.message_index, 0) + item.tokens
    return horizon_after(turns, tokens_from, len(messages), state, cls, stale, forced,
                         call_tokens=sum(item.tokens for item in items),
                         unanswered=open_tokens(items),
                         first_task=on_first_task(items, through=runs_of_one(
                             state.calls + 1, cls.compaction, state.agent_runs)),
                         credit=takes_credit(items),
                         task_wait=waits_for_task(state, cls, items[0].clock if items else None,
                                                  tokens_from, turns))


def takes_credit(items: Iterable[Item] = (), clock: Clock | None = None) -> bool:
    """Whether a young session may step on credit (`on_credit`): not one whose client sends
    its calls' results back as system messages (`Clock.system_results`). Such a client
    rebuilds the system messages around them on every call (a date, what its memory
    recalled): measured on one such agent, 43% of its calls break its own cached prefix and
    its runs end after 2-6 calls, so a step the credit hastens onto a call the client kept
    is re-sent at full price and not repaid (runs, tune, late / cost @0.1: 10.9 / -1.4%
    with it, 1.6 / +0.5% without; bench/README.md, "Results sent back as system
    messages")."""
    clock = clock if clock is not None else next((item.clock for item in items), None)
    return clock is None or not clock.system_results


def calls_until_affordable(steps: int, calls: int, share: float) -> int | None:
    """How many calls after this one the instability budget next allows a step on (0: this
    one; None: never): the first w with `steps + 1 <= share * (calls + 1 + w)`."""
    if share <= 0:
        return None
    return max(0, ceil((steps + 1) / share - (calls + 1) - 1e-9))


def stale_cut_repays(stale: int, resend: int, steps: int, calls: int, c: Compaction) -> bool:
    """Whether cutting `stale` tokens of the task statement now, ahead of the instability
    budget, pays: a step re-sends the `resend` tokens after the cut at full price instead
    of the cached price, while the cut saves the cached price of `stale` on every call until
    the budget would have allowed the step. (Taken early, the step counts against the
    budget: the session's next step comes as much later, not an extra prefix change.)"""
    wait = calls_until_affordable(steps, calls, c.max_step_share)
    if not wait:
        return wait == 0
    if steps > c.max_step_share * calls:  # one step ahead of the budget at most
        return False
    return c.cached_price * stale * wait >= (1 - c.cached_price) * resend


def young(calls: int, c: Compaction, first_task: bool = True) -> bool:
    """Whether a session of `calls` calls (this one included) has its large calls' steps
    weighed by `unrepaid` too (`repay_young_calls`), while on its first task (`first_task`,
    `on_first_task`): a session the user gave a later task is a long one (a queue of
    tasks), its calls to come not its calls so far (bench/README.md, "Short runs' cost
    @0.1, part seven")."""
    return bool(c.repay_calls and calls <= c.repay_young_calls and first_task)


def on_first_task(items: Iterable[Item] = (), clock: Clock | None = None,
                  through: bool = False) -> bool:
    """Whether the session of `items` (or of their layout's `clock`) is on its first task,
    its agent having made a tool call (`Clock.api_calls`, `Clock.text_calls`): the layout
    found no later task (`Clock.task_start`: a user message after the agent answered, the
    boundary the masking rules of a queue's tasks read). A session whose agent has made no
    call the layout knows is never on a first task here, so never weighed young (`young`):
    a text-tool agent's outputs come as user messages, which the layout tells from a new
    task only when they answer the call its turn wrote (`text_tool_result`); counted a first
    task with no such answer, a whole queue passed for one (acr queue: cost @0.1 -8.1 · -5.2
    points weighed; bench/README.md, "Short runs' cost @0.1, part nine"). One answered call
    in prose is enough, as one through the API is: the next user message that answers none
    ends the first task (mini-SWE-agent runs' cost @0.1 up; bench/README.md, "The newest
    corpora's short runs…", session 48). An agent that writes its steps as JSON
    (`Clock.json_steps`) gets its harness's instructions for a step (a plan, a list of
    facts) before its first call: only a user message after that call ends its first task
    (`Clock.called_start`; TapeAgents' GAIA runs, cost @0.1 holdout −19.5 -> +0.2,
    bench/README.md, "The ninth agent kind, part two")."""
    clock = clock or next((item.clock for item in items), None)
    if clock is None or not (clock.api_calls or clock.text_calls):
        return False
    if through and run_of_one(clock):
        return True
    return (clock.called_start if clock.json_steps else clock.task_start) < 0


def runs_of_one(calls: int, c: Compaction, runs: tuple[int, ...] | None) -> bool:
    """Whether a text-tool run stays on its first task through its harness's replies
    (`on_first_task`'s `through`): the agent's record (`runs`, once it has started more than
    `repay_ahead_runs` sessions before this one) says fewer than `repay_agent_quantile` of
    those ran past the record's last mark: runs of one task each, not a queue of tasks. A
    harness's reply to a malformed turn ("Please always provide EXACTLY ONE action…", a
    timeout notice) answers no call, so it ended the first task (`Clock.task_start`), and
    from it on the run's large calls stepped unweighed (`young`), each step re-sending the
    run's history for the few calls it had left (mini-SWE-agent runs: 17% of steps 17+
    turns deep, 7.9 points of cost @0.1; bench/README.md, "Session 67, step67"). Off with no
    record and on an agent whose sessions nearly all run long: a queue's first task is such
    a run, but its later tasks are many calls to come (applied there too, mini-SWE-agent and
    DA-Code queues lost recall, HyperAgent queues' holdout cost @0.1)."""
    if not c.repay_ahead_runs or runs is None:
        return False
    before = runs[0] - 1  # the current session is counted from its first call
    long = runs[-1] - (calls >= RUN_MARKS[-1])
    return before > c.repay_ahead_runs and long < c.repay_agent_quantile * before


def text_tools_now(cls: TaskClass, items: Iterable[Item]) -> TextTools | None:
    """The agent policy's `text_tools` settings where they apply (None elsewhere): an agent
    whose tools are text (its class's `kinds` digest no user turn, `engine.text_tools_aging`)
    on a run of one task (`one_run`), whose results, never digested, each step re-sent at
    full price. A queue's tasks age as the policy does: with these settings, later batches
    cost the MedAgentBench queues 0.4-0.7 point of cost @0.1; gated on `on_first_task`
    instead, the mini-SWE-agent runs kept a quarter of the gain at less recall (a harness's
    format reminder ends that first task; bench/README.md, "mini-SWE-agent runs' cost @0.1:
    a text-tool agent's old results masked with the digests")."""
    opts = cls.stages.compress
    if opts is None or "user" in opts.kinds or not one_run(items):
        return None
    return cls.text_tools


def one_run(items: Iterable[Item]) -> bool:
    """Whether the session of `items` is a text-tool agent's run of one task: it has
    answered a call written in prose (`Clock.text_calls`), none through the API, most of the
    user messages after its first answer answered its calls (`Clock.text_results`; not an
    agent that writes a call now and then, AutoCodeRover, whose later turns are its
    harness's prose), and no later task opened as its first did (`Clock.queue_starts`; a
    harness's reply to a malformed turn, which ends `on_first_task`'s first task, is none)."""
    return run_of_one(next((item.clock for item in items), None))


def run_of_one(clock: Clock | None) -> bool:
    """`one_run` of a layout's clock."""
    return (clock is not None and clock.text_calls and not clock.api_calls
            and 2 * clock.text_results > clock.replies and not clock.queue_starts)


# A harness's count of the calls its agent has left, in the turn it answers with ("You have
# 4 steps left", "3 turns remaining"): the calls this one included that the session can
# still make (`calls_left`).
_CALLS_LEFT = re.compile(
    r"\b(\d+)\s+(?:more\s+)?(?:steps?|turns?|calls?|attempts?|iterations?|rounds?|actions?)"
    r"\s+(?:left|remaining)\b", re.IGNORECASE)


def calls_left(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """The calls the session can still make, this one included, as its harness counts
    them in its latest user message (`_CALLS_LEFT`; the smallest count named there), None
    when it names none. A step's rewrites repay only over those calls (`unrepaid`)."""
    latest = next((m for m in reversed(messages) if m.get("role") == "user"), None)
    if latest is None:
        return None
    counts = [int(n) for n in _CALLS_LEFT.findall(content_text(latest.get("content")))]
    return min(counts) if counts else None


# A maximum of the calls a session may make, as its system prompt or first user turn states
# it ("The maximum number of steps you can take is 20", "at most 30 turns", "You have 5
# chances to interact"): the limit's number (`stated_left`). Not a count per turn or in
# parallel ("up to 5 tool calls per turn"), nor one of what is left (`calls_left`).
_CALL_NOUN = (r"(?:(?:tool|function|api|model)\s+)?(?:steps?|turns?|calls?|attempts?|iterations?"
              r"|rounds?|actions?|chances?|interactions?)")
_STATED_MAX = re.compile(
    rf"\bmax(?:imum)?\s+(?:number\s+of\s+)?{_CALL_NOUN}\b[^.\n\d]{{0,40}}?\b(?:is|of|:)\s*(\d+)\b"
    rf"|\b{_CALL_NOUN}\s+limit\s+(?:is\s+|of\s+|:\s*)(\d+)\b"
    rf"|\b(?:at\s+most|up\s+to|no\s+more\s+than|a\s+maximum\s+of|a\s+limit\s+of|you\s+have)"
    rf"\s+(\d+)\s+{_CALL_NOUN}\b(?!\s+(?:left|remaining|per|each|in\s+parallel|at\s+(?:once"
    rf"|a\s+time)))", re.IGNORECASE)


def stated_left(messages: Sequence[Mapping[str, Any]]) -> int | None:
    """The calls the session can still make, this one included, by the maximum its system
    prompt or first user turn states (`_STATED_MAX`; the smallest stated there) less the
    assistant turns made so far; None when none is stated, or when the session has made
    that many already (it outlived the limit: a queue of tasks each stating it, a count
    of something else). A session known to be that short weighs a step's rewrites over
    its age, not at least `repay_calls` (`unrepaid`)."""
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    stating = [m for m in messages if m.get("role") == "system"]
    stating += [first_user] if first_user is not None else []
    stated = [int(n) for m in stating for match in _STATED_MAX.findall(
        content_text(m.get("content"))) for n in match if n]
    if not stated:
        return None
    left = min(stated) - sum(1 for m in messages if m.get("role") == "assistant")
    return left if left > 0 else None


def system_stated(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a system message states the session's limit (`_STATED_MAX`): the harness's
    for the whole session, where one in the first user turn may be its first task's only (a
    queue's tasks each state their own; `unrepaid` weighs by `limited_calls` only here:
    applied to a queue's first task, it moved the later tasks' steps, DA-Code queues'
    holdout recall −0.045; bench/README.md, "Session 74, dac74")."""
    return any(_STATED_MAX.search(content_text(m.get("content")))
               for m in messages if m.get("role") == "system")


def limited_calls(calls: int, left: int) -> int:
    """The calls to come (this one included) a session of `calls` calls can expect when its
    stated limit leaves it `left` (`stated_left`, this one included), by the age's own prior
    (`ahead_calls`: a session that has made n calls runs past x with a chance of n / x) cut
    at the limit: the mean of its length L given it ends by the limit, n ln(limit / n) /
    (1 − n / limit), less the calls made. A step's gain grows with the calls to come, so
    their mean is the one to weigh by. At least one."""
    limit = calls + left - 1
    if left <= 1:
        return 1
    mean = calls * math.log(limit / calls) / (1 - calls / limit)
    return max(1, round(mean - calls + 1))


def tail_mask_repays(tokens: int, masked: int, left: int, cached_price: float) -> bool:
    """Whether masking an output as it stops being the newest (`engine._tail_masks`) repays
    over the `left` calls the harness counts (this one included, `calls_left`): the rewrite
    lands at the tail of what the last call sent, so it re-sends only its own `masked`
    tokens at full price (what follows it is new to this call anyway) instead of the
    output's `tokens` at the cached price, and saves the cached price of the difference on
    each later call. Never on the call the harness counts as the last (`left` 1): there it
    saves a few tokens on that call alone, and changes the cached prefix all the same (a
    call not prefix stable; MINT runs, 44 such calls of 3,078: 253 tokens saved in all;
    bench/README.md, "Prefix stable at the edge")."""
    if left <= 1:
        return False
    gain = cached_price * (tokens - masked) * (left - 1)
    return gain >= masked - cached_price * tokens


def agent_left(calls: int, c: Compaction, runs: tuple[int, ...] | None) -> int | None:
    """The calls a session of `calls` calls (this one included) has left by its agent's
    record (`runs`: its sessions that reached each of `agents.RUN_MARKS` calls, this one
    included, `agents.AgentRunStore`): of the agent's sessions that reached this one's age,
    the `repay_agent_quantile` share ended by the mark that fewer than the rest reached;
    the calls up to that mark's last are left, at least this one. None until the agent has
    started `repay_agent_runs` sessions before this one, or when that share of them ran as
    long as the fixed estimate (`repay_calls`) or past the last mark (a long-running agent
    keeps it). Reflexion's HotpotQA runs end after 2-6 calls: weighed over at least 20
    calls to come, 59 of their 99 aging steps landed on a run's last call and cost more
    than they saved (bench/README.md, "A fifteenth agent kind ... (gen57)"). A share, not
    the longest session: one outlier set the longest for good (bench/README.md, "... a
    share of the agent's sessions ...")."""
    if not c.repay_agent_runs or runs is None or runs[0] <= c.repay_agent_runs:
        return None
    at = bisect_right(RUN_MARKS, calls) - 1  # the sessions that reached this age, about
    beyond = (1 - c.repay_agent_quantile) * runs[at]
    ends = next((RUN_MARKS[k] - 1 for k in range(at + 1, len(RUN_MARKS))
                 if runs[k] <= beyond), None)
    if ends is None or ends >= c.repay_calls:
        return None
    return max(1, ends - calls + 1)


def unrepaid(
    before: list[Item], after: list[Item], new_from: int, calls: int, c: Compaction,
    left: int | None = None, stated: int | None = None, runs: tuple[int, ...] | None = None,
    ahead: bool = False, limited: bool = False,
) -> set[int]:
    """The old messages whose rewrite by this step does not repay: those before its first
    change that does.

    A step whose first change is message i re-sends at full price everything the last call
    sent from i on (R), and its rewrites from i on save the cached price of the tokens they
    take (T) on every call still to come (W): the net gain is `cached_price × T × W −
    (1 − cached_price) × R`. The first change kept is the one of the largest net gain (the
    earliest of equal ones), none when no first change gains. W is estimated from the
    session's age: the calls so far (this one included), at least `repay_calls`.
    Weighed only on a small call (at most `early_max_tokens`, the young-session credit's
    bound): weighed on large calls too, leaving a long session's early rewrites out moved
    its next steps' cuts onto newer messages (tau2 retail queues: recall 99.1 -> 98.8% tune,
    98.97 -> 98.8% holdout; bench/README.md, "Short runs' cost…, on small calls"). A large
    call is weighed too while the session is young (at most `repay_young_calls` calls so
    far): runs whose tool outputs are thousands of tokens pass `early_max_tokens` on their
    first calls and end after 10-30, so a step's re-send there often outweighs what it takes
    over the calls left (Toolathlon runs, bench/README.md "Short runs' cost with large tool
    outputs").
    A harness that counts the calls its agent has left (`left`, `calls_left`) bounds the
    estimate: a step on a run's last calls does not repay what it re-sends, however its age
    estimates the calls to come (MINT's code-acting runs of at most 5 calls, its harness
    counting the steps left: cost @0.1 below no gateway's, weighed over 10 calls;
    bench/README.md, "Short code-acting runs: a step weighed over the calls the harness
    says are left").
    A maximum its prompt states up front (`stated`, `stated_left`: the limit less the turns
    made) says the session is short: the calls to come are then estimated from its age
    alone, at most that many; stated in a system message (`limited`, `system_stated`), at
    most the mean the age's prior leaves below the limit (`limited_calls`), and its large
    calls are weighed too (a data-science agent's runs of 3-20 calls, "The
    maximum number of steps you can take is 20", stepped on a quarter of their calls
    weighed over at least 20: prefix stable 75.2 -> 82.6%, cost @0.1 6.9 -> 8.6%, tune;
    bench/README.md, "Short runs with a stated step limit"; weighed over the limit's calls
    left, a step ten calls in counted on ten more where such runs have about five, and a
    20-call run's last call stepped unweighed: cost @0.1 8.60 · 7.83 -> 9.63 · 9.08%,
    tune · holdout, "Session 74, dac74").
    An agent whose sessions mostly end young (`runs`, `agent_left`) has a step taken only
    if some of it repays over the calls a share (`repay_agent_quantile`) of its sessions that
    reached this one's age still had left; a step that does is weighed as above (bounded by
    that estimate, the step's early rewrites left out came back in a later step, one more
    prefix change: Moatless runs, tune, cost @0.1 11.41 -> 11.11%, prefix stable 79.8 ->
    79.6%).
    A step the share does not allow yet (`ahead`, `ahead_of_share`) is weighed over
    `repay_ahead_share` of the session's age at most (`ahead_calls`).
    `new_from`: the first message index the last call did not send (billed in full anyway)."""
    if not c.repay_calls or (not young(calls, c, on_first_task(
                                 before, through=runs_of_one(calls, c, runs)))
                             and not (limited and stated is not None)
                             and sum(item.tokens for item in before) > c.early_max_tokens):
        return set()
    was = {item.id: item for item in before}
    changed: dict[int, int] = {}  # message index -> tokens the step takes from it
    sent: dict[int, int] = {}  # message index -> tokens sent after the step
    for item in after:
        sent[item.message_index] = sent.get(item.message_index, 0) + item.tokens
        old = was.get(item.id)
        if old is not None and old.text != item.text and item.message_index < new_from:
            changed[item.message_index] = (changed.get(item.message_index, 0)
                                           + old.tokens - item.tokens)
    if not changed:
        return set()
    calls_to_come = (max(calls, c.repay_calls) if stated is None
                     else min(calls, limited_calls(calls, stated) if limited else stated))
    if left is not None:
        calls_to_come = min(calls_to_come, left)
    if ahead and c.repay_ahead_share:
        calls_to_come = min(calls_to_come, ahead_calls(calls, c))
    order = sorted(changed)
    first = _first_repaid(order, changed, sent, new_from, calls_to_come, c)
    bound = agent_left(calls, c, runs)
    if first < len(order) and bound is not None and bound < calls_to_come and (
            _first_repaid(order, changed, sent, new_from, bound, c) == len(order)):
        return set(order)  # nothing of the step repays over the calls the agent has left
    return set(order[:first])


def ahead_of_share(state: SessionState, c: Compaction, items: Iterable[Item]) -> bool:
    """Whether a step now is one the instability budget does not allow yet and not the
    session's first: the young-session credit's later step (`on_credit`), or a stale
    block's early cut (`stale_cut_repays`), a session's second step hastened from the
    call the share allows it on. Its gain over taking it then is what it saves on the
    calls until then, so a run that ends first (Moatless runs: half end within seven calls,
    their second step on credit at the sixth) pays its re-send for a call or two of saving
    (`ahead_calls`). Only on the session's first task (`on_first_task` of `items`, as
    `young`): the age of a session the user gave a later task says nothing of what that
    task has left, and a queue's later tasks run long (tau-bench airline queues weighed so
    on every task: tune recall 99.458 -> 99.343, cost @0.1 -0.20; bench/README.md, "A step
    ahead of the share weighed over half the session's age"). Not for an agent whose record
    says its runs go on (`long_running`)."""
    return (state.steps >= 1 and bool(c.repay_ahead_share)
            and state.steps + 1 > c.max_step_share * (state.calls + state.stable_calls)
            and on_first_task(items, through=runs_of_one(state.calls + 1, c, state.agent_runs))
            and not long_running(state.calls + 1, c, state.agent_runs))


def ahead_calls(calls: int, c: Compaction) -> int:
    """The calls a step ahead of the share (`ahead_of_share`) is weighed over in a session of
    `calls` calls (this one included): `repay_ahead_share` of them, at least one. By its age
    alone a session that has made n calls makes r·n more with a chance of 1 / (1 + r) (the
    age is a uniform draw of its length): at half its age, two times in three. Weighed over
    the age itself (r = 1), the Moatless runs' second steps stayed (prefix stable 79.8 ·
    79.4%); over half, 81.0 · 80.4% (bench/README.md, "A step ahead of the share weighed
    over half the session's age")."""
    return max(1, round(c.repay_ahead_share * calls))


def long_running(calls: int, c: Compaction, runs: tuple[int, ...] | None) -> bool:
    """Whether the agent's record (`runs`, once it has started more than `repay_ahead_runs`
    sessions) says half its sessions that reached this age ran on to `repay_calls` calls
    or past the record's last mark (`agent_left` at the median finds no end sooner). The
    age is a guess made for want of a record, and this one says it is a bad one: the
    premise of weighing a step ahead by half the age (the session ends soon) does not hold
    for an agent whose runs last dozens of calls. mini-SWE-agent's runs (13-145 calls, one
    agent for all 500) weighed so lost recall and cost @0.1 (tune 99.447 -> 99.439, holdout
    17.082 -> 16.896); with this, from its 6th run on, as before the rule (bench/README.md,
    "Moatless runs' prefix stable: a step ahead of the share, unless the agent's record
    says its runs go on"). A few runs are enough: it only turns the age's guess off."""
    if not c.repay_ahead_runs or runs is None or runs[0] <= c.repay_ahead_runs:
        return False
    median = c.model_copy(update={"repay_agent_runs": c.repay_ahead_runs,
                                  "repay_agent_quantile": 0.5})
    return agent_left(calls, median, runs) is None


def _first_repaid(order: list[int], changed: Mapping[int, int], sent: Mapping[int, int],
                  new_from: int, calls_to_come: int, c: Compaction) -> int:
    """The position in `order` of the first change a step keeps (`unrepaid`; len(order):
    none): the net gain of a step whose first change is order[k] counts every rewrite from
    it on saving on each call to come, and everything the last call sent from it on re-sent."""
    best, first = 0.0, len(order)
    taken = resend = 0
    for k in range(len(order) - 1, -1, -1):
        index = order[k]
        upto = order[k + 1] if k + 1 < len(order) else new_from
        taken += changed[index]
        resend += sum(t for i, t in sent.items() if index <= i < upto)
        net = c.cached_price * taken * calls_to_come - (1 - c.cached_price) * resend
        if net >= best:
            best, first = net, k
    return first


def waits_for_task(state: SessionState, cls: TaskClass, clock: Clock | None,
                   tokens_from: Mapping[int, int], turns: Sequence[int]) -> bool:
    """Whether a step waits for the current task's end: in a text-tool agent's queue of tasks
    (`Clock.text_queue`), a later task younger than `queue_step_turns` turns takes one step,
    once it has lasted `done_results_turns` (the task before is then done with, its results
    gisted: `compress._done_results`), and no other. A step taken mid-task re-sends at full
    price everything after its first change, the current task's results verbatim (a 40k
    page in one smolagents queue); the step at the next task's start re-sends the finished
    task as gists (bench/README.md, "smolagents queues' cost @0.1: a later task's one
    step"). A task that took no step (it ended before it lasted `done_results_turns`, or the
    share held its step back) leaves it to the next task's first call: waited for, a queue of
    one-turn tasks never stepped (MedAgentBench queues, tune late 94.19 -> 89.04%). Only
    where the session grows a turn a call (`clock.turns`, at least the calls before this
    one): a harness that sends each call as a fresh prompt, the agent's steps inside it,
    adds calls, not turns, so its tasks never aged past the wait (HyperAgent queues, tune
    late 66.53 -> 51.27%). Nor for an agent that writes its steps as JSON
    (`Clock.json_steps`), whose results a done task does not gist (`compress._answers_call`):
    its task's step has nothing to wait for (TapeAgents queues, holdout recall 99.261 ->
    99.211%). Nor for a client that sends its calls' results back as system messages
    (`Clock.system_results`): it rebuilds them around every call and breaks its own cached
    prefix (`takes_credit`), so a task's steps protect no prefix (AutoGPT queues, holdout
    cost @0.1 13.73 -> 12.69%). Only while the results since the task before's start, still
    verbatim (`tokens_from`, less the agent's `turns` and the tasks' statements), reach
    `queue_wait_tokens`: a task of small results (3-5 turns of 100-token tracebacks)
    re-sends little at a step in its middle, and held back to the next task the step gisted
    them (`_done_results`) where the share's step had masked them, the fold of earlier tasks
    keeping the gists (MINT queues, tune late / recall / cost @0.1 92.30 / 99.903 / 73.89 ->
    91.38 / 99.885 / 73.23 without this bound)."""
    c, opts = cls.compaction, cls.stages.compress
    if (c.queue_step_turns is None or opts is None or opts.done_results_turns is None
            or clock is None or not clock.text_queue() or clock.json_steps
            or clock.system_results or clock.turns < state.calls):
        return False
    start, at = clock.queue_starts[-1]
    age = clock.turns - at
    if age >= c.queue_step_turns:
        return False
    before = clock.queue_starts[-2][0] if len(clock.queue_starts) > 1 else 0
    if _results_since(tokens_from, turns, before, (i for i, _ in clock.queue_starts)) < (
            c.queue_wait_tokens):
        return False
    if state.horizon > start:  # the task has taken its step
        return True
    if age >= opts.done_results_turns:
        return False
    return state.horizon > before


def _results_since(tokens_from: Mapping[int, int], turns: Sequence[int], start: int,
                   statements: Iterable[int]) -> int:
    """The verbatim tokens (`tokens_from`: at or after the horizon) of the messages after
    `start` that are neither the agent's turns nor a task's statement: the results."""
    skip = {*turns, *statements}
    return sum(t for i, t in tokens_from.items() if i > start and i not in skip)


def on_credit(state: SessionState, c: Compaction, call_tokens: int) -> bool:
    """Whether a young, small session may step now on its credit: fewer than `early_calls`
    calls so far (this one included), a call of at most `early_max_tokens` (a step re-sends
    it at full price: cheap while it is small), and one step ahead of the share at most. A
    session that lasts takes no more steps in all than the share allows: once the credit
    lapses, its next step waits until the share has caught up."""
    return (state.calls + 1 < c.early_calls and 0 < call_tokens <= c.early_max_tokens
            and state.steps + 1 <= c.max_step_share * (state.calls + 1) + 1)


def horizon_after(
    turns: list[int],
    tokens_from: dict[int, int],
    n_messages: int,
    state: SessionState,
    cls: TaskClass,
    stale: int = 0,
    forced: bool = False,
    call_tokens: int = 0,
    unanswered: int = 0,
    first_task: bool = True,
    credit: bool = True,
    task_wait: bool = False,
) -> int:
    """`step_horizon` from the assistant turns and the compactable tokens per message; only
    those at or after `state.horizon` count, so a caller may pass just those. `unanswered`:
    the tokens of the exchange the model has not answered yet (`open_tokens`);
    `first_task`: the session is on its first task (`on_first_task`); `credit`: a young
    session may step on credit (`takes_credit`); `task_wait`: the step waits for the
    current task's end (`waits_for_task`), unless the call is over the budget."""
    c = cls.compaction
    if not c.ages or (task_wait and not forced):
        return state.horizon

    turns = sorted(turns)
    indexes = sorted(tokens_from)  # tokens from each index on: suffix sums, bisected
    suffix = [*accumulate((tokens_from[i] for i in reversed(indexes)), initial=0)][::-1]

    def verbatim(start: int) -> tuple[int, int]:
        return len(turns) - bisect_left(turns, start), suffix[bisect_left(indexes, start)]

    n_turns, n_tokens = verbatim(state.horizon)
    resend = n_tokens
    n_tokens += stale
    over_turns = c.verbatim_turns_high is not None and n_turns > c.verbatim_turns_high
    over_tokens = c.verbatim_tokens_high is not None and n_tokens > c.verbatim_tokens_high
    # Turns completed since the last step (the open one does not count): steps are spaced.
    since = sum(1 for i in turns if i > state.horizon)
    # An instability budget: a step changes the prefix, so a session may take one on at
    # most `max_step_share` of its calls before this one (the first had no prefix to keep:
    # prefix stability, as the yardstick counts it, is over the calls after it, and 0.2
    # keeps it at 80% or more; counted with this call, web's holdout half fell to 79.97%).
    # A session recognised as aging late counts the calls it made before (`stable_calls`).
    # A stale block's early cut (`stale_cut_repays`) still weighs its wait from this call
    # on: counted from the call before, SWE-agent's recall fell under 99%. A call over the
    # budget (`forced`) changes the prefix whatever: it ages what is due up to its latest
    # turn, rather than leave the budget ladder to drop old exchanges whose values a digest
    # keeps; the latest turn stays the ladder's to cut last.
    affordable = state.steps + 1 <= c.max_step_share * (state.calls + state.stable_calls)
    # A large stale block need not wait for the budget; a session's first call has no
    # cached prefix to weigh (the budget ladder cuts it just enough). Nor does a young,
    # small session's credit (`on_credit`) act on it, or on a call over the budget: the
    # latest turn stays the ladder's.
    if stale and not affordable and state.calls:
        affordable = stale_cut_repays(stale, resend, state.steps, state.calls, c)
    if (not (affordable or forced) and state.calls and credit
            and on_credit(state, c, call_tokens)):
        affordable = True  # ahead of the share; its first step also once most of the call
        # is verbatim behind the latest exchange
        over_tokens = over_tokens or (not state.steps and c.early_share > 0
                                      and n_tokens >= c.early_share * call_tokens)
    due = since >= c.min_step_turns and (affordable or forced) and (over_turns or over_tokens)
    # A step cannot digest the exchange still unanswered (pinned): it waits verbatim, in the
    # cached prefix, until the next step the budget allows. When it outweighs all the step
    # would take now, the step waits one call for it instead (no extra prefix change; a
    # call over the budget never waits): on intercode, a 4k-token query result re-sent on
    # every later call of its session.
    if due and not forced and unanswered > n_tokens:
        return state.horizon
    if not due:
        return state.horizon
    latest = max(turns[-1] if turns else 0, state.horizon)
    # A young session's large call, its step weighed by the repay rule (`unrepaid`), leaves
    # the latest answer verbatim, as a forced step off the share does: rewriting it is
    # free of re-send (it came with this call, `new_from`), so the rule never weighs it,
    # and the next calls quote it. Digested, a step the rule's left-out rewrites no longer
    # hastened (`lagging_tokens`) came a call later, onto the answer the agent then
    # quoted (tau2 retail-mini runs: tune recall 99.54 -> 99.43% with
    # `repay_young_calls: 80`, 99.54% with this; bench/README.md, "A young session's
    # large calls weighed, part two").
    weighed = (not forced and call_tokens > c.early_max_tokens
               and young(state.calls + 1, c, first_task))
    reach = n_messages if affordable and not weighed else latest
    for start in [*turns, n_messages]:
        if start <= state.horizon:
            continue
        if start >= reach:
            return reach
        n_turns, n_tokens = verbatim(start)
        if (c.verbatim_turns_high is None or n_turns <= c.verbatim_turns_low) and (
            c.verbatim_tokens_high is None or n_tokens <= c.verbatim_tokens_low
        ):
            return start
    return reach
