"""When Redis goes away the gateway fails open: agents keep working, /readyz says why, and
the traces of the calls made meanwhile are kept in memory (bounded) and written once Redis
answers again, in order, so that feedback and the learner still get them. A Redis that
hangs (keeps the connection, never answers) is taken for one that is down."""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis

from gateway.auth import tenant_of_token
from gateway.context.replay import calls_from_messages
from gateway.learner.traces import TraceEvent
from gateway.observability.explain import ACCOUNT_FIELD, PIECE
from gateway.store import keys
from gateway.store.embedded import EmbeddedRedis
from tests.conftest import ModuleStart, module_gateway
from tests.harness import Gateway, Upstream
from tests.sessions import synthetic_session

HELD = 3  # learner.outage_buffer_traces of this module's gateway
# CTXGATE_REDIS_TIMEOUT_S of this module's gateway: below its fit timeout (1 s), so that a
# call during a hang takes the outage path (traced, held), not the fit-timeout one.
REDIS_TIMEOUT_S = 0.5
ADMIN_KEY = "admin-outage-key"


@module_gateway(wait_path="/readyz")
def outage_gateway(start: ModuleStart) -> dict[str, str]:
    """A gateway with a Redis of its own (these tests stop it), stopped with it."""
    store = EmbeddedRedis(start.workdir / "redis").start()
    start.noted["store"] = store
    start.on_stop.append(store.stop)
    return {
        "CTXGATE_UPSTREAM_URL": f"{start.upstream.url}/v1", "CTXGATE_REDIS_URL": store.url,
        "CTXGATE_WORKER": "off", "CTXGATE_LEARNER": json.dumps({"outage_buffer_traces": HELD}),
        "CTXGATE_REDIS_TIMEOUT_S": str(REDIS_TIMEOUT_S), "CTXGATE_ADMIN_KEY": ADMIN_KEY,
    }


@pytest.fixture(scope="module")
def outage_stack(outage_gateway: Gateway) -> tuple[EmbeddedRedis, Gateway]:
    """The module's gateway and its Redis, shared by the module; each test leaves Redis
    running again."""
    return outage_gateway.noted["store"], outage_gateway


@pytest.fixture
def stack(outage_stack: tuple[EmbeddedRedis, Gateway]) -> Iterator[tuple[EmbeddedRedis, Gateway]]:
    store, server = outage_stack
    try:
        yield outage_stack
    finally:
        if store.process is None:
            store.start()
        wait_metric(server, "ctxgate_trace_outage_buffered", 0, timeout_s=30)


def test_redis_outage_forwards_unmanaged(stack: tuple[EmbeddedRedis, Gateway],
                                         upstream: Upstream) -> None:
    store, server = stack
    api = openai.OpenAI(base_url=server.base_url, api_key="sk-outage-0000", max_retries=0)
    messages = [{"role": "user", "content": "still there?"}]
    managed = api.chat.completions.with_raw_response.create(model="m", messages=messages)  # type: ignore[arg-type]
    assert managed.headers["x-ctxgate-task-class"] != "unmanaged"
    store.stop()
    upstream.clear()
    degraded = api.chat.completions.with_raw_response.create(model="m", messages=messages)  # type: ignore[arg-type]
    assert degraded.headers["x-ctxgate-task-class"] == "unmanaged"
    assert degraded.parse().choices[0].message.content == "echo: still there?"
    assert upstream.last_body()["messages"] == messages
    ready = httpx.get(f"{server.url}/readyz")
    assert ready.status_code == 503 and "redis" in ready.json()["reason"]
    assert httpx.get(f"{server.url}/metrics").status_code == 200
    # Feedback cannot fail open: the caller is told to retry, in the OpenAI envelope.
    trace_id = managed.headers["x-ctxgate-trace-id"]
    feedback = post_feedback(server, "sk-outage-0000", trace_id)
    assert feedback.status_code == 503, feedback.text
    assert feedback.json()["error"]["code"] == "store_unavailable"
    assert feedback.headers["retry-after"] == "1"
    assert "context engine failed: forwarding unmanaged" in server.log


def agent_step(n: int) -> list[dict[str, Any]]:
    """A coding agent's call whose last tool result failed: a call that may teach."""
    call = {"id": f"call_{n}", "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "pytest"}'}}
    return [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": f"Fix the failing test number {n}."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{n}",
             "content": "Traceback (most recent call last):\nAssertionError: 1 != 2"}]


BASH = [{"type": "function", "function": {"name": "bash", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}}}}]


def outage_calls(server: Gateway, key: str, n: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """`n` agent calls answered while Redis is down: their trace ids and messages."""
    api = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0)
    made = []
    for i in range(n):
        messages = agent_step(i)
        raw = api.chat.completions.with_raw_response.create(
            model="m", messages=messages, tools=BASH)  # type: ignore[arg-type]
        assert raw.headers["x-ctxgate-task-class"] == "unmanaged"
        made.append((raw.headers["x-ctxgate-trace-id"], messages))
    return made


