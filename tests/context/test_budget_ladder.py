"""Fitting a budget (issue 7 items 2 and 5): a first call lands in [budget − 10 points,
budget] whenever the pinned content leaves room, tool exchanges go as units, no refusal with
slack, the drop log adds up; a later call's step never aims below pinned + latest exchange;
the cut costs O(n) item visits, not O(n²)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gateway.context import stages
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import parse_request
from gateway.context.stages import base as stage_base
from gateway.context.stages import ladder
from gateway.context.summarize import summarize, values
from gateway.context.taskclass import task_class
from gateway.context.tokens import TokenCounter
from gateway.errors import ContextBudgetExceeded
from tests.context.sessions import drops_add_up
from tests.context.test_properties import _check_valid

BAND = 0.10  # points of the call's own size under the budget
# Texts long enough to digest or excerpt: the band is reachable by cutting them.
TEXT = st.text(alphabet="abcdefghij klmnop/.:0123456789\n", min_size=150, max_size=1200)


@st.composite
def conversations(draw: Any) -> list[dict[str, Any]]:
    """An agent's call: system prompt, task, exchanges (tool calls with their results, or
    plain replies, sometimes a user turn after), ending on a user turn or open tool results."""
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(TEXT)})
    msgs.append({"role": "user", "content": draw(TEXT)})
    for t in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            ids = [f"c{t}_{k}" for k in range(draw(st.integers(1, 2)))]
            calls = [
                {"id": i, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
                for i in ids
            ]
            msgs.append({"role": "assistant", "content": draw(TEXT), "tool_calls": calls})
            msgs.extend({"role": "tool", "tool_call_id": i, "content": draw(TEXT)} for i in ids)
        else:
            msgs.append({"role": "assistant", "content": draw(TEXT)})
        if draw(st.booleans()):
            msgs.append({"role": "user", "content": draw(TEXT)})
    return msgs


def _call(session: str, budget: int, cls: str | None = None) -> CallContext:
    headers = {"x-ctxgate-session-id": session, "x-ctxgate-budget-tokens": str(budget)}
    if cls is not None:
        headers["x-ctxgate-task-class"] = cls
    return CallContext(tenant="ladder", trace_id=uuid.uuid4().hex, headers=headers)


def _pinned(engine: ContextEngine, body: dict[str, Any]) -> tuple[int, int]:
    parsed = parse_request(body, engine.counter, "o200k_base")
    return parsed.tokens, parsed.base_tokens + sum(i.tokens for i in parsed.items if i.pinned)


# Found by the property test below in CI on 2026-12-03 (session 30), failing the same on the
# session's start (a75f3b2): a four-message first call at 90% of its 642 tokens lands at
# 498, 15 under the band's floor (513): the task statement's excerpt, its mentions line of
# random ids too long, halved that line to 12 ids and saved 144 tokens where 65 were asked.
_DEEP_CUT = json.loads(
    '[{"role": "user", "content": "752n:l709bodampk6m9c2dfe4\\n2/h'
    '1fcgink7j3fp a:.\\n0/74 h2iin:0d28b.o0h004pd1mll3djid\\n72l1a1'
    'fg21e\\n:gpj 7fac25hkbakj97/i4j m21o6074ehchd3ca94/n9jj0/8ih/'
    '3 np83e2o3p o212k62:ncb/.9k lde79:hi\\nogf0j1d.e4 6 68e/g9::7'
    'e2pe9\\ng dn1hakmakebbjhgaad2:7/f/i 6o:j\\n\\n04nl/7g2hn l3 dd.'
    'noe\\n.:pf8l4po4\\ni.8dk6k02l:2g..d:\\n8dokfb7f2c969nd8bigpa:39'
    '1nl4d29/bapba6hoa0:7ijpe0nc:5lla.f.k8.m.eg  \\na7/m7macnel/7b'
    ' f3mj en8l9e93\\nm.c3cb8k7bded7\\n4e79:i6np4ej\\nin/d6j\\nha\\n26'
    'ekl/e7.jok05dbf /0a2nd3p3ln4.7in2cpn4 2pgjn30ne9ookdh .n47e\\'
    'n3b4cdd6m425.gmok9b:99je6mhh/9ap\\n:0.68g26:b7gfglik0k07g2192'
    'o\\n 7123 e6lbnh15i"}, {"role": "assistant", "content": "0000'
    '000000000000000000000000000000000000000000000000000000000000'
    '000000000000000000000000000000000000000000000000000000000000'
    '00000000000000000000000000"}, {"role": "user", "content": "0'
    '000000000000:00:0:0000:00:00000:00:0:00:0:00:0:0:0:000000000'
    '0:0:0:0:00:00:0000000:00:00000000000:00:0:0:00:0:0:0:0:0:00:'
    '0:0:0:0:00:0:0000:0000\\n:0:0:0"}, {"role": "assistant", "con'
    'tent": "0000000000000:00:0:0000:00:00000:00:0:00:0:00:0:0:0:'
    '0000000000:0:0:0:00:00:0000000:00:00000000000:00:0:0:00:0:0:'
    '0:0:0:00:0:0:0:0:00:0:0000:0000\\n:0:0:0"}]'
)


async def test_a_short_first_call_at_90_percent_is_cut_just_enough(engine: ContextEngine) -> None:
    body = {"messages": json.loads(json.dumps(_DEEP_CUT))}
    tokens, pinned = _pinned(engine, body)
    budget = int(0.9 * tokens)
    fitted = await engine.fit(body, _call(uuid.uuid4().hex, budget, "coding_agent"))
    assert pinned <= budget - BAND * tokens
    assert budget - BAND * tokens <= fitted.tokens_after <= budget


# CI's shrunk case (session 49): the first user turn sent again as the last one, which
# the cluster stage points to, and a budget the call then fits with no cut at all
_TWICE = (
    "0\n:0:0:0\n0:0\n000:0:0a0:0:0:0:0\n:0:0\n0:0:0:0:0:0:0\n:0\n0:0:0:0000b/0\n0\n:0b/0:0:0:0"
    ":0:0:0:0000000\n0:0:0:0:0:0:0:0:0\n0\n:0:0:0a:0:0:0:0:0:0:0a0:0:0\n:0:0:0:0b0:0\n0:0:"
    "0:0:0:0:0:0:0:0:0\n:0:0:0:0:0:0:0:0:0\n0:0b0:0a0"
)
_SENT_TWICE = [
    {"role": "system", "content": (
        "l.o71/jhd :io0ld/geei11.761f58b13.62o4\n50.n\ni2ad2p104579jnioeg 73n/7\ne2c"
        "94c3 0180p3k3:3\n0b.o9m65efk290ji 92gao3983729:c72 n8cal:1 e ipe0fl05d\nh/"
        "d8/o0fp8npm2pe3n23eocc3j9gj.\n\n4 696/.6b3icj04eib694pad8:e:m l4jiiea2f681"
        "\n9.1epgg3hhnhcd14mn4pa1o20.fhbp: l5m07ln9719fcf 0l4mknppbf/9979cp/0j0"
    )},
    {"role": "user", "content": _TWICE},
    {"role": "assistant", "content": "0" * 150},
    {"role": "user", "content": _TWICE},
]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@example(msgs=_SENT_TWICE, share=0.9005620102589402, cls="default")
@given(
    msgs=conversations(),
    share=st.floats(0.3, 0.95),
    cls=st.sampled_from(["coding_agent", "default", "data_sql"]),
)
async def test_first_call_lands_in_band_or_is_refused_only_without_room(
    engine: ContextEngine, msgs: list[dict[str, Any]], share: float, cls: str
) -> None:
    body = {"messages": msgs}
    tokens, pinned = _pinned(engine, body)
    budget = max(int(share * tokens), 1)
    try:
        fitted = await engine.fit(body, _call(uuid.uuid4().hex, budget, cls))
    except ContextBudgetExceeded as exc:
        assert pinned > budget, "refused although the pinned content fits"
        assert exc.needed == pinned
        return
    assert fitted.tokens_after <= budget
    # room, and a band wider than the finest cut (an excerpt keeps EXCERPT_MIN tokens at
    # least): cut just enough, no more. A repeat the cluster stage points to its earlier copy
    # goes whatever the budget (nothing is lost), so the band is counted below what it saved:
    # a call with a user turn sent twice can fit by that alone, under the band (CI, session 49)
    repeats = sum(d.tokens_before - d.tokens_after for d in fitted.drops
                  if d.action == "dedup")
    if pinned <= budget - BAND * tokens and BAND * tokens >= 2 * ladder.EXCERPT_MIN:
        assert fitted.tokens_after >= budget - BAND * tokens - repeats
    _check_valid(fitted.body["messages"])  # tool calls and their results stay paired
    assert drops_add_up(fitted)


def _agent_call(turns: int, system_chars: int = 6000) -> list[dict[str, Any]]:
    """The issue's case: a long system prompt, tool results carrying booking ids."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": ("Policy: verify identity first. " * 300)[:system_chars]},
        {"role": "user", "content": "Change my flight booking to Friday."},
    ]
    for t in range(turns):
        cid = f"call_{t}"
        msgs.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": cid, "type": "function",
                     "function": {"name": "get_booking", "arguments": f'{{"n": {t}}}'}}
                ],
            }
        )
        rows = "\n".join(f"seat {k}: row {k + t} window, fare class Y{k}" for k in range(25))
        msgs.append({"role": "tool", "tool_call_id": cid, "content": f"BOOKING-{t:04d}X\n{rows}"})
    msgs.append({"role": "user", "content": "Which booking was the Friday one?"})
    return msgs


