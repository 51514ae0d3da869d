"""A text-tool agent whose own turns are too short to digest (MedAgentBench: one REST call a
line, `GET http://…`): its old results still go as gists on a long session. Its results are
not digested (`engine.text_tools_aging`), so the only batch that could mask them was one
its digests started, and a one-line call's digest is never long enough to start one: every
old result went verbatim, then whole inside the fold notes (bench/README.md, "MedAgentBench
queues: …")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from gateway.context.engine import CallContext, ContextEngine
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from tests.context.conftest import without_done_results


def _call(session: str) -> CallContext:
    return CallContext("t-gists", "tr", {"x-ctxgate-session-id": session,
                                         "x-ctxgate-task-class": "default"})


INSTRUCTIONS = ("You are an expert in using FHIR functions. If you decide to invoke a GET "
                "function, put it in the format of\nGET url?param=value\n")


def _task(t: int) -> str:
    return f"{INSTRUCTIONS}Question: the last HbA1C of patient S{3100 + t}?"


def _result(t: int, k: int) -> str:
    return ("Here is the response from the GET request:\n"
            + '{"resourceType": "Bundle", "entry": [' + ", ".join(
                f'{{"id": "obs-{t}-{k}-{i}", "valueQuantity": {{"value": {i}.{k}}}}}'
                for i in range(20)) + "]}")


def _rest_queue(tasks: int) -> list[dict[str, Any]]:
    """MedAgentBench's queue: per task, its instructions and question in a user turn, two
    REST calls in prose answered by the harness, a FINISH."""
    messages: list[dict[str, Any]] = []
    for t in range(tasks):
        messages.append({"role": "user", "content": _task(t)})
        for k in range(2):
            messages.append({"role": "assistant", "content": (
                f"GET http://34.170.56.151:8080/fhir/Observation?code=A1C&patient=S{3100 + t}")})
            messages.append({"role": "user", "content": _result(t, k)})
        messages.append({"role": "assistant", "content": f'FINISH(["{t}.1"])'})
    return messages[:-1]  # the last call ends with the harness's answer


async def _late(engine: ContextEngine, messages: list[dict[str, Any]], session: str) -> Any:
    fitted = None
    ends = [i + 1 for i, m in enumerate(messages) if m["role"] == "user"]
    for end in ends:  # each call ends with a user turn
        fitted = await engine.fit({"messages": messages[:end]}, _call(session))
    assert fitted is not None
    return fitted


async def test_old_results_of_a_short_turned_text_tool_agent_go_as_gists(
    engine: ContextEngine,
) -> None:
    messages = _rest_queue(30)  # 89 assistant turns
    fitted = await _late(engine, messages, "rest-gists")
    assert fitted.task_class == "default"
    sent = fitted.body["messages"]
    text = "\n".join(str(m["content"]) for m in sent)
    # the early results are in the request no more: not as sent, nor inside a fold note
    old = [_result(t, k) for t in range(10) for k in range(2)]
    assert not any(r in text for r in old)
    assert not any(r.split("\n", 1)[1] in text for r in old)
    # the current task's turns as written; the first task (the session's goal) whole
    assert sent[-4:] == messages[-4:]
    assert _task(0) in str(sent[0]["content"])
    gists = [d for d in fitted.drops if d.kind == "user" and d.reason == "aged"]
    assert gists or any(d.reason == "folded_turns" for d in fitted.drops)
    assert fitted.tokens_after < 0.5 * fitted.tokens_before
    assert sum(d.tokens_saved for d in fitted.drops) == fitted.tokens_before - fitted.tokens_after


async def test_a_short_text_tool_session_keeps_its_results(
    engine: ContextEngine, settings: Settings, redis_client: aioredis.Redis,
    embedder: Embedder, drop_log_path: Path,
) -> None:
    # before the 60th turn no old result goes as a gist by its age, nor folds: with the
    # done-results rule off (`done_results_turns`) every result goes as sent; with the
    # shipped settings the earlier tasks' results are done with (test_done_results.py), the
    # current task's go as sent
    messages = _rest_queue(10)
    metrics = Metrics()
    log = DropLog(str(drop_log_path), "hash", metrics)
    off = ContextEngine(without_done_results(settings), redis_client, metrics, log, embedder)
    try:
        kept = await _late(off, messages, "rest-short-off")
    finally:
        log.close()
    shipped = await _late(engine, messages, "rest-short")
    for fitted, tasks in ((kept, range(10)), (shipped, range(9, 10))):
        assert not [d for d in fitted.drops if d.reason in ("folded_turns", "folded_exchange")]
        text = "\n".join(str(m["content"]) for m in fitted.body["messages"])
        assert all(f"obs-{t}-{k}-7" in text for t in tasks for k in range(2))
    assert not [d for d in kept.drops if d.kind == "user" and d.reason == "aged"]
    start = messages.index({"role": "user", "content": _task(9)})
    aged = [d for d in shipped.drops if d.kind == "user" and d.reason == "aged"]
    assert aged and all((d.message_index or 0) < start for d in aged)
