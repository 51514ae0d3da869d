"""Issue 10: no request can freeze the gateway.

A call whose fitting passes CTXGATE_FIT_TIMEOUT_S goes out as the client sent it (task
class `unmanaged`, logged, counted), or is refused with 503 `context_fit_timeout` when its
class says `on_fit_timeout: refuse`, whether it was fitted inline (small) or on the
fitting thread (large); either way it is traced, with the explainer's account of a call
not fitted and why, and feedback on it is accepted. A call the engine failed on is traced
the same way. And a small call is answered while a large one is being fitted.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
import redis
import yaml

from gateway.auth import tenant_of_token
from gateway.learner.traces import TraceEvent
from gateway.store import keys
from tests.conftest import ModuleStart, gateway_env, module_gateway
from tests.harness import ROOT, Gateway, Upstream

SMALL = [{"role": "system", "content": "You are terse."},
         {"role": "user", "content": "Is there a status page?"}]


def many(n: int) -> list[dict[str, str]]:
    """n short user messages, as in the issue's report (over `default`'s budget at 20k)."""
    return [{"role": "user", "content": f"m{i}"} for i in range(n)]


KEY = "sk-fit-budget-0001"


def post(url: str, messages: list[dict[str, str]], **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", timeout=60,
                      headers={"authorization": f"Bearer {KEY}", **headers},
                      content=orjson.dumps({"model": "gpt-4o-mini", "messages": messages}))


@module_gateway(wait_path="/readyz")
def hurried(start: ModuleStart) -> dict[str, str]:
    """A gateway whose every fit is past its budget; class `strict` refuses such calls."""
    config: dict[str, Any] = yaml.safe_load((ROOT / "config" / "gateway.yaml").read_text())
    config["task_classes"]["strict"] = {"description": "refuses calls it cannot fit in time",
                                        "on_fit_timeout": "refuse"}
    path = start.workdir / "gateway.yaml"
    path.write_text(yaml.safe_dump(config))
    return {**gateway_env(start.upstream, start.redis_url), "CTXGATE_CONFIG": str(path),
            "CTXGATE_FIT_TIMEOUT_S": "0.000001", "CTXGATE_WORKER": "off",
            "CTXGATE_MODELS_FILE": str(ROOT / "config" / "models.yaml")}


@pytest.mark.parametrize("messages", [SMALL, many(2_000)], ids=["inline", "fitting-thread"])
def test_a_call_past_its_time_budget_goes_out_as_sent(hurried: Gateway, upstream: Upstream,
                                                      messages: list[dict[str, str]]) -> None:
    counted = hurried.metric("ctxgate_fit_timeouts_total", task_class="default",
                             outcome="unmanaged")
    upstream.clear()
    answer = post(hurried.url, messages)
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-ctxgate-task-class"] == "unmanaged"
    assert upstream.last_body()["messages"] == messages  # the client's own, untouched
    assert hurried.metric("ctxgate_fit_timeouts_total", task_class="default",
                          outcome="unmanaged") == counted + 1
    assert "fitting took longer than the time budget: forwarded unmanaged" in hurried.log


def assert_traced_unmanaged(server: Gateway, redis_url: str, answer: httpx.Response,
                            messages: list[dict[str, str]], reason: str) -> None:
    """The call's trace is stored like any call's and explained as a call not fitted, and
    feedback that names it is accepted."""
    trace_id = answer.headers["x-ctxgate-trace-id"]
    account = server.explained(trace_id)
    assert (account["task_class"], account["unmanaged"]) == ("unmanaged", reason)
    assert account["tenant"] == tenant_of_token(KEY) and account["model"] == "gpt-4o-mini"
    assert account["budget"]["source"] == "unmanaged" and account["playbook"] is None
    assert [m["role"] for m in account["messages"]] == [m["role"] for m in messages]
    assert all(m["status"] == "kept" and m["sent_as"] == m["index"] and not m["drops"]
               for m in account["messages"])
    assert account["upstream"]["messages"] == len(messages)
    feedback = httpx.post(f"{server.base_url}/feedback", timeout=30,
                          json={"trace_id": trace_id, "outcome": "failure"},
                          headers={"authorization": f"Bearer {KEY}"})
    assert feedback.status_code == 202, feedback.text
    raw = redis.Redis.from_url(redis_url).hget(keys.trace(tenant_of_token(KEY), trace_id),
                                                "event")
    assert raw is not None
    event = TraceEvent.from_json(raw)  # type: ignore[arg-type]
    assert event.task_class == "default" and event.response["content"].startswith("echo: ")
    kept = event.messages  # trimmed as every trace is (learner.max_trace_chars), once
    assert kept[0] == messages[0] and kept[-1] == messages[-1]
    if len(kept) < len(messages):
        notes = [m for m in kept if "earlier messages not kept" in m["content"]]
        assert len(notes) == 1 and kept[1] is notes[0]
        assert notes[0]["content"] == f"[{len(messages) - len(kept) + 1} earlier messages not kept]"


@pytest.mark.parametrize("messages", [SMALL, many(2_000)], ids=["inline", "fitting-thread"])
def test_a_call_past_its_time_budget_is_traced(hurried: Gateway, redis_url: str,
                                               messages: list[dict[str, str]]) -> None:
    answer = post(hurried.url, messages)
    assert answer.headers["x-ctxgate-task-class"] == "unmanaged"
    assert_traced_unmanaged(hurried, redis_url, answer, messages,
                            "fitting passed its time budget of 1e-06 s")


def test_an_anthropic_call_past_its_time_budget_is_traced_as_sent(hurried: Gateway,
                                                                  redis_url: str) -> None:
    """The trace holds the chat view of what the client sent, without the adapter's marks
    (a block of a type the adapter does not know pins its message)."""
    messages = [{"role": "user", "content": [
                    {"type": "text", "text": "Look at this result."},
                    {"type": "search_result", "source": "https://example.com", "title": "t",
                     "content": [{"type": "text", "text": "r"}]}]},
                {"role": "assistant", "content": "Seen."},
                {"role": "user", "content": "Summarise it."}]
    answer = httpx.post(f"{hurried.url}/v1/messages", timeout=60, headers={
        "x-api-key": KEY, "anthropic-version": "2023-06-01"}, json={
        "model": "claude-stub", "max_tokens": 64, "system": "Be brief.", "messages": messages})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-ctxgate-task-class"] == "unmanaged"
    trace_id = answer.headers["x-ctxgate-trace-id"]
    account = hurried.explained(trace_id)
    assert account["unmanaged"] == "fitting passed its time budget of 1e-06 s"
    assert [m["role"] for m in account["messages"]] == ["system", "user", "assistant", "user"]
    raw = redis.Redis.from_url(redis_url).hget(keys.trace(account["tenant"], trace_id), "event")
    assert raw is not None
    event = TraceEvent.from_json(raw)  # type: ignore[arg-type]
    assert [m["role"] for m in event.messages] == ["system", "user", "assistant", "user"]
    assert not any("ctxgate_pinned" in m for m in event.messages)


@pytest.mark.parametrize("messages", [SMALL, many(2_000)], ids=["inline", "fitting-thread"])
def test_a_call_the_engine_failed_on_is_traced(gateway: Gateway, redis_url: str,
                                               messages: list[dict[str, str]]) -> None:
    session = f"broken-{len(messages)}"  # its session record is not a hash: the engine fails
    redis.Redis.from_url(redis_url).set(keys.session(tenant_of_token(KEY), session), "x")
    answer = post(gateway.url, messages, **{"x-ctxgate-session-id": session})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-ctxgate-task-class"] == "unmanaged"
    assert_traced_unmanaged(gateway, redis_url, answer, messages, "the context engine failed")


@pytest.mark.parametrize("messages", [SMALL, many(2_000)], ids=["inline", "fitting-thread"])
def test_a_class_that_refuses_answers_an_openai_error(hurried: Gateway, upstream: Upstream,
                                                      messages: list[dict[str, str]]) -> None:
    upstream.clear()
    answer = post(hurried.url, messages, **{"x-ctxgate-task-class": "strict"})
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert error["code"] == "context_fit_timeout" and error["type"] == "server_error"
    assert "on_fit_timeout: refuse" in error["message"]
    assert "CTXGATE_FIT_TIMEOUT_S" in error["message"]
    assert upstream.client_requests() == []  # nothing went upstream
    assert hurried.metric("ctxgate_fit_timeouts_total", task_class="strict",
                          outcome="refused") >= 1


def test_a_small_call_is_answered_while_a_large_one_is_fitted(gateway: Gateway) -> None:
    large: list[httpx.Response] = []
    sender = threading.Thread(target=lambda: large.append(post(gateway.url, many(20_000))))
    sender.start()
    time.sleep(0.2)  # the 0.7 MB body is in (loopback): being parsed or fitted
    latencies: list[float] = []
    while sender.is_alive() and len(latencies) < 20:
        started = time.monotonic()
        answer = post(gateway.url, SMALL)
        assert answer.status_code == 200 and answer.headers["x-ctxgate-task-class"] != "unmanaged"
        latencies.append(time.monotonic() - started)
    sender.join()
    assert large[0].status_code == 200
    assert len(latencies) >= 2  # the large call took a while: fitting 20k messages (or its 1 s)
    # Fitted on the event loop, the first small call waited for the rest of the large one's
    # parsing and fitting: its overhead less the 0.2 s slept (0.8 s measured at idle). Off
    # the loop it takes ~10-100 ms at idle, ~0.3-0.8 s at load 8 (CI beside replays). The
    # bound scales with what load stretches alike: the large call's own overhead and the
    # later small calls' latency, so that a blocked first call fails at any load.
    overhead = float(large[0].headers["x-ctxgate-overhead-ms"]) / 1000
    bound = max(0.5, overhead / 2, 3 * sorted(latencies[1:])[len(latencies[1:]) // 2])
    assert latencies[0] < bound, (latencies, overhead)


BYPASS = {"x-ctxgate-bypass": "true"}
OBSERVE_FAILED = "fidelity signals of a call sent as is failed"


def test_a_small_call_is_answered_while_a_large_bypassed_one_is_parsed(
        gateway: Gateway, upstream: Upstream) -> None:
    """A large bypassed body is parsed and validated on the fitting thread, and its
    fidelity observed and its body freed there after the response: small calls meanwhile,
    and for a second after it, are answered promptly."""
    messages = many(20_000)  # 0.7 MB (the test gateway takes 1 MiB): large by its roles
    large: list[httpx.Response] = []
    session = {"x-ctxgate-session-id": uuid.uuid4().hex}  # not one another test broke
    sender = threading.Thread(
        target=lambda: large.append(post(gateway.url, messages, **BYPASS, **session)))
    sender.start()
    latencies: list[float] = []
    until = None
    while until is None or time.monotonic() < until:
        if until is None and not sender.is_alive():
            until = time.monotonic() + 1.0  # its observation and release come after
        started = time.monotonic()
        answer = post(gateway.url, SMALL)
        assert answer.status_code == 200
        latencies.append(time.monotonic() - started)
    sender.join()
    assert large[0].status_code == 200, large[0].text
    assert large[0].headers["x-ctxgate-task-class"] == "bypass"
    sent = orjson.dumps({"model": "gpt-4o-mini", "messages": messages})  # as `post` sends it
    assert any(r["body"] == sent for r in upstream.client_requests())  # forwarded as sent
    # Loose (2 busy shared cores, at load 4 once failed at 0.5 s, cause not kept): at 0.7 MB the
    # loop's own parse took ~15-50 ms, so this guards against a stall, not that; the
    # 3.5 MB figures are bench.large's (`--bypass`, bench/README.md).
    assert max(latencies) < 1.0, latencies
    trace_id = large[0].headers["x-ctxgate-trace-id"]
    assert not [line for line in gateway.log.splitlines()
                if OBSERVE_FAILED in line and trace_id in line]


def _cut_short(n: int) -> bytes:
    return orjson.dumps({"model": "gpt-4o-mini", "messages": many(n)})[:-3]


def _bad_role(n: int) -> bytes:
    return orjson.dumps({"model": "gpt-4o-mini", "messages": [*many(n), {"role": "robot"}]})


def _no_model(n: int) -> bytes:
    return orjson.dumps({"messages": many(n)})


@pytest.mark.parametrize("body", [_cut_short, _bad_role, _no_model],
                         ids=["bad-json", "bad-role", "no-model"])
def test_a_bad_large_bypassed_call_gets_the_same_openai_error(
        gateway: Gateway, body: Callable[[int], bytes]) -> None:
    """Parsed on the fitting thread, a large bypassed body is refused as a small one is."""
    answers = [httpx.post(f"{gateway.url}/v1/chat/completions", timeout=60, content=body(n),
                          headers={"authorization": f"Bearer {KEY}", **BYPASS})
               for n in (20_000, 2)]
    assert [a.status_code for a in answers] == [400, 400], [a.text for a in answers]
    large, small = (a.json()["error"] for a in answers)
    assert large["type"] == small["type"] == "invalid_request_error"
    assert large.get("code") == small.get("code")
    for key in ("message", "param"):  # the same words; positions and indexes differ
        assert _digitless(large.get(key)) == _digitless(small.get(key)), (large, small)


def _digitless(text: str | None) -> str | None:
    return None if text is None else re.sub(r"\d+", "N", text)
