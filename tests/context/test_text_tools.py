"""Agents whose tools are text (AutoCodeRover: the model writes `search_class("X")` in prose,
the harness answers in a user turn `Result of search_class("X"):`, no API tools): their
sessions age as the agent policy's, their calls' results stay verbatim; a session a person
drives (short user turns in prose) goes out as before."""

from __future__ import annotations

from typing import Any

from gateway.context.classify import is_agent_request, is_text_tool_request
from gateway.context.engine import CallContext, ContextEngine
from gateway.context.items import text_tool_result

SYSTEM = "You are a software developer maintaining a large project."
ISSUE = "<issue>Deleting an index_together raises ValueError in the schema editor.</issue>"


def _call(session: str) -> CallContext:
    # `default` (the class such an agent gets when nothing names it; fixed here so that the
    # test does not hang on what the embedded examples say of its first call)
    return CallContext("t-text", "tr", {"x-ctxgate-session-id": session,
                                         "x-ctxgate-task-class": "default"})


def _code(k: int) -> str:
    return "\n".join(f"    def method_{k}_{i}(self, arg_{i}):\n        return self.field_{k}_{i}"
                     for i in range(30))


def _prose_tool_session(rounds: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": ISSUE}]
    for k in range(rounds):
        messages.append({"role": "assistant", "content": (
            f"To understand the bug I need the class Editor{k}. I will look at how it handles "
            f"the schema and which of its methods the migration reaches, then decide. "
            + "The traceback ends in the schema editor, so the index handling is the place. " * 6
            + "\n"
            f'search_class("Editor{k}")')})
        messages.append({"role": "user", "content": (
            f'Result of search_class("Editor{k}"):\nFound 1 classes with name Editor{k}.\n'
            f"<file>django/db/backends/editor_{k}.py</file>\n<code>class Editor{k}:\n"
            f"{_code(k)}\n</code>")})
    return messages


def _human_chat(rounds: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": ISSUE}]
    for k in range(rounds):
        messages.append({"role": "assistant", "content": (
            f"You could call search_class(\"Editor{k}\") to see the class; it probably holds "
            f"the method that raises. " + "Here is why this matters for the schema. " * 8)})
        messages.append({"role": "user", "content": (
            f"Thanks, I looked at Editor{k} and it still fails. What should I try next?")})
    return messages


def test_a_prose_tool_session_is_told_apart_from_a_human_chat() -> None:
    tools = {"messages": _prose_tool_session(3)}
    chat = {"messages": _human_chat(3)}
    assert is_text_tool_request(tools) and not is_agent_request(tools)
    assert not is_text_tool_request(chat)
    # its first call has no result yet: nothing to tell by
    assert not is_text_tool_request({"messages": tools["messages"][:2]})
    # a short reply naming the call is a person's, not a harness's
    said = 'search_class("Editor0")'
    assert not text_tool_result(said, 'search_class("Editor0") gave nothing useful, sorry.')
    assert text_tool_result(said, _prose_tool_session(1)[-1]["content"])
    # a long user turn whose first line names no call the assistant wrote is not a result
    assert not text_tool_result(said, "Result of a long search:\n" + _code(0))


async def _late_call(engine: ContextEngine, messages: list[dict[str, Any]], session: str
                     ) -> Any:
    fitted = None
    for end in range(2, len(messages) + 1, 2):  # each call ends with a user turn
        fitted = await engine.fit({"messages": messages[:end]}, _call(session))
    assert fitted is not None
    return fitted


async def test_a_prose_tool_session_ages_its_turns_and_keeps_its_results(
    engine_without_young: ContextEngine,
) -> None:
    # large calls not weighed (`engine_without_young`): on its first task the shipped
    # `agent` aging leaves a step out while its digests do not repay the re-send
    # (`steps.on_first_task`: its answered calls make it one), which this session's short
    # turns beside verbatim results never do; this test is of what an aged turn becomes
    messages = _prose_tool_session(16)
    fitted = await _late_call(engine_without_young, messages, "prose-tools")
    assert fitted.task_class == "default"  # its class is not renamed: it ages as an agent
    sent = fitted.body["messages"]
    assert len(sent) == len(messages)
    turns = [(out, came) for out, came in zip(sent, messages, strict=True)
             if came["role"] == "assistant"]
    aged = [out for out, came in turns if out["content"] != came["content"]]
    assert aged, "old assistant turns became digests"
    assert all('search_class("Editor' not in out["content"] or len(out["content"]) < 250
               for out in aged)
    assert turns[-1][0] == turns[-1][1]  # the latest turn, whose call is open, verbatim
    # every result the harness wrote back goes verbatim, however old
    results = [(out, came) for out, came in zip(sent, messages, strict=True)
               if came["role"] == "user"]
    assert all(out["content"] == came["content"] for out, came in results)
    assert fitted.tokens_after < 0.9 * fitted.tokens_before
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after
    assert all(d.kind == "assistant" for d in fitted.drops if d.reason == "aged")


async def test_a_human_chat_of_the_same_size_goes_out_as_sent(engine: ContextEngine) -> None:
    messages = _human_chat(16)
    fitted = await _late_call(engine, messages, "human-chat")
    assert fitted.task_class == "default"
    assert fitted.body["messages"] == messages
    assert fitted.tokens_after == fitted.tokens_before and not fitted.drops


def _rest_session(calls: int) -> list[dict[str, Any]]:
    """MedAgentBench's shape: no system message, the instructions and question in the first
    user turn, one REST call a turn in prose, the harness's answer naming its method."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": (
        "You are an expert in using FHIR functions. If you decide to invoke a GET function, "
        "put it in the format of\nGET url?param=value\nQuestion: the last HbA1C of S31?")}]
    for k in range(calls):
        messages.append({"role": "assistant", "content": (
            f"GET http://34.170.56.151:8080/fhir/Observation?code=A1C&patient=S31{k}")})
        messages.append({"role": "user", "content": (
            "Here is the response from the GET request:\n"
            + '{"resourceType": "Bundle", "entry": [' + ", ".join(
                f'{{"id": "{k}{i}", "valueQuantity": {{"value": {i}.{k}}}}}'
                for i in range(20)) + "]}")})
    return messages


def test_a_rest_call_in_prose_is_answered_by_a_harness_naming_its_method() -> None:
    session = _rest_session(2)
    answer = session[2]["content"]
    assert is_text_tool_request({"messages": session})
    assert not is_agent_request({"messages": session})
    assert text_tool_result(session[1]["content"], answer)
    # the call in a code fence (as gemini wrote it) is still a call on a line of its own
    assert text_tool_result("```tool_code\nGET http://h/fhir/Patient?name=Ann\n```", answer)
    # a method named in passing mid-sentence is no call; a reply not naming it is no answer
    assert not text_tool_result("You could GET http://h/fhir/Patient next.", answer)
    assert not text_tool_result("POST http://h/fhir/Observation\n{}", answer)
    assert not text_tool_result(session[1]["content"], "Getting there: " + "x" * 300)
    # a short reply naming the method is a person's
    assert not text_tool_result(session[1]["content"], "The GET request failed, sorry.")


async def test_a_rest_call_session_ages_its_turns_and_keeps_its_results(
    engine: ContextEngine,
) -> None:
    # past the agent policy's 60th turn, from which old user turns go as gists
    messages = _rest_session(70)
    fitted = None
    for end in range(1, len(messages) + 1, 2):  # each call ends with a user turn
        fitted = await engine.fit({"messages": messages[:end]}, _call("rest-calls"))
    assert fitted is not None and fitted.task_class == "default"
    sent = fitted.body["messages"]
    assert sent[-1] == messages[-1]  # the latest answer as written
    # the task stays whole (old finished calls fold into a note beside it)
    assert messages[0]["content"] in sent[0]["content"]
    assert fitted.drops and fitted.tokens_after < fitted.tokens_before
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after


async def test_a_rest_call_session_without_the_methods_named_goes_out_as_sent(
    engine: ContextEngine,
) -> None:
    # the same session whose replies do not name the method: a person's, not a harness's
    messages = [m if m["role"] != "user" or i == 0 else
                {**m, "content": m["content"].replace("GET request", "request")}
                for i, m in enumerate(_rest_session(70))]
    fitted = None
    for end in range(1, len(messages) + 1, 2):
        fitted = await engine.fit({"messages": messages[:end]}, _call("rest-person"))
    assert fitted is not None
    assert fitted.body["messages"] == messages and not fitted.drops
