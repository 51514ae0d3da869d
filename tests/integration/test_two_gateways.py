"""Two `ctxgate serve` processes (worker off) and two `ctxgate worker` processes on one Redis.

Several tenants send traffic and feedback to both gateways at once. Every delta the scripted
Curator hands out ends up in Redis exactly once (no lesson lost, none learned twice), every
citation is credited once, and a session whose calls alternate between the two gateways is
forwarded byte for byte as the same session sent to one gateway only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis

from gateway.auth import tenant_of_token
from gateway.store import keys as store_keys
from tests.conftest import ModuleStart, gateway_env, module_group
from tests.harness import ROOT, Gateway, Upstream, listening, spawn_niced, stop
from tests.learner.conftest import curation, reflection

pytestmark = pytest.mark.integration

DB = 12  # a database of its own: the session's gateway runs an in-process worker on 0
CLASS = "coding_agent"
SYSTEM = "You are an autonomous programmer working in a repository."
TENANTS = 3
SESSIONS = 3  # per tenant; each teaches twice: a failed step, then explicit feedback
# Distinct lessons (no two near-duplicates), one per Curator call, in the order it is asked.
LESSONS = [
    "Install missing Python modules with pip before rerunning pytest.",
    "Read the whole traceback before editing any file.",
    "Prefer git diff over reopening files to review your own changes.",
    "Quote shell globs so that find receives the pattern literally.",
    "Run the single failing test first, the full suite only at the end.",
    "Database migrations must be generated after the model change, never before.",
    "When a port is busy, look for the stale server process with lss.",
    "Check the Python version in pyproject before using match statements.",
    "Escape regex metacharacters when searching for operators with grep.",
    "Docker builds cache layers: copy requirements before the source tree.",
    "Set TZ=UTC in tests that format dates to avoid locale-dependent failures.",
    "JSON keys are strings; convert integer keys back after loading.",
    "Use pathlib for paths so that Windows separators are handled.",
    "A flaky network test should be marked and skipped offline, not retried blindly.",
    "Type errors from mypy about Optional need a None check, not a cast.",
    "Large CSV files should be streamed row by row instead of read into memory.",
    "Environment variables override YAML settings; print both when debugging config.",
    "Node projects pin dependencies in package-lock.json: run npm ci, not npm install.",
]


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Pair:
    """The four processes, spawned ahead of this module (`module_group`), not waited for."""

    models: tuple[str, str]  # the Reflector's and the Curator's
    env: dict[str, str]
    gateways: list[Gateway]
    workers: list[subprocess.Popen[bytes]]
    logs: list[Path]  # the workers'


def _pair_loaded(pair: Pair) -> bool:
    """Both gateways listen (their models loaded) and both workers' models are loaded."""
    return (all(listening(g.url) or g.process.poll() is not None for g in pair.gateways)
            and all(w.poll() is not None or b"embedding model" in log.read_bytes()
                    for w, log in zip(pair.workers, pair.logs, strict=True)))


@module_group(loaded=_pair_loaded, weight=4)
def pair(start: ModuleStart) -> Pair:
    """Two gateways (worker off) and two workers on one Redis database, spawned ahead of
    this module: the four model loads (~15 CPU-s each) overlap the tests before it."""
    tag = uuid.uuid4().hex[:8]
    models = f"pair-reflector-{tag}", f"pair-curator-{tag}"
    url = start.redis_url.rsplit("/", 1)[0] + f"/{DB}"
    redis.Redis.from_url(url).flushdb()
    env = gateway_env(start.upstream, url)
    env.update(CTXGATE_REFLECTOR_MODEL=models[0], CTXGATE_CURATOR_MODEL=models[1],
               CTXGATE_WORKER="off", CTXGATE_UPSTREAM_TIMEOUT_S="30")
    worker_env = {**os.environ, "HF_HUB_OFFLINE": "1", **env}
    found = Pair(models, env, [], [], [])
    start.on_stop.append(lambda: [stop(p) for p in
                                  [*found.workers, *(g.process for g in found.gateways)]])
    for name in ("worker-a", "worker-b"):  # first: their imports overlap the gateways'
        (start.workdir / name).mkdir()
        log = start.workdir / name / "worker.log"
        found.logs.append(log)
        found.workers.append(spawn_niced(
            [sys.executable, "-m", "gateway", "worker"], start.niceness, cwd=ROOT,
            env=worker_env, stdout=log.open("wb"), stderr=subprocess.STDOUT))
    for name in ("gateway-a", "gateway-b"):
        found.gateways.append(Gateway.spawn(start.workdir / name, env,
                                            niceness=start.niceness))
    start.pids += [p.pid for p in found.workers] + [g.process.pid for g in found.gateways]
    return found


