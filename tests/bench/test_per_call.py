"""The replay's per-call mode (`bench/corpora.py`, `bench/corpus_run.py`): a session recorded
per call is replayed with each call's own message list as the client sent it. On a small
session whose client removes the reminder it appended to its newest turn (as OpenHands'
harness does): no gateway pays the client's own prefix break, needed values and masking come
from each call's own list and reply; a plain growing session gives the same figures in both
modes; the JSONL `calls` shape is read, or ignored with `per_call=False`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from bench import corpora
from bench.baselines import mask_keep
from bench.corpora import Session, session_calls
from bench.corpus_run import breaks_before, replay_session
from bench.figures import engine_row
from bench.yardstick import cached_chars, needed_values, reduction, serialized
from gateway.context.replay import build_engine
from gateway.settings import Settings
from tests.sessions import synthetic_session

SYSTEM = {"role": "system", "content": "You are a coding agent. Act with <execute_bash>."}
TASK = "Fix the failing test in src/app_42.py."
OBS = ["OBSERVATION:\n" + "\n".join(f"src/module_{i}.py: line {i}" for i in range(40)),
       "OBSERVATION:\n" + "\n".join(f"tests/test_{i}.py passed" for i in range(40))]
REPLIES = [{"role": "assistant", "content": "<execute_bash>\ncat src/app_42.py\n</execute_bash>"},
           {"role": "assistant", "content": "<execute_bash>\ncat src/module_17.py\n"
                                            "</execute_bash>"},
           {"role": "assistant", "content": "<execute_bash>\npytest tests/test_33.py\n"
                                            "</execute_bash>"}]


def reminder(left: int) -> str:
    return f"\n\nENVIRONMENT REMINDER: You have {left} turns left to complete the task."


def edited_calls() -> list[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """Three calls: each newest user turn carries a reminder, gone from it on the next call."""
    turns = [TASK, *OBS]
    calls = []
    for k in range(3):
        messages: list[dict[str, Any]] = [SYSTEM]
        for j in range(k + 1):
            text = turns[j] + (reminder(10 - k) if j == k else "")
            messages.append({"role": "user", "content": text})
            if j < k:
                messages.append(REPLIES[j])
        calls.append((messages, REPLIES[k]))
    return calls


def edited_session() -> Session:
    calls = edited_calls()
    return Session("edited", [*calls[-1][0], calls[-1][1]], calls=calls)


async def replay(session: Session, corpus: str) -> list[dict[str, Any]]:
    engine = build_engine(Settings())
    try:
        return await replay_session(engine, session, corpus=corpus)
    finally:
        assert engine.embedder is not None
        engine.embedder.close()


async def test_the_baseline_pays_the_clients_own_break_and_figures_are_per_call() -> None:
    session = edited_session()
    calls = edited_calls()
    records = await replay(session, "edited")

    assert [r["call"] for r in records] == [0, 1, 2] and {r["calls"] for r in records} == {3}
    previous: list[str] | None = None
    for record, (sent, reply) in zip(records, calls, strict=True):
        none = record["methods"]["none"]
        ser = serialized(sent)
        # no gateway: its own list, cached only up to where the client changed its last turn
        assert none["size"] == sum(len(s) for s in ser)
        assert none["cached"] == cached_chars(previous, ser)
        if previous is not None:
            assert none["cached"] < sum(len(s) for s in previous)
        previous = ser
        # needed values from the reply that answered this call, found in this call's list
        assert record["needed"] == len(needed_values(reply, sent)) > 0
        keep1 = record["methods"]["keep-1"]
        assert keep1["reduction"] == reduction(sent, mask_keep(sent, 1))
    assert [r["engine"]["client_extends_previous"] for r in records] == [None, False, False]
    # where the engine changed nothing before the client's own break
    assert all(r["engine"]["breaks_before_client"] is False for r in records[1:])
    row = engine_row(records)
    assert row["client_prefix_stable"] == 0.0 and row["prefix_stable_to_client_break"] == 100.0

    # the same session replayed as the prefixes of its last call: the earlier calls' turns
    # without their reminder, so the client never breaks its own prefix and the baseline
    # pays less
    prefixes = await replay(Session("edited", session.messages), "edited-prefix")
    assert [r["engine"]["client_extends_previous"] for r in prefixes] == [None, True, True]
    assert sum(r["methods"]["none"]["cached"] for r in prefixes) > sum(
        r["methods"]["none"]["cached"] for r in records)


async def test_a_growing_session_gives_the_same_figures_in_both_modes() -> None:
    _, messages, _ = synthetic_session(1, 30)
    plain = Session("s", messages)
    per_call = Session("s", messages, calls=session_calls(plain))
    assert per_call.calls is not None and len(per_call.calls) == 31  # and the last reply

    def figures(records: list[dict[str, Any]]) -> list[Any]:
        return [(r["call"], r["late"], r["needed"], r["methods"],
                 {k: v for k, v in r["engine"].items() if k != "ms"}) for r in records]

    a = figures(await replay(plain, "mode"))
    b = figures(await replay(per_call, "mode"))
    assert a == b
    assert any(m["ctxgate"]["reduction"] > 0 for _, _, _, m, _ in a)  # the engine did cut
    assert all(e["client_extends_previous"] in (None, True) for *_, e in a)


def test_breaks_before_the_client() -> None:
    a, b, c = ({"role": "user", "content": x} for x in "abc")
    b2 = {"role": "user", "content": "b'"}
    # the client changed message 1; the engine too (no earlier break): not before
    assert not breaks_before([a, b], [a, b2, c], [a, b], [a, b2, c])
    # the engine changed message 0 where the client changed message 1
    assert breaks_before([a, b], [a, b2, c], [a, b], [b, b2, c])
    # the client repeated its previous request: any change of the forwarded prefix counts
    assert breaks_before([a, b], [a, b, c], [a, b], [a, b2, c])
    assert not breaks_before([a, b], [a, b, c], [a, b], [a, b, c])


def test_jsonl_calls_are_read_or_ignored(tmp_path: Path) -> None:
    calls = edited_calls()
    folder = tmp_path / "percall"
    folder.mkdir()
    line = {"id": "x", "messages": [*calls[-1][0], calls[-1][1]],
            "calls": [{"messages": m, "reply": r} for m, r in calls]}
    (folder / "sessions.jsonl").write_bytes(orjson.dumps(line) + b"\n")

    [session] = corpora.load("percall", tmp_path)
    assert session_calls(session) == calls
    [prefixes] = corpora.load("percall", tmp_path, per_call=False)
    assert prefixes.calls is None
    assert [m for m, _ in session_calls(prefixes)] == [
        session.messages[:i] for i in (2, 4, 6)]


def test_same_output_sends_a_per_call_sessions_calls_as_their_client_sent_them(
        tmp_path: Path) -> None:
    """`bench.same_output` replays a per-call corpus call by call, the edited turn as sent."""
    from bench.same_output import _sessions

    session = edited_session()
    (tmp_path / "edited").mkdir()
    (tmp_path / "edited" / "sessions.jsonl").write_bytes(orjson.dumps({
        "id": "edited/1", "messages": session.messages,
        "calls": [{"messages": sent, "reply": reply} for sent, reply in edited_calls()]}))
    [(name, calls, headers)] = _sessions(tmp_path, False, only=["edited"])
    assert name == "edited:edited/1" and headers == {}
    assert [body["messages"] for body in calls] == [sent for sent, _ in edited_calls()]
    assert reminder(10) in calls[0]["messages"][-1]["content"]
    assert reminder(10) not in calls[1]["messages"][1]["content"]  # the client's edit
