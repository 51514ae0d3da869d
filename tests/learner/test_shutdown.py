"""SIGTERM to `ctxgate serve` while its learner works: a clean exit, nothing lost.

The learner process stops taking entries, lets the one in flight finish within its grace
period or hands it back (pending, for redelivery), the trace writer is flushed, and only
then the embedded Redis stops. Its append-only file is read back afterwards to see where
the job ended up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from gateway.auth import tenant_of_token
from gateway.store import keys
from gateway.store.embedded import EmbeddedRedis
from tests.harness import ROOT, Gateway, Upstream, free_port, stop, wait_until_up
from tests.learner.conftest import curation, reflection

CLASS = "coding_agent"
LESSON = "Install missing Python modules with pip before rerunning pytest."


def failed_step() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are an autonomous programmer."},
        {"role": "user", "content": "Fix the failing test."},
        {"role": "assistant", "content": "Running the tests.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'}}]},
        {"role": "tool", "tool_call_id": "call_1",
         "content": "Traceback (most recent call last):\nModuleNotFoundError: No module 'yaml'"},
    ]


def reflector_asked(upstream: Upstream, model: str) -> bool:
    return any(r["path"] == "/v1/chat/completions" and orjson.loads(r["body"])["model"] == model
               for r in upstream.requests())


def spawn_in_own_group(workdir: Path, env: dict[str, str]
                       ) -> tuple[subprocess.Popen[bytes], Path, dict[str, str], str]:
    """`ctxgate serve` leading a process group of its own, as in a terminal or a service
    manager, where a stop signal reaches the whole group (its children included)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    full_env = {**os.environ, "CTXGATE_PORT": str(port), "CTXGATE_HOST": "127.0.0.1",
                "CTXGATE_DATA_DIR": str(workdir / "data"), "HF_HUB_OFFLINE": "1",
                "CTXGATE_DROP_LOG": str(workdir / "drops.jsonl"), **env}
    full_env.pop("CTXGATE_REDIS_URL", None)  # it starts and owns an embedded Redis
    log = workdir / "gateway.log"
    process = subprocess.Popen([sys.executable, "-m", "gateway", "serve"], cwd=ROOT,
                               env=full_env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                               start_new_session=True)
    return process, log, full_env, f"http://127.0.0.1:{port}"


def start_in_own_group(workdir: Path, env: dict[str, str]) -> Gateway:
    process, log, full_env, url = spawn_in_own_group(workdir, env)
    wait_until_up(f"{url}/healthz", process, log)
    return Gateway(url, process, workdir, full_env)


def test_a_stop_signal_while_the_model_loads_ends_serve_without_waiting_for_it(
    tmp_path: Path, upstream: Upstream
) -> None:
    """SIGTERM to the group while `ctxgate serve` loads its embedding model: it exits at
    once, cleanly, rather than after the load (~10 s of CPU; the load in a thread of the
    serving process was joined at exit, and group stops took 19-22 s on a loaded machine)."""
    process, log, _, _ = spawn_in_own_group(tmp_path, {
        "CTXGATE_UPSTREAM_URL": f"{upstream.url}/v1", "CTXGATE_WORKER": "off"})
    try:
        deadline = time.monotonic() + 120
        while not any(said in log.read_bytes() for said in (  # the load has begun
                b'"loading the embedding model"', b'"Waiting for application startup."')):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    finally:
        stop(process)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    said = log.read_text()
    assert "Traceback" not in said, said[-3000:]
    # sentence-transformers logs this once the imports are done, as it builds the model
    assert "Loading SentenceTransformer model" not in said, said[-3000:]


@pytest.mark.parametrize(("how", "learner_delay_s", "expect"), [
    ("SIGTERM to serve", 1.0, "merged"),
    ("SIGTERM to its group", 60.0, "pending"),
    ("SIGINT to its group", 60.0, "pending"),  # Ctrl-C in the terminal of `make run`
])
def test_stop_signal_with_a_learning_job_in_flight(
    tmp_path: Path, upstream: Upstream, how: str, learner_delay_s: float, expect: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    reflector, curator = f"slow-reflector-{tag}", f"curator-{tag}"
    upstream.script(reflector, [{**reflection(insight=LESSON), "delay_s": learner_delay_s}])
    upstream.script(curator, [curation([{"type": "ADD", "section": "common_mistakes",
                                         "content": LESSON}])])
    server = start_in_own_group(tmp_path, {
        "CTXGATE_UPSTREAM_URL": f"{upstream.url}/v1", "CTXGATE_WORKER": "inprocess",
        "CTXGATE_LEARNER_URL": f"{upstream.url}/v1", "CTXGATE_REFLECTOR_MODEL": reflector,
        "CTXGATE_CURATOR_MODEL": curator})
    key = f"sk-stop-{tag}"
    try:
        answer = httpx.post(f"{server.base_url}/chat/completions", timeout=30,
                            headers={"authorization": f"Bearer {key}",
                                     "x-ctxgate-task-class": CLASS},
                            json={"model": "gpt-4o-mini", "messages": failed_step()})
        assert answer.status_code == 200
        deadline = time.monotonic() + 60
        while not reflector_asked(upstream, reflector):  # the job is in flight
            assert time.monotonic() < deadline, server.log[-2000:]
            time.sleep(0.05)
        asked = time.monotonic()
        if how == "SIGTERM to serve":
            server.process.send_signal(signal.SIGTERM)
        else:
            os.killpg(server.process.pid, signal.SIGINT if "SIGINT" in how else signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
        took = time.monotonic() - asked
    finally:
        stop(server.process)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.process.pid, signal.SIGKILL)  # nothing of it outlives the test
    log = server.log
    assert "shutdown failed" not in log.lower() and "Traceback" not in log, log[-3000:]
    assert "Application shutdown complete" in log
    assert took < 15  # the grace period (5 s), not the learner's 60 s

    data = EmbeddedRedis(tmp_path / "data").start()  # read back what the AOF kept
    try:
        client = redis.Redis(port=data.port)
        pending = client.xpending(keys.TRACE_STREAM, keys.TRACE_GROUP)["pending"]
        bullets = client.hvals(keys.playbook_bullets(tenant_of_token(key), CLASS))
        client.close()
    finally:
        data.stop()
    if expect == "merged":  # finished within the grace period: merged and acknowledged
        assert (pending, [orjson.loads(b)["content"] for b in bullets]) == (0, [LESSON])
    else:  # handed back: still pending for redelivery, nothing half-applied
        assert (pending, bullets) == (1, [])