def post_feedback(server: Gateway, key: str, trace_id: str) -> httpx.Response:
    return httpx.post(f"{server.base_url}/feedback", json={
        "trace_id": trace_id, "outcome": "failure"},
        headers={"authorization": f"Bearer {key}"}, timeout=30)


def stored(store: EmbeddedRedis, tenant: str, trace_id: str) -> TraceEvent | None:
    raw = redis.Redis(port=store.port).hget(keys.trace(tenant, trace_id), "event")
    return TraceEvent.from_json(raw) if raw else None  # type: ignore[arg-type]


def wait_stored(store: EmbeddedRedis, tenant: str, trace_id: str) -> TraceEvent:
    deadline = time.monotonic() + 30  # the writer retries with backoff (at most 10 s)
    while time.monotonic() < deadline:
        event = stored(store, tenant, trace_id)
        if event is not None:
            return event
        time.sleep(0.1)
    raise AssertionError(f"trace {trace_id} never written")


def wait_metric(server: Gateway, name: str, value: float, timeout_s: float = 10,
                **labels: str) -> None:
    deadline = time.monotonic() + timeout_s
    while server.metric(name, **labels) != value:
        assert time.monotonic() < deadline, f"{name}{labels} = {server.metric(name, **labels)}"
        time.sleep(0.05)