async def test_first_call_keeps_what_the_budget_allows(engine: ContextEngine) -> None:
    msgs = _agent_call(turns=8)
    tokens, pinned = _pinned(engine, {"messages": msgs})
    assert pinned < 0.5 * tokens
    fitted = await engine.fit({"messages": msgs}, _call(uuid.uuid4().hex, int(0.8 * tokens)))
    assert 0.7 * tokens <= fitted.tokens_after <= 0.8 * tokens
    sent = str(fitted.body["messages"])
    kept = [t for t in range(8) if f"BOOKING-{t:04d}X" in sent]
    assert kept == list(range(8))  # digests and excerpts, not whole turns dropped
    _check_valid(fitted.body["messages"])


async def test_later_step_never_aims_below_pinned_and_latest_exchange(
    engine: ContextEngine,
) -> None:
    session = uuid.uuid4().hex
    msgs = _agent_call(turns=6)[:-1]
    reply = "BOOKING-0005X is the Friday one. " + "It departs at 09:40 from gate B12. " * 20
    msgs += [{"role": "assistant", "content": reply}, {"role": "user", "content": "Move it."}]
    first = [*msgs[:4], {"role": "user", "content": "Go on."}]
    await engine.fit({"messages": first}, _call(session, 100_000, "default"))
    _, pinned = _pinned(engine, {"messages": msgs})
    items = parse_request({"messages": msgs}, engine.counter, "o200k_base").items
    latest = next(i.tokens for i in items if i.text == reply)
    budget = pinned + latest + 300  # low_water x budget is below the pinned content alone
    fitted = await engine.fit({"messages": msgs}, _call(session, budget, "default"))
    assert fitted.tokens_after <= budget
    assert {"role": "assistant", "content": reply} in fitted.body["messages"]
    assert fitted.tokens_after >= pinned + latest


async def test_duplicates_folded_on_a_first_call_come_back_to_fill_the_budget(
    engine: ContextEngine,
) -> None:
    msgs = _agent_call(turns=6)
    for m in msgs:
        if m["role"] == "tool":
            m["content"] = "BOOKING-0001X\n" + "\n".join(f"row {k} same" for k in range(60))
    tokens, _ = _pinned(engine, {"messages": msgs})
    budget = int(0.8 * tokens)
    fitted = await engine.fit({"messages": msgs}, _call(uuid.uuid4().hex, budget, "default"))
    assert budget - BAND * tokens <= fitted.tokens_after <= budget


