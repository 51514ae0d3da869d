"""An agent without tools whose observations come back as user turns (a planner that
delegates in prose and gets its team's reports as user messages): its sessions age their
old reports as the agent policy ages tool results, its own turns stay as written, the
latest user turn and the request are sent whole; a person chatting is not taken for one
(`RequestScan.reports`, `engine.report_aging`). Made-up sessions."""

from __future__ import annotations

from typing import Any

from gateway.context.classify import (
    REPORT_CHARS,
    REPORT_TURNS,
    RESTATED_CHARS,
    RequestScan,
    long_lines,
    superseded,
)
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


TEAM = "\n".join(f"{name}: a team member that {does}, and reports back what it found in full."
                 for name, does in (("Browser", "opens web pages, searches and scrolls them"),
                                    ("Reader", "opens the local files it is given and reads them"),
                                    ("Coder", "writes short Python programs for the others to run"),
                                    ("Terminal", "runs the programs and shell scripts it is sent"),
                                    ("Archivist", "looks records up in the library's catalogue"),
                                    ("Clerk", "writes the final answer in the form the user asks")))


def _plan(request: str, k: int, template: bool = True) -> str:
    """A made-up plan: the template's headings and team, then this request's own steps."""
    steps = "\n".join(f"{i}. Check register volume {k * 1000 + i} for the ferry line of "
                      f"town {k}-{i}, then note its pier." for i in range(1, 9))
    if not template:
        return f"Steps for {request}\n{steps}"
    return (f"We are working to address the following user request:\n{request}\n\nTo answer "
            f"this request we have assembled the following team:\n{TEAM}\n\nHere is the plan "
            f"to follow as best as possible:\n{steps}")


def _task(request: str, k: int, rounds: int, template: bool = True) -> list[dict[str, Any]]:
    """One request's turns as its ledger call sends them: the request, its plan, `rounds`
    instructions each answered by a report, and the ledger question."""
    turns: list[dict[str, Any]] = [{"role": "user", "content": request},
                                   {"role": "assistant", "content": _plan(request, k, template)}]
    for r in range(1, rounds + 1):
        turns.append({"role": "assistant", "content": f"Please open result {k * 100 + r}."})
        turns.append({"role": "user", "content": _report(k * 100 + r)})
    return [*turns, {"role": "user", "content": QUESTION.replace(REQUEST, request)}]


async def _queue(engine: ContextEngine, session: str, template: bool) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]]]:
    """A planner's queue of two requests, each call fitted in turn: the first request's
    last call and ledger reply stay before the second's turns. Returns (sent, forwarded)."""
    first, second = REQUEST, "Which lighthouses of the same coast were lit before 1900?"
    system = {"role": "system", "content": SYSTEM}
    calls = [[system, *_task(first, 1, r)] for r in range(1, 9)]
    done = [*calls[-1], {"role": "assistant", "content": '{"is_request_satisfied": true}'}]
    calls += [[*done, *_task(second, 2, r, template)] for r in range(1, 13)]
    fitted = None
    for messages in calls:
        fitted = await engine.fit({"messages": messages}, _call(session))
    assert fitted is not None and fitted.task_class == "default"
    return calls[-1], fitted.body["messages"]


def test_a_turn_is_restated_by_one_on_its_template() -> None:
    later = set(long_lines(_plan("Which lighthouses were lit?", 2)))
    assert superseded(_plan(REQUEST, 1), later, RESTATED_CHARS)
    assert not superseded(_plan(REQUEST, 1), later)  # not a re-sent prompt's 2,000
    assert not superseded(_plan(REQUEST, 1), set(long_lines(_plan("Which?", 2, False))),
                          RESTATED_CHARS)


async def test_an_earlier_plan_restated_by_a_later_one_ages(
    engine_without_young: ContextEngine,
) -> None:
    """The first request's plan, restated by the second's on the same template, goes as a
    digest listing its values; the second plan and every instruction go as written."""
    sent, forwarded = await _queue(engine_without_young, "rr", template=True)
    plans = [i for i, m in enumerate(sent)
             if m["role"] == "assistant" and m["content"].startswith("We are working")]
    assert len(plans) == 2
    old, new = plans
    assert len(forwarded[old]["content"]) < 0.5 * len(sent[old]["content"])
    assert "1008" in forwarded[old]["content"]  # a value of its own steps, listed
    assert forwarded[new] == sent[new]
    assert all(f == m for i, (f, m) in enumerate(zip(forwarded, sent, strict=True))
               if m["role"] == "assistant" and i != old)


async def test_a_plan_no_later_turn_restates_goes_as_written(
    engine_without_young: ContextEngine,
) -> None:
    sent, forwarded = await _queue(engine_without_young, "rn", template=False)
    assert all(f == m for f, m in zip(forwarded, sent, strict=True) if m["role"] == "assistant")
    assert len(forwarded[4]["content"]) < len(sent[4]["content"])  # its reports still age
