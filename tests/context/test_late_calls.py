"""A late call between compaction steps does work in proportion to its new messages, not to
the session's history (issue 7): the repeated tool calls (`calls.RepeatScan`), the messages
lost from the forwarded call (`Haystack.lost_after`) and the rewritten messages forwarded
(`materialize` with the prefix's copies) are found from what the call added, and give what
finding them afresh gives; a step call's horizon is found from the verbatim turns."""

from __future__ import annotations

import json
from typing import Any
from unittest.mock import patch

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import gateway.context.engine as engine_module
import gateway.context.fidelity as fidelity_module
import gateway.context.session as session_module
from gateway.context.apply import apply_decisions, changed_decisions, reapply, reapply_changed
from gateway.context.calls import RepeatScan, repeated_calls
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.fidelity import (
    NEAR_SAME,
    Haystack,
    _may_be_near,
    lost_messages,
    observe,
    similarity,
)
from gateway.context.items import PINNED, parse_request
from gateway.context.prefix import Prefix, _derived
from gateway.context.render import Picks, materialize, materialize_picked
from gateway.context.session import (
    Decision,
    SessionState,
    lost_runs,
    record_changes,
    run_hashes,
)
from gateway.context.steps import horizon_after, open_tokens, step_horizon
from gateway.context.taskclass import Compaction, TaskClass
from gateway.context.tokens import TokenCounter
from tests.sessions import synthetic_session

from .test_prefix_cache import _engine, _growing, _same

COUNTER = TokenCounter()
ARGS = [json.dumps({"command": c * 130}) for c in "ab"] + [json.dumps({"command": "ls"})]


@st.composite
def call_turns(draw: Any) -> list[dict[str, Any]]:
    """Assistant turns with tool calls whose arguments and ids repeat now and then."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for t in range(draw(st.integers(0, 25))):
        calls = [{"id": draw(st.sampled_from([f"c{t}_{k}", f"c{t}_{k}", "dup", ""])),
                  "type": "function",
                  "function": {"name": "sh", "arguments": draw(st.sampled_from(ARGS))}}
                 for k in range(draw(st.integers(0, 2)))]
        msg: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
        if draw(st.integers(0, 9)) == 0:
            msg[PINNED] = True
        msgs += [msg, {"role": "tool", "tool_call_id": f"c{t}_0", "content": "ok"}]
    return msgs


@settings(max_examples=150, deadline=None)
@given(msgs=call_turns(), data=st.data())
def test_a_kept_scan_finds_the_repeats_a_fresh_one_finds(
    msgs: list[dict[str, Any]], data: Any
) -> None:
    """Grown call by call, the scan gives `repeated_calls` of the whole list each time and,
    unless a new call reuses an earlier call's id, reads only the messages added."""
    scan = RepeatScan(min_chars=100)
    end = 0
    while end < len(msgs):
        new_end = data.draw(st.integers(end + 1, len(msgs)))
        ids_before = {c["id"] for m in msgs[:end] for c in m.get("tool_calls") or ()}
        ids_added = {c["id"] for m in msgs[end:new_end] for c in m.get("tool_calls") or ()}
        found = scan.scan(msgs[:new_end])
        assert found == repeated_calls(msgs[:new_end], min_chars=100)
        if not (ids_before - {""}) & ids_added:
            assert scan.visited == new_end - end
        end = new_end


