"""A harness that keeps each run's whole episode in one user message (a structured-chat or
ReAct agent's scratchpad: the objective, then every step's thought, action and
`Observation:`, ending in the prompt for the next thought), no API tools: such a user turn
is tool history (`items.scratchpad`, `RequestScan.scratchpads`). A queue of such runs (each
earlier run's last message and its answer, then the current run's message) ages as the
agent policy ages an agent's history, whatever its class, and an earlier run's message that
opens as the first did is not a queue's statement kept whole (`Layout.extend`)."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.context.classify import RequestScan
from gateway.context.engine import CallContext, FittedCall
from gateway.context.items import scratchpad
from gateway.settings import Settings
from tests.context.sessions import drops_add_up, memory_engine

SYSTEM = ("You navigate a code repository with tools. Use a json blob to specify a tool "
          "(`action` and `action_input`). Follow this format: Thought / Action / Observation "
          "(repeat), then the Final Answer action.")


def _observation(run: int, step: int) -> str:
    """A made-up search result of 30 lines."""
    return "\n".join(f"src/pkg_{run}/module_{step}_{i}.py:{100 + i}: def handler_{run}_{step}_"
                     f"{i}(request, retries={i}, timeout={30 + i})" for i in range(30))


def _reply(run: int, step: int) -> str:
    return (f" I look for the handlers of part {step} of run {run}.\nAction:\n```\n"
            f'{{"action": "code_search", "action_input": {{"names": '
            f'["handler_{run}_{step}"]}}}}\n```')


def _episode(run: int, steps: int, objective: str | None = None) -> str:
    """Run `run`'s user message after `steps` steps: objective, then the scratchpad."""
    head = (f"Objective: {objective or f'find where the handlers of run {run} are defined.'}"
            "\n\nThis was your previous work:\n")
    body = "".join(f"Thought:{_reply(run, s)}\nObservation: {_observation(run, s)}\n"
                   for s in range(steps))
    return head + body + "Thought:"


def _answer(run: int) -> str:
    return ('```\n{"action": "Final Answer", "action_input": "The handlers of run '
            f'{run} are in src/pkg_{run}."}}\n```')


def _calls(runs: int, steps: int, same: int = 0) -> list[list[dict[str, Any]]]:
    """Every call of a queue of `runs` runs of `steps` steps each, as the harness sends it;
    the first `same` runs ask the same objective."""
    done: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    calls = []
    for run in range(runs):
        objective = "find where the request handlers are defined." if run < same else None
        for step in range(steps + 1):
            calls.append([*done, {"role": "user", "content": _episode(run, step, objective)}])
        done += [{"role": "user", "content": _episode(run, steps, objective)},
                 {"role": "assistant", "content": _answer(run)}]
    return calls


def _call(session: str) -> CallContext:
    # `default`, a class that does not age turns itself (named here so that the test does
    # not depend on what the embedded examples say of the first call)
    return CallContext("t-pad", "pad", {"x-ctxgate-session-id": session,
                                        "x-ctxgate-task-class": "default"})


def test_a_user_turn_ending_in_the_loop_after_an_observation_is_a_scratchpad() -> None:
    assert scratchpad(_episode(0, 2))
    assert not scratchpad(_episode(0, 0))  # the objective alone: no step yet
    assert not scratchpad("Where are the handlers defined?\nThought:")
    # numbered steps: the prompt is the next step's
    assert scratchpad("Question: where?\nThought 1: look\nAction 1: Search[handler]\n"
                      "Observation 1: src/pkg.py\nThought 2:")
    # worked examples numbered from 1 again, then the task: not the agent's own steps
    examples = ("Question: who?\nThought 1: look\nAction 1: Search[Ann]\nObservation 1: Ann "
                "is a poet.\nThought 2: done\nAction 2: Finish[Ann]\nObservation 2: Episode "
                "finished\n\nQuestion: where are the handlers defined?\nThought 1:")
    assert not scratchpad(examples)
    # examples that run into the task without the loop's prompt after them
    assert not scratchpad("Action:\nls\nObservation:\n[1] a.py\n--- END OF EXAMPLE ---\n"
                          "Now fix the bug in b.py.")
    calls = _calls(2, 2)
    assert not RequestScan().scratchpads(calls[0])
    assert RequestScan().scratchpads(calls[2])  # the run's message rewritten: read anew
    scan = RequestScan()  # appended messages: read on from those read before
    assert scan.scratchpads(calls[3][:2]) and scan.scratchpads(calls[-1])


async def _last_fit(settings: Settings, embedder: Any,
                    calls: list[list[dict[str, Any]]]) -> FittedCall:
    engine = memory_engine(settings, embedder, True)
    session = uuid.uuid4().hex
    fitted = None
    for messages in calls:
        fitted = await engine.fit({"messages": messages}, _call(session))
        assert drops_add_up(fitted)
    assert fitted is not None
    return fitted


async def test_a_queue_of_scratchpad_runs_ages_its_earlier_runs(
    settings: Settings, embedder: Any
) -> None:
    """Without the rule a class that does not age sends every earlier run whole."""
    calls = _calls(6, 3)
    fitted = await _last_fit(settings, embedder, calls)
    sent, messages = fitted.body["messages"], calls[-1]
    assert fitted.task_class == "default"
    assert sent[-1] == messages[-1]  # the current run's message as the client sent it
    assert sent[1] == messages[1]  # the first run's message: the task statement
    aged = {d.message_index for d in fitted.drops if d.kind == "user" and d.reason == "aged"}
    assert {3, 5} <= aged  # earlier runs' episodes, old enough, aged
    assert fitted.tokens_after < 0.7 * fitted.tokens_before


async def test_an_earlier_run_that_opens_as_the_first_did_ages_too(
    settings: Settings, embedder: Any
) -> None:
    """The second run asks the first run's objective again (its first line is the first
    run's), the later ones ask others: that run's message is no later task's statement kept
    whole while "its task" lasts (no later run opens so) — it carries that run's steps, and
    the answer after it closed them."""
    calls = _calls(6, 3, same=2)
    fitted = await _last_fit(settings, embedder, calls)
    aged = {d.message_index for d in fitted.drops if d.kind == "user" and d.reason == "aged"}
    assert {3, 5} <= aged
    assert len(fitted.body["messages"][3]["content"]) < 0.3 * len(calls[-1][3]["content"])
