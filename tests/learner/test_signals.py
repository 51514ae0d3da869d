"""Implicit feedback rules: tool results judged as failed or clean."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.learner.signals import cited_ids, implicit_signal, trailing_tool_step
from gateway.playbook.config import FeedbackRules


def step(*results: str) -> list[dict[str, Any]]:
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": f"tool{i}",
              "arguments": "{}"}} for i in range(len(results))]
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"c{i}", "content": r} for i, r in enumerate(results)),
    ]


@pytest.mark.parametrize("output", [
    "Traceback (most recent call last):\n  File x\nValueError: bad",
    "npm ERR! something\nProcess exited with code 2",
    '{"exit_code": 1, "stdout": ""}',
    "HTTP/1.1 503 Service Unavailable",
    '{"status": 404, "message": "not found"}',
    "bash: foo: command not found",
    "error: pathspec 'x' did not match",
    "KeyError: 'name'",
])
def test_failures_are_recognised(output: str) -> None:
    signal = implicit_signal(step("ok", output), FeedbackRules())
    assert signal is not None and signal.outcome == "failure"
    assert signal.detail.startswith("tool1:")


@pytest.mark.parametrize("output", [
    "3 passed in 0.2s", '{"exit_code": 0, "stdout": "done"}', "HTTP/1.1 200 OK",
    "wrote 12 bytes to errors.log",
])
def test_clean_results_are_success(output: str) -> None:
    signal = implicit_signal(step(output), FeedbackRules())
    assert signal is not None and signal.outcome == "success"


def test_class_rules_override_defaults() -> None:
    rules = FeedbackRules(failure_patterns=(r"\bFAIL\b",), success_patterns=(r"0 failed",))
    assert implicit_signal(step("1 FAIL"), rules).outcome == "failure"  # type: ignore[union-attr]
    assert implicit_signal(step("Traceback (most"), rules).outcome == "success"  # type: ignore[union-attr]
    assert implicit_signal(step("FAIL but 0 failed"), rules).outcome == "success"  # type: ignore[union-attr]


def test_no_trailing_tool_exchange_is_no_signal() -> None:
    messages = [*step("boom Traceback (most recent call last)"),
                {"role": "user", "content": "thanks"}]
    assert trailing_tool_step(messages) is None
    assert implicit_signal(messages, FeedbackRules()) is None
    assert implicit_signal([{"role": "user", "content": "hi"}], FeedbackRules()) is None


def test_citations_only_count_injected_ids() -> None:
    text = "Following [err-00001] and [str-00002], not [zzz-00009] or [err-1]."
    assert cited_ids(text, ["err-00001", "str-00002", "ver-00001"]) == ["err-00001", "str-00002"]


def test_traces_keep_the_newest_messages_and_whole_tool_exchanges() -> None:
    from gateway.learner.traces import keep_recent

    history: list[dict[str, Any]] = [{"role": "system", "content": "S"}]
    for i in range(50):
        history += [{"role": "user", "content": f"turn {i} " + "x" * 500},
                    {"role": "assistant", "content": "ok " * 100}]
    history += step("boom " * 300, "Traceback (most recent call last)")[1:]
    kept = keep_recent(history, 5000)
    assert kept[0] == history[0] and "earlier messages not kept" in kept[1]["content"]
    assert kept[-4:] == history[-4:] and len(kept) < 20
    signal = implicit_signal(kept, FeedbackRules())
    assert signal is not None and signal.outcome == "failure"
    assert keep_recent(history[:5], 10**6) == history[:5]
    shown = keep_recent(history, 10**6, 5000)  # only what the Reflector's 5,000 show
    assert shown[-4:] == history[-4:] and len(shown) < 20 < len(keep_recent(history, 10**6))
    tiny = keep_recent(history, 10)  # even a tiny budget keeps the last call's tool exchange
    assert tiny[-3]["role"] == "assistant" and tiny[-3].get("tool_calls")


_MESSAGE = st.one_of(
    st.builds(lambda n: {"role": "user", "content": "u" * n}, st.integers(0, 9000)),
    st.builds(lambda n: {"role": "assistant", "content": "a" * n}, st.integers(0, 3000)),
    st.builds(lambda n: {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "run", "arguments": "x" * n}}]},
        st.integers(0, 5000)),
    st.builds(lambda n: {"role": "tool", "tool_call_id": "c", "content": "t" * n},
              st.integers(0, 12000)),
)


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(_MESSAGE, min_size=1, max_size=40), shown=st.integers(200, 30000),
       answer=st.booleans())
def test_a_stored_trace_keeps_what_the_reflector_is_shown(
        messages: list[dict[str, Any]], shown: int, answer: bool) -> None:
    """Trimmed to the Reflector's budget, a trace shows it the same messages as the whole
    history would (the note of the messages not kept stands where the elision mark would),
    with the agent's answer after them too (explicit feedback's episode)."""
    from gateway.learner.traces import keep_recent
    from gateway.learner.transcript import ELIDED, transcript

    history = [{"role": "system", "content": "S" * 300}, *messages]
    kept = keep_recent(history, 10**9, shown)
    tail = [{"role": "assistant", "content": "done"}] if answer else []
    whole, trimmed = transcript([*history, *tail], shown), transcript([*kept, *tail], shown)
    if kept is not history:
        note = f"[system] {kept[1]['content']}"
        trimmed = trimmed.replace(f"\n{note}\n", f"\n{ELIDED}\n").replace(
            f"\n{note}", f"\n{ELIDED}")
    assert trimmed == whole
