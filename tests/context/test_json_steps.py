"""An agent that writes its steps as JSON objects in plain assistant text (a plan, a search, a
page to read, an answer) and whose harness answers each with a JSON observation in a user
turn (no API tools): such a step is a call written in prose, its observation that call's
result (`items.json_step_result`), so the session ages as a text-tool agent's. Its harness
sends each node's own instructions (a schema turn that opens as the task's first turn did,
then an instruction): before the agent's first call they are the task's statement (`goal`),
not a later task (`Clock.queue_starts`), and they do not end its first task
(`steps.on_first_task`); a later task is one laid out as the first was (as many turns). Its
digests list a value that ends a sentence with its period (`summarize.values`), as the agent
quotes it (bench/README.md, "The ninth agent kind, part two")."""

from __future__ import annotations

import json
from typing import Any

from gateway.context.classify import RequestScan
from gateway.context.items import Layout, json_step_result, parse_request
from gateway.context.steps import on_first_task
from gateway.context.summarize import summarize, values
from gateway.context.tokens import TokenCounter

TEMPLATE = "You can use these tools: web search, page reading and python."
PLAN_SCHEMA = f"{TEMPLATE}\nWrite ONLY steps as JSON objects of these kinds: plan_step."
ACT_SCHEMA = (f"{TEMPLATE}\nWrite ONLY steps as JSON objects of these kinds: search_step, "
              "read_step, final_answer_step (with answer_unit and answer).")
PAGE = ("the editions are listed below " * 60 + "The first one was retrieved on 28 April 2018. "
        + "more editions follow " * 30)


def step(**fields: Any) -> dict[str, str]:
    return {"role": "assistant", "content": json.dumps(fields, indent=2)}


def observation(**fields: Any) -> dict[str, str]:
    return {"role": "user", "content": json.dumps(fields, indent=2)}


def task(question: str) -> list[dict[str, Any]]:
    """One task as the harness lays it out: the plan node's schema, the question and its
    instruction, the plan; the facts node's instruction and the facts; the act node's
    schema and instruction, then the agent's steps and their observations."""
    return [
        {"role": "user", "content": PLAN_SCHEMA},
        observation(kind="question", content=question),
        {"role": "user", "content": "What steps should I do? Reply with a plan_step."},
        step(kind="plan_step", plan=["search", "read the page", "answer"]),
        {"role": "user", "content": "Before you begin, list the facts you know."},
        step(kind="facts_step", given_facts=[], facts_to_lookup=["the year"]),
        {"role": "user", "content": ACT_SCHEMA},
        {"role": "user", "content": "Start executing the plan, one JSON step a turn."},
        step(kind="search_step", query=question),
        observation(kind="search_results", serp=[{"url": "https://example.org/editions"}]),
        step(kind="read_step", url="https://example.org/editions"),
        observation(kind="page", text=PAGE),
        step(kind="final_answer_step", answer_unit="", answer="2018"),
    ]


SYSTEM = {"role": "system", "content": "You are an expert research agent."}


def test_a_json_step_answered_by_a_json_observation_is_a_call() -> None:
    assert json_step_result(json.dumps({"kind": "search_step"}), '{"kind": "serp"}')
    assert not json_step_result(json.dumps({"kind": "search_step"}), "Thanks, and the year?")
    layout = Layout()
    layout.extend([SYSTEM, *task("When did the first edition appear?")])
    clock = layout.clock
    assert clock.text_calls and clock.json_steps and clock.text_results == 2
    messages = [SYSTEM, *task("When did the first edition appear?")]
    scan = RequestScan()  # read on call by call, each call only its new messages
    assert not scan.text_tools(messages[:10])
    assert scan.text_tools(messages[:11])


def test_a_node_s_instructions_are_the_task_s_statement_not_a_later_task() -> None:
    messages = [SYSTEM, *task("When did the first edition appear?")]
    parsed = parse_request({"messages": messages}, TokenCounter(), "o200k_base")
    assert parsed.layout is not None
    clock = parsed.layout.clock
    assert clock.queue_starts == []  # the act node's schema opens as the task did
    assert on_first_task(clock=clock)  # the instruction turns came before its first call
    schema = [item for item in parsed.items if item.message_index == 7]
    assert schema and all(item.goal for item in schema)


def test_a_later_task_laid_out_as_the_first_starts_one() -> None:
    first = [SYSTEM, *task("When did the first edition appear?")]
    layout = Layout()
    layout.extend([*first, *task("When did the second edition appear?")])
    later = len(first)
    assert [start for start, _ in layout.clock.queue_starts] == [later]
    assert later + 6 in layout.clock.template_turns  # its act node's schema: not a task
    assert not on_first_task(clock=layout.clock)


def test_a_json_step_agent_s_digest_lists_a_sentence_s_last_value_with_its_period() -> None:
    assert "2018." in values(PAGE, periods=True)
    assert "2018." not in values(PAGE) and "2018" in values(PAGE)
    page = observation(kind="page", text=PAGE)["content"]
    listed = summarize(page, "user", 3, periods=True).rsplit("\n", 1)[-1]
    assert listed.startswith("[omitted text mentions:") and "2018." in listed.split()
    assert "2018." not in summarize(page, "user", 3)
