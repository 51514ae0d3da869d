"""The ACE loop through the real gateway: a failed step and explicit feedback become one
bullet, injected into new sessions of the same tenant and class only; an open session's
prompt does not change."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.conftest import ModuleStart, gateway_env, module_gateway
from tests.harness import Gateway, Upstream
from tests.learner.conftest import curation, reflection

LESSON = "Install missing Python modules with pip before rerunning pytest."
CLASS = "coding_agent"
SYSTEM = "You are an autonomous programmer working in a repository."


TAG = uuid.uuid4().hex[:8]
MODELS = (f"e2e-reflector-{TAG}", f"e2e-curator-{TAG}")


@pytest.fixture(scope="module")
def models() -> tuple[str, str]:
    return MODELS


@module_gateway()
def loop_gateway(start: ModuleStart) -> dict[str, str]:
    env = gateway_env(start.upstream, start.redis_url.rsplit("/", 1)[0] + "/8")
    env.update(CTXGATE_REFLECTOR_MODEL=MODELS[0], CTXGATE_CURATOR_MODEL=MODELS[1],
               CTXGATE_WORKER="inprocess", CTXGATE_UPSTREAM_TIMEOUT_S="30")
    return env


def client(gateway: Gateway, key: str, session: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0,
                         default_headers={"x-ctxgate-task-class": CLASS,
                                          "x-ctxgate-session-id": session})


def call(gateway: Gateway, upstream: Upstream, key: str, session: str,
         messages: list[dict[str, Any]]) -> tuple[str, str]:
    """One chat call; returns (trace id, the system prompt the upstream received)."""
    upstream.clear()
    raw = client(gateway, key, session).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages)  # type: ignore[arg-type]
    forwarded = [orjson.loads(r["body"]) for r in upstream.requests()
                 if r["path"] == "/v1/chat/completions"]
    system = forwarded[-1]["messages"][0]
    assert system["role"] == "system"
    return raw.headers["x-ctxgate-trace-id"], str(system["content"])


def failed_step() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Fix the failing test in tests/test_parser.py."},
        {"role": "assistant", "content": "Running the tests.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'}}]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": "Traceback (most recent call last):\n  File \"t.py\", line 1\n"
                    "ModuleNotFoundError: No module named 'yaml'"},
    ]


def bullets(gateway: Gateway, tenant: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{gateway.url}/admin/playbooks/{tenant}/{CLASS}/bullets",
                       headers={"authorization": f"Bearer {gateway.admin_key}"})
    assert answer.status_code == 200
    found: list[dict[str, Any]] = answer.json()["bullets"]
    return found


def queued_trace_ids(gateway: Gateway) -> list[str]:
    """The trace ids announced on the trace stream of the gateway's Redis database."""
    import redis

    client = redis.Redis.from_url(gateway.env["CTXGATE_REDIS_URL"])
    try:
        entries = client.xrange("ctxgate:traces")
    finally:
        client.close()
    return [fields[b"trace_id"].decode() for _, fields in entries]


def wait_for(predicate: Any, timeout_s: float = 40.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_failure_and_feedback_teach_one_bullet(
    loop_gateway: Gateway, upstream: Upstream, models: tuple[str, str]
) -> None:
    from gateway.auth import tenant_of_token

    key_a, key_b = f"sk-a-{uuid.uuid4().hex[:6]}", f"sk-b-{uuid.uuid4().hex[:6]}"
    tenant_a = tenant_of_token(key_a)
    upstream.script(models[0], [reflection(insight=LESSON)])
    upstream.script(models[1], [curation([{"type": "ADD", "section": "common_mistakes",
                                           "content": LESSON}])])
    opening = failed_step()[:2]
    first_trace, open_prompt = call(loop_gateway, upstream, key_a, "open", opening)
    assert "<ctxgate-playbook>" not in open_prompt  # nothing learned yet
    # No tool result, no feedback yet: stored for feedback, never queued for the learner.
    time.sleep(0.3)
    assert first_trace not in queued_trace_ids(loop_gateway)

    # The agent's next call carries a failed tool result: implicit feedback.
    call(loop_gateway, upstream, key_a, "failing", failed_step())
    wait_for(lambda: len(bullets(loop_gateway, tenant_a)) == 1)
    # The same lesson again, from explicit feedback on another call: still one bullet.
    answer = httpx.post(f"{loop_gateway.url}/v1/feedback",
                        headers={"authorization": f"Bearer {key_a}"},
                        json={"trace_id": first_trace, "outcome": "failure",
                              "note": "it never installed the dependency"})
    assert answer.status_code == 202
    assert first_trace in queued_trace_ids(loop_gateway)  # queued once feedback arrived
    wrong_tenant = httpx.post(f"{loop_gateway.url}/v1/feedback",
                              headers={"authorization": f"Bearer {key_b}"},
                              json={"trace_id": first_trace, "outcome": "failure"})
    assert wrong_tenant.status_code == 404
    wait_for(lambda: loop_gateway.metric("ctxgate_curator_operations_total", op="FOLD") >= 1)
    [bullet] = bullets(loop_gateway, tenant_a)
    assert bullet["content"] == LESSON and bullet["id"] == "err-00001"

    # A new session of the same tenant and class gets it, citation instruction included.
    _, fresh_prompt = call(loop_gateway, upstream, key_a, "fresh", opening)
    assert f"[err-00001] helpful=0 harmful=0 :: {LESSON}" in fresh_prompt
    assert "cite its id" in fresh_prompt
    # The session that was open keeps its prompt byte for byte; another tenant gets nothing.
    _, reopened = call(loop_gateway, upstream, key_a, "open",
                       [*opening, {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": "go on"}])
    assert reopened == open_prompt
    _, other_prompt = call(loop_gateway, upstream, key_b, "fresh", opening)
    assert "<ctxgate-playbook>" not in other_prompt
    assert loop_gateway.metric("ctxgate_feedback_events_total", source="implicit",
                               outcome="failure") >= 1
    # The agent cites the bullet and its step succeeds: the bullet is credited, no LLM call.
    install = {"name": "bash", "arguments": '{"command": "pip install pyyaml"}'}
    cited_step = [*opening, {"role": "assistant", "content": "Per [err-00001], installing.",
                             "tool_calls": [{"id": "call_9", "type": "function",
                                             "function": install}]},
                  {"role": "tool", "tool_call_id": "call_9",
                   "content": "Successfully installed PyYAML-6.0.1"}]
    call(loop_gateway, upstream, key_a, "fresh", cited_step)
    wait_for(lambda: bullets(loop_gateway, tenant_a)[0]["helpful"] == 1)
    folds = [d for d in loop_gateway.drops() if d.get("stage") == "playbook"]
    assert [d["action"] for d in folds] == ["dedup"] and folds[0]["kept_as"] == "err-00001"