@pytest.fixture(scope="module")
def models(pair: Pair) -> tuple[str, str]:
    return pair.models


@pytest.fixture(scope="module")
def pair_env(pair: Pair) -> dict[str, str]:
    return pair.env


@pytest.fixture(scope="module")
def gateways(pair: Pair) -> Iterator[tuple[Gateway, Gateway]]:
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(
            # warm (fitting reranks); four processes load the model at once (the workers
            # too, before they take entries): 129-253 s at load 15-22 (tests/store/
            # test_cluster_learning.py), 180 s too few. Spawned ahead of this module, they
            # have mostly loaded by now.
            lambda gateway: (gateway.wait_up("/readyz", timeout_s=360), gateway)[1],
            pair.gateways)
    yield first, second
    stop(first.process)
    stop(second.process)


@pytest.fixture(scope="module")
def workers(pair: Pair) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Spawned ahead with the gateways (`pair`), before them."""
    yield pair.workers
    for process in pair.workers:
        process.terminate()
    for process in pair.workers:
        # A worker stopped mid-job may first finish loading its embedder (seconds on 2 cores).
        assert process.wait(timeout=60) == 0, f"worker exited {process.returncode}"


def chat(gateway: Gateway, key: str, session: str, messages: list[dict[str, Any]],
         **headers: str) -> httpx.Response:
    answer = httpx.post(f"{gateway.base_url}/chat/completions", timeout=30, json={
        "model": "gpt-4o-mini", "messages": messages}, headers={
        "authorization": f"Bearer {key}", "x-ctxgate-task-class": CLASS,
        "x-ctxgate-session-id": session, **headers})
    assert answer.status_code == 200, answer.text
    return answer


def opening(task: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]


def tool_step(task: str, said: str, output: str) -> list[dict[str, Any]]:
    return [*opening(task),
            {"role": "assistant", "content": said, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "bash", "arguments": '{"command": "pytest -q"}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": output}]


FAILED = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'yaml'"
PASSED = "Successfully installed PyYAML-6.0.1"


def teach(pair: tuple[Gateway, Gateway], key: str, session: str) -> None:
    """An opening call on one gateway, a failed step on the other, feedback on the first."""
    task = f"Fix the failing test ({session})."
    trace = chat(pair[0], key, session, opening(task)).headers["x-ctxgate-trace-id"]
    chat(pair[1], key, session, tool_step(task, "Running the tests.", FAILED))
    answer = httpx.post(f"{pair[0].url}/v1/feedback", timeout=30,
                        headers={"authorization": f"Bearer {key}"},
                        json={"trace_id": trace, "outcome": "failure", "note": session})
    assert answer.status_code == 202, answer.text


def cite(pair: tuple[Gateway, Gateway], key: str, session: str, bullet_id: str) -> None:
    """A new session (the playbook is injected), then a step that cites a bullet and passes."""
    task = f"Add the missing dependency ({session})."
    chat(pair[0], key, session, opening(task))
    chat(pair[1], key, session, tool_step(task, f"Per [{bullet_id}], installing.", PASSED))


def playbook(gateway: Gateway, tenant: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{gateway.url}/admin/playbooks/{tenant}/{CLASS}/bullets",
                       headers={"authorization": f"Bearer {gateway.admin_key}"})
    assert answer.status_code == 200, answer.text
    bullets: list[dict[str, Any]] = answer.json()["bullets"]
    return bullets


def history(turns: int) -> Iterator[list[dict[str, Any]]]:
    """A growing conversation, each call resending it whole, with a tool exchange or two."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant. " * 4},
        {"role": "user", "content": "Plan a trip through the Alps, in detail. " * 6}]
    for turn in range(turns):
        yield [dict(m) for m in messages]
        messages.append({"role": "assistant", "content": f"Step {turn}: " + "walk on. " * 30})
        if turn % 3 == 1:
            messages[-1]["tool_calls"] = [{"id": f"call_{turn}", "type": "function", "function": {
                "name": "weather", "arguments": orjson.dumps({"day": turn}).decode()}}]
            messages.append({"role": "tool", "tool_call_id": f"call_{turn}",
                             "content": f"Day {turn}: sunny. " * 20})
        messages.append({"role": "user", "content": f"And then, after step {turn}? " * 5})