def wait_ready(server: Gateway) -> None:
    deadline = time.monotonic() + 30
    while httpx.get(f"{server.url}/readyz", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, "never ready again"
        time.sleep(0.1)


def test_traces_made_during_an_outage_are_written_once_redis_answers(
        stack: tuple[EmbeddedRedis, Gateway]) -> None:
    store, server = stack
    key = "sk-outage-held-0001"
    tenant = tenant_of_token(key)
    store.stop()
    made = outage_calls(server, key, 2)
    wait_metric(server, "ctxgate_trace_outage_buffered", 2)
    assert post_feedback(server, key, made[0][0]).status_code == 503
    store.start()  # same port: the gateway's client reconnects
    # Written back by the writer on its own (no feedback sent since Redis returned).
    last = wait_stored(store, tenant, made[1][0])
    assert last.task_class == "coding_agent"  # by the class rules (its bash tool)
    assert last.messages == made[1][1]
    assert last.response["content"].startswith("echo: ")
    # The buffer empties once a batch is stored and then queued (a trace is queued only
    # after it is stored: its entry comes a round trip after the trace itself).
    wait_metric(server, "ctxgate_trace_outage_buffered", 0)
    # In order, and both queued for the workers (each may teach: a failed tool result).
    entries = redis.Redis(port=store.port).xrange(keys.TRACE_STREAM)
    queued = [fields[b"trace_id"].decode() for _, fields in entries]
    assert queued == [trace_id for trace_id, _ in made]
    feedback = post_feedback(server, key, made[0][0])
    assert feedback.status_code == 202, feedback.text
    assert feedback.json() == {"status": "accepted", "trace_id": made[0][0]}
    assert redis.Redis(port=store.port).hget(keys.trace(tenant, made[0][0]), "feedback")
    # The explainer answers for it as for a fitted call: sent as is, failed open.
    explained = httpx.get(f"{server.url}/admin/traces/{made[1][0]}",
                          headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert explained.status_code == 200, explained.text
    account = explained.json()
    assert (account["task_class"], account["unmanaged"]) == (
        "unmanaged", "failed open: store unavailable")
    assert account["tenant"] == tenant and account["budget"]["source"] == "unmanaged"
    assert [m["role"] for m in account["messages"]] == [m["role"] for m in made[1][1]]
    assert all(m["status"] == "kept" and m["sent_as"] == m["index"] and not m["drops"]
               for m in account["messages"])
    assert account["upstream"]["messages"] == len(made[1][1]) and account["playbook"] is None


def test_feedback_right_after_redis_returns_finds_a_held_trace(
        stack: tuple[EmbeddedRedis, Gateway]) -> None:
    store, server = stack
    key = "sk-outage-held-0002"
    store.stop()
    [(trace_id, _)] = outage_calls(server, key, 1)
    wait_metric(server, "ctxgate_trace_outage_buffered", 1)
    store.start()
    # Before the writer's next retry: feedback writes the held traces back first.
    feedback = post_feedback(server, key, trace_id)
    assert feedback.status_code == 202, feedback.text
    assert stored(store, tenant_of_token(key), trace_id) is not None


def test_past_the_bound_the_oldest_held_traces_are_shed_and_counted(
        stack: tuple[EmbeddedRedis, Gateway]) -> None:
    store, server = stack
    key = "sk-outage-shed-0003"
    tenant = tenant_of_token(key)
    shed_before = server.metric("ctxgate_worker_failures_total", reason="trace_outage_shed")
    store.stop()
    made = outage_calls(server, key, HELD + 2)
    wait_metric(server, "ctxgate_worker_failures_total", shed_before + 2,
                reason="trace_outage_shed")
    assert server.metric("ctxgate_trace_outage_buffered") == HELD
    store.start()
    for trace_id, _ in made[2:]:
        wait_stored(store, tenant, trace_id)
    assert [stored(store, tenant, trace_id) for trace_id, _ in made[:2]] == [None, None]
    assert post_feedback(server, key, made[0][0]).status_code == 404


def test_a_hung_redis_is_taken_for_down_and_left_behind_once_it_answers(
        stack: tuple[EmbeddedRedis, Gateway], upstream: Upstream) -> None:
    store, server = stack
    key = "sk-hang-0004"
    api = openai.OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=30)
    messages = [{"role": "user", "content": "anyone home?"}]
    before = api.chat.completions.with_raw_response.create(model="m", messages=messages)  # type: ignore[arg-type]
    assert before.headers["x-ctxgate-task-class"] != "unmanaged"
    trace_id = before.headers["x-ctxgate-trace-id"]
    wait_stored(store, tenant_of_token(key), trace_id)
    assert store.process is not None
    store.process.send_signal(signal.SIGSTOP)  # the connection stays open; nothing answers
    try:
        for _ in range(3):
            started = time.monotonic()
            raw = api.chat.completions.with_raw_response.create(model="m", messages=messages)  # type: ignore[arg-type]
            assert time.monotonic() - started < REDIS_TIMEOUT_S + 3
            assert raw.headers["x-ctxgate-task-class"] == "unmanaged"
            assert raw.parse().choices[0].message.content == "echo: anyone home?"
        # Their traces' writes time out as well: held, as through an outage.
        deadline = time.monotonic() + REDIS_TIMEOUT_S + 3
        while not server.metric("ctxgate_trace_outage_buffered"):
            assert time.monotonic() < deadline, "no trace held while Redis hangs"
            time.sleep(0.05)
        ready = httpx.get(f"{server.url}/readyz", timeout=30)
        assert ready.status_code == 503 and "redis" in ready.json()["reason"]
        started = time.monotonic()
        feedback = post_feedback(server, key, trace_id)
        assert feedback.status_code == 503, feedback.text
        assert feedback.json()["error"]["code"] == "store_unavailable"
        assert time.monotonic() - started < REDIS_TIMEOUT_S + 3
    finally:
        store.process.send_signal(signal.SIGCONT)
    wait_ready(server)
    after = api.chat.completions.with_raw_response.create(model="m", messages=messages)  # type: ignore[arg-type]
    assert after.headers["x-ctxgate-task-class"] != "unmanaged"
    feedback = post_feedback(server, key, trace_id)
    assert feedback.status_code == 202, feedback.text


def test_a_long_sessions_next_call_is_explained_after_redis_restarts_empty(
        stack: tuple[EmbeddedRedis, Gateway]) -> None:
    """Redis restarted without its data (no persistence): the account pieces this gateway
    wrote before are gone although it remembers writing them; the session's next call
    names some of the same pieces and must still be explained, not 404."""
    store, server = stack
    key = "sk-outage-pieces-0005"
    _, messages, _ = synthetic_session(13, turns=40)
    calls = [body for body in calls_from_messages(messages, "gpt-4o-mini")
             if len(body["messages"]) > PIECE][:2]
    headers = {"authorization": f"Bearer {key}", "x-ctxgate-session-id": uuid.uuid4().hex,
               "x-ctxgate-budget-tokens": "9000", "x-ctxgate-task-class": "coding_agent"}
    admin = replace(server, admin_key=ADMIN_KEY)

    def call(body: dict[str, Any]) -> tuple[str, list[str]]:
        response = httpx.post(f"{server.base_url}/chat/completions", json=body,
                              headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        trace_id = response.headers["x-ctxgate-trace-id"]
        admin.explained(trace_id)  # written, pieces and all
        raw = redis.Redis(port=store.port).hget(keys.trace(tenant_of_token(key), trace_id),
                                                ACCOUNT_FIELD)
        assert raw is not None
        return trace_id, orjson.loads(raw)["roles"]["pieces"]

    _, before = call(calls[0])
    store.stop()
    for path in store.data_dir.iterdir():  # what a restart without persistence keeps
        if path.suffix in (".aof", ".rdb"):
            path.unlink()
    store.start()
    wait_ready(server)
    assert not redis.Redis(port=store.port).keys("*acctpiece*")
    trace_id, after = call(calls[1])
    assert before[0] == after[0]  # a piece the gateway had written before the restart
    explained = admin.explained(trace_id)
    assert len(explained["messages"]) == len(calls[1]["messages"])
