"""When Redis goes away the gateway fails open: agents keep working, /readyz says why."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai

from gateway.store.embedded import EmbeddedRedis
from tests.harness import Gateway, Upstream, stop


def test_redis_outage_forwards_unmanaged(tmp_path: Path, upstream: Upstream) -> None:
    redis = EmbeddedRedis(tmp_path / "redis").start()
    server = Gateway.start(tmp_path / "gw", {"CTXGATE_UPSTREAM_URL": f"{upstream.url}/v1",
                                             "CTXGATE_REDIS_URL": redis.url,
                                             "CTXGATE_WORKER": "off"})
    api = openai.OpenAI(base_url=server.base_url, api_key="sk-outage-0000", max_retries=0)
    messages = [{"role": "user", "content": "still there?"}]
    try:
        managed = api.chat.completions.with_raw_response.create(model="m", messages=messages)  # type: ignore[arg-type]
        assert managed.headers["x-ctxgate-task-class"] != "unmanaged"
        redis.stop()
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
        feedback = httpx.post(f"{server.base_url}/feedback", json={
            "trace_id": trace_id, "outcome": "failure"},
            headers={"authorization": "Bearer sk-outage-0000"}, timeout=30)
        assert feedback.status_code == 503, feedback.text
        assert feedback.json()["error"]["code"] == "store_unavailable"
        assert feedback.headers["retry-after"] == "1"
    finally:
        stop(server.process)
        redis.stop()
    assert "context engine failed: forwarding unmanaged" in server.log
