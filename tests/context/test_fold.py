"""Old finished exchanges folded into a gateway note (gateway/context/fold.py): the real
engine on the embedded Redis, the shipped configuration, a support agent's ticket queue."""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson

from gateway.context.engine import ContextEngine, FittedCall
from gateway.context.fold import (
    FOLD_HEAD,
    FOLD_REASON,
    TURNS_BLOCK,
    TURNS_HEAD,
    TURNS_REASON,
    FoldMemo,
    find_runs,
    find_turn_runs,
    fold,
    sent_as,
)
from gateway.context.items import PINNED
from gateway.observability.explain import account_of, explain
from gateway.observability.reconstruct import reconstruct
from gateway.settings import Settings
from tests.context.sessions import drops_add_up, fit_each_call

TURNS_MARK = " turns folded]"  # a turns run's note header: [ctxgate: k turns folded]
TOOLS = [{"type": "function", "function": {"name": "get_reservation",
                                           "parameters": {"type": "object"}}}]


def _segments(k: int) -> str:
    return "\n".join(f"segment {i}: flight HAT{k:03d}{i} on 2024-05-{10 + i} seat {i}A"
                     for i in range(12))


def support_queue(tickets: int,
                  result: Callable[[int], str] = _segments) -> list[dict[str, Any]]:
    """One agent working tickets one after another: a customer turn naming its ids, a
    lookup (with its reservation id and the customer's), its result (`result(k)`: a list
    of segments by default), the agent's answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You help customers with their reservations."},
        {"role": "user", "content": "Hello, I need help with my booking."},
        {"role": "assistant", "content": "Sure, what is your reservation?"},
    ]
    for k in range(tickets):
        messages.append({"role": "user", "content": (
            f"Hi, I am customer cust_{k:03d}_4411 and I would like to know the current status "
            f"of my reservation RES{k:03d}X before I travel, thanks.")})
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{k:03d}_abcdefghijklmnopqrstuvwx", "type": "function", "function": {
                "name": "get_reservation",
                "arguments": f'{{"id": "RES{k:03d}X", "customer": "cust_{k:03d}_4411"}}'}}]})
        messages.append({"role": "tool", "tool_call_id": f"call_{k:03d}_abcdefghijklmnopqrstuvwx",
                         "content": result(k)})
        messages.append({"role": "assistant", "content": f"Reservation RES{k:03d}X is confirmed."})
    return messages


def check_structure(messages: list[dict[str, Any]]) -> None:
    """Every call answered by the tool messages right after it, every result answering a
    call right before it, no assistant turn follows an assistant turn."""
    k = 0
    while k < len(messages):
        msg = messages[k]
        calls = msg.get("tool_calls") or []
        if msg["role"] == "tool":
            raise AssertionError(f"result {k} answers no call right before it")
        if calls:
            ids = sorted(c["id"] for c in calls)
            results = messages[k + 1:k + 1 + len(calls)]
            assert sorted(r.get("tool_call_id", "") for r in results) == ids, k
            assert all(r["role"] == "tool" for r in results), k
            k += 1 + len(calls)
            continue
        if k and msg["role"] == "assistant":
            assert messages[k - 1]["role"] != "assistant" or messages[k - 1].get("tool_calls")
        k += 1


async def replay(engine: ContextEngine, messages: list[dict[str, Any]], session: str
                 ) -> list[FittedCall]:
    fits = await fit_each_call(engine, messages, TOOLS, "t-fold", session)
    return fits


async def test_a_long_queue_folds_old_exchanges_keeping_values_and_pairs(
    engine: ContextEngine, settings: Settings, drop_log_path: Path
) -> None:
    compress = settings.task_classes["agent"]["stages"]["compress"]
    assert compress["fold_from_turns"] == 60
    messages = support_queue(45)  # 91 turns
    fits = await replay(engine, messages, "fold-long")
    last = fits[-1]
    assert last.task_class == "agent"
    sent = last.body["messages"]
    check_structure(sent)
    # the old turns went as notes (fold_turns) of what their folds and turns named, one a
    # block of TURNS_BLOCK client messages
    notes = [m["content"] for m in sent if m["role"] == "user" and TURNS_MARK in m["content"]]
    assert len(notes) >= 2
    note = "\n".join(notes)
    assert FOLD_HEAD not in note  # each run's header goes with its turn
    # the values of each folded lookup stay: its reservation and customer ids, and the reply
    folded = {int(n) for n in re.findall(r"get_reservation\(RES(\d+)X", note)}
    assert len(folded) >= 30
    for k in folded:
        assert f"\nget_reservation(RES{k:03d}X, cust_{k:03d}_4411) → " in note
    # a folded reply's values stay (its words that name nothing go)
    assert "is confirmed." not in note
    calls_left = {c["function"]["arguments"] for m in sent for c in m.get("tool_calls") or ()}
    assert not any(f'"RES{k:03d}X"' in a for k in folded for a in calls_left)
    # the drop log adds up on every call, each folded message accounted for once
    assert all(drops_add_up(fit) for fit in fits)
    turn_events = [d for d in last.drops if d.reason == TURNS_REASON]
    carriers = [d for d in turn_events if d.action == "compress"]
    assert len(carriers) == len(notes) and all(d.kind == "user" for d in carriers)
    blocks = [d.message_index // TURNS_BLOCK for d in carriers]
    assert blocks == sorted(set(blocks))  # one run a block
    # every client message from a carrier to its kept reply: one event (4 a ticket)
    assert len(turn_events) >= 4 * (len(folded) - len(notes))
    first = carriers[0].message_index
    kept = set(range(first, first + len(turn_events) + len(notes))) - {
        d.message_index for d in turn_events}
    assert len(kept) == len(notes)  # each run's kept reply, right after its events
    assert len({d.message_index for d in last.drops}) == len(last.drops)
    assert all(d.tokens_after == 0 for d in turn_events if d not in carriers)
    # the plan says the same as the messages (the wire adapters render from it)
    assert last.plan is not None and len(last.plan) == len(sent)
    for (i, text), out in zip(last.plan, sent, strict=True):
        assert out["content"] == (messages[i]["content"] if text is None else text) or (
            messages[i]["role"] == "user")  # a gist's text, or the note's
    # the drop log's decision lines rebuild every call's drops, the folds included
    rebuilt = list(reconstruct(orjson.loads(line) for line in drop_log_path.read_bytes(
        ).splitlines() if line.strip()))
    assert len(rebuilt) == len(fits) and all(call.balanced for call in rebuilt)
    assert sorted((d["item_id"], d["reason"], d["tokens_after"]) for d in rebuilt[-1].drops) == (
        sorted((d.item_id, d.reason, d.tokens_after) for d in last.drops))
    # the explainer says where each folded message went, and its account adds up
    explained = explain(account_of(last, last.budget_source), "tr", "t-fold")
    by_index = {m["index"]: m for m in explained["messages"]}
    folded_msgs = [m for m in explained["messages"] if m["status"] == "folded"]
    assert len(folded_msgs) == len(turn_events) - len(notes)
    into = {by_index[d.message_index]["index"] for d in carriers}
    for i in into:
        carrier = by_index[i]
        assert carrier["status"] == "digested"
        assert TURNS_MARK in sent[carrier["sent_as"]]["content"]
    for m in folded_msgs:
        assert m["sent_as"] is None and m["folded_into"] in into
        assert m["index"] in by_index[m["folded_into"]]["carries_folded"]
    tokens = explained["tokens"]
    assert tokens["saved_by_drops"] == tokens["before"] - tokens["after"]
    # between steps the fold repeats itself byte for byte: the prefix cache holds
    extends = sum(
        1 for a, b in pairwise(fits)
        if b.body["messages"][:len(a.body["messages"])] == a.body["messages"])
    assert extends >= 0.7 * (len(fits) - 1)


async def test_a_short_queue_is_not_folded(engine: ContextEngine) -> None:
    fits = await replay(engine, support_queue(14), "fold-short")  # 29 turns
    for fit in fits:
        assert not any(FOLD_HEAD in str(m.get("content")) for m in fit.body["messages"])
        assert not any(d.reason == FOLD_REASON for d in fit.drops)
    sent = fits[-1].body["messages"]
    assert sum(1 for m in sent if m["role"] == "tool") == 14


def _run(*, pinned: bool = False, answered: bool = True, reply: bool = True,
         parts: bool = False, answers: str = "c1") -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function",
            "function": {"name": "lookup", "arguments": '{"id": "RES001X", "n": 7}'}}
    assistant: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
    if pinned:
        assistant[PINNED] = True
    if parts:
        assistant["content"] = [{"type": "opaque", "block": {"type": "thinking"}}]
    out: list[dict[str, Any]] = [{"role": "user", "content": "status of RES001X?"}, assistant]
    if answered:
        out.append({"role": "tool", "tool_call_id": answers, "content": "[ctxgate: omitted {…]"})
    if reply:
        out.append({"role": "assistant", "content": "Confirmed."})
    out.append({"role": "user", "content": "thanks"})
    return out


def test_only_finished_plain_runs_closed_by_a_reply_fold() -> None:
    messages = _run()
    indexes = list(range(len(messages)))
    runs = find_runs(messages, indexes, horizon=len(messages))
    assert [(r.user, r.start, r.end) for r in runs] == [(0, 1, 3)]
    assert find_runs(messages, indexes, horizon=3) == []  # its reply is not behind it
    for variant in (_run(pinned=True), _run(answered=False), _run(reply=False),
                    _run(parts=True), _run(answers="c2")):
        assert find_runs(variant, list(range(len(variant))), len(variant)) == [], variant


def test_a_fold_notes_values_and_results_as_sent_and_keeps_the_log_adding_up() -> None:
    messages = _run()
    events: list[Any] = []
    folded = fold(messages, None, events, len(messages), lambda i: (f"id{i}", 40),
                  len, FoldMemo())
    assert folded is not None
    assert [m["role"] for m in folded.messages] == ["user", "assistant", "user"]
    assert folded.messages[0]["content"] == (
        "status of RES001X?\n[ctxgate: calls after this, folded]\nlookup(RES001X, 7) → omitted")
    assert folded.plan == [(0, folded.messages[0]["content"]), (3, None), (4, None)]
    saved = sum(e.tokens_before - e.tokens_after for e in folded.events)
    assert saved == -folded.delta  # 2 messages of 40 tokens, less the note's
    assert sent_as("[ctxgate: omitted Neither…; mentions: 11 HAT136]") == (
        "omitted; mentions: 11 HAT136")


def _talk(pinned_at: int | None = None) -> list[dict[str, Any]]:
    """Old turns as an aged session sends them, then the latest user message."""
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You help customers."},
        {"role": "user", "content": "[ctxgate: omitted Hi there…; mentions: 555-123-2002]"},
        {"role": "assistant", "content": "Thank you."},
        {"role": "user", "content": "[…2 lines]"},
        {"role": "assistant", "content": "Your plan P1001 has 5GB."},
        {"role": "user", "content": "###TRANSFER###"},
        {"role": "assistant", "content": "Hi! How can I help?"},
        {"role": "user", "content": "My data is slow."},
    ]
    if pinned_at is not None:
        out[pinned_at][PINNED] = True
    return out


def test_only_two_or_more_closed_turns_behind_the_horizon_make_a_turns_run() -> None:
    messages = _talk()
    indexes = list(range(len(messages)))
    assert [(r.user, r.start, r.end) for r in find_turn_runs(messages, indexes, 7)] == [
        (1, 2, 6)]
    assert [(r.user, r.start, r.end) for r in find_turn_runs(messages, indexes, 6)] == [
        (1, 2, 4)]  # the third turn's reply is not behind the horizon
    assert find_turn_runs(messages, indexes, 4) == []  # one turn gains nothing
    pinned = _talk(pinned_at=3)  # a pinned message breaks the run: one turn each side
    assert find_turn_runs(pinned, indexes, 7) == []
    # a run starts no turn past a block's end: turns at client 61, 63 | 65 (one: no run)
    assert TURNS_BLOCK == 64
    shifted = [i + 60 for i in indexes]
    assert [(r.user, r.start, r.end) for r in find_turn_runs(messages, shifted, 128)] == [
        (1, 2, 4)]


def test_a_turns_run_goes_as_one_note_of_what_it_named_and_the_log_adds_up() -> None:
    messages = _talk()
    folded = fold(messages, None, [], 7, lambda i: (f"id{i}", 40), len, FoldMemo())
    assert folded is not None
    assert [m["role"] for m in folded.messages] == ["system", "user", "assistant", "user"]
    # a placeholder's values, a reply's words that name one as written, a user text as
    # sent; a placeholder's excerpt, a digest that kept no line and words naming nothing go
    note = "[ctxgate: 3 turns folded]\n555-123-2002\nP1001 5GB.\n###TRANSFER###"
    assert folded.messages[1]["content"] == note and TURNS_HEAD.match(note)
    assert folded.messages[2]["content"] == "Hi! How can I help?"  # the last reply stays
    assert folded.plan == [(0, None), (1, note), (6, None), (7, None)]
    assert [(e.message_index, e.action, e.reason, e.tokens_after) for e in folded.events] == [
        (1, "compress", TURNS_REASON, len(note))] + [
        (i, "drop", TURNS_REASON, 0) for i in range(2, 6)]
    assert sum(e.tokens_saved for e in folded.events) == -folded.delta == 5 * 40 - len(note)


def test_a_turns_run_takes_an_earlier_fold_with_its_events() -> None:
    messages = [*_run(), {"role": "assistant", "content": "Bye."},
                {"role": "user", "content": "one more thing"}]
    folded = fold(messages, None, [], 6, lambda i: (f"id{i}", 40), len, FoldMemo())
    assert folded is not None
    note = "[ctxgate: 2 turns folded]\nstatus of RES001X?\nlookup(RES001X, 7) → omitted\nthanks"
    assert folded.messages == [{"role": "user", "content": note},
                               {"role": "assistant", "content": "Bye."},
                               {"role": "user", "content": "one more thing"}]
    # the exchange's own fold events are replaced: one event a client message, 0..4
    assert [(e.message_index, e.reason) for e in folded.events] == [
        (i, TURNS_REASON) for i in range(5)]
    assert [e.kind for e in folded.events] == ["user", "tool_call", "tool_result", "assistant",
                                               "user"]
    assert sum(e.tokens_saved for e in folded.events) == -folded.delta == 5 * 40 - len(note)


def _queue_session(rng: Any, n: int, tag: str = "") -> list[dict[str, Any]]:
    """A long session of talk turns and finished exchanges, some texts placeholders."""
    out: list[dict[str, Any]] = [{"role": "system", "content": f"You help customers.{tag}"}]
    for k in range(n):
        said = rng.choice([f"order #W{k:04d}{tag} please", "[…2 lines]",
                           f"[ctxgate: omitted Hi…; mentions: 555-{k:04d}]", "thanks"])
        out.append({"role": "user", "content": said})
        if rng.random() < 0.4:
            cid = f"c{k}{tag}"
            out.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function",
                 "function": {"name": "lookup", "arguments": f'{{"id": "W{k:04d}"}}'}}]})
            out.append({"role": "tool", "tool_call_id": cid, "content": rng.choice(
                ["[ctxgate: omitted {…]", f"status W{k:04d}: shipped"])})
        out.append({"role": "assistant", "content": rng.choice(
            ["Done.", f"Your order #W{k:04d} ships on 2024-05-{10 + k % 20}.", None])})
    return out


def _folded(messages: list[dict[str, Any]], horizon: int, memo: FoldMemo,
            counted: list[str]) -> Any:
    def head(i: int) -> tuple[str, int]:
        return f"id{i}", 30 + len(str(messages[i].get("content")))

    def count(text: str) -> int:
        counted.append(text)
        return len(text)

    original = memo.original(messages, "enc", head)
    folded = fold(messages, None, [], horizon, original, count, memo)
    return None if folded is None else (
        folded.messages, folded.plan, [(e.message_index, e.action, e.reason, e.item_id,
                                        e.tokens_before, e.tokens_after, e.text, e.kind)
                                       for e in folded.events], folded.delta)


def test_a_steps_fold_from_the_last_ones_notes_and_heads_is_the_fold_afresh() -> None:
    """The turns notes (by their runs' contents) and the messages' heads (by the message
    objects) a fold keeps for the next: while a session grows, has messages replaced (new
    objects, old and recent), is cut short, restarts or is another history under the same
    memo, every fold equals the fold with a new memo; and a step re-makes only the notes of
    the runs whose contents changed."""
    import random

    rng = random.Random(7)
    memo = FoldMemo()
    session = _queue_session(rng, 260)
    made, total, plain = 0, 0, False
    for n in range(60, len(session), 9):
        messages = list(session[:n])
        op = rng.random()
        if op < 0.25:  # a message inside the folded part replaced by a new object
            k = rng.randrange(1, n // 2)
            if isinstance(messages[k].get("content"), str):
                messages[k] = {**messages[k], "content": messages[k]["content"] + " (edited)"}
        elif op < 0.35:  # the same contents as new objects (a body decoded anew)
            messages = [dict(m) for m in messages]
        elif op < 0.45:  # cut short
            messages = messages[: n - rng.randrange(1, 30)]
        elif op < 0.5:  # another history under the same memo
            messages = _queue_session(random.Random(n), n // 4 + 3, tag="x")
        horizon = len(messages) - rng.randrange(0, 6)
        counted: list[str] = []
        kept = _folded(messages, horizon, memo, counted)
        fresh = _folded(messages, horizon, FoldMemo(), [])
        assert kept == fresh, (n, op)
        if kept is not None and plain and op >= 0.35:  # a step after a step
            total += sum(1 for m in kept[0] if TURNS_HEAD.match(str(m["content"])))
            made += sum(1 for text in counted if TURNS_HEAD.match(text))
        plain = op >= 0.35
    assert total >= 20 and made * 3 < total, (made, total)  # the older blocks' notes kept



def test_a_steps_fold_sends_the_notes_it_makes_again_as_the_last_folds_very_messages() -> None:
    """A step's fold (the horizon moved: folded afresh) sends a user message whose note it
    makes the same as the last fold's very copy (`FoldMemo.users`: the body encoder's runs
    and the short ids' memo go by identity), and a new copy where the note or the message
    changed; the fold equals the fold with a new memo."""
    import random

    memo = FoldMemo()
    messages = _queue_session(random.Random(7), 200)
    horizon = len(messages) - 40
    first = _folded(messages, horizon, memo, [])
    assert first is not None
    notes = {id(m): m for m in first[0] if TURNS_HEAD.match(str(m["content"]))}
    assert len(notes) >= 3
    grown = messages + _queue_session(random.Random(8), 10, tag="y")[1:]
    grown[1] = {**grown[1], "content": "order #W9999 please"}  # the first note's message
    second = _folded(grown, horizon + 30, memo, [])
    assert second == _folded(grown, horizon + 30, FoldMemo(), [])
    again = [m for m in second[0] if id(m) in notes]
    assert len(again) >= len(notes) - 2 and all(m is notes[id(m)] for m in again)
    assert not any(id(m) in notes for m in second[0][:2])  # its message changed: made anew


def test_a_fold_between_steps_is_taken_from_the_memo_on_equal_drop_events() -> None:
    """A call between steps whose drop events before the horizon are equal to the last
    call's but new objects (a full path's call renders them anew from its prefix's last
    mark) takes the last fold from the memo, folding nothing again; once a new decision
    brings a later step, the runs with no events of their own are numbered by it, from the
    memo too. Either way it equals the fold with a new memo, steps included."""
    import random
    from dataclasses import replace

    messages = _queue_session(random.Random(3), 90)
    horizon = len(messages) - 6
    head = [_event(i, 1) for i in range(3, horizon, 11)]
    tail = [_event(len(messages) - 2, 1)]
    memo = FoldMemo()
    _fold_of(messages, head + tail, horizon, memo)
    assert memo.folded is not None and memo.folded.floating
    longer = [*messages, {"role": "user", "content": "and W0001?"},
              {"role": "assistant", "content": "Shipped."}]
    again = [replace(e) for e in head]  # equal, not the same objects
    notes, runs = memo.notes, memo.runs  # a fold made again keeps new ones
    kept = _fold_of(longer, again + tail, horizon, memo)
    assert memo.notes is notes and memo.runs is runs  # taken from the memo
    assert kept == _fold_of(longer, again + tail, horizon, FoldMemo())
    newer = [*longer, {"role": "user", "content": "thanks"}]
    stepped = [*[replace(e) for e in head], *tail, _event(len(longer) - 1, 2)]
    remade = _fold_of(newer, stepped, horizon, memo)
    assert memo.notes is notes  # a later step: the memo's fold, renumbered
    assert remade == _fold_of(newer, stepped, horizon, FoldMemo())
    assert 2 in {e.step for e in remade[2] if e.reason in (FOLD_REASON, TURNS_REASON)}


def _event(i: int, step: int) -> Any:
    from gateway.observability.droplog import DropEvent

    return DropEvent(stage="compress", action="compress", reason="digest", item_id=f"id{i}",
                     kind="tool_result", message_index=i, tokens_before=80,
                     tokens_after=20, step=step)


def _fold_of(sent: list[dict[str, Any]], events: list[Any], horizon: int,
             memo: FoldMemo) -> Any:
    out = fold(sent, None, events, horizon, memo.original(
        sent, "enc", lambda i: (f"id{i}", 30 + len(str(sent[i].get("content"))))),
        len, memo)
    assert out is not None
    return out.messages, out.plan, out.events, out.delta


def test_a_fold_numbers_its_eventless_runs_by_the_calls_latest_step_whichever_path() -> None:
    """The drop events before the horizon the very objects of the last call's (a call on
    its session's prefix), and a new decision after the horizon with a later step (a repeat
    on arrival decided on the prefix): the runs with no events of their own take that step,
    as a fold with a new memo (the full path's, or no prefix cache) numbers them; the
    runs with events of their own keep theirs, and a step back numbers them back."""
    import random

    messages = _queue_session(random.Random(5), 90)
    horizon = len(messages) - 6
    head = [_event(i, 1) for i in range(3, horizon, 17)]
    memo = FoldMemo()
    first = _fold_of(messages, head, horizon, memo)
    assert memo.folded is not None and memo.folded.floating
    steps = {e.message_index: e.step for e in first[2]}
    assert {steps[i] for i in memo.folded.floating} == {1}
    notes = memo.notes
    for step in (3, 4, 2):
        longer = [*messages, {"role": "user", "content": f"and W000{step}?"},
                  {"role": "assistant", "content": "Shipped."}]
        events = [*head, _event(len(longer) - 1, step)]  # the same head objects
        kept = _fold_of(longer, events, horizon, memo)
        assert memo.notes is notes  # taken from the memo
        assert kept == _fold_of(longer, events, horizon, FoldMemo()), step
        floating = memo.folded.floating
        assert {e.step for e in kept[2] if e.message_index in floating} == {max(step, 1)}
        messages = longer


def _ticket(k: int, user: str, name: str, arguments: dict[str, Any], result: str,
            reply: str) -> list[dict[str, Any]]:
    """One old ticket turn: the customer's message, one call and its result (as an aged
    session sends it), the agent's reply."""
    cid = f"t{k}"
    return [{"role": "user", "content": user},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": cid, "type": "function", "function": {
                    "name": name, "arguments": orjson.dumps(arguments).decode()}}]},
            {"role": "tool", "tool_call_id": cid, "content": result},
            {"role": "assistant", "content": reply}]


