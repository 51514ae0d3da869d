"""Agents that act by writing code for their harness to run (CodeAct's convention, MINT's
harness: a `<thought>`, then Python in `<execute>...</execute>`; the harness answers in a
user turn opening with `Observation:` and what the code printed; no system message, no API
tools): the answer is the code's result however short, so such a session is an agent whose
tools are text and its old tasks and turns age (bench/README.md, "An eighth agent kind
nobody tuned for: MINT")."""

from __future__ import annotations

from typing import Any

from gateway.context.classify import is_agent_request, is_text_tool_request
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import text_tool_result

RULES = ("You are a helpful assistant assigned with the task of problem-solving. To achieve "
         "this, you will be using an interactive coding environment equipped with a variety "
         "of tool functions to assist you throughout the process.\n\nAt each turn, you should "
         "first provide your step-by-step thinking in <thought>. Then either run Python in "
         "<execute> </execute> and receive its output, or answer in <solution> </solution>.\n"
         "You have 5 chances to interact with the environment.\n")
EXAMPLE = "".join(f"Tool function {i}: goto(receptacle) moves you to receptacle {i}.\n"
                  for i in range(40))


def _task(t: int) -> str:
    return RULES + EXAMPLE + f"Task: put a clean mug {t} in coffeemachine {t}."


def _reply(t: int, k: int) -> str:
    return (f"Assistant:\n<thought> I look in cabinet {k} for mug {t}. </thought>\n<execute>\n"
            f'print(goto("cabinet {k}"))\nprint(take_from("mug {t}", "cabinet {k}"))\n'
            "</execute>\n")


def _observation(t: int, k: int) -> str:
    return (f"Observation:\nOn the cabinet {k}, you see a mug {t}, a plate {k} and a "
            f"spoon_{t}_{k}.\nYou have {4 - k} steps left and 2 chances to propose solution "
            "left.\n")


def _queue(tasks: int, turns: int) -> list[dict[str, Any]]:
    """Tasks one after another in one conversation, each opening with the rules again."""
    messages: list[dict[str, Any]] = []
    for t in range(tasks):
        messages.append({"role": "user", "content": _task(t)})
        for k in range(turns):
            messages.append({"role": "assistant", "content": _reply(t, k)})
            if k < turns - 1:
                messages.append({"role": "user", "content": _observation(t, k)})
    return messages


def test_an_observation_answers_the_code_the_agent_wrote() -> None:
    assert text_tool_result(_reply(0, 1), _observation(0, 1))  # short: under 200 characters
    assert len(_observation(0, 1)) < 200
    assert text_tool_result("<execute_bash>\nls -la\n</execute_bash>", "OBSERVATION:\nsetup.py")
    assert text_tool_result("Let me run it:\n```python\nprint(2 + 2)\n```", "Observation: 4")
    # no code to run, or no label first: a person's reply
    assert not text_tool_result("I think the mug is in the cabinet.", "Observation: nice try")
    assert not text_tool_result(_reply(0, 1), "Thanks! What did you observe there?")
    assert not text_tool_result("Use `goto` next time.", "Observation:\nOn the cabinet 1")
    session = _queue(1, 3)[:-1]
    assert is_text_tool_request({"messages": session})
    assert not is_agent_request({"messages": session})


async def test_a_code_acting_agents_queue_ages(engine: ContextEngine) -> None:
    messages = _queue(12, 4)
    headers = {"x-ctxgate-session-id": "code-queue", "x-ctxgate-task-class": "default"}
    fitted = None
    ends = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    for end in ends:  # each call ends right before an assistant turn
        fitted = await engine.fit({"messages": messages[:end]},
                                  CallContext("t-code", "s", headers))
    assert fitted is not None and fitted.task_class == "default"
    sent = [str(m["content"]) for m in fitted.body["messages"]]
    assert fitted.drops and fitted.tokens_after < fitted.tokens_before
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after
    assert _reply(0, 0) not in sent and _reply(5, 1) not in sent  # old turns aged
    # an earlier task's statement (the rules again) ages or points at the first task's,
    # which stays as sent: the copy repeats on arrival name (bench/README.md, "oh55")
    assert all(_task(t) not in sent for t in range(1, 11))
    assert _task(0) in sent
    assert fitted.body["messages"][-1] == messages[ends[-1] - 1]  # the latest as written
    assert any("Task: put a clean mug 11 in coffeemachine 11." in text for text in sent)
