"""When a session takes a compaction step (`steps.py`): the instability budget, a stale
task-statement block cut ahead of it when the cut repays its full-price re-send, and a step
that waits a call for the exchange it would leave open."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import pytest

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import parse_request
from gateway.context.session import Decision, MemorySessionStore, SessionState
from gateway.context.steps import (
    calls_until_affordable,
    horizon_after,
    lagging_tokens,
    open_tokens,
    stale_cut_repays,
    unrepaid,
)
from gateway.context.taskclass import Compaction, TaskClass, task_class
from gateway.context.tokens import TokenCounter
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.sessions import drops_add_up
from tests.context.test_whole_digest import with_share
from tests.sessions import sql_session

from .conftest import with_compaction, without_credit, without_repay, without_young

SHARE_5 = Compaction(verbatim_tokens_high=1000, verbatim_tokens_low=0, max_step_share=0.2)


@pytest.mark.parametrize(
    ("steps", "calls", "share", "wait"),
    [
        (0, 4, 0.2, 0),  # the fifth call: 1 <= 0.2 * 5
        (0, 2, 0.2, 2),
        (0, 0, 0.2, 4),
        (1, 4, 0.2, 5),  # the second step on the tenth call
        (2, 3, 0.5, 2),
        (0, 7, 1.0, 0),
        (3, 3, 0.0, None),
    ],
)
def test_calls_until_affordable(steps: int, calls: int, share: float, wait: int | None) -> None:
    assert calls_until_affordable(steps, calls, share) == wait


def test_a_large_stale_block_repays_its_resend_before_the_budget_allows_a_step() -> None:
    # 2 calls early: 0.1 * 8000 * 2 = 1600 saved against 0.9 * 600 = 540 re-sent
    assert stale_cut_repays(8000, 600, 0, 2, SHARE_5)
    # a small block (the INSTRUCTIONS alone) does not: 0.1 * 700 * 2 = 140 < 540
    assert not stale_cut_repays(700, 600, 0, 2, SHARE_5)
    # the price of a cached token decides: at 0.5 the re-send is as dear as what is saved
    dear = SHARE_5.model_copy(update={"cached_price": 0.5})
    assert stale_cut_repays(700, 600, 0, 2, dear)
    assert not stale_cut_repays(200, 600, 0, 2, dear)


def test_a_stale_cut_runs_at_most_one_step_ahead_of_the_budget() -> None:
    assert stale_cut_repays(8000, 600, 0, 2, SHARE_5)
    # one step taken early (on call 2): the next waits for the budget however large
    assert not stale_cut_repays(80000, 10, 1, 3, SHARE_5)
    assert stale_cut_repays(0, 10**6, 1, 9, SHARE_5)  # the budget allows it: no weighing


def test_horizon_moves_early_for_a_stale_block_and_not_otherwise() -> None:
    cls = TaskClass(name="c", compaction=SHARE_5)
    turns = [2, 4]  # two assistant turns, each followed by a small tool output
    tokens_from = {2: 100, 3: 200, 4: 100, 5: 200}
    state = SessionState(horizon=0, calls=2, steps=0)
    # over the high-water mark by the stale block alone, 2 calls before the budget's step
    assert horizon_after(turns, tokens_from, 6, state, cls, stale=8000) == 6
    assert horizon_after(turns, tokens_from, 6, state, cls, stale=900) == 0
    # a session's first call: no cached prefix to weigh, no early step
    first = SessionState(horizon=0, calls=0, steps=0)
    assert horizon_after(turns, tokens_from, 6, first, cls, stale=80000) == 0
    # without stale tokens the budget holds the step back whatever the verbatim tokens
    assert horizon_after(turns, {2: 900, 3: 900}, 6, state, cls) == 0


def test_the_exchange_left_open_at_a_step_lags_until_the_next() -> None:
    view = "\n".join(f"{k}: value_{k} = compute({k})" for k in range(300))
    msgs = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "goal: fix parser.py"},
        {"role": "assistant", "content": "```\nopen parser.py\n```"},
        {"role": "user", "content": "short output of the first command, long enough " * 4},
        {"role": "assistant", "content": "```\nopen big.py\n```"},
        {"role": "user", "content": view},  # the latest output when the step ran
        {"role": "assistant", "content": "```\npython big.py\n```"},
        {"role": "user", "content": "ok"},
    ]
    items = parse_request({"messages": msgs}, TokenCounter(), "o200k_base").items
    cls = task_class("c", {"compaction": {"verbatim_tokens_high": 1000},
                           "stages": {"compress": {"kinds": ["user"], "min_tokens": 25}}})
    by_message = {i.message_index: i for i in items}
    decided = {by_message[3].id: Decision("compress", "compress", "aged", "summary", 3)}
    state = SessionState(decisions=decided, horizon=6, calls=5, steps=1)
    lag = lagging_tokens(items, state, cls)
    assert lag == by_message[5].tokens > 1000  # the view, not the output decided before it
    assert lagging_tokens(items, SessionState(decisions=decided, horizon=4), cls) == 0
    assert lagging_tokens(items, state, TaskClass(name="still")) == 0  # a class that never ages
    # whatever the order and however many other items come with them (the incremental path
    # passes its candidates, in the order their pins lapsed)
    assert lagging_tokens([by_message[5], *reversed(items)], state, cls) == 2 * lag
    undecided = SessionState(horizon=6, calls=5, steps=1)
    assert lagging_tokens(items, undecided, cls) == lag + by_message[3].tokens
    # the lagging view repays a step now, a call after the budget's last one (1 of 5 calls)
    turns = [2, 4, 6]
    assert horizon_after(turns, {6: 8}, 8, state, cls, stale=lag) == 8
    assert horizon_after(turns, {6: 8}, 8, state, cls, stale=0) == 6



def test_a_young_sessions_left_out_output_does_not_hasten_the_next_step() -> None:
    """While a large call's step is weighed too (`repay_young_calls`), an output a step
    left out (undecided, before the exchange that was open at the step) does not lag: only
    that exchange does; on a small call it still lags. Counted, a left-out output of
    thousands of tokens took a long session's next step a few calls earlier, onto outputs
    its next calls still read."""
    view = "\n".join(f"{k}: value_{k} = compute({k})" for k in range(300))

    def call(k: int, command: str) -> dict[str, Any]:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{k}", "type": "function",
             "function": {"name": "shell", "arguments": json.dumps({"command": command})}}]}

    msgs = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "goal: fix parser.py"},
        call(0, "open parser.py"),
        {"role": "tool", "tool_call_id": "c0", "content": view},  # left out: undecided
        call(1, "open big.py"),
        {"role": "tool", "tool_call_id": "c1",
         "content": "the output open at the step, long enough to age " * 4},
        call(2, "python big.py"),
        {"role": "tool", "tool_call_id": "c2", "content": "ok"},
    ]
    items = parse_request({"messages": msgs}, TokenCounter(), "o200k_base").items
    by_message = {i.message_index: i for i in items}
    young = {"verbatim_tokens_high": 1000, "repay_calls": 20, "repay_young_calls": 40,
             "early_max_tokens": 8000}
    stages = {"compress": {"kinds": ["tool_result"], "min_tokens": 25}}
    cls = task_class("c", {"compaction": young, "stages": stages})
    state = SessionState(horizon=6, calls=5, steps=1)
    large = 8001  # the call's tokens: over early_max_tokens, weighed only while young
    assert lagging_tokens(items, state, cls, msgs, call_tokens=large) == by_message[5].tokens
    # past the young calls, with the rule off, or without the messages: both lag, as before
    both = by_message[3].tokens + by_message[5].tokens
    assert lagging_tokens(items, SessionState(horizon=6, calls=40, steps=8), cls, msgs,
                          call_tokens=large) == both
    off = task_class("o", {"compaction": {**young, "repay_young_calls": 0}, "stages": stages})
    assert lagging_tokens(items, state, off, msgs, call_tokens=large) == both
    assert lagging_tokens(items, state, cls, call_tokens=large) == both
    # a small call (its steps weighed before the young window, `unrepaid`): both lag, as
    # before it (counted as not lagging, tau2 retail and tau-bench runs lost recall and cost)
    small = sum(i.tokens for i in items)
    assert small <= 8000
    assert lagging_tokens(items, state, cls, msgs, call_tokens=small) == both
    # so the left-out view no longer repays a step ahead of the budget on its own
    turns = [2, 4, 6]
    lag = lagging_tokens(items, state, cls, msgs, call_tokens=large)
    assert horizon_after(turns, {6: 8}, 8, state, cls, stale=lag) == 6
    assert horizon_after(turns, {6: 8}, 8, state, cls, stale=both) == 8
    # a client that went back (redid a step, Moatless Tools) sends fewer messages than the
    # session's horizon (left at message 10 by its longer history): the exchange open at the
    # step is looked for within what it sent, its latest (an IndexError before: the gateway
    # forwarded the call unmanaged); the outputs before it do not lag, as above
    went_back = SessionState(horizon=10, calls=5, steps=1)
    assert lagging_tokens(items, went_back, cls, msgs, call_tokens=large) == 0

def test_a_young_sessions_weighed_step_leaves_the_latest_answer_verbatim() -> None:
    """A step on a young session's large call (weighed by the repay rule) stops before the
    latest assistant turn: rewriting the answer that came with this call costs no re-send,
    so the rule never weighs it, and the next calls quote it (tau2 retail-mini runs lost
    recall where a delayed step digested it). A small call, a session past its young
    calls, the rule off, or a call over the budget reach as far as before."""
    young = SHARE_5.model_copy(update={"repay_calls": 20, "repay_young_calls": 40,
                                       "early_max_tokens": 8000})
    cls = TaskClass(name="y", compaction=young)
    turns = [2, 4]  # the latest answer (4) and the user's turn after it (5)
    tokens_from = {2: 300, 3: 400, 4: 300, 5: 400}
    state = SessionState(horizon=0, calls=5, steps=0)  # the share allows a step
    assert horizon_after(turns, tokens_from, 6, state, cls, call_tokens=9000) == 4
    assert horizon_after(turns, tokens_from, 6, state, cls, call_tokens=3000) == 6
    old = SessionState(horizon=0, calls=45, steps=8)
    assert horizon_after(turns, tokens_from, 6, old, cls, call_tokens=9000) == 6
    off = TaskClass(name="o", compaction=young.model_copy(update={"repay_young_calls": 0}))
    assert horizon_after(turns, tokens_from, 6, state, off, call_tokens=9000) == 6
    assert horizon_after(turns, tokens_from, 6, state, cls, call_tokens=9000,
                         forced=True) == 6
    # nothing before the latest answer left to age: no step
    assert horizon_after(turns, tokens_from, 6, SessionState(horizon=4, calls=5, steps=0),
                         cls, call_tokens=9000) == 4


CREDIT = SHARE_5.model_copy(
    update={"early_calls": 12, "early_max_tokens": 8000, "early_share": 0.6}
)


def test_a_young_small_session_takes_its_first_step_on_credit() -> None:
    cls = TaskClass(name="c", compaction=CREDIT)
    share_only = TaskClass(name="s", compaction=SHARE_5)
    turns = [2, 4]  # the exchange at 4 is the latest: a step ages up to it
    third = SessionState(horizon=0, calls=2, steps=0)  # the share allows a step on the 5th
    over = {2: 300, 3: 900}  # past the 1000-token mark
    assert horizon_after(turns, over, 6, third, cls, call_tokens=3000) == 4
    assert horizon_after(turns, over, 6, third, share_only, call_tokens=3000) == 0
    # a large call (a web page per call) waits for the share: its re-send is dear
    assert horizon_after(turns, over, 6, third, cls, call_tokens=9000) == 0
    # under the mark, the first step once 60% of the call is verbatim behind the exchange
    small = {2: 100, 3: 400}
    assert horizon_after(turns, small, 6, third, cls, call_tokens=800) == 4
    assert horizon_after(turns, small, 6, third, cls, call_tokens=900) == 0
    # a later step on credit needs the mark itself
    later = SessionState(horizon=2, calls=5, steps=1)
    assert horizon_after(turns, {3: 100, 4: 400}, 6, later, cls, call_tokens=600) == 2


def test_the_credit_is_one_step_and_lapses() -> None:
    cls = TaskClass(name="c", compaction=CREDIT)
    turns = [2, 4]
    over = {2: 300, 3: 900}
    # one step ahead of the share at most: a step on the 3rd call, none on the 4th
    assert horizon_after(turns, over, 6, SessionState(calls=3, steps=1), cls,
                         call_tokens=3000) == 0
    # the 5th call: the share allows one, the credit a second
    assert horizon_after(turns, over, 6, SessionState(calls=4, steps=1), cls,
                         call_tokens=3000) == 4
    # from the 12th call on the session waits for the share (3 steps on 12 calls: no)
    assert horizon_after(turns, over, 6, SessionState(calls=10, steps=2), cls,
                         call_tokens=3000) == 4
    assert horizon_after(turns, over, 6, SessionState(calls=11, steps=3), cls,
                         call_tokens=3000) == 0


def _steps_taken(cls: TaskClass, n_calls: int, call_tokens: int) -> list[int]:
    """The calls a session that is always past the mark steps on."""
    state, taken = SessionState(), []
    for k in range(n_calls):  # system, task, then k exchanges (the latest one open)
        turns = list(range(2, 2 * k + 1, 2))
        tokens_from = {i: 2000 for i in range(max(state.horizon, 2), 2 * k)}
        horizon = horizon_after(turns, tokens_from, 2 * k + 2, state, cls,
                                call_tokens=call_tokens)
        if horizon != state.horizon:
            state.horizon, state.steps = horizon, state.steps + 1
            taken.append(k)
        state.calls += 1
    return taken


def test_a_session_that_lasts_takes_no_more_steps_than_the_share() -> None:
    credit = TaskClass(name="c", compaction=CREDIT)
    share = TaskClass(name="s", compaction=SHARE_5)
    assert _steps_taken(share, 50, 3000) == [5, 10, 15, 20, 25, 30, 35, 40, 45]
    # the first step on the 3rd call; repaid after the credit lapses (none on the 15th)
    assert _steps_taken(credit, 50, 3000) == [2, 4, 9, 20, 25, 30, 35, 40, 45]
    assert _steps_taken(credit, 50, 9000) == _steps_taken(share, 50, 9000)  # large calls


def test_a_step_waits_a_call_for_the_exchange_it_would_leave_open() -> None:
    cls = TaskClass(name="c", compaction=SHARE_5)
    turns = [2, 4]  # the exchange at 4 is the latest, unanswered (pinned): not in tokens_from
    verbatim = {2: 300, 3: 900}  # 1200 compactable tokens: past the 1000-token mark
    state = SessionState(horizon=0, calls=5, steps=0)  # the share allows a step
    assert horizon_after(turns, verbatim, 6, state, cls, unanswered=1000) == 4  # steps
    # the open exchange outweighs all the step would take now: it waits for it
    assert horizon_after(turns, verbatim, 6, state, cls, unanswered=4000) == 0
    # stale task-statement blocks count with what the step would take
    assert horizon_after(turns, verbatim, 6, state, cls, unanswered=4000, stale=3000) == 4
    # a call over the budget never waits
    assert horizon_after(turns, verbatim, 6, state, cls, unanswered=4000, forced=True) == 4
    # the next call: the exchange answered, the step takes it too
    later = SessionState(horizon=0, calls=6, steps=0)
    answered = {**verbatim, 4: 20, 5: 4000}
    assert horizon_after([2, 4, 6], answered, 8, later, cls, unanswered=100) == 6


def test_open_tokens_are_the_unanswered_exchange_only() -> None:
    msgs = [
        {"role": "system", "content": "You query a database."},
        {"role": "user", "content": "How many cities?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "q", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "answered output " * 20},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "b", "type": "function", "function": {"name": "q", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "b", "content": "open output " * 50},
    ]
    items = parse_request({"messages": msgs}, TokenCounter(), "o200k_base").items
    assert open_tokens(items) == sum(i.tokens for i in items if i.message_index >= 4)


TOOLS = [{"type": "function",
          "function": {"name": "execute_sql", "parameters": {"type": "object"}}}]


def _sql_session(outputs: list[str]) -> list[dict[str, Any]]:
    return sql_session("Which language do most people speak in each country?", outputs)


async def test_a_large_output_arriving_on_a_step_call_is_digested_a_call_later(
    settings: Settings, embedder: Any
) -> None:
    """The share allows the session's first step on its 6th call, which ends on a large
    query result: a step then would leave it verbatim until the 11th call. It waits a call
    and takes it: the later calls send its digest, with no more prefix changes."""
    engine = ContextEngine(without_credit(settings), None, Metrics(),
                           DropLog("/dev/null", "none", None), embedder,
                           sessions=MemorySessionStore())
    small = [f"table t{k}: " + ", ".join(f"col_{k}_{i} int" for i in range(40))
             for k in range(5)]
    large = "\n".join(f"('C{i:03d}', 'Country {i}', 'Language {i % 17}', {i % 97}.5)"
                      for i in range(400))
    after = [f"count {k}: {1000 + k}" for k in range(4)]
    messages = _sql_session([*small, large, *after])
    session, previous, changes = uuid.uuid4().hex, None, 0
    for end in range(4, len(messages) + 1, 2):  # each call ends on a tool result
        fitted = await engine.fit({"messages": messages[:end], "tools": TOOLS},
                                  CallContext("t-steps", uuid.uuid4().hex,
                                              {"x-ctxgate-session-id": session}))
        forwarded = fitted.body["messages"]
        if previous is not None and forwarded[: len(previous)] != previous:
            changes += 1
        previous = list(forwarded)
        assert drops_add_up(fitted)
    assert changes == 1  # one step, as without the wait
    sent = {m.get("tool_call_id"): m["content"] for m in previous or [] if m["role"] == "tool"}
    assert len(sent["c5"]) < len(large) / 4  # the large result digested
    assert sent["c9"] == after[-1]  # the latest verbatim


REPAY = SHARE_5.model_copy(update={"repay_calls": 20, "early_max_tokens": 8000})


def _rewritten(items: list[Any], taken: dict[int, int]) -> list[Any]:
    """`items` with the messages in `taken` rewritten `taken[i]` tokens shorter."""
    return [replace(i, text=i.text[: len(i.text) // 2], tokens=i.tokens - taken[i.message_index])
            if i.message_index in taken else i for i in items]


def _exchanges(api: bool = False) -> list[Any]:
    """`api`: the first answer calls a tool through the API, message 3 its output (a
    session weighed young, `steps.on_first_task`)."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You help customers."},
                                  {"role": "user", "content": "my order " * 50}]
    for k in range(4):
        msgs += [{"role": "assistant", "content": f"looking up {k} " * 5},
                 {"role": "user" if k == 0 else "assistant", "content": f"reply {k} " * 100}]
    if api:
        msgs[2]["tool_calls"] = [{"id": "c0", "type": "function",
                                  "function": {"name": "lookup", "arguments": "{}"}}]
        msgs[3] = {"role": "tool", "tool_call_id": "c0", "content": msgs[3]["content"]}
    return parse_request({"messages": msgs}, TokenCounter(), "o200k_base").items


