"""An agent without tools whose observations come back as user turns (a planner that
delegates in prose and gets its team's reports as user messages): its sessions age their
old reports as the agent policy ages tool results, its own turns stay as written, the
latest user turn and the request are sent whole; a person chatting is not taken for one
(`RequestScan.reports`, `engine.report_aging`). Made-up sessions."""

from __future__ import annotations

from typing import Any

from gateway.context.classify import REPORT_CHARS, REPORT_TURNS, RequestScan
from gateway.context.engine import CallContext, ContextEngine

SYSTEM = "You coordinate a small team: a browser, a file reader and a coder."
REQUEST = "Which harbour towns of the northern coast had a ferry line in 1931?"
QUESTION = ("We are working on this request:\n" + REQUEST + "\nAnswer in JSON: is the request"
            " satisfied, are we in a loop, is progress being made, who speaks next, and what"
            " they should be told.")


def _report(k: int) -> str:
    """A made-up page a browser agent reports: 30 lines, each naming its round."""
    lines = [f"Row {i} of page {k}: harbour town number {k * 100 + i} had a ferry pier "
             f"listed in the {1900 + i} register, page {k}." for i in range(30)]
    return f"I opened result {k} of the search.\n" + "\n".join(lines)


def _session(rounds: int) -> list[dict[str, Any]]:
    """The planner's chat as it asks its ledger question after `rounds` reports."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": REQUEST},
        {"role": "assistant", "content": "Plan: search the registers, then list the towns."}]
    for k in range(1, rounds + 1):
        messages.append({"role": "assistant", "content": f"Please open result {k}."})
        messages.append({"role": "user", "content": _report(k)})
    messages.append({"role": "user", "content": QUESTION})
    return messages


def _chat(rounds: int, question: str = "What else should I know about town {k}?") -> list[
        dict[str, Any]]:
    """A person asking short questions and getting long answers."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for k in range(1, rounds + 1):
        messages.append({"role": "user", "content": question.format(k=k)})
        messages.append({"role": "assistant", "content": _report(k)})
    messages.append({"role": "user", "content": "Thanks! One more question: and the ferries?"})
    return messages


def _call(session: str) -> CallContext:
    # `default`, the class such a session gets when nothing names it
    return CallContext("t-report", "rp", {"x-ctxgate-session-id": session,
                                           "x-ctxgate-task-class": "default"})


def test_reports_after_short_instructions_mark_the_session() -> None:
    assert len(_report(1)) >= REPORT_CHARS
    assert not RequestScan().reports(_session(REPORT_TURNS - 1))
    assert RequestScan().reports(_session(REPORT_TURNS))
    # read on from the messages read before, as a session's next call does
    messages, scan = _session(REPORT_TURNS + 3)[:-1], RequestScan()
    ends = [i + 1 for i, m in enumerate(messages) if m["role"] == "user"]
    assert [scan.reports(messages[:end]) for end in ends] == [False] * REPORT_TURNS + [True] * 4


def test_a_person_chatting_is_not_taken_for_an_agent() -> None:
    # short questions, long answers
    assert not RequestScan().reports(_chat(20))
    # long pasted texts answered at length
    pasted = _chat(20, question=_report(0) + " Summarise this for town {k}.")
    assert not RequestScan().reports(pasted)
    # a few long turns among many short ones: not half the turns that answer the assistant
    mixed: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for k in range(12):
        said = "Ok." if k % 4 == 0 else _report(k)
        mixed += [{"role": "assistant", "content": said},
                  {"role": "user", "content": _report(k) if k % 4 == 0 else "Go on."}]
    assert not RequestScan().reports(mixed)


async def test_old_reports_age_the_planners_turns_and_the_question_stay(
    engine_without_young: ContextEngine,
) -> None:
    rounds = 24
    fitted = None
    for k in range(1, rounds + 1):  # each round's ledger call
        fitted = await engine_without_young.fit({"messages": _session(k)}, _call("rq"))
    assert fitted is not None
    messages = _session(rounds)
    sent = fitted.body["messages"]
    assert fitted.task_class == "default"  # not renamed: it ages as the agent policy does
    assert fitted.tokens_after < 0.6 * fitted.tokens_before
    assert all(d.kind != "assistant" for d in fitted.drops if d.reason == "aged")
    written = [m["content"] for m in sent if m["role"] == "assistant"]
    assert written == [m["content"] for m in messages if m["role"] == "assistant"]
    assert sent[1]["content"] == REQUEST and sent[-1]["content"] == QUESTION
    old = [m["content"] for m, was in zip(sent, messages, strict=True)
           if m["role"] == "user" and was["content"].startswith("I opened")]
    assert sum(map(len, old)) < 0.4 * sum(len(_report(k)) for k in range(1, rounds + 1))


async def test_a_chat_of_the_same_size_goes_as_sent(
    engine_without_young: ContextEngine,
) -> None:
    fitted = None
    messages = _chat(24)
    for end in [i + 1 for i, m in enumerate(messages) if m["role"] == "user"]:
        fitted = await engine_without_young.fit({"messages": messages[:end]}, _call("rc"))
    assert fitted is not None
    assert fitted.body["messages"] == messages


def test_observations_labelled_as_a_prose_calls_result_are_left_to_the_text_tool_check() -> (
        None):
    """A ReAct agent whose call form the text-tool check does not know yet is not taken for
    a planner reading reports: it ages as a text-tool agent once that check knows it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": REQUEST}]
    for k in range(1, 8):
        messages += [{"role": "assistant", "content": f"Thought: look again.\nAction: look({k})"},
                     {"role": "user", "content": "Observation: " + _report(k)}]
    assert not RequestScan().reports(messages)
    unlabelled = [dict(m, content=m["content"].removeprefix("Observation: ")) for m in messages]
    assert RequestScan().reports(unlabelled)