@settings(max_examples=200, deadline=None)
@given(msgs=call_turns(), data=st.data())
def test_a_scan_kept_across_steps_finds_what_a_fresh_one_finds(
    msgs: list[dict[str, Any]], data: Any
) -> None:
    """A session's calls forward the client's messages under drawn plans: between steps a
    plan extends the last one; a step keeps a drawn start of it, then drops or rewrites any
    message after (as a render does: a rewritten message is a copy with new content). The
    scan kept across them finds what `repeated_calls` finds in each forwarded list, and a
    step reads only from the first message that renders another client message."""
    scan, plan, end, scan_twice = RepeatScan(min_chars=100), [], 0, False
    while end < len(msgs):
        new_end = data.draw(st.integers(end + 1, len(msgs)))
        step = bool(plan) and data.draw(st.booleans())
        kept = data.draw(st.integers(0, len(plan))) if step else len(plan)
        fates = data.draw(st.lists(st.sampled_from(["sent", "sent", "dropped", "gist"]),
                                   min_size=new_end, max_size=new_end))
        start = plan[kept - 1][0] + 1 if kept else 0
        plan = plan[:kept] + [(i, None if fates[i] == "sent" else f"gist {i}")
                              for i in range(start if step else end, new_end)
                              if fates[i] != "dropped"]
        forwarded = materialize(msgs, plan)
        before = list(scan.indexes)
        found = scan.scan(forwarded, plan, extends=not step)
        assert found == repeated_calls(forwarded, min_chars=100)
        assert list(scan.indexes) == [i for i, _ in plan]
        ids = [c["id"] for m in forwarded for c in m.get("tool_calls") or () if c["id"]]
        unique = len(ids) == len(set(ids))
        if unique and not scan_twice:  # no id names two calls: only the change is read
            common = next((k for k, (a, b) in enumerate(zip(before, scan.indexes, strict=False))
                           if a != b), min(len(before), len(plan)))
            assert scan.visited == len(plan) - common
        scan_twice = bool(scan.twice)  # it reads all again while an id names two calls
        end = new_end


@st.composite
def growing_plans(draw: Any) -> list[tuple[int, list[tuple[int, str | None]]]]:
    """A plan that only grows, as the session's prefix keeps it: (messages, plan) per call."""
    calls, plan, count = [], [], 0
    for _ in range(draw(st.integers(1, 12))):
        added = draw(st.integers(0, 6))
        for i in range(count, count + added):
            fate = draw(st.sampled_from(["sent", "sent", "dropped", "gist"]))
            if fate != "dropped":
                plan.append((i, None if fate == "sent" else f"gist {i}"))
        count += added
        calls.append((count, list(plan)))
    return calls


@settings(max_examples=150, deadline=None)
@given(calls=growing_plans())
def test_lost_messages_of_a_growing_plan_read_only_its_new_entries(
    calls: list[tuple[int, list[tuple[int, str | None]]]],
) -> None:
    haystack, plan, read = Haystack(), [], 0
    for count, grown in calls:
        plan += grown[len(plan):]  # the same object, grown in place
        lost, same = haystack.lost_after(count, plan)
        assert lost == lost_messages(count, plan)
        assert list(lost) == list(lost_messages(count, plan))  # same order: same JSON
        assert haystack.visited == len(plan) - read
        if same:
            assert lost is haystack.found
        read = len(plan)
    other = list(plan)  # another plan (a step's): read whole
    assert haystack.lost_after(calls[-1][0], other)[0] == lost_messages(calls[-1][0], other)
    assert haystack.visited == len(other)


@settings(max_examples=300, deadline=None)
@given(a=st.sets(st.integers(0, 40), max_size=16), b=st.sets(st.integers(0, 40), max_size=16))
def test_the_near_prefilter_never_rejects_a_near_pair(a: set[int], b: set[int]) -> None:
    x, y = tuple(sorted(a)), tuple(sorted(b))
    if similarity(x, y) >= NEAR_SAME:
        assert _may_be_near(set(x), y)


def test_materialize_with_copies_makes_only_new_rewritten_messages() -> None:
    msgs = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    plan = [(0, None), (1, "one"), (3, "three")]
    copies: dict[int, Any] = {}
    first = materialize(msgs, plan, copies)
    assert first == materialize(msgs, plan) and set(copies) == {1, 3}
    made = copies[1]
    plan += [(4, None), (5, "five")]
    again = materialize(msgs, plan, copies)
    assert again == materialize(msgs, plan)
    assert again[1] is made and set(copies) == {1, 3, 5}
    assert again[0] is msgs[0] and again[3] is msgs[4]


def _peek(engine: ContextEngine, session: str) -> Prefix:
    prefix = engine.prefixes.take("t1", session)
    assert prefix is not None
    engine.prefixes.put("t1", session, prefix)
    return prefix


