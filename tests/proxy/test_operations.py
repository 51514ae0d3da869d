"""Start-up, settings, the embedded Redis, health, metrics, traces and logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import openai
import pytest
import redis

from tests.conftest import gateway_env
from tests.harness import ROOT, Gateway, Upstream, stop

SECRET = "sk-live-very-secret-key-42424242"


def test_health_ready_and_metrics(gateway: Gateway) -> None:
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{gateway.url}/readyz").status_code == 200
    client = openai.OpenAI(base_url=gateway.base_url, api_key=SECRET, max_retries=0)
    before = gateway.metric("ctxgate_requests_total", endpoint="/v1/chat/completions",
                            status="200")
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "count"}])
    after = gateway.metric("ctxgate_requests_total", endpoint="/v1/chat/completions",
                           status="200")
    assert after == before + 1
    text = gateway.metrics()
    for name in ("ctxgate_request_duration_seconds", "ctxgate_overhead_seconds",
                 "ctxgate_upstream_duration_seconds", "ctxgate_upstream_ttfb_seconds",
                 "ctxgate_context_tokens_total"):
        assert f"{name}" in text, name
    assert gateway.metric("ctxgate_overhead_seconds_count", endpoint="/v1/chat/completions") > 0


def test_no_secret_reaches_a_log(gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=gateway.base_url, api_key=SECRET, max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "s"}])
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="stub-500", messages=[{"role": "user",
                                                                     "content": "s"}])
    httpx.post(f"{gateway.base_url}/chat/completions", content=b"{bad",
               headers={"authorization": f"Bearer {SECRET}"})
    time.sleep(0.2)
    logs = gateway.log + (gateway.workdir / "drops.jsonl").read_text(errors="replace") \
        if (gateway.workdir / "drops.jsonl").exists() else gateway.log
    assert "chat completion" in logs  # the request log is there...
    assert SECRET not in logs and SECRET[8:] not in logs  # ...without the key
    assert "test-admin-key" not in logs


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("env,named", [
    ({"CTXGATE_PORT": "eighty"}, "CTXGATE_PORT"),
    ({"CTXGATE_AUTH_MODE": "open-door"}, "CTXGATE_AUTH_MODE"),
    ({"CTXGATE_UPSTREAM_URL": "ftp://nowhere"}, "CTXGATE_UPSTREAM_URL"),
    ({"CTXGATE_CONFIG": "/nonexistent/gateway.yaml"}, "CTXGATE_CONFIG"),
])
def test_invalid_settings_stop_start_up(env: dict[str, str], named: str, tmp_path: Path) -> None:
    result = run_cli("serve", env={"CTXGATE_DATA_DIR": str(tmp_path), **env})
    assert result.returncode != 0
    assert named in result.stderr


def test_env_overrides_yaml(tmp_path: Path) -> None:
    from gateway.settings import load_settings

    config = tmp_path / "g.yaml"
    config.write_text("port: 9100\nupstream_timeout_s: 7\n")
    os.environ["CTXGATE_PORT"] = "9200"
    try:
        settings = load_settings(config=config)
    finally:
        del os.environ["CTXGATE_PORT"]
    assert (settings.port, settings.upstream_timeout_s) == (9200, 7.0)


def test_embedded_redis_is_started_shared_and_stopped(tmp_path: Path, upstream: Upstream) -> None:
    env = {"CTXGATE_UPSTREAM_URL": f"{upstream.url}/v1", "CTXGATE_WORKER": "off"}
    server = Gateway.start(tmp_path, env, wait_path="/readyz")
    state = json.loads((tmp_path / "data" / "redis.json").read_text())
    try:
        assert httpx.get(f"{server.url}/readyz").status_code == 200
        assert redis.Redis(port=state["port"]).ping()
        listed = run_cli("playbook", "list", env={"CTXGATE_DATA_DIR": str(tmp_path / "data"),
                                                  "CTXGATE_REDIS_URL": ""})
        assert listed.returncode == 0, listed.stderr
    finally:
        stop(server.process)
    assert not (tmp_path / "data" / "redis.json").exists()
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=state["port"], socket_connect_timeout=0.5).ping()
    assert (tmp_path / "data" / "ctxgate.aof").exists() or any(
        (tmp_path / "data").glob("appendonlydir*"))


class _Collector(BaseHTTPRequestHandler):
    received: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        _Collector.received.append(self.path.encode() + b" " + self.rfile.read(length))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_spans_are_exported_over_otlp(tmp_path: Path, upstream: Upstream, redis_url: str) -> None:
    collector = ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    env = {**gateway_env(upstream, redis_url), "CTXGATE_WORKER": "off",
           "CTXGATE_OTEL_ENDPOINT": f"http://127.0.0.1:{collector.server_port}",
           "OTEL_BSP_SCHEDULE_DELAY": "100"}
    server = Gateway.start(tmp_path, env)
    try:
        client = openai.OpenAI(base_url=server.base_url, api_key=SECRET, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "traced"}])
        trace_id = bytes.fromhex(raw.headers["x-ctxgate-trace-id"])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
                trace_id in body for body in _Collector.received):
            time.sleep(0.1)
    finally:
        stop(server.process)
        collector.shutdown()
    exported = b"".join(_Collector.received)
    assert b"/v1/traces" in exported and trace_id in exported
    assert b"upstream POST chat/completions" in exported
    trace_logs = [json.loads(line) for line in server.log.splitlines()
                  if line.startswith("{") and "chat completion" in line]
    assert trace_logs and trace_logs[-1]["trace_id"] == raw.headers["x-ctxgate-trace-id"]
