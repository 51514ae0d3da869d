"""A ReAct agent whose harness appends each action's result to the agent's own turn
(`Action: ...` then `Observation: <result>` in one assistant message, which the next call
sends back; no API tools, no user turn carries the result): its session is a text-tool
agent's; the latest such turn is the open exchange the call reads, never digested; a turn
whose appended result repeats, exactly, one an earlier turn sent as is carries goes out with
that result as a pointer on arrival, the agent's words as written. Made-up sessions."""

from __future__ import annotations

from typing import Any

from gateway.context.classify import is_text_tool_request
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import Layout, appended_observation
from gateway.settings import Settings
from tests.context.conftest import without_credit
from tests.context.sessions import fit_agreed, memory_engine

SYSTEM = ("You are Researcher. You ONLY have access to the following tools:\n\n"
          "Tool Name: lookup(topic: str)\nTool Description: Finds notes on a topic.\n\n"
          "Use the following format:\n\nThought: you should always think about what to do\n"
          "Action: the action to take\nAction Input: the input to the action\n"
          "Observation: the result of the action\n")
TASK = "Current Task: Write one paragraph on the history of the harbour of Port Ellis."
# a tool's error the harness appends each time the agent retries the same action
REFUSED = ("Observation: I tried reusing the same input, I must stop using this action input. "
           "I'll try something else instead. Lookup service quota exceeded for key "
           "acct_7731_harbour; retry after the window closes.")


def _notes(k: int) -> str:
    return (f"Observation: Notes on topic {k}: " + " ".join(
        f"In {1850 + 7 * k + j} the harbour master logged ship {k}-{j} at pier {j}."
        for j in range(8)))


def _turn(k: int, result: str) -> dict[str, Any]:
    return {"role": "assistant", "content": (
        f"Thought: attempt {k}, the notes on pier {k} come next.\n\nAction: lookup\n"
        f'Action Input: {{"topic": "pier {k}"}}\n\n{result}')}


def _session(results: list[str]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                      {"role": "user", "content": TASK}]
    for k, result in enumerate(results):
        messages.append(_turn(k, result))
    messages.append({"role": "assistant", "content": "Thought: I now know the final answer\n"
                                                     "Final Answer: The harbour grew."})
    return messages


def _call(session: str) -> CallContext:
    return CallContext("t-appended", "ta", {"x-ctxgate-session-id": session})


def test_a_result_appended_to_the_agents_turn_is_found() -> None:
    turn = _turn(1, _notes(1))["content"]
    at = appended_observation(turn)
    assert at is not None and turn[at:] == _notes(1)
    # the format the system prompt teaches, with no action written: no result
    assert appended_observation("Thought: hm.\nObservation: the result of the action") is None
    # a label mid-line is no harness's label
    assert appended_observation("Action: lookup\nI saw no Observation: here") is None
    # the request is a text-tool agent's, though no user turn carries a result
    messages = _session([_notes(0), _notes(1)])[:-1]
    assert is_text_tool_request({"messages": messages})
    assert not is_text_tool_request({"messages": [{"role": "system", "content": SYSTEM},
                                                  {"role": "user", "content": TASK}]})


def test_the_latest_turn_with_its_result_is_the_open_exchange() -> None:
    messages = _session([_notes(0), _notes(1)])[:-1]
    layout = Layout()
    layout.extend(messages)
    latest = len(messages) - 1
    assert layout.open_from == latest
    assert layout.pinned_message(latest, "assistant")
    assert not layout.pinned_message(latest - 1, "assistant")


async def test_a_repeated_appended_result_points_back_on_arrival(
    settings: Settings, embedder: Any,
) -> None:
    # no young session's step credit: no step ages the first copy on these few calls
    cached, plain = (memory_engine(without_credit(settings), embedder, cache)
                     for cache in (True, False))
    results = [_notes(0), REFUSED, _notes(1), REFUSED, REFUSED]
    messages = _session(results)
    fitted = None
    for end in range(3, len(messages)):
        if messages[end]["role"] == "assistant":
            fitted = await fit_agreed(cached, plain, {"messages": messages[:end]},
                                      _call("appended"))
    assert fitted is not None
    sent = fitted.body["messages"]
    assert len(sent) == len(messages) - 1
    assert "[ctxgate: repeats" not in sent[3]["content"]  # the first copy of the refusal
    for i in (5, 6):  # its repeats: the agent's words as written, the result a pointer
        head = messages[i]["content"].split("Observation:")[0]
        assert sent[i]["content"].startswith(head + "Observation: [ctxgate: repeats")
        assert "acct_7731_harbour" not in sent[i]["content"]
    assert any(d.reason == "repeated_result" for d in fitted.drops)
    assert sum(d.tokens_saved for d in fitted.drops) == (
        fitted.tokens_before - fitted.tokens_after)


async def test_the_result_a_call_reads_is_never_digested(engine: ContextEngine) -> None:
    # long results, each read once, in a class that ages the agent's turns: its steps
    # digest old turns, never the latest one, which carries the result the call reads
    messages = _session([_notes(k) * 6 for k in range(14)])
    call = CallContext("t-appended", "ta", {"x-ctxgate-session-id": "reads",
                                            "x-ctxgate-task-class": "coding_agent"})
    digested = 0
    for end in range(3, len(messages)):
        if messages[end]["role"] != "assistant":
            continue
        fitted = await engine.fit({"messages": messages[:end]}, call)
        sent = fitted.body["messages"]
        assert sent[-1] == messages[end - 1]
        digested = max(digested, sum(a != b for a, b in zip(sent, messages, strict=False)))
    assert digested  # old turns did age