SUMMARY = ("The user is experiencing persistent mobile data issues on line L1001 despite "
           "enabling roaming, resetting APN settings, and refueling data, the speed test "
           "still fails due to no connection. Further technical assistance is required.")


def test_turns_notes_repeat_nothing_an_earlier_note_has_and_keep_values_not_prose() -> None:
    """A later block's turns note leaves out a line an earlier note of the call has and a
    call already there whose result names nothing new; a reply goes as the words that
    carry its values, as written; an old call's free-text argument as its start and its
    values, its short values whole (bench/README.md, "Turns notes that repeat nothing")."""
    phone = "Sure, my phone number is 555-123-2002."
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You help customers."}]
    messages += _ticket(0, phone, "get_customer_by_phone", {"phone": "555-123-2002"},
                        '{"customer_id":"C1001"}', "Your current plan has a data limit of 5GB "
                        "per month, and you've used 3.2GB so far.")
    messages += _ticket(1, "Please escalate.", "transfer_to_human_agents",
                        {"summary": SUMMARY, "customer": "Kevin Smith", "line": "L1001"},
                        "Transfer successful", "You're welcome!")
    while len(messages) < 2 * TURNS_BLOCK - 9:  # talk that names nothing, to block 1
        messages += [{"role": "user", "content": "[…2 lines]"},
                     {"role": "assistant", "content": "Thank you."}]
    messages += _ticket(2, phone, "get_customer_by_phone", {"phone": "555-123-2002"},
                        "[ctxgate: omitted {\"customer_id\"…]", "Thank you for letting me know.")
    messages += [{"role": "user", "content": "[…1 lines]"},
                 {"role": "assistant", "content": 'Your plan "P1001" has 5GB per month.'},
                 {"role": "user", "content": "My data is slow again."},
                 {"role": "assistant", "content": "Let me check."},
                 {"role": "user", "content": "Thanks."}]
    horizon = len(messages) - 1
    folded = fold(messages, None, [], horizon, lambda i: (f"id{i}", 400), len, FoldMemo())
    assert folded is not None
    notes = [str(m["content"]).split("\n") for m in folded.messages
             if TURNS_HEAD.match(str(m.get("content")))]
    assert [n[1:] for n in notes] == [
        [phone,
         'get_customer_by_phone(555-123-2002) → {"customer_id":"C1001"}',
         "5GB 3.2GB",  # the reply's values, as written
         "Please escalate.",
         "transfer_to_human_agents(The user is experiencing persistent… L1001, Kevin Smith, "
         "L1001) → Transfer successful"],
        # the phone line and the lookup again (its result omitted) are in the first note;
        # of the second reply only P1001 is new (5GB is there), the rest names nothing
        ["P1001", "My data is slow again."]]
    assert sum(e.tokens_saved for e in folded.events) == -folded.delta