async def test_a_late_call_between_steps_reads_only_its_new_messages(
    settings: Any, embedder: Any
) -> None:
    """On a long session, every call that reuses its session's prefix (but the first after
    a step, which reads the forwarded list once) reads as many messages and plan entries as
    it added, and makes as many rewritten copies: as few late as early."""
    _, msgs, _ = synthetic_session(0, turns=150)
    engine = _engine(settings, embedder, True)
    work: list[tuple[int, int, int, int]] = []  # call, new messages, scanned, plan entries read
    previous: Prefix | None = None
    count, warm = 0, False
    for n, (body, _) in enumerate(_growing(msgs)):
        reused = engine.prefixes.reused
        call = CallContext("t1", f"late{n}", {"x-ctxgate-session-id": "late"})
        fitted = await engine.fit(body, call)
        prefix = _peek(engine, "late")
        new = len(body["messages"]) - count
        copies_before = len(prefix.copies) if previous is prefix else 0
        this_reused = engine.prefixes.reused > reused and previous is prefix
        if this_reused and warm and fitted.plan is not None:
            assert prefix.calls is not None and prefix.haystack is not None
            work.append((n, new, prefix.calls.visited, prefix.haystack.visited))
        if this_reused:
            assert len(prefix.copies) - copies_before <= new
        previous, count, warm = prefix, len(body["messages"]), this_reused
    assert len(work) > 60
    late = [w for w in work if w[0] >= 2 * len(_growing(msgs)) // 3]
    assert late, "no late call reused its session's prefix"
    assert all(scanned == new and read <= new for _, new, scanned, read in work)
    assert max(w[1] for w in late) <= 6  # a turn's few messages, not the history


TOOLS = [{"type": "function", "function": {"name": "sh", "parameters": {"type": "object"}}}]


def _repeating_session(turns: int) -> list[dict[str, Any]]:
    """A shell session whose tool calls repeat now and then (three in four of ARGS)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You run shell commands with sh."},
        {"role": "user", "content": "Find the failing test in the repository."},
    ]
    for k in range(turns):
        args = ARGS[k % 3] if k % 4 else json.dumps({"command": f"pytest -k case{k} " * 9})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{k}", "type": "function",
             "function": {"name": "sh", "arguments": args}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k}",
                         "content": f"output {k} " * 40})
    return messages


async def test_repeated_calls_are_pointed_alike_with_and_without_the_prefix(
    settings: Any, embedder: Any
) -> None:
    """A session repeating its tool calls: the engine keeping its scan on the prefix
    forwards what an engine without a prefix cache forwards, call by call."""
    messages = _repeating_session(40)
    calls = [({"messages": messages[:end], "tools": TOOLS}, {})
             for end in range(4, len(messages) + 1, 2)]
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    reused = await _same(cached, plain, calls, "repeats")
    assert reused > len(calls) // 2
    last = (await cached.fit(calls[-1][0], CallContext("t1", "again", {
        "x-ctxgate-session-id": "repeats-2"}))).body["messages"]
    pointed = [c for m in last for c in m.get("tool_calls") or ()
               if "same as call" in c["function"]["arguments"]]
    assert pointed  # the repeats were found and pointed


async def test_an_edited_earlier_call_is_pointed_as_a_fresh_fit_points_it(
    settings: Any, embedder: Any
) -> None:
    """The scan kept on the prefix trusts that the client messages it read are unchanged;
    a session that edits an earlier call's arguments (making a repeat of a later call and
    undoing one) fails the prefix's byte check and forwards what an engine without a
    prefix cache forwards, call by call, across its steps."""
    messages = _repeating_session(60)
    calls = [({"messages": messages[:end], "tools": TOOLS}, {})
             for end in range(4, len(messages) + 1, 2)]
    edited = json.loads(json.dumps(messages))
    edited[4]["tool_calls"][0]["function"]["arguments"] = ARGS[2]  # call_1 (ARGS[1]) now as call_2
    edited[2]["tool_calls"][0]["function"]["arguments"] = ARGS[0]  # call_0 repeats no more
    calls += [({"messages": edited[:end], "tools": TOOLS}, {})
              for end in range(len(messages) - 30, len(messages) + 1, 2)]
    cached, plain = _engine(settings, embedder, True), _engine(settings, embedder, False)
    reused = await _same(cached, plain, calls, "edited")
    assert reused > len(calls) // 2


@st.composite
def two_fittings(draw: Any) -> tuple[list[dict[str, Any]], list[Any], list[Any], list[Any]]:
    """Messages, their items, and two fittings of them (each item kept, rewritten or left
    out) that send the same up to a drawn message and may differ from there on."""
    n = draw(st.integers(1, 70))
    messages = [{"role": "user" if i % 2 else "assistant", "content": f"message {i}"}
                for i in range(n)]
    items = parse_request({"messages": messages}, COUNTER, "o200k_base").items
    same_until = draw(st.integers(0, n))

    def fitting(fates: list[str]) -> list[Any]:
        out = []
        for item, fate in zip(items, fates, strict=True):
            if fate != "out":
                out.append(item if fate == "as is" else restated_text(item, fate))
        return out

    fate = st.sampled_from(["as is", "as is", "out", "gist"])
    first = [draw(fate) for _ in items]
    second = first[:same_until] + [draw(fate) for _ in items[same_until:]]
    return messages, items, fitting(first), fitting(second)


def restated_text(item: Any, text: str) -> Any:
    from dataclasses import replace

    return replace(item, text=f"{text} {item.message_index}", tokens=1)


@settings(max_examples=150, deadline=None)
@given(case=two_fittings())
def test_a_render_resumed_from_a_mark_is_the_render_from_scratch(case: Any) -> None:
    """A step call renders from the last mark before its first change (`render_from`): it
    gives what rendering every message anew gives, its marks too; the rewritten messages
    before the mark are the earlier render's own copies, those after it too where it makes
    the same copy (the same message, the same text), and the copies it keeps are those of
    its own plan."""
    from bisect import bisect_right

    from gateway.context.render import render_from, render_messages

    messages, items, before, after = case
    earlier = render_messages(messages, items, before)
    whole = render_messages(messages, items, after)
    first = next((min(a.message_index, b.message_index)
                  for a, b in zip(before, after, strict=False) if a != b),
                 min([len(messages), *(x[min(len(before), len(after))].message_index
                                       for x in (before, after)
                                       if len(x) > min(len(before), len(after)))]))
    at = bisect_right(earlier.marks, first, key=lambda m: m.index) - 1
    if at < 0:
        return
    mark = earlier.marks[at]
    resumed = render_from(
        messages, [i for i in items if i.message_index >= mark.index],
        [i for i in after if i.message_index >= mark.index], mark,
        (earlier.plan, earlier.digests, earlier.marks), earlier.copies)
    assert (resumed.plan, resumed.digests, resumed.changed, resumed.messages) == (
        whole.plan, whole.digests, whole.changed, whole.messages)
    assert [(m.pos, m.index, m.changed, m.rolling.hexdigest()) for m in resumed.marks] == [
        (m.pos, m.index, m.changed, m.rolling.hexdigest()) for m in whole.marks]
    assert resumed.copies == whole.copies
    rewritten = {i: text for i, text in resumed.plan if text is not None}
    assert set(resumed.copies) == set(rewritten)
    for i, copy in resumed.copies.items():
        assert copy["content"] == rewritten[i]
        was = earlier.copies.get(i)  # after the mark: taken again where it is the same copy
        assert (copy is was) == (i < mark.index or (
            was is not None and was["content"] == copy["content"]))


def _items_view(prefix: Prefix) -> tuple[Any, ...]:
    """What a prefix keeps of its items alone, against what reading them whole gives."""
    fresh = _derived([prefix.layout.restate(i) for i in prefix.items], prefix.layout.count)
    ids = lambda items: [(i.id, i.pinned) for i in items]  # noqa: E731
    kept = (prefix.item_tokens, prefix.system_tokens, prefix.compactable,
            {k: ids(prefix.layout.restate(i) for i in g) for k, g in prefix.watched.items()},
            [i.id for i in prefix.goal_items])
    whole = (fresh.item_tokens, fresh.system_tokens, fresh.compactable,
             {k: ids(g) for k, g in fresh.watched.items()}, [i.id for i in fresh.goal_items])
    return kept, whole


async def test_a_step_prefix_derived_from_the_last_one_is_the_prefix_read_whole(
    settings: Any, embedder: Any
) -> None:
    """A step call builds its prefix from the one it extended (`_derived_from`: its new
    messages and those it watches read); after every call of a long session, and of the
    same session with an earlier message edited, what the prefix keeps of its items is
    what reading them whole gives, and pins that lapsed are not watched."""
    _, msgs, _ = synthetic_session(1, turns=90)
    engine = _engine(settings, embedder, True)
    calls = _growing(msgs)
    edited = json.loads(json.dumps(msgs))
    edited[5]["content"] = f"{edited[5]['content']} (edited)"
    steps = 0
    for n, (body, _) in enumerate(calls + _growing(edited)[len(calls) - 20:]):
        before = engine.prefixes.reused
        await engine.fit(body, CallContext("t1", f"d{n}", {"x-ctxgate-session-id": "derived"}))
        built = engine.prefixes.reused == before
        kept, whole = _items_view(_peek(engine, "derived"))
        assert kept == whole, f"call {n}"
        steps += built
    assert steps > 10


class _Watched(list[Any]):
    """Messages that note the lowest index read."""

    least = 10**9

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, int):
            self.least = min(self.least, i)
        return super().__getitem__(i)


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 3), turns=st.integers(1, 40), data=st.data())
def test_the_step_horizon_reads_from_the_horizon_and_finds_what_reading_all_finds(
    seed: int, turns: int, data: Any
) -> None:
    """`step_horizon` reads only the messages at or after the session's horizon (a late
    step call: the verbatim turns, not its history) and returns what `horizon_after` of
    every message's turns and compactable tokens returns."""
    _, msgs, _ = synthetic_session(seed, turns=turns)
    items = parse_request({"messages": msgs}, COUNTER, "o200k_base").items
    every: dict[int, int] = {}
    for item in items:
        if not (item.pinned or item.goal or item.kind == "system"):
            every[item.message_index] = every.get(item.message_index, 0) + item.tokens
    all_turns = [i for i, m in enumerate(msgs) if m.get("role") == "assistant"]
    state = SessionState(horizon=data.draw(st.integers(0, len(msgs) + 2)),
                         calls=data.draw(st.integers(0, 60)), steps=data.draw(st.integers(0, 9)))
    stale, forced = data.draw(st.integers(0, 300)), data.draw(st.booleans())
    # marks at the verbatim turns and tokens give or take one: a message missed tips them
    tokens = stale + sum(n for i, n in every.items() if i >= state.horizon)
    n_turns = sum(1 for i in all_turns if i >= state.horizon)
    high = max(1, tokens + data.draw(st.integers(-1, 1)))
    cls = TaskClass(name="c", compaction=Compaction(
        verbatim_tokens_high=high, verbatim_tokens_low=data.draw(st.integers(0, high - 1)),
        verbatim_turns_high=data.draw(st.none() | st.just(max(3, n_turns - 1))),
        min_step_turns=data.draw(st.integers(0, 3)),
        max_step_share=data.draw(st.sampled_from([0.2, 0.5, 1.0]))))
    expected = horizon_after(all_turns, every, len(msgs), state, cls, stale, forced,
                             call_tokens=sum(i.tokens for i in items),
                             unanswered=open_tokens(items))
    watched = _Watched(msgs)
    assert step_horizon(watched, items, state, cls, stale, forced=forced) == expected
    assert watched.least >= state.horizon