def test_a_step_leaves_out_the_early_rewrites_that_do_not_repay_their_resend() -> None:
    items = _exchanges()
    sent = {i.message_index: i.tokens for i in items}
    resend_from_3 = sum(t for i, t in sent.items() if 3 <= i < 9)
    # a small gist of message 3 would re-send all from it; message 7's digest re-sends less
    after = _rewritten(items, {3: 10, 7: sent[7] // 2})
    left = unrepaid(items, after, 9, 2, REPAY)
    assert left == {3}
    assert 0.9 * resend_from_3 > 0.1 * 10 * 20  # the arithmetic the rule follows
    # the calls to come are the calls so far when more than repay_calls: a long session
    # keeps the early rewrite (0.1 * 10 * 1000 > 0.9 * what it re-sends)
    assert unrepaid(items, after, 9, 1000, REPAY) == set()
    # a step none of whose rewrites repays takes none
    assert unrepaid(items, _rewritten(items, {3: 1, 7: 1}), 9, 2, REPAY) == {3, 7}
    # a rewrite of a message the last call did not send re-sends nothing: it stays
    assert unrepaid(items, _rewritten(items, {3: 10, 8: 1}), 8, 2, REPAY) == {3}
    # contiguous small rewrites are weighed together, not each against its own message
    many = _rewritten(items, {3: 10, 4: 10, 5: 10, 6: 10, 7: 10, 8: 10})
    assert unrepaid(items, many, 9, 2, REPAY) == {3, 4, 5, 6, 7}
    assert unrepaid(items, after, 9, 2, SHARE_5) == set()  # repay_calls 0: the rule is off
    # a call larger than early_max_tokens is not weighed: every rewrite stays
    total = sum(sent.values())
    assert unrepaid(items, after, 9, 2, REPAY.model_copy(update={"early_max_tokens": total})) == {3}
    assert unrepaid(items, after, 9, 2,
                    REPAY.model_copy(update={"early_max_tokens": total - 1})) == set()


def test_a_young_session_weighs_a_large_calls_step_too() -> None:
    """A young session's large call (tool outputs of thousands of tokens: a run of 10-30
    calls over MCP servers) is weighed while the session has had at most
    `repay_young_calls` calls; past that only small calls are. Only a session whose agent
    calls tools through the API is weighed so (a text-tool agent's queue passes for one
    first task, `steps.on_first_task`)."""
    items = _exchanges(api=True)
    sent = {i.message_index: i.tokens for i in items}
    after = _rewritten(items, {3: 10, 7: sent[7] // 2})
    large = REPAY.model_copy(update={"early_max_tokens": sum(sent.values()) - 1,
                                     "repay_young_calls": 40})
    assert unrepaid(items, after, 9, 2, large) == {3}
    # past the young calls a large call is not weighed, whatever its rewrites
    assert unrepaid(items, _rewritten(items, {3: 1, 7: 1}), 9, 41, large) == set()
    assert unrepaid(items, _rewritten(items, {3: 1, 7: 1}), 9, 40, large) == {3, 7}
    assert unrepaid(items, after, 9, 2, large.model_copy(update={"repay_young_calls": 0})) == set()
    prose = _exchanges()  # the same exchanges, the agent's tools in prose
    prose_large = large.model_copy(
        update={"early_max_tokens": sum(i.tokens for i in prose) - 1})
    assert unrepaid(prose, _rewritten(prose, {3: 10, 7: sent[7] // 2}), 9, 2,
                    prose_large) == set()


async def _replay(settings: Settings, embedder: Any, messages: list[dict[str, Any]],
                  tools: list[dict[str, Any]] = TOOLS) -> tuple[int, list[list[dict[str, Any]]]]:
    """Prefix changes and the forwarded messages of each call of a session."""
    engine = ContextEngine(settings, None, Metrics(), DropLog("/dev/null", "none", None),
                           embedder, sessions=MemorySessionStore())
    session, previous, changes, sent = uuid.uuid4().hex, None, 0, []
    for end in range(4, len(messages) + 1, 2):  # each call ends on a tool result
        fitted = await engine.fit({"messages": messages[:end], "tools": tools},
                                  CallContext("t-repay", uuid.uuid4().hex,
                                              {"x-ctxgate-session-id": session}))
        forwarded = fitted.body["messages"]
        if previous is not None and forwarded[: len(previous)] != previous:
            changes += 1
        previous = list(forwarded)
        sent.append(previous)
        assert drops_add_up(fitted)
    return changes, sent


async def test_a_short_session_does_not_resend_itself_for_small_digests(
    settings: Settings, embedder: Any
) -> None:
    """Eight calls of small records, all values (the shape of a short support run): a
    digest keeps most of a record, so each early step would re-send the whole session for
    a few tokens a call. The shipped rule leaves those rewrites out and the forwarded prefix
    never changes; without it (repay_calls 0) the young session steps twice."""
    outputs = [json.dumps({"order_id": f"#W{k}{k:05d}", "item": f"item_{k}_{k}", "price": 100 + k})
               + "\n" + json.dumps([{"id": f"#P{k}{k:04d}{j}", "sku": f"S{k}{k}{j:03d}"}
                                    for j in range(6)]) for k in range(8)]
    messages = _sql_session(outputs)
    # these digests keep most of each record: the shipped `whole_digest_share` sends them as
    # they are (no step at all), so it is off here, where the repay rule is what is tested
    settings = with_share(settings, None)
    changes, _ = await _replay(settings, embedder, messages)
    assert changes == 0
    before, _ = await _replay(without_repay(settings), embedder, messages)
    assert before == 2


async def test_a_young_session_with_a_large_prompt_does_not_resend_itself_for_small_digests(
    settings: Settings, embedder: Any
) -> None:
    """Records behind a system prompt of ~10k tokens (a long policy, or large tool outputs:
    every call passes `early_max_tokens`), a customer agent (class `agent`). While the
    session is young (`repay_young_calls`) its large calls are weighed too, and a step
    whose digests take a few tokens is left out; weighed on small calls only
    (`repay_young_calls: 0`), the session re-sends everything after the prompt."""
    outputs = [json.dumps({"order_id": f"#W{k}{k:05d}", "item": f"item_{k}_{k}", "price": 100 + k})
               + "\n" + json.dumps([{"id": f"#P{k}{k:04d}{j}", "sku": f"S{k}{k}{j:03d}"}
                                    for j in range(6)]) for k in range(8)]
    messages = sql_session("Which of my orders can still be exchanged?", outputs,
                           '{{"order_id": "#W{k}"}}')
    messages[0]["content"] = "You help customers with their orders.\n" + "\n".join(
        f"Policy {i}: an order in state s{i} may be "
        + ", ".join(f"action_{i}_{j}" for j in range(12)) for i in range(120))
    for m in messages:
        for call in m.get("tool_calls") or []:
            call["function"]["name"] = "get_order"
    tools = [{"type": "function",
              "function": {"name": "get_order", "parameters": {"type": "object"}}}]
    settings = with_share(settings, None)  # as in the test above: the repay rule alone
    changes, _ = await _replay(with_compaction(settings, repay_young_calls=30), embedder,
                               messages, tools)
    before, _ = await _replay(without_young(settings), embedder, messages, tools)
    assert (changes, before) == (0, 1)