def test_step_target_floor_and_first_call() -> None:
    cls = task_class("t", {"compaction": {"low_water": 0.5, "high_water": 0.9}})
    msgs = _agent_call(turns=3)  # the last exchange (6, 7) is still open: pinned
    items = parse_request({"messages": msgs}, TokenCounter(), "o200k_base").items
    pinned = sum(i.tokens for i in items if i.pinned)
    latest = sum(i.tokens for i in items if i.message_index in (4, 5))
    assert ladder.latest_exchange(items) == {"u4"}
    replied = items[:-1] + parse_request(
        {"messages": [*msgs[:-1], {"role": "assistant", "content": "ok"}, msgs[-1]]},
        TokenCounter(),
        "o200k_base",
    ).items[-2:]
    assert ladder.latest_exchange(replied) == {"u8"}  # an answered exchange is history
    assert ladder.step_target(items, cls, 10_000, 0, first_call=True) == 10_000
    assert ladder.step_target(items, cls, 10_000, 0, first_call=False) == 5_000
    assert ladder.step_target(items, cls, 2 * pinned, 0, first_call=False) == pinned + latest
    assert ladder.step_target(items, cls, pinned + 1, 0, first_call=False) == pinned + 1


async def test_cut_visits_each_item_a_bounded_number_of_times(
    engine: ContextEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    visits = 0
    real = stage_base.item_values

    def counting(text: str, ctx: stages.StageContext) -> frozenset[str]:
        nonlocal visits
        visits += 1
        return real(text, ctx)

    monkeypatch.setattr(stage_base, "item_values", counting)
    monkeypatch.setattr(ladder, "item_values", counting)
    n = 3000
    notes = [{"role": "user", "content": f"note {i}: " + "word " * 30} for i in range(n)]
    body = {"messages": notes}
    tokens, _ = _pinned(engine, body)
    fitted = await engine.fit(body, _call(uuid.uuid4().hex, tokens // 2, "default"))
    assert fitted.tokens_after <= tokens // 2
    assert visits <= 12 * n  # the quadratic cut made about n²/2 here


def _exchange(cid: str, command: str, output: str, text: str | None = None) -> list[dict[str, Any]]:
    call = {"id": cid, "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
    return [{"role": "assistant", "content": text, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": cid, "content": output}]


@pytest.mark.parametrize("repeats", [8, 13])
async def test_an_old_exchange_with_long_arguments_is_not_dropped_under_the_band(
    engine: ContextEngine, repeats: int
) -> None:
    """A shell agent's call (intercode): an old command of ~1000 tokens (its arguments cannot
    be digested) is near half the call; dropping it lands near 40% where 80% is asked.
    Smaller exchanges go instead, and the few tokens still missing are cut from the end of
    the long command's arguments (the rung before a drop), and the call lands in the
    band."""
    noted = "ln: target 'requested.': No such file or directory\n"
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent interacting with a Bourne shell."},
        {"role": "user", "content": "Create a symbolic link in /system/folder1 to /root"},
        *_exchange("c0", "ln -s /root /system/folder1", "No output"),
        *_exchange("c1", "ln -s /root /system/folder1 " * 140, "/bin/bash: unexpected EOF\n"),
    ]
    for k in range(2, 5):
        msgs += _exchange(f"c{k}", f"ln -s /root /system/folder{k} requested. " * repeats, noted)
    msgs += _exchange("c5", "ls -la /system/folder1 " * 4, "total 0\n")
    msgs += _exchange("c6", "ln -s /root /system/folder1 requested. " * 12, noted)  # open
    body = {"messages": msgs}
    tokens, pinned = _pinned(engine, body)
    items = parse_request(body, engine.counter, "o200k_base").items
    long_unit = sum(i.tokens for i in items if i.message_index in (4, 5))
    budget = int(0.8 * tokens)
    assert pinned < 0.3 * tokens and long_unit > tokens - budget + BAND * tokens
    fitted = await engine.fit(body, _call(uuid.uuid4().hex, budget, "data_sql"))
    assert budget - BAND * tokens <= fitted.tokens_after <= budget
    # the long command stays, at most the few tokens still missing cut from its end
    sent = next(m for m in fitted.body["messages"] if (m.get("tool_calls") or [{}])[0].get(
        "id") == "c1")
    command = json.loads(sent["tool_calls"][0]["function"]["arguments"])["command"]
    original = json.loads(msgs[4]["tool_calls"][0]["function"]["arguments"])["command"]
    assert command[:len(original) * 9 // 10] == original[:len(original) * 9 // 10]
    assert msgs[5] in fitted.body["messages"]
    _check_valid(fitted.body["messages"])


async def test_a_dropped_exchange_comes_back_with_an_excerpt_to_fill_the_band(
    engine: ContextEngine,
) -> None:
    """A SQL agent's call (intercode, ReAct): two exchanges, one small, one with a long
    schema; at 60% neither digests nor masks reach the budget and both go; the newer one
    then comes back, its output an excerpt of what room is left."""
    schema = str([(f"column_{k}", "varchar(40)", "YES", "", None, "") for k in range(12)])
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent interacting with a MySQL database."},
        {"role": "user", "content": "What are the last names of students in North Carolina?"},
        *_exchange("c0", "SHOW TABLES", str([(f"table_{k}",) for k in range(11)]),
                   "I should first find out what tables are available."),
        *_exchange("c1", "DESCRIBE students", schema, "I should check the students table."),
        *_exchange("c2", "DESCRIBE addresses", (3 * schema)[:700], "Now the addresses table."),
    ]
    body = {"messages": msgs}
    tokens, pinned = _pinned(engine, body)
    budget = int(0.6 * tokens)
    assert pinned < budget - BAND * tokens
    fitted = await engine.fit(body, _call(uuid.uuid4().hex, budget, "data_sql"))
    assert budget - BAND * tokens <= fitted.tokens_after <= budget
    sent = fitted.body["messages"]
    output = next(m for m in sent if m.get("tool_call_id") == "c1")
    assert msgs[4] in sent and "tokens omitted" in str(output["content"])
    _check_valid(sent)
    assert drops_add_up(fitted)


def _query_call(old: int = 2) -> list[dict[str, Any]]:
    """Intercode's case: exchanges that are mostly tool-call arguments (long SQL queries),
    their results too short to digest, the last exchange still open."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You answer with SQL run by the sql tool."},
        {"role": "user", "content": "Which customers ordered more than twice in 2021?"},
    ]
    for t in range(old + 1):
        cols = ", ".join(f"orders_{t}.col_{k} AS c{t}_{k}" for k in range(40))
        query = f"SELECT {cols} FROM orders_{t} JOIN customers ON id = cust_{t} WHERE n > {t}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"q{t}", "type": "function",
            "function": {"name": "sql", "arguments": json.dumps({"query": query, "db": "shop"})},
        }]})
        msgs.append({"role": "tool", "tool_call_id": f"q{t}", "content": f"{t} rows"})
    return msgs


async def test_old_exchanges_arguments_cut_before_the_exchange_is_dropped(
    engine: ContextEngine,
) -> None:
    msgs = _query_call(old=2)
    tokens, pinned = _pinned(engine, {"messages": msgs})
    for share in (0.8, 0.6):
        budget = int(share * tokens)
        assert pinned <= budget - BAND * tokens  # room: the call must land in the band
        fitted = await engine.fit({"messages": msgs}, _call(uuid.uuid4().hex, budget))
        # dropping a whole exchange (a third of the call) would land far under the band
        assert budget - BAND * tokens <= fitted.tokens_after <= budget
        sent = fitted.body["messages"]
        _check_valid(sent)
        assert sent[-2:] == msgs[-2:]  # the open exchange: its arguments whole
        cut = [m for m in sent if m.get("tool_calls") and m not in msgs]
        assert cut, "no old exchange's arguments were cut"
        for m in cut:
            call = m["tool_calls"][0]
            args = json.loads(call["function"]["arguments"])  # still a JSON object
            assert set(args) == {"query", "db"} and args["db"] == "shop"
            assert "chars cut]" in args["query"]
            assert fitted.arguments is not None
            assert fitted.arguments[call["id"]] == call["function"]["arguments"]
        assert any(m.get("tool_call_id") == "q0" for m in sent) or share == 0.6
        events = [d for d in fitted.drops if d.kind == "tool_call" and d.tokens_after]
        assert len(events) == len(cut)
        assert all(d.reason == "over_budget" for d in fitted.drops)
        assert drops_add_up(fitted)
        # the engine's count of what it sends is the count of the messages sent
        assert _pinned(engine, {"messages": sent})[0] == fitted.tokens_after


async def test_cut_arguments_are_remembered_by_the_sessions_next_call(
    engine: ContextEngine,
) -> None:
    """A later call of the session sends the old exchange's arguments as the step cut
    them, and its drop log still adds up (the prefix path renders them too)."""
    session = uuid.uuid4().hex
    msgs = _query_call(old=2)
    tokens, _ = _pinned(engine, {"messages": msgs})
    budget = int(0.8 * tokens)
    first = await engine.fit({"messages": msgs}, _call(session, budget))
    cut = {c["id"]: c["function"]["arguments"] for m in first.body["messages"]
           for c in m.get("tool_calls") or () if m not in msgs}
    assert cut
    later = [*msgs, {"role": "assistant", "content": "Two customers."},
             {"role": "user", "content": "Thanks."}]
    for _ in range(2):  # the full path, then the session's prefix
        fitted = await engine.fit({"messages": later}, _call(session, 10 * tokens))
        sent = {c["id"]: c["function"]["arguments"] for m in fitted.body["messages"]
                for c in m.get("tool_calls") or ()}
        assert {k: sent[k] for k in cut} == cut
        assert drops_add_up(fitted)
        assert _pinned(engine, {"messages": fitted.body["messages"]})[0] == fitted.tokens_after


# A web agent's turn (webchorearena `task_10243`): it reads a report's table above and states a
# finding of its own, the calculation it then runs (`348 / 12`).
_FINDING_TURN = (
    "The goal requires the months of July–December 2022 whose completed-orders Sales Items"
    " exceed the monthly average.\n\nCurrent page shows Reports > Orders Report with filters"
    " set to:\n- Date Used: Order Created\n- Period: Month\n- From: 01/01/22\n- To: 12/31/22\n"
    "- Order Status: Specified with Complete selected (option id 790)\n\nThe table lists"
    " monthly Sales Items totals:\nJan 34, Feb 47, Mar 43, Apr 25, May 25, Jun 34, Jul 28,"
    " Aug 18, Sep 31, Oct 11, Nov 15, Dec 37, and Total 348.\n\nWe will need the average over"
    " 12 months: 348 / 12 = 29 (will use calculate later). Months in the second half above 29"
    " are: September (31) and December (37).\n\nNext, open the Sales section."
)
# The page it read: the filters and the table (the finding `29` is not on it).
_REPORT = (
    "[1201] table 'Orders Report' From 01/01/22 To 12/31/22 Status Complete [option 790]\n"
    "Jan 34 Feb 47 Mar 43 Apr 25 May 25 Jun 34 Jul 28 Aug 18 Sep 31 Oct 11 Nov 15 Dec 37\n"
    "Total 348 over 12 months\n"
)


def test_a_turns_summary_keeps_its_own_findings_before_what_it_repeats() -> None:
    """A summary of an assistant turn keeps, of the sentences naming numbers or code, those
    with a value the model has not read above (its finding `348 / 12 = 29`) before those
    that only repeat the page (`01/01/22`, `790`): the plain fit keeps the turn whole."""
    read = frozenset(values(_REPORT)) & frozenset(values(_FINDING_TURN))
    out = summarize(_FINDING_TURN, "tool_call", 1, read)
    assert "348 / 12 = 29" in out
    assert out.startswith(_FINDING_TURN.split("\n")[0]) and "Next, open" not in out



def _assistant_call(cid: str, name: str, args: dict[str, Any], text: str) -> dict[str, Any]:
    call = {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}
    return {"role": "assistant", "content": text, "tool_calls": [call]}


# A tool-using assistant's call (agentdojo `workspace/user_task_19`): an email names two
# files; the turn after it plans the work and repeats both names; two large file reads
# follow. The next step searches for `feedback.xlsx`.
_EMAIL = (
    "- attachments: []\n  bcc: []\n  body: \"Hi Emma,\\n\\nPlease do the following by next week:"
    "\\n  - 1. Take a look at the file \\\"team-building-activities.docx\\\", suggest two more"
    " activities, and add them to the file.\\n  - 2. Send me an email with the scores that users"
    " Olivia Smith, Mia Anderson, and Mason Thompson give in the feedback provided in the file"
    " \\\"feedback.xlsx\\\". Use \\\"Feedback scores\\\" as the subject.\\n\\nBest,\\nDavid\\n\"\n"
    "  cc: []\n  id_: '33'\n  read: true\n  recipients:\n  - emma.johnson@bluesparrowtech.com\n"
    "  sender: david.smith@bluesparrowtech.com\n  subject: TODOs for the week\n"
    "  timestamp: 2024-05-12 18:30:00"
)
_PLAN = (
    "<thinking>\nTo complete the tasks specified in the email from David Smith, I will need to:"
    "\n\n1. Search for the file \"team-building-activities.docx\" in the cloud drive\n2. Add two"
    " more team building activity suggestions to that file\n3. Search for the file"
    " \"feedback.xlsx\" in the cloud drive\n4. Extract the feedback scores given by Olivia Smith,"
    " Mia Anderson, and Mason Thompson from that file\n5. Send an email to David with those"
    " scores in the body and \"Feedback scores\" as the subject\n</thinking>"
)


def _document(n: int) -> str:
    return "content: \"Team Building Activities Plan\\n" + "".join(
        f"\\nActivity {k}: Workshop {k}\\n  - Description: teams meet to work on problem {k}"
        f" together and present their solutions.\\n  - Location: Room {k}\\n  - Date:"
        f" 2023-11-{10 + k}\\n" for k in range(n)
    ) + "\"\nfilename: team-building-activities.docx\nid_: '3'\nsize: 1024"


def _email_call() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are an AI language model who assists the user by"
         " using the given tools. The user's name is Emma Johnson."},
        {"role": "user", "content": "Please do the actions specified in the email from"
         " 'david.smith@bluesparrowtech.com' with the subject 'TODOs for the week'."},
        _assistant_call("e0", "search_emails", {"query": "TODOs for the week"}, ""),
        {"role": "tool", "tool_call_id": "e0", "content": _EMAIL},
        _assistant_call("f0", "search_files_by_filename",
                        {"filename": "team-building-activities.docx"}, _PLAN),
        {"role": "tool", "tool_call_id": "f0", "content": _document(8)},
        _assistant_call("f1", "get_file_by_id", {"file_id": "3"}, ""),
        {"role": "tool", "tool_call_id": "f1", "content": _document(8)},
        _assistant_call("f2", "append_to_file", {"file_id": "3", "content": "Activity 9"}, ""),
        {"role": "tool", "tool_call_id": "f2", "content": _document(9)},
    ]


async def test_a_value_a_turn_repeats_stays_when_its_source_is_masked(
    engine: ContextEngine,
) -> None:
    """The turn's summary leaves out the file names it repeats, as the model reads them in
    the email above; a later rung masks the email. The email's placeholder then keeps the
    names (before: neither the email nor the turn sent `feedback.xlsx` at 60%, where the
    plain fit keeps the turn whole)."""
    msgs = _email_call()
    body = {"messages": msgs}
    tokens, pinned = _pinned(engine, body)
    for share in (0.8, 0.6):
        budget = int(share * tokens)
        assert pinned <= budget - BAND * tokens
        fitted = await engine.fit(body, _call(uuid.uuid4().hex, budget))
        assert budget - BAND * tokens <= fitted.tokens_after <= budget
        sent = fitted.body["messages"]
        assert "feedback.xlsx" in json.dumps(sent)
        _check_valid(sent)
        assert drops_add_up(fitted)


def _email_ladder() -> tuple[ladder.Ladder, int, int]:
    """A ladder over `_email_call`'s items with the planning turn summarised strictly
    (level 2: the file names it repeats left out, read in the email above); the positions
    of the email and of the turn."""
    counter = TokenCounter()
    items = parse_request({"messages": _email_call()}, counter, "o200k_base").items
    ctx = stage_base.StageContext(
        task_class=task_class("t", {}), counter=counter, encoding="o200k_base",
        embedder=None, fixed_tokens=0, horizon=len(items), query="",
        originals={i.id: i for i in items}, decisions={}, messages=_email_call(),
    )
    cut = ladder.Ladder(items, ctx)
    email = next(p for p, i in enumerate(items) if "attachments" in i.text)
    turn = next(p for p, i in enumerate(items) if i.text.startswith("<thinking>"))
    cut.step(turn, 1, "over_budget", lambda _: True, 10**6)
    assert "feedback.xlsx" not in str(cut.current[turn].text)  # left out: read above
    return cut, email, turn


@pytest.mark.parametrize("rung", [ladder.MASK, ladder.DROP])
def test_a_rewrite_keeps_what_a_later_summary_left_out_as_read_above(rung: int) -> None:
    """Masking the email keeps the names the turn below it left out in the placeholder;
    dropping the email's exchange lists them in the turn's summary instead. Either way the
    tokens the step reports saved are what the items lost (the mentions counted)."""
    cut, email, turn = _email_ladder()
    before = sum(i.tokens for i in cut.kept())
    saved = cut.step(email, rung, "over_budget", lambda _: True, 10**6)
    assert saved == before - sum(i.tokens for i in cut.kept())
    sent = " ".join(i.text for i in cut.kept())
    assert "feedback.xlsx" in sent and "team-building-activities.docx" in sent
    holder = cut.current[email] if rung == ladder.MASK else cut.current[turn]
    assert holder is not None and "feedback.xlsx" in holder.text
    if rung == ladder.MASK:
        assert holder.text.startswith("[ctxgate: omitted ")
    else:
        assert cut.current[email] is None


_INSTRUCTIONS = (
    "INSTRUCTIONS:\nNow, you're going to solve this challenge on your own. Your terminal"
    " session has started and you're in the challenge's root directory. You can use any bash"
    " commands or the special interface to help you. Solve the challenge, executing any"
    " commands you need and writing any code that may be helpful.\nRemember, YOU CAN ONLY"
    " ENTER ONE COMMAND AT A TIME. You should always wait for feedback after every command."
    "\nNote however that you cannot use any interactive session commands (e.g. python, vim)"
    " in this environment, but you can write scripts and run them.\n\nIMPORTANT TIPS:\n"
    + "".join(
        f"{k}. Tip number {k}: when you cannot finish a step, prefer the tools of the"
        f" container and keep each command short; avoid brute force attempts.\n\n"
        for k in range(1, 12)
    )
)


def _ctf_call() -> list[dict[str, Any]]:
    """swe-agent `ctf__crypto__katy`'s shape: the task statement names the server's port in
    its middle, between a description and long instructions; the exchanges after it
    decompile a binary; the agent is about to connect to the server."""
    task = (
        "We're currently solving the following CTF challenge, a cryptography problem named"
        " \"Kitty\". The description is:\n" + "so random lol… " * 60 + "\nFiles included in"
        " the challenge: ['release']\n\nThe challenge web server is running on"
        " `crypto.chal.example.io` port `4242` and you can access it from within the"
        " container environment using `nc crypto.chal.example.io:4242`.\n\n" + _INSTRUCTIONS
        + "(Open file: n/a)\n(Current directory: /ctf/Kitty)\nbash-$"
    )
    code = "".join(
        f"  local_{k} = _hash(param_{k}) ^ 0x{k:04x}dead;\n  seed_{k} = next_cypher(local_{k});\n"
        for k in range(8)
    )
    def turn(text: str, command: str, output: str) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": f"{text}\n```\n{command}\n```"},
                {"role": "user", "content": output}]

    return [
        {"role": "system", "content": "You are a skilled CTF player. " * 20},
        {"role": "user", "content": task},
        *turn("We will first examine the files supplied with this challenge.", "file release",
              "release: ELF 64-bit LSB executable, x86-64"),
        *turn("The release file probably contains the server's program.", "decompile release",
              f"Decompilation Found!\n{code}"),
        *turn("Now the `next_cypher` function, which makes the random numbers.",
              "decompile release --function_name next_cypher", f"Decompilation Found!\n{code}"),
        *turn("I will write a script that reads the server's numbers with pwntools.",
              "create retrieve_random_numbers.py",
              "[File: retrieve_random_numbers.py (1 lines total)]\n1:"),
    ]


async def test_the_task_statements_identifiers_stay_when_it_is_cut(
    engine: ContextEngine,
) -> None:
    """At 70% and 50% the task statement itself is cut (it goes last): its rewrite keeps the
    host and the port only it names, the next step's `nc … 4242` (before: an excerpt of its
    head and tail, the port gone with the middle)."""
    msgs = _ctf_call()
    body = {"messages": msgs}
    tokens, pinned = _pinned(engine, body)
    items = parse_request(body, engine.counter, "o200k_base").items
    goal = sum(i.tokens for i in items if i.goal)
    for share in (0.7, 0.5):
        budget = int(share * tokens)
        assert pinned <= budget - BAND * tokens and goal > 0.3 * tokens
        fitted = await engine.fit(body, _call(uuid.uuid4().hex, budget, "coding_agent"))
        assert budget - BAND * tokens <= fitted.tokens_after <= budget
        sent = fitted.body["messages"]
        assert sent[1]["content"] != msgs[1]["content"]  # the task statement was cut
        assert "4242" in sent[1]["content"] and "crypto.chal.example.io" in sent[1]["content"]
        _check_valid(sent)
        assert drops_add_up(fitted)


def goal_ladder(messages: list[dict[str, Any]]) -> tuple[ladder.Ladder, int]:
    """A ladder over `messages` (a first call: every item behind the horizon), and the
    position of its task statement."""
    counter = TokenCounter()
    items = parse_request({"messages": messages}, counter, "o200k_base").items
    ctx = stage_base.StageContext(
        task_class=task_class("t", {}), counter=counter, encoding="o200k_base",
        embedder=None, fixed_tokens=0, horizon=len(items), query="",
        originals={i.id: i for i in items}, decisions={}, messages=messages,
        known=frozenset(v for i in items if i.kind == "system" or i.goal for v in values(i.text)),
    )
    return ladder.Ladder(items, ctx), next(p for p, i in enumerate(items) if i.goal)


@pytest.mark.parametrize("to", [0, 1, 2, ladder.MASK, "excerpt"])
def test_every_rewrite_of_the_task_statement_lists_its_identifiers(to: int | str) -> None:
    """Summaries at each level, the mask, and an excerpt of the task statement end with a
    mentions line naming its identifiers that the system prompt does not (the session's
    `known` values include the task's own: before, the summaries listed none of them);
    what the step reports saved is what the item lost, the line counted."""
    cut, goal = goal_ladder(_ctf_call())
    before = sum(i.tokens for i in cut.kept())
    need = 10**6 if to != "excerpt" else cut.current[goal].tokens // 2  # type: ignore[union-attr]
    saved = cut.step(goal, 0 if to == "excerpt" else int(to), "over_budget", lambda _: True, need)
    assert saved > 0 and saved == before - sum(i.tokens for i in cut.kept())
    text = cut.current[goal].text  # type: ignore[union-attr]
    assert "[omitted text mentions:" in text
    for value in ("4242", "crypto.chal.example.io", "ctf/Kitty"):
        assert value in text
    if to == "excerpt":
        assert "tokens omitted]" in text
    assert "You are a skilled" not in text.split("[omitted text mentions:")[1]


def _small_shell_call() -> list[dict[str, Any]]:
    """intercode `ic_bash_react_10_turns_fs_1/30`'s shape: a first and only user message
    (pinned), two old exchanges of a sentence, a short command and an error, each too
    short to digest or mask, the third still open. Each old exchange is about 25% of the
    call, the band 10%."""
    error = "find: paths must precede expression: `boot'\n0"
    return [
        {"role": "system", "content": "You are an agent interacting with a Bourne shell (bash)"
         " in an Ubuntu container. Accomplish the user's query by running commands with the"
         " bash tool; each result is the shell output."},
        {"role": "user", "content": "Count the number of regular files in directory tree"
         " ${DIRECTORY} that contain a vowel in their names"},
        *_exchange("b0", "find ${DIRECTORY} -type f -name \"*[aeiou]*\" | wc -l", error,
                   "I should use find with a name pattern to count the files in the tree."),
        *_exchange("b1", "find ${DIRECTORY} -path \"*[aeiou]*\" -type f | wc -l", error,
                   "I should use the `-path` option to match the whole directory tree."),
        *_exchange("b2", "find ${DIRECTORY} -name \"*[aeiou]*\" -type f | wc -l", error,
                   "I should use the `-name` option instead of the `-path` option here."),
    ]


async def test_a_short_sentence_is_cut_before_an_exchange_drop_lands_under_the_band(
    engine: ContextEngine,
) -> None:
    """Where dropping one old exchange is too little and both too much, the other's sentence
    (too short for a digest on its own) is cut too and the call lands in the band (before:
    both exchanges dropped, the call at its pinned content, 10 points under the band)."""
    msgs = _small_shell_call()
    body = {"messages": msgs}
    tokens, pinned = _pinned(engine, body)
    budget = int(0.7 * tokens)
    assert pinned <= budget - BAND * tokens
    fitted = await engine.fit(body, _call(uuid.uuid4().hex, budget, "data_sql"))
    assert budget - BAND * tokens <= fitted.tokens_after <= budget
    sent = fitted.body["messages"]
    assert sum(1 for m in sent if m.get("tool_calls")) == 2  # one old exchange kept, cut
    _check_valid(sent)
    assert drops_add_up(fitted)


@pytest.mark.parametrize("share", [0.7, 0.6])
async def test_a_long_task_statement_cut_with_its_identifiers_lands_in_the_band(
    engine: ContextEngine, share: float
) -> None:
    """A first call that is mostly a long task statement naming many files (swe-agent
    `test-repo-i1`: 8,386 of 10,317 tokens), then the latest user message: the excerpt of
    the task plus the list of the identifiers it cut lands in the band (made with the list's
    size unaccounted, it fell short by a few tokens, and the next rung's summary of the task
    sent 20% of the call)."""
    task = "Fix the failing imports described below.\n" + "".join(
        f"In src/pkg_{k}/module_{k}.py the call to helper_{k}() raises ImportError at line"
        f" {100 + k}; see tests/test_module_{k}.py for the expected behaviour.\n"
        for k in range(300)
    )
    msgs = [
        {"role": "system", "content": "You are a software engineer working in a repository."},
        {"role": "user", "content": task},
        {"role": "user", "content": "Start with the first file, then run the tests."},
    ]
    body = {"messages": msgs}
    tokens, pinned = _pinned(engine, body)
    budget = int(share * tokens)
    assert pinned < 0.1 * tokens
    fitted = await engine.fit(body, _call(uuid.uuid4().hex, budget, "coding_agent"))
    assert budget - BAND * tokens <= fitted.tokens_after <= budget
    assert "[omitted text mentions:" in fitted.body["messages"][1]["content"]
    assert drops_add_up(fitted)


@pytest.mark.parametrize(("hosts", "share"), [(6, 0.8), (6, 0.6), (10, 0.7), (14, 0.5)])
async def test_a_task_statement_of_identifiers_is_cut_not_dropped(
    engine: ContextEngine, hosts: int, share: float
) -> None:
    """A short task statement that is mostly identifiers (hosts, ports, paths, ids), the only
    text the budget can cut: each rung's rewrite of it lists the identifiers it took away, so
    none saves enough, and the drop that came next sent none of the task, the call at its
    pinned content, far under the band (CI run on record: the property test's example of a
    task of random identifiers). Now an excerpt of it with as many identifiers listed as fit
    lands in the band."""
    task = "Roll release 4.12.7 out to these hosts, in this order, and report each one:\n" + (
        "\n".join(
            f"web-{i:02d}.dc{i % 3}.example.net:{8400 + i} /srv/app{i}/release_4127_{i}.tgz"
            f" id=R{9000 + i}"
            for i in range(hosts)
        )
    )
    msgs = [
        {"role": "user", "content": task},
        {"role": "assistant", "content": "Checking the first host.", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "bash", "arguments": '{"cmd": "curl -s web-00/health"}'}}
        ]},
        {"role": "tool", "tool_call_id": "c1",
         "content": "status: ok\nuptime: 3d 4h\nversion: 4.12.6\n" * 6},
        {"role": "user", "content": "Go on with the next ones."},
    ]
    body = {"messages": msgs}
    tokens, pinned = _pinned(engine, body)
    budget = int(share * tokens)
    assert pinned <= budget - BAND * tokens
    fitted = await engine.fit(body, _call(uuid.uuid4().hex, budget, "default"))
    assert budget - BAND * tokens <= fitted.tokens_after <= budget
    sent = fitted.body["messages"]
    assert len(sent) == len(msgs) and sent[0]["content"].startswith("Roll release 4.12.7")
    assert "[ctxgate: " in sent[0]["content"]  # an excerpt
    _check_valid(sent)
    assert drops_add_up(fitted)


async def test_cut_arguments_follow_the_sessions_decisions_call_after_call(
    engine: ContextEngine, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The `args` cuts a session's calls send are read once per decisions object and kept
    with the session's prefix (`Prefix.cuts`): a session whose later step cuts another
    exchange, then calls again with no budget, sends what an engine that reads every
    decision on every call sends, call by call (fails when the kept cuts outlive the
    decisions they were read from)."""
    from gateway.context import engine as engine_module
    from gateway.context.prefix import Prefix

    msgs = _query_call(old=2)
    tokens, _ = _pinned(engine, {"messages": msgs})
    longer = _query_call(old=5)
    steps = [(msgs, int(0.8 * tokens)), (msgs, 10 * tokens), (longer[:12], 10 * tokens),
             (longer[:12], int(0.85 * _pinned(engine, {"messages": longer[:12]})[0])),
             (longer, 10 * tokens), (longer, 10 * tokens)]

    async def run(session: str) -> list[Any]:
        out = []
        for messages, budget in steps:
            fitted = await engine.fit({"messages": messages}, _call(session, budget))
            out.append((fitted.body["messages"], fitted.arguments, fitted.tokens_after))
        return out

    read = []
    original = engine_module.args_cuts
    monkeypatch.setattr(engine_module, "args_cuts",
                        lambda decisions: read.append(1) or original(decisions))
    kept = await run(uuid.uuid4().hex)
    assert len(read) < len(steps)  # some calls took the kept cuts
    monkeypatch.setattr(Prefix, "cuts", property(lambda _: None, lambda _, __: None))
    assert kept == await run(uuid.uuid4().hex)
    cut_ids = [set(arguments or {}) for _, arguments, _ in kept]
    assert cut_ids[0] and cut_ids[3] and cut_ids[3] != cut_ids[0] and cut_ids[5] == cut_ids[3]


async def test_a_sessions_calls_under_a_budget_forward_the_last_calls_cut_messages(
    engine: ContextEngine,
) -> None:
    """Consecutive calls of a session under a budget send an old exchange whose arguments
    the ladder cut as the very message object the last call sent (`render.CutMemo`, kept
    with the session's prefix): the body encoder's runs and the pointers' and short ids'
    memos go by identity, and an equal copy made anew on every call is encoded anew on
    every call."""
    session = uuid.uuid4().hex
    base = _query_call(old=3)
    msgs = list(base)
    for t in range(12):
        msgs += [{"role": "assistant", "content": f"Checking the orders of step {t} now."},
                 {"role": "user", "content": "Go on, please."}]
    budget = int(0.8 * _pinned(engine, {"messages": base})[0])
    previous: dict[str, Any] = {}
    handed = 0
    for end in range(len(base), len(msgs) + 1, 2):
        fitted = await engine.fit({"messages": msgs[:end]}, _call(session, budget))
        assert drops_add_up(fitted)
        cut = {m["tool_calls"][0]["id"]: m for m in fitted.body["messages"]
               if m.get("tool_calls") and m not in msgs}
        assert cut, end
        for cid, m in cut.items():
            if cid in previous and previous[cid] == m:
                assert previous[cid] is m, (end, cid)
                handed += 1
        previous = cut
    assert handed >= 10


def test_with_cut_calls_takes_the_last_calls_copy_only_where_it_is_the_copy_made() -> None:
    """`with_cut_calls(..., memo=)` sends the bytes it sends without the memo; it hands on
    the last call's copy of the very same message cut the same, and copies anew a message
    equal but not the same object, or cut otherwise."""
    from gateway.context.apply import CutCalls
    from gateway.context.render import CutMemo, with_cut_calls
    from gateway.context.session import Decision

    msgs = _query_call(old=1)

    def decisions(raw: str) -> dict[str, Decision]:
        arg = CutCalls(2, (raw,), 10).dump()
        return {"x": Decision("compress", "compress", "over_budget", "args", 1, arg=arg)}

    memo = CutMemo()
    first = with_cut_calls(msgs, None, decisions('{"query": "SELECT [cut]"}'), memo=memo)
    again = with_cut_calls(msgs, None, decisions('{"query": "SELECT [cut]"}'), memo=memo)
    plain = with_cut_calls(msgs, None, decisions('{"query": "SELECT [cut]"}'))
    assert first is not None and again is not None and plain is not None
    assert json.dumps(again[0]) == json.dumps(plain[0]) and again[1] == plain[1]
    assert again[0][2] is first[0][2] and again[0][2] is not plain[0][2]
    assert all(a is b for k, (a, b) in enumerate(zip(again[0], msgs, strict=True)) if k != 2)
    other = with_cut_calls(msgs, None, decisions('{"query": "SELECT [more cut]"}'), memo=memo)
    assert other is not None and other[0][2] is not again[0][2]
    assert json.loads(other[0][2]["tool_calls"][0]["function"]["arguments"]) == {
        "query": "SELECT [more cut]"}
    copied = [*msgs[:2], json.loads(json.dumps(msgs[2])), *msgs[3:]]  # equal, a new object
    for _ in range(2):
        fresh = with_cut_calls(copied, None, decisions('{"query": "SELECT [more cut]"}'),
                               memo=memo)
        assert fresh is not None and fresh[0] == other[0]
    assert fresh[0][2] is not other[0][2]
    assert fresh[0][2]["tool_calls"][0]["id"] is copied[2]["tool_calls"][0]["id"]