GISTS = ['gist', 'a ,"3": quote', '{"7":null}', 'é \\",\\"2\\":']


@st.composite
def stepping_plans(draw: Any) -> list[tuple[int, list[tuple[int, str | None]], bool]]:
    """(messages, plan, step) per call: between steps the plan grows in place; a step keeps
    a drawn start of it and decides every later message anew (texts that look like JSON)."""
    calls: list[tuple[int, list[tuple[int, str | None]], bool]] = []
    plan: list[tuple[int, str | None]] = []
    count = 0

    def fates(start: int, end: int) -> list[tuple[int, str | None]]:
        out: list[tuple[int, str | None]] = []
        for i in range(start, end):
            fate = draw(st.sampled_from(["sent", "sent", "dropped", *GISTS]))
            if fate != "dropped":
                out.append((i, None if fate == "sent" else f"{fate} {i}"))
        return out

    for _ in range(draw(st.integers(1, 14))):
        added = draw(st.integers(0 if count else 1, 6))
        step = bool(calls) and draw(st.integers(0, 2)) == 0
        if step:
            keep = draw(st.integers(0, len(plan)))
            start = plan[keep][0] if keep < len(plan) else count
            plan = plan[:keep] + fates(start, count + added)
        else:
            plan += fates(count, count + added)
        count += added
        calls.append((count, list(plan), step))
    return calls


