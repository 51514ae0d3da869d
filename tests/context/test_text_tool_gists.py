"""A text-tool agent whose own turns are too short to digest (MedAgentBench: one REST call a
line, `GET http://…`): its old results still go as gists on a long session. Its results are
not digested (`engine.text_tools_aging`), so the only batch that could mask them was one
its digests started, and a one-line call's digest is never long enough to start one: every
old result went verbatim, then whole inside the fold notes (bench/README.md, "MedAgentBench
queues: …")."""

from __future__ import annotations

from typing import Any

from gateway.context.engine import CallContext, ContextEngine


def _call(session: str) -> CallContext:
    return CallContext("t-gists", "tr", {"x-ctxgate-session-id": session,
                                         "x-ctxgate-task-class": "default"})


TASK = ("You are an expert in using FHIR functions. If you decide to invoke a GET function, "
        "put it in the format of\nGET url?param=value\nQuestion: the last HbA1C of S31?")


def _result(k: int) -> str:
    return ("Here is the response from the GET request:\n"
            + '{"resourceType": "Bundle", "entry": [' + ", ".join(
                f'{{"id": "obs-{k}-{i}", "valueQuantity": {{"value": {i}.{k}}}}}'
                for i in range(20)) + "]}")


def _rest_session(calls: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    for k in range(calls):
        messages.append({"role": "assistant", "content": (
            f"GET http://34.170.56.151:8080/fhir/Observation?code=A1C&patient=S31{k}")})
        messages.append({"role": "user", "content": _result(k)})
    return messages


async def _late(engine: ContextEngine, messages: list[dict[str, Any]], session: str) -> Any:
    fitted = None
    for end in range(1, len(messages) + 1, 2):  # each call ends with a user turn
        fitted = await engine.fit({"messages": messages[:end]}, _call(session))
    assert fitted is not None
    return fitted


async def test_old_results_of_a_short_turned_text_tool_agent_go_as_gists(
    engine: ContextEngine,
) -> None:
    messages = _rest_session(90)
    fitted = await _late(engine, messages, "rest-gists")
    assert fitted.task_class == "default"
    sent = fitted.body["messages"]
    text = "\n".join(str(m["content"]) for m in sent)
    # the early results are in the request no more: not as sent, nor inside a fold note
    old = [_result(k) for k in range(30)]
    assert not any(r in text for r in old)
    assert not any(r.split("\n", 1)[1] in text for r in old)
    # the latest answer as written, the task whole
    assert sent[-1] == messages[-1]
    assert TASK in str(sent[0]["content"])
    gists = [d for d in fitted.drops if d.kind == "user" and d.reason == "aged"]
    assert gists or any(d.reason == "folded_turns" for d in fitted.drops)
    assert fitted.tokens_after < 0.5 * fitted.tokens_before
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after


async def test_a_short_text_tool_session_keeps_its_results(engine: ContextEngine) -> None:
    # before the 60th turn no old user turn goes as a gist: every result as written
    messages = _rest_session(30)
    fitted = await _late(engine, messages, "rest-short")
    sent = fitted.body["messages"]
    results = [(out, came) for out, came in zip(sent, messages, strict=True)
               if came["role"] == "user"]
    assert all(out["content"] == came["content"] for out, came in results)
