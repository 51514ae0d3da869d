"""Under a budget, a scratchpad agent's older steps inside its latest user message are cut
by the budget ladder before the call is refused (gateway/context/scratchpad.py; issue 7: a
refusal only when nothing else works). A structured-chat agent is called with its system
prompt and ONE user message: the objective, then every earlier `Thought:` / `Action:` /
`Observation:` step, then the `Thought:` prompt. That message is pinned, so over a budget
the call was refused; now its older steps are digested, masked and dropped oldest first,
just enough, the objective and the newest step sent as the client wrote them. Without a
budget's pressure the message is not split."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import parse_request
from gateway.context.scratchpad import scratchpad_steps, unpinned_scratchpad
from gateway.context.tokens import TokenCounter
from gateway.errors import ContextBudgetExceeded
from tests.context.sessions import drops_add_up

SYSTEM = ("Respond to the human as helpfully as possible. You have access to the tools: "
          "open_file, code_search. Use a json blob to specify a tool. Follow this format:\n"
          "Thought: ...\nAction: ...\nObservation: the result of the action\n...")
OBJECTIVE = "Objective: find where `parse_config_v2` reads the `retry_limit` setting.\n"
HEADER = "Agent scratchpad:\nThis was your previous work:\n"


def _listing(step: int, lines: int = 40) -> str:
    """A tool's output: a file of numbered lines, values unique to the step."""
    return "\n".join(f"{n} def handler_{step}_{n}(value_{n}): return value_{n} * {step}"
                     for n in range(1, lines + 1))


def _reply(step: int) -> str:
    return (f"Thought: I open module_{step}.py next.\n\nAction:\n```json\n"
            f'{{"action": "open_file", "action_input": {{"path": "module_{step}.py"}}}}\n```\n')


def _step(step: int, lines: int = 40) -> str:
    return (f"{_reply(step)}Observation: The content of module_{step}.py is:\n"
            f"{_listing(step, lines)}\n")


def _message(steps: int, newest_lines: int = 40) -> str:
    """The user message of a run's call after `steps` steps, as the client writes it."""
    return (OBJECTIVE + HEADER + "".join(_step(k) for k in range(steps - 1))
            + _step(steps - 1, newest_lines) + "Thought:")


def _body(steps: int, newest_lines: int = 40) -> dict[str, Any]:
    return {"messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": _message(steps, newest_lines)}]}


def _call(budget: int | None) -> CallContext:
    headers = {"x-ctxgate-session-id": uuid.uuid4().hex, "x-ctxgate-task-class": "default"}
    if budget is not None:
        headers["x-ctxgate-budget-tokens"] = str(budget)
    return CallContext("t-scratchpad-budget", uuid.uuid4().hex, headers)


def _tokens(engine: ContextEngine, body: dict[str, Any]) -> int:
    return parse_request(body, engine.counter, "o200k_base").tokens


def test_the_steps_of_a_scratchpad_that_ends_in_the_loop_are_found() -> None:
    text = _message(5)
    steps = scratchpad_steps(text)
    assert len(steps) == 5
    assert text[:steps[0].start] == OBJECTIVE + HEADER  # the head: the objective
    for k, step in enumerate(steps):
        assert text[step.body:step.end] == f"The content of module_{k}.py is:\n{_listing(k)}"
        assert text[step.start:].startswith("Thought:") or k > 0
    assert text[steps[-1].end:] == "\nThought:"


def test_a_few_shot_prompt_followed_by_the_task_is_no_scratchpad() -> None:
    examples = "".join(_step(k) for k in range(6))
    prompt = f"Here are examples:\n{examples}(END OF EXAMPLES)\nTask: buy red shoes.\nAction:"
    assert scratchpad_steps(prompt) == []
    # examples whose last observation runs into the task: no `Thought:` prompt after it
    prompt = f"Here is an example:\n{examples}--- END OF EXAMPLE ---\nNow fix typos in bad.txt."
    assert scratchpad_steps(prompt) == []


def test_a_numbered_episode_starts_at_its_first_observation() -> None:
    examples = "".join(f"Thought {k}: look\nAction {k}: Search[x{k}]\nObservation {k}: "
                       f"{_listing(k)}\n" for k in range(1, 5))
    live = "".join(f"Thought {k}: look\nAction {k}: Search[y{k}]\nObservation {k}: "
                   f"{_listing(10 + k)}\n" for k in range(1, 3))
    text = f"{examples}Question: which?\n{live}Thought 3:"
    steps = scratchpad_steps(text)
    assert len(steps) == 2  # the live episode's, not the examples'
    assert text[:steps[0].start].endswith("Question: which?\n")  # the task stays in the head
    assert "handler_11_1" in text[steps[0].body:steps[0].end]