@settings(max_examples=200, deadline=None)
@given(calls=stepping_plans())
def test_the_lost_messages_json_spliced_at_a_step_is_the_json_written_whole(
    calls: list[tuple[int, list[tuple[int, str | None]], bool]],
) -> None:
    """At a step the session's `lost` is the last one's up to the first message the new
    plan renders otherwise, and the new entries after it: the same dict, in the same order,
    and the same bytes as `lost_messages` dumped whole."""
    state, haystack = SessionState(), Haystack()
    plan: list[tuple[int, str | None]] = []
    for count, drawn, step in calls:
        if step:
            plan = list(drawn)  # a new object
        else:
            plan += drawn[len(plan):]  # the same object, grown in place
            if count % 3 == 2:
                continue  # a call that never got to observe: the plan grew unread
        messages = [{"role": "user", "content": str(i)} for i in range(count)]
        observe(state, messages, plan, task_class="c", mode="managed", haystack=haystack)
        lost = lost_messages(count, plan)
        assert haystack.found == lost and list(haystack.found) == list(lost)
        assert state.lost == (orjson.dumps({str(i): t for i, t in lost.items()}) if lost
                              else None)


def test_a_step_keeping_the_start_of_the_plan_splices_the_kept_json() -> None:
    """A step that renders the first messages as the last plan did keeps their JSON and
    reads only the plan's entries from the first change."""
    haystack = Haystack()
    plan = [(1, "gist 1"), (2, None), (4, 'a ,"5": b')]
    haystack.lost_after(6, plan)
    haystack.found_raw = orjson.dumps({str(i): t for i, t in haystack.found.items()})
    step = [(1, "gist 1"), (2, None), (3, "gist 3"), (5, None)]
    lost, same = haystack.lost_after(7, step)
    assert same and lost == lost_messages(7, step)
    assert haystack.found_raw == orjson.dumps({"0": None, "1": "gist 1", "3": "gist 3",
                                               "4": None, "6": None})


