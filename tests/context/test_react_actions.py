"""ReAct agents (ReAct on WebShop: the model writes one action a turn in bracket syntax,
`search[red shoes]`, `click[Buy Now]`; the harness answers in a user turn starting with
ReAct's `Observation:` label; no API tools, no system message): their sessions are text-tool
sessions, which age; the same session whose answers do not carry the label, or whose
actions are no line of their own, goes out as sent."""

from __future__ import annotations

from typing import Any

from gateway.context.classify import is_agent_request, is_text_tool_request
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import text_tool_result

EXAMPLE = ("Webshop \nInstruction:  \ni would like a 3 ounce bottle of bright citrus deodorant "
           "\n[Search]  \n\nAction: search[3 ounce bright citrus deodorant]\nObservation: ...\n")


def _call(session: str) -> CallContext:
    return CallContext("t-react", "tr", {"x-ctxgate-session-id": session,
                                          "x-ctxgate-task-class": "default"})


def _page(k: int) -> str:
    return ("\n[Back to Search] \nPage 1 (Total results: 50) \n[Next >] \n" + "".join(
        f"[B0{k:03d}{i:04d}X] \nItem {k}-{i}: a pack of {i} soaps, unscented, for sensitive "
        f"skin, made in batch {k * 31 + i} \n${i}.{k % 100:02d} \n" for i in range(6)))


def _react_session(calls: int) -> list[dict[str, Any]]:
    """WebShop's shape: the few-shot example and the first page in the first user turn,
    one action a turn, the shop's page after `Observation: `."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": (
        EXAMPLE + "\nWebshop \nInstruction:  \ni need unscented soap, price lower than 30.00 "
        "dollars \n[Search] ")}]
    for k in range(calls):
        action = f"search[unscented soap pack {k}]" if k % 2 else f"click[B0{k:03d}0001X]"
        messages.append({"role": "assistant", "content": action})
        messages.append({"role": "user", "content": f"Observation: {_page(k)}"})
    return messages


def test_a_react_action_is_answered_by_an_observation() -> None:
    session = _react_session(2)
    answer = session[2]["content"]
    assert is_text_tool_request({"messages": session})
    assert not is_agent_request({"messages": session})
    assert text_tool_result(session[1]["content"], answer)
    # a numbered action with its label (ReAct on FEVER/HotpotQA), after the thought
    assert text_tool_result("Thought 2: I need his birth year.\nAction 2: Lookup[born]",
                            "Observation 2: " + "He was born in 1961 in Hawaii. " * 8)
    # an action mentioned mid-sentence is no action; a page without the label is no answer
    assert not text_tool_result("You could click[Buy Now] to buy it.", answer)
    assert not text_tool_result(session[1]["content"], answer.removeprefix("Observation: "))
    assert not text_tool_result("I will look again.", answer)
    # a short answer with the label (`Observation: OK.`) is not taken as a result
    assert not text_tool_result(session[1]["content"], "Observation: OK.")


async def test_a_react_session_ages_its_turns_and_keeps_its_results(
    engine: ContextEngine,
) -> None:
    # past the agent policy's 60th turn, from which old user turns go as gists
    messages = _react_session(70)
    fitted = None
    for end in range(1, len(messages) + 1, 2):  # each call ends with a user turn
        fitted = await engine.fit({"messages": messages[:end]}, _call("react"))
    assert fitted is not None and fitted.task_class == "default"
    sent = fitted.body["messages"]
    assert sent[-1] == messages[-1]  # the latest observation as written
    # the task whole (old finished calls fold into a note beside it, its end trimmed)
    assert messages[0]["content"].rstrip() in sent[0]["content"]
    assert fitted.drops and fitted.tokens_after < fitted.tokens_before
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after


async def test_a_react_session_without_the_label_goes_out_as_sent(
    engine: ContextEngine,
) -> None:
    # the same session whose answers do not start with `Observation:`: a person's replies
    messages = [m if m["role"] != "user" or i == 0 else
                {**m, "content": m["content"].replace("Observation: ", "Here:", 1)}
                for i, m in enumerate(_react_session(70))]
    fitted = None
    for end in range(1, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end]}, _call("react-person"))
    assert fitted is not None
    assert fitted.body["messages"] == messages and not fitted.drops