def test_the_pieces_add_up_to_the_message_and_pin_the_objective_and_newest_step() -> None:
    counter = TokenCounter()
    body = _body(4)
    parsed = parse_request(body, counter, "o200k_base")
    split = unpinned_scratchpad(body["messages"], parsed, counter)
    assert split.tokens == parsed.tokens
    pieces = [item for item in split.items if item.message_index == 1]
    assert "".join(p.text for p in pieces) == body["messages"][1]["content"]
    pinned = [p for p in pieces if p.pinned]
    assert pinned[0].text == OBJECTIVE + HEADER
    assert pinned[-1].text.endswith("The content of module_3.py is:\n" + _listing(3)
                                    + "\nThought:")
    free = [p for p in pieces if not p.pinned]
    assert [p.kind for p in free] == ["assistant", "tool_result"] * 3
    assert len({p.unit for p in free}) == 3  # a step's reply and output go together
    assert [p.age for p in free[1::2]] == [3, 2, 1]  # the oldest step oldest
    assert not any(p.rewritable for p in free[::2])  # a reply is kept or dropped, never cut


async def test_a_scratchpad_over_the_budget_is_cut_not_refused(engine: ContextEngine) -> None:
    body = _body(6)
    tokens = _tokens(engine, body)
    for fraction in (0.8, 0.6):
        budget = int(fraction * tokens)
        fitted = await engine.fit(body, _call(budget))
        assert budget - 0.1 * tokens <= fitted.tokens_after <= budget  # in the band
        text = fitted.body["messages"][-1]["content"]
        assert fitted.body["messages"][0]["content"] == SYSTEM
        assert text.startswith(OBJECTIVE + HEADER)
        assert text.endswith(_step(5) + "Thought:")  # the newest step whole
        assert "module_0.py is:\n" + _listing(0) not in text  # the oldest output is cut
        assert drops_add_up(fitted)
        assert {d.message_index for d in fitted.drops} == {1}
    # at 80%, cut oldest first: the step before the newest is sent whole
    fitted = await engine.fit(body, _call(int(0.8 * tokens)))
    assert _step(4) in fitted.body["messages"][-1]["content"]


async def test_what_the_objective_and_newest_step_need_still_refuses(
    engine: ContextEngine,
) -> None:
    """The newest observation is the step's input: over the budget with it alone, refused."""
    body = _body(3, newest_lines=200)
    messages = body["messages"]
    keep = {"messages": [messages[0], {"role": "user", "content": OBJECTIVE + HEADER
                                       + _step(2, 200) + "Thought:"}]}
    with pytest.raises(ContextBudgetExceeded):
        await engine.fit(body, _call(_tokens(engine, keep) - 20))
    fitted = await engine.fit(body, _call(_tokens(engine, keep) + 20))  # that fits
    assert fitted.body["messages"][-1]["content"].endswith(_step(2, 200) + "Thought:")
    assert drops_add_up(fitted)


async def test_without_a_budget_s_pressure_the_scratchpad_is_sent_as_written(
    engine: ContextEngine,
) -> None:
    body = _body(6)
    fitted = await engine.fit(body, _call(None))
    assert fitted.body["messages"][-1]["content"] == body["messages"][-1]["content"]
    assert not fitted.drops


def test_a_message_parsed_into_several_items_is_split_whole() -> None:
    """An observation holding a retrieved document (`segments.py`: its own `knowledge`
    item): the message is split from its text, whatever items it was parsed into."""
    counter = TokenCounter()
    document = "<document>" + " ".join(f"retry_limit_{n}" for n in range(40)) + "</document>"
    text = _message(4).replace("module_1.py is:\n", f"module_1.py is:\n{document}\n", 1)
    body = {"messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": text}]}
    parsed = parse_request(body, counter, "o200k_base")
    assert sum(item.message_index == 1 for item in parsed.items) > 1
    split = unpinned_scratchpad(body["messages"], parsed, counter)
    pieces = [item for item in split.items if item.message_index == 1]
    assert "".join(p.text for p in pieces) == text
    assert split.tokens == parsed.tokens
    assert [p.kind for p in pieces if not p.pinned] == ["assistant", "tool_result"] * 3


async def test_a_session_s_later_calls_under_the_budget_are_cut_too(
    engine: ContextEngine,
) -> None:
    """The same call sent again in its session (its message's pieces pinned again as the
    latest user message), then a later run's call after the agent's answer: each is cut,
    not refused, and its log adds up."""
    body = _body(6)
    budget = int(0.7 * _tokens(engine, body))
    call = _call(budget)
    first = await engine.fit(body, call)
    again = await engine.fit(body, call)
    assert again.body["messages"] == first.body["messages"]
    later = {"messages": [*body["messages"],
                          {"role": "assistant", "content": "Final Answer: module_2.py"},
                          {"role": "user", "content": _message(7)}]}
    fitted = await engine.fit(later, call)
    assert fitted.tokens_after <= budget
    assert fitted.body["messages"][-1]["content"].endswith(_step(6) + "Thought:")
    assert all(drops_add_up(f) for f in (first, again, fitted))