@settings(max_examples=200, deadline=None)
@given(calls=stepping_plans())
def test_the_lost_runs_kept_from_the_last_call_are_the_runs_read_whole(
    calls: list[tuple[int, list[tuple[int, str | None]], bool]],
) -> None:
    """A save writes `lost` in runs (`session.lost_runs`); the fidelity signals make them
    from the runs the last call kept (`Haystack.found_runs`: only those from the first
    message whose entry changed are made again). Runs of 4 messages here, so that steps
    and growing plans cross many: after every call that changed `lost`, the runs handed to
    the save and their hashes are those of decoding `lost` whole (fails when a change is not
    marked: a run keeps an entry the session no longer has)."""
    state, haystack = SessionState(), Haystack()
    plan: list[tuple[int, str | None]] = []
    with patch.object(fidelity_module, "LOST_RUN", 4), patch.object(session_module,
                                                                   "LOST_RUN", 4):
        for count, drawn, step in calls:
            if step:
                plan = list(drawn)
            else:
                plan += drawn[len(plan):]
            messages = [{"role": "user", "content": str(i)} for i in range(count)]
            before = state.lost
            observe(state, messages, plan, task_class="c", mode="managed", haystack=haystack)
            if state.lost is None or state.lost == before:
                continue
            assert state.lost_split is not None and state.lost_split[0] is state.lost
            runs = lost_runs(state.lost)
            assert state.lost_split[1] == runs and state.lost_split[2] == run_hashes(runs)
            mapping, deleted = state.changes()
            record = record_changes(state, mapping, deleted, None)
            assert record.lost_runs == run_hashes(runs)
            state.saved()


async def test_a_step_re_applies_only_what_it_changed_and_gets_what_re_applying_all_gets(
    settings: Any, embedder: Any
) -> None:
    """A step call re-applies the decisions it changed only (`reapply_changed`, spliced
    into the items the decisions before it sent): on a long session, and on the same
    session with an earlier message edited (the full path, no prefix), every step's list
    is the one `reapply` over every item gives, item for item, and the ids it was given
    are those whose decision differs (fails when an undone decision is left out)."""
    _, msgs, _ = synthetic_session(1, turns=90)
    engine = _engine(settings, embedder, True)
    calls = _growing(msgs)
    edited = json.loads(json.dumps(msgs))
    edited[5]["content"] = f"{edited[5]['content']} (edited)"
    checked: list[int] = []
    real = engine_module.reapply_changed

    def checking(items: Any, decisions: Any, changed: Any, applied: Any, originals: Any,
                 *rest: Any) -> Any:
        earlier = checking.earlier  # type: ignore[attr-defined]
        assert set(changed) == {
            k for k in decisions.keys() | earlier.keys() if decisions.get(k) != earlier.get(k)}
        out = real(items, decisions, changed, applied, originals, *rest)
        whole = reapply(items, decisions, earlier, applied, *rest)
        assert out is not None
        assert [(i.id, i.text, i.tokens, i.fixed_tokens) for i in out] == [
            (i.id, i.text, i.tokens, i.fixed_tokens) for i in whole]
        checked.append(len(changed))
        return out

    real_fit_items = engine._fit_items

    async def fit_items(messages: Any, parsed: Any, cls: Any, budget: Any, state: Any,
                        *rest: Any) -> Any:
        checking.earlier = state.decisions  # type: ignore[attr-defined]
        return await real_fit_items(messages, parsed, cls, budget, state, *rest)

    with patch.object(engine_module, "reapply_changed", checking), \
            patch.object(engine, "_fit_items", fit_items):
        for n, (body, _) in enumerate(calls + _growing(edited)[len(calls) - 20:]):
            await engine.fit(body, CallContext("t1", f"r{n}", {"x-ctxgate-session-id": "re"}))
    assert len(checked) > 10 and any(checked), checked