def session_calls(gateways: list[Gateway], key: str, session: str) -> list[httpx.Response]:
    """The same session's calls, the i-th sent to gateways[i % len(gateways)]."""
    return [chat(gateways[i % len(gateways)], key, session, messages,
                 **{"x-ctxgate-budget-tokens": "900"})
            for i, messages in enumerate(history(12))]


def forwarded(upstream: Upstream, key: str) -> list[bytes]:
    return [r["body"] for r in upstream.requests()
            if r["path"] == "/v1/chat/completions"
            and r["headers"].get("authorization") == f"Bearer {key}"]


@pytest.mark.timeout(600)  # the four model loads of the fixtures, then the test
def test_two_gateways_two_workers_one_redis(
    workers: list[subprocess.Popen[bytes]], gateways: tuple[Gateway, Gateway],
    upstream: Upstream, models: tuple[str, str], pair_env: dict[str, str],
) -> None:
    reflector, curator = models
    upstream.script(reflector, [reflection(insight="lesson")])
    upstream.script(curator, [curation([{"type": "ADD", "section": "common_mistakes",
                                         "content": lesson}]) for lesson in LESSONS]
                    + [curation([])])  # repeated once the lessons run out: would be lost
    keys = [f"sk-pair{t}-{uuid.uuid4().hex[:6]}" for t in range(TENANTS)]
    alt_key, one_key = (f"sk-render-{name}-{uuid.uuid4().hex[:6]}" for name in ("alt", "one"))
    a, b = gateways
    teach_jobs = [(k, f"teach-{s}", (a, b) if s % 2 == 0 else (b, a))
                  for s in range(SESSIONS) for k in keys]
    with ThreadPoolExecutor(8) as pool:
        render = [pool.submit(session_calls, [a, b], alt_key, "trip"),
                  pool.submit(session_calls, [b], one_key, "trip")]
        for done in [pool.submit(teach, p, k, s) for k, s, p in teach_jobs]:
            done.result()
        alternated, single = (f.result() for f in render)

    # Either gateway renders a session's calls as the other would.
    assert any(int(r.headers["x-ctxgate-dropped-items"]) > 0 for r in single)  # it was fitted
    assert forwarded(upstream, alt_key) == forwarded(upstream, one_key)
    assert [r.headers["x-ctxgate-tokens-after"] for r in alternated] == [
        r.headers["x-ctxgate-tokens-after"] for r in single]

    # Every lesson the Curator handed out is one bullet of one tenant: none lost, none twice.
    expected = TENANTS * SESSIONS * 2
    tenants = [tenant_of_token(key) for key in keys]

    def learned() -> list[str]:
        return [b["content"] for t in tenants for b in playbook(a, t)]

    wait_for(lambda: len(learned()) >= expected, 90, f"{expected} bullets")
    time.sleep(1.0)  # a duplicate job would land now
    asked = [r for r in upstream.requests() if orjson.loads(r["body"]).get("model") == curator]
    assert len(asked) == expected  # each episode reflected and curated once
    assert sorted(learned()) == sorted(LESSONS[:expected])
    client = redis.Redis.from_url(pair_env["CTXGATE_REDIS_URL"])
    [group] = client.xinfo_groups(store_keys.TRACE_STREAM)
    assert group["pending"] == 0 and client.xlen(store_keys.TRACE_DEAD_LETTER) == 0

    # Citations from new sessions, on both gateways: each credited once, on either worker.
    cited = {t: playbook(b, t)[0]["id"] for t in tenants}
    cite_jobs = [(k, f"cite-{n}", p) for k in keys for n in range(2) for p in ((a, b), (b, a))]
    with ThreadPoolExecutor(8) as pool:
        for done in [pool.submit(cite, p, k, s, cited[tenant_of_token(k)])
                     for k, s, p in cite_jobs]:
            done.result()

    def helpful() -> dict[str, int]:
        return {t: next(x["helpful"] for x in playbook(a, t) if x["id"] == cited[t])
                for t in tenants}

    want = {t: 4 for t in tenants}
    wait_for(lambda: helpful() == want, 60, f"helpful counters {want}")
    time.sleep(1.0)
    assert helpful() == want
    assert sum(len(playbook(b, t)) for t in tenants) == expected
    assert all(w.poll() is None for w in workers)  # both workers still consuming
