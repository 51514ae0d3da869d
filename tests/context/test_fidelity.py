"""The live fidelity signals on hand-built histories: what was lost, what the turn used."""

from __future__ import annotations

import json
from typing import Any

from gateway.context.fidelity import (
    CallSignals,
    call_sketch,
    lost_messages,
    observe,
    similarity,
)
from gateway.context.needed import action_values, needed_values
from gateway.context.render import Plan
from gateway.context.session import SessionState

SECRET = "TOKEN_4821"


def _call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


def _turn(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [_call(cid, name, **args)]}


def _result(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def _history() -> list[dict[str, Any]]:
    """Call n: read a file whose output holds SECRET, then list a directory."""
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the login bug."},
        _turn("c1", "read_file", path="src/auth/login.py"),
        _result("c1", f"def login():\n    key = '{SECRET}'\n    return check(key)\n"),
        _turn("c2", "list_dir", path="src/auth"),
        _result("c2", "login.py\nsession.py\n"),
    ]


def _plan(count: int, lost: dict[int, str | None]) -> Plan:
    """A render plan of `count` messages where `lost` were rewritten (text) or dropped."""
    return [(i, lost.get(i)) for i in range(count) if i not in lost or lost[i] is not None]


def _measure(sent: list[dict[str, Any]], plan: Plan | None, turn: dict[str, Any],
             mode: str = "managed") -> CallSignals | None:
    """Call n (`sent`, forwarded under `plan`), then call n+1 carrying its answer `turn`."""
    state = SessionState()
    assert observe(state, sent, plan, task_class="coding", mode=mode) is None  # first call
    assert {"fidelity"} <= state.dirty
    following = [*sent, turn, _result("c9", "ok")]
    return observe(state, following, None, task_class="coding", mode=mode)


def test_a_value_only_in_a_masked_result_is_missed() -> None:
    sent = _history()
    plan = _plan(len(sent), {3: "[ctxgate: tool_result omitted (40 tokens)]"})
    turn = _turn("c9", "call_api", key=SECRET, url="localhost:8080")  # a leaf is a value
    signals = _measure(sent, plan, turn)
    assert signals == CallSignals("coding", "managed", needed=1, found=0, tool_calls=1,
                                  refetches=0, repeats=0)


def test_a_value_kept_by_the_digest_is_found() -> None:
    sent = _history()
    plan = _plan(len(sent), {3: f"[digest] login() uses key {SECRET}"})
    turn = _turn("c9", "call_api", key=SECRET)
    signals = _measure(sent, plan, turn)
    assert signals is not None and (signals.needed, signals.found) == (1, 1)


def test_values_never_seen_before_are_not_needed() -> None:
    turn = _turn("c9", "write_file", path="src/auth/new_module.py", text="brand new")
    signals = _measure(_history(), None, turn)
    assert signals is not None and (signals.needed, signals.found) == (0, 0)
    assert signals.tool_calls == 1


def test_re_reading_a_dropped_result_is_a_refetch() -> None:
    sent = _history()
    plan = _plan(len(sent), {2: None, 3: None})  # the read_file exchange dropped
    turn = _turn("c9", "read_file", path="src/auth/login.py")
    signals = _measure(sent, plan, turn)
    assert signals is not None and (signals.tool_calls, signals.refetches) == (1, 1)
    assert (signals.needed, signals.found) == (1, 0)  # its path was in the dropped call


def test_re_reading_an_intact_result_is_not_a_refetch_but_is_the_baseline() -> None:
    turn = _turn("c9", "read_file", path="src/auth/login.py")
    managed = _measure(_history(), _plan(6, {5: None}), turn)
    assert managed is not None and (managed.refetches, managed.repeats) == (0, 1)
    bypass = _measure(_history(), None, turn, mode="bypass")
    assert bypass == CallSignals("coding", "bypass", 1, 1, 1, 1, 1)  # every repeat counts


def test_a_call_on_another_file_is_no_repeat() -> None:
    turn = _turn("c9", "read_file", path="src/auth/session.py")
    signals = _measure(_history(), _plan(6, {2: None, 3: None}), turn, mode="bypass")
    assert signals is not None and signals.refetches == 0


def test_near_same_arguments() -> None:
    def sketch(**args: Any) -> tuple[int, ...]:
        return call_sketch(_call("x", "bash", **args))

    same = similarity(sketch(command="cat  src/a.py"), sketch(command="cat src/a.py"))
    assert same == 1.0
    reordered = similarity(sketch(command="grep -rn login src tests"),
                           sketch(command="grep -rn login tests src"))
    assert reordered == 1.0
    other_lines = similarity(sketch(command="sed -n 1,50p src/a.py"),
                             sketch(command="sed -n 60,90p src/a.py"))
    assert other_lines < 0.8
    assert similarity(sketch(), sketch()) == 1.0  # two calls without arguments
    long_a = sketch(text=" ".join(f"w{i}" for i in range(100)))
    long_b = sketch(text=" ".join(f"w{i}" for i in range(101)))
    assert len(long_a) == 16 and similarity(long_a, long_b) >= 0.8


def test_a_text_turn_uses_identifiers_of_its_text() -> None:
    turn = {"role": "assistant", "content": f"The bug: login() compares {SECRET} too early."}
    assert SECRET in action_values(turn)
    signals = _measure(_history(), None, turn)
    assert signals is not None and (signals.needed, signals.found, signals.tool_calls) == (
        1, 1, 0)
    assert needed_values(turn, _history()) == {SECRET}


def test_a_retry_or_a_changed_history_measures_nothing() -> None:
    state = SessionState()
    sent = _history()
    observe(state, sent, None, task_class="coding", mode="managed")
    assert observe(state, sent, None, task_class="coding", mode="managed") is None  # retry
    edited = [*sent[:-1], _result("c2", "changed"), _turn("c9", "run", command=SECRET)]
    assert observe(state, edited, None, task_class="coding", mode="managed") is None


def test_the_record_writes_lost_only_when_it_changes() -> None:
    state = SessionState()
    sent = _history()
    plan = _plan(len(sent), {3: None})
    observe(state, sent, plan, task_class="coding", mode="managed")
    assert "lost" in state.dirty and state.lost is not None
    state.dirty.clear()
    longer = [*sent, _turn("c9", "run", command="ls"), _result("c9", "ok")]
    observe(state, longer, _plan(len(longer), {3: None}), task_class="coding",
            mode="managed")
    assert state.dirty == {"fidelity"}
    assert lost_messages(3, [(0, None), (2, "x")]) == {1: None, 2: "x"}