FATES = [None, Decision("select", "drop", "recency", "drop"),
         Decision("select", "mask", "stale", "mask"),
         Decision("compress", "compress", "aged", "summary", text="a gist"),
         Decision("compress", "compress", "aged", "summary", text="another gist")]


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_re_applying_the_changed_decisions_only_is_re_applying_all(data: st.DataObject) -> None:
    """`reapply_changed`, given the ids `changed_decisions` finds, gives what `reapply`
    gives over every item, for drawn decisions before and after a step (made, changed,
    undone, an item dropped before and sent now, several in one message; pinned items
    sent as is): the same items, in the same order (fails when undone ids are left out
    of `changed`, or when an item sent again is spliced at the wrong place)."""
    _, msgs, _ = synthetic_session(data.draw(st.integers(0, 3)), turns=6)
    parsed = parse_request({"model": "m", "messages": msgs}, COUNTER, "o200k_base")
    items = parsed.items
    draw = lambda: {i.id: d for i in items  # noqa: E731
                    if (d := data.draw(st.sampled_from(FATES))) is not None}
    earlier, decisions = draw(), draw()
    if data.draw(st.booleans()):  # a step that changes a few only
        decisions = {**earlier, **dict(list(decisions.items())[:3])}
    applied = apply_decisions(items, earlier, COUNTER, "o200k_base", frozenset())
    changed = changed_decisions(decisions, earlier)
    assert changed == {k for k in decisions.keys() | earlier.keys()
                       if decisions.get(k) != earlier.get(k)}
    out = reapply_changed(items, decisions, changed, applied, {i.id: i for i in items},
                          COUNTER, "o200k_base", frozenset())
    whole = reapply(items, decisions, earlier, applied, COUNTER, "o200k_base", frozenset())
    assert out is not None
    assert [(i.id, i.text, i.tokens) for i in out] == [(i.id, i.text, i.tokens) for i in whole]


@settings(max_examples=150, deadline=None)
@given(calls=growing_plans(), data=st.data())
def test_materialize_picked_from_the_last_call_gives_the_very_objects_of_materialize(
    calls: list[tuple[int, list[tuple[int, str | None]]]], data: st.DataObject,
) -> None:
    """Between steps a call's forwarded list is taken by `materialize_picked` from what the
    last call picked of the same growing plan (`Picks`, kept with the prefix): each call
    sends its own messages (a new list of new objects each call, as a new body decodes)
    and the copies made so far, object for object what `materialize` with the copies gives
    (fails when a picked entry keeps an earlier call's message, or when a copy is placed
    by a stale number)."""
    plan: list[tuple[int, str | None]] = []
    copies: dict[int, Any] = {}
    check: dict[int, Any] = {}
    picks = Picks()
    for count, grown in calls:
        plan += grown[len(plan):]
        msgs = [{"role": "user", "content": f"m{i}"} for i in range(count)]
        picked = materialize_picked(msgs, plan, copies, picks)
        expected = materialize(msgs, plan, check)
        assert picked == expected and len(picked) == len(plan)
        for (i, text), got in zip(plan, picked, strict=True):
            assert (got is msgs[i]) if text is None else (got is copies[i])
        assert picks.planned == len(plan)
        if data.draw(st.booleans()):
            check = dict(copies)  # materialize's copies are the ones kept
