"""`GET /admin/traces/{id}` and `ctxgate explain` against what the upstream really received:
a session replayed through the real gateway, every call's account checked message by
message against the request the scripted upstream recorded."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

import httpx
import orjson
import redis

from gateway.auth import tenant_of_token
from gateway.context.call_ids import renamed
from gateway.context.replay import calls_from_messages
from gateway.observability.explain import ACCOUNT_FIELD, PIECE, PIECED
from gateway.store import keys
from tests.harness import ROOT, Gateway, Upstream
from tests.sessions import synthetic_session

KEY = "sk-test-explain-000000000"


def _forwarded(upstream: Upstream, body: dict[str, Any]) -> dict[str, Any]:
    """The request the gateway sent for `body` (the in-process learner calls the stub too)."""
    for request in reversed(upstream.requests()):
        sent: dict[str, Any] = orjson.loads(request["body"])
        last = sent["messages"][-1]
        if sent.get("model") == body["model"] and last in (
                body["messages"][-1], renamed(body["messages"][-1])):
            return sent
    raise AssertionError("the upstream never received the call")


def _check(explained: dict[str, Any], sent: list[dict[str, Any]], forwarded: dict[str, Any],
           response: httpx.Response) -> None:
    upstream = forwarded["messages"]
    assert explained["upstream"]["messages"] == len(upstream)
    assert len(explained["messages"]) == len(sent)
    playbook = explained["playbook"]
    seen = set()
    for client, account in zip(sent, explained["messages"], strict=True):
        assert account["role"] == client["role"]
        j = account["sent_as"]
        if account["status"] == "dropped":
            assert j is None and account["drops"]
            assert all(d["tokens_after"] == 0 for d in account["drops"])
            continue
        seen.add(j)
        # tool-call ids go out short in a managed call, call and result alike (call_ids.py)
        expected = dict(renamed(client) if explained["upstream"]["tool_call_ids"] == "short"
                        else client)
        if account["status"] == "digested":
            assert account["drops"] and account["digest"] is not None
            expected["content"] = account["digest"]
        else:
            assert not account["drops"] and account["digest"] is None
        if account["playbook_appended"]:
            expected["content"] = f"{expected['content']}\n\n{playbook['text']}"
        assert upstream[j] == expected, (account["index"], j)
    if playbook is not None and explained["upstream"]["playbook_new_message"]:
        assert upstream[0] == {"role": "system", "content": playbook["text"]}
        seen.add(0)
    assert seen == set(range(len(upstream)))  # every message sent is accounted for
    tokens = explained["tokens"]
    assert tokens["before"] == int(response.headers["x-ctxgate-tokens-before"])
    assert tokens["after"] == int(response.headers["x-ctxgate-tokens-after"])
    assert tokens["saved_by_drops"] == tokens["before"] - tokens["after"] + tokens["playbook"]
    drops = sum(len(m["drops"]) for m in explained["messages"])
    assert drops == int(response.headers["x-ctxgate-dropped-items"])
    assert explained["task_class"] == response.headers["x-ctxgate-task-class"]


def test_a_session_explained_call_by_call_matches_what_went_upstream(
        gateway: Gateway, upstream: Upstream) -> None:
    tenant, session = tenant_of_token(KEY), uuid.uuid4().hex
    admin = {"authorization": f"Bearer {gateway.admin_key}"}
    bullet = httpx.post(f"{gateway.url}/admin/playbooks/{tenant}/coding_agent/bullets",
                        headers=admin, json={"section": "testing", "content":
                                             "Run the failing test alone before the suite."})
    assert bullet.status_code == 201, bullet.text
    _, messages, _ = synthetic_session(11, turns=36)
    calls = calls_from_messages(messages, "gpt-4o-mini")
    headers = {"authorization": f"Bearer {KEY}", "x-ctxgate-session-id": session,
               "x-ctxgate-budget-tokens": "9000", "x-ctxgate-task-class": "coding_agent"}
    statuses: set[str] = set()
    ids: set[str] = set()
    for n, body in enumerate(calls):
        upstream.clear()
        response = httpx.post(f"{gateway.base_url}/chat/completions", json=body,
                              headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        if n % 5 and n != len(calls) - 1:
            continue
        forwarded = _forwarded(upstream, body)
        explained = gateway.explained(response.headers["x-ctxgate-trace-id"])
        _check(explained, body["messages"], forwarded, response)
        assert explained["budget"] == {"tokens": 9000, "source": "header",
                                       "why": explained["budget"]["why"]}
        assert explained["playbook"]["bullet_ids"] == [bullet.json()["id"]]
        assert explained["messages"][0]["playbook_appended"]  # into the system prompt
        statuses |= {m["status"] for m in explained["messages"]}
        ids |= {explained["upstream"]["tool_call_ids"]}
    assert "short" in ids  # the session's call ids are long: a call with tool calls renames
    assert statuses == {"kept", "digested", "dropped"} or statuses == {"kept", "digested"}
    assert "digested" in statuses


def test_unknown_trace_and_admin_key(gateway: Gateway) -> None:
    missing = httpx.get(f"{gateway.url}/admin/traces/{uuid.uuid4().hex}",
                        headers={"authorization": f"Bearer {gateway.admin_key}"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "trace_not_found"
    refused = httpx.get(f"{gateway.url}/admin/traces/x",
                        headers={"authorization": "Bearer wrong"})
    assert refused.status_code in (401, 403)


def test_cli_explain_agrees_with_the_api(gateway: Gateway, upstream: Upstream) -> None:
    _, messages, _ = synthetic_session(12, turns=12)
    body = calls_from_messages(messages, "gpt-4o-mini")[-1]
    response = httpx.post(f"{gateway.base_url}/chat/completions", json=body, timeout=30,
                          headers={"authorization": f"Bearer {KEY}",
                                   "x-ctxgate-budget-tokens": "3000"})
    trace_id = response.headers["x-ctxgate-trace-id"]
    explained = gateway.explained(trace_id)
    env = {**os.environ, "CTXGATE_REDIS_URL": gateway.env["CTXGATE_REDIS_URL"]}
    as_json = subprocess.run([sys.executable, "-m", "gateway", "explain", trace_id, "--json"],
                             cwd=ROOT, env=env, capture_output=True, check=True)
    assert orjson.loads(as_json.stdout) == explained
    text = subprocess.run([sys.executable, "-m", "gateway", "explain", trace_id], cwd=ROOT,
                          env=env, capture_output=True, check=True, text=True).stdout
    assert f"trace {trace_id}" in text and "budget 3000 tokens (header" in text
    assert ("(tool-call ids shortened)" in text) == (
        explained["upstream"]["tool_call_ids"] == "short")
    first_drop = next(d for m in explained["messages"] for d in m["drops"])
    assert f"{first_drop['stage']}/{first_drop['action']} {first_drop['reason']}" in text
    unknown = subprocess.run([sys.executable, "-m", "gateway", "explain", "nope"], cwd=ROOT,
                             env=env, capture_output=True)
    assert unknown.returncode == 1


def test_a_long_sessions_accounts_share_their_pieces(gateway: Gateway, redis_url: str) -> None:
    """Each call's account names its long lists' pieces; the session's calls share those
    before their first change (each written once), a call whose piece is lost is not
    explained (404), never explained wrongly, until a later call writes the piece again."""
    tenant, session = tenant_of_token(KEY), uuid.uuid4().hex
    _, messages, _ = synthetic_session(13, turns=40)
    headers = {"authorization": f"Bearer {KEY}", "x-ctxgate-session-id": session,
               "x-ctxgate-budget-tokens": "9000", "x-ctxgate-task-class": "coding_agent"}
    traces = []
    for body in calls_from_messages(messages, "gpt-4o-mini"):
        response = httpx.post(f"{gateway.base_url}/chat/completions", json=body,
                              headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        traces.append(response.headers["x-ctxgate-trace-id"])
    last = gateway.explained(traces[-1])  # waits for the trace to land
    assert len(last["messages"]) > PIECE
    store = redis.Redis.from_url(redis_url)
    named: list[str] = []
    first_roles = set()
    for trace_id in traces:
        raw = store.hget(keys.trace(tenant, trace_id), ACCOUNT_FIELD)
        assert raw is not None
        account = orjson.loads(raw)
        if isinstance(account["roles"], dict):
            first_roles.add(account["roles"]["pieces"][0])
        for name in PIECED:
            if isinstance(account[name], dict):
                named += account[name]["pieces"]
    stored = set(named)
    assert len(first_roles) == 1  # the roles' first 64 entries: one piece for every call
    assert named and len(stored) < len(named)  # shared pieces are stored once
    assert all(store.exists(keys.account_piece(tenant, digest)) for digest in stored)
    account = orjson.loads(store.hget(keys.trace(tenant, traces[-1]),  # type: ignore[arg-type]
                                      ACCOUNT_FIELD))
    store.delete(keys.account_piece(tenant, account["roles"]["pieces"][-1]))
    missing = httpx.get(f"{gateway.url}/admin/traces/{traces[-1]}",
                        headers={"authorization": f"Bearer {gateway.admin_key}"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "trace_not_found"
    # The session's next call names that piece again: the gateway finds it gone (evicted,
    # flushed) although it wrote it, writes it back, and both calls are explained.
    again = httpx.post(f"{gateway.base_url}/chat/completions", json=body, headers=headers,
                       timeout=30)
    assert again.status_code == 200, again.text
    assert gateway.explained(again.headers["x-ctxgate-trace-id"])["messages"]
    assert gateway.explained(traces[-1]) == last
