"""Delivery guarantees: concurrent workers lose no update; a dead worker's entry is finished
by another consumer exactly once."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import orjson
import redis.asyncio as aioredis

from gateway.learner.traces import TraceEvent, TraceSink
from gateway.learner.worker import StreamConsumer, ensure_group, run_worker
from gateway.playbook.bullet import Operation
from gateway.playbook.store import PlaybookStore
from gateway.store import keys
from tests.harness import ROOT, Upstream, free_port
from tests.learner.conftest import (
    cited_clean_step,
    curation,
    failed_step_event,
    make_services,
    make_settings,
    reflection,
)


async def publish(redis: aioredis.Redis, events: list[TraceEvent]) -> None:
    sink = TraceSink(redis)
    for event in events:
        sink.publish(event)
    await sink.aclose()


async def test_concurrent_workers_lose_no_update(
    lredis: aioredis.Redis, upstream: Upstream, models: tuple[str, str], tmp_path: Path
) -> None:
    """40 failed steps, each tagging the same bullet harmful, through 4 consumers at once."""
    tenant = "t" + uuid.uuid4().hex[:8]
    store = PlaybookStore(lredis)
    [seed] = await store.merge(tenant, "code", [
        Operation("ADD", "seed", section="tool_usage", content="Run pytest with -q.")])
    upstream.script(models[0], [reflection([{"id": seed.bullet_id, "tag": "harmful"}])])
    upstream.script(models[1], [curation([{"type": "TAG", "id": seed.bullet_id,
                                           "helpful": 1, "harmful": 0}])])
    events = [failed_step_event(tenant, f"tr-{i}", injected=[seed.bullet_id]) for i in range(40)]
    await publish(lredis, events)
    services = make_services(make_settings(upstream, models, tmp_path), lredis, tmp_path)
    await asyncio.gather(*(
        run_worker(services, stop=asyncio.Event(), burst=True, consumer=f"w{i}")
        for i in range(4)))
    bullet = await store.get(tenant, "code", seed.bullet_id)
    assert bullet is not None
    assert (bullet.harmful, bullet.helpful) == (40, 40)
    info = await lredis.xpending(keys.TRACE_STREAM, keys.TRACE_GROUP)
    assert info["pending"] == 0
    consumers = await lredis.xinfo_consumers(keys.TRACE_STREAM, keys.TRACE_GROUP)
    assert sum(1 for c in consumers if c["name"].decode().startswith("w")) >= 2


async def test_crash_between_merge_and_ack_applies_once(
    lredis: aioredis.Redis, upstream: Upstream, models: tuple[str, str], tmp_path: Path
) -> None:
    tenant = "t" + uuid.uuid4().hex[:8]
    store = PlaybookStore(lredis)
    [seed] = await store.merge(tenant, "code", [
        Operation("ADD", "seed", section="tool_usage", content="Use a venv.")])
    upstream.script(models[0], [reflection([{"id": seed.bullet_id, "tag": "helpful"}])])
    upstream.script(models[1], [curation([{"type": "ADD", "section": "x", "content": "A."}])])
    services = make_services(make_settings(upstream, models, tmp_path), lredis, tmp_path)
    from gateway.learner.build import build_learner, build_llm
    from gateway.playbook.config import learner_settings

    llm = build_llm(services)
    learner = build_learner(services, llm)
    dying = StreamConsumer(lredis, learner, learner_settings(services.settings), "dying")
    await publish(lredis, [failed_step_event(tenant, "tr-crash", injected=[seed.bullet_id])])
    await ensure_group(lredis)
    [(entry_id, fields)] = await dying.read_new(None)
    await learner.handle(fields)  # merged ... and the process "dies" before XACK
    # The next model answers differently: only the stored delta may be re-merged.
    upstream.script(models[1], [curation([{"type": "ADD", "section": "x", "content": "B."}])])
    await asyncio.sleep(0.4)  # past reclaim_idle_s
    await run_worker(services, stop=asyncio.Event(), burst=True, consumer="heir")
    await llm.aclose()
    bullets = {b.content: b for b in await store.bullets(tenant, "code")}
    assert sorted(bullets) == ["A.", "Use a venv."]
    assert bullets["Use a venv."].helpful == 1
    assert (await lredis.xpending(keys.TRACE_STREAM, keys.TRACE_GROUP))["pending"] == 0
    assert entry_id


async def test_sigkilled_worker_entry_is_reclaimed_once(
    lredis: aioredis.Redis, learner_redis_url: str, upstream: Upstream,
    models: tuple[str, str], tmp_path: Path
) -> None:
    """A real worker process reads an entry, hangs in the learner call, and is SIGKILLed;
    another consumer claims the entry after the idle time and finishes it exactly once."""
    tenant = "t" + uuid.uuid4().hex[:8]
    await ensure_group(lredis)
    await publish(lredis, [failed_step_event(tenant, "tr-kill")])
    log = (tmp_path / "worker.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.learner.worker_proc", learner_redis_url,
         f"{upstream.url}/v1", "stub-stall", models[1], "doomed"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = await lredis.xpending(keys.TRACE_STREAM, keys.TRACE_GROUP)
            if info["pending"] == 1:
                break
            await asyncio.sleep(0.1)
        assert info["pending"] == 1 and info["consumers"][0]["name"] == b"doomed"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    upstream.script(models[0], [reflection(insight="Check imports.")])
    upstream.script(models[1], [curation([{"type": "ADD", "section": "common_mistakes",
                                           "content": "Check imports before running."}])])
    services = make_services(make_settings(upstream, models, tmp_path), lredis, tmp_path)
    await asyncio.sleep(0.4)
    await run_worker(services, stop=asyncio.Event(), burst=True, consumer="heir")
    await run_worker(services, stop=asyncio.Event(), burst=True, consumer="heir2")
    bullets = await PlaybookStore(lredis).bullets(tenant, "code")
    assert [b.content for b in bullets] == ["Check imports before running."]
    assert (await lredis.xpending(keys.TRACE_STREAM, keys.TRACE_GROUP))["pending"] == 0
    assert await lredis.xlen(keys.TRACE_DEAD_LETTER) == 0


class SlowLearner:
    """Takes longer than the reclaim idle time, as a real LLM call may."""

    def __init__(self) -> None:
        self.calls = 0

    async def handle(self, fields: dict[str, str]) -> list[Operation]:
        self.calls += 1
        await asyncio.sleep(1.0)
        return []


async def test_entry_in_progress_is_not_reclaimed(lredis: aioredis.Redis) -> None:
    from gateway.playbook.config import LearnerSettings

    settings = LearnerSettings(reclaim_idle_s=0.3)
    await ensure_group(lredis)
    await publish(lredis, [failed_step_event("slow", "tr-slow")])
    slow, other = SlowLearner(), SlowLearner()
    busy = StreamConsumer(lredis, slow, settings, "busy")  # type: ignore[arg-type]
    idle = StreamConsumer(lredis, other, settings, "idle")  # type: ignore[arg-type]
    [(entry_id, fields)] = await busy.read_new(None)
    work = asyncio.create_task(busy.process(entry_id, fields))
    stolen = []
    for _ in range(8):
        await asyncio.sleep(0.12)
        stolen += await idle.reclaim()
    await work
    assert stolen == [] and slow.calls == 1 and other.calls == 0
    assert (await lredis.xpending(keys.TRACE_STREAM, keys.TRACE_GROUP))["pending"] == 0


async def test_ctxgate_worker_process_learns_and_stops_on_sigterm(
    lredis: aioredis.Redis, learner_redis_url: str, upstream: Upstream,
    models: tuple[str, str], tmp_path: Path
) -> None:
    """`ctxgate worker` as its own process: learns from the stream, exits on SIGTERM."""
    import os

    tenant = "t" + uuid.uuid4().hex[:8]
    metrics_port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text("task_classes:\n  code:\n    playbook: {enabled: true}\n")
    upstream.script(models[0], [reflection()])
    upstream.script(models[1], [curation([{"type": "ADD", "section": "tool_usage",
                                           "content": "Pass -q to pytest."}])])
    env = {**os.environ, "CTXGATE_REDIS_URL": learner_redis_url, "CTXGATE_CONFIG": str(config),
           "CTXGATE_LEARNER_URL": f"{upstream.url}/v1", "CTXGATE_REFLECTOR_MODEL": models[0],
           "CTXGATE_CURATOR_MODEL": models[1], "CTXGATE_DROP_LOG": str(tmp_path / "d.jsonl"),
           "HF_HUB_OFFLINE": "1", "CTXGATE_WORKER_METRICS_PORT": str(metrics_port)}
    log = (tmp_path / "worker.log").open("wb")
    process = subprocess.Popen([sys.executable, "-m", "gateway", "worker"], cwd=ROOT, env=env,
                               stdout=log, stderr=subprocess.STDOUT)
    try:
        await publish(lredis, [failed_step_event(tenant, "tr-proc")])
        store = PlaybookStore(lredis)
        # It loads its embedding model (~11 s of CPU) before it takes an entry: 33.8 s at
        # load ~20 (its log), after its own start; the test asserts that it learns.
        deadline = time.monotonic() + 180
        warm_when_open: bool | None = None  # the model loaded when the metrics port opened
        while not await store.bullets(tenant, "code") and time.monotonic() < deadline:
            if warm_when_open is None and _answers(f"http://127.0.0.1:{metrics_port}/metrics"):
                warm_when_open = "embedding model warm" in (tmp_path / "worker.log").read_text()
            await asyncio.sleep(0.1)
        # a probe on the port means "taking work": it opens after the load, not during it
        if warm_when_open is None:  # it learned before a poll found the port open
            warm_when_open = "embedding model warm" in (tmp_path / "worker.log").read_text()
        assert warm_when_open, "the metrics port answered while the model loaded"
        assert [b.content for b in await store.bullets(tenant, "code")] == ["Pass -q to pytest."]
        added = 'ctxgate_curator_operations_total{op="ADD"} 1.0'
        while time.monotonic() < deadline:  # counted just after the merge it follows
            exposed = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
            if added in exposed:
                break
            await asyncio.sleep(0.05)
        assert added in exposed
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


async def test_a_trace_queued_twice_is_learned_from_once(
    lredis: aioredis.Redis, upstream: Upstream, models: tuple[str, str], tmp_path: Path
) -> None:
    """The same trace written twice to the stream (as a write that timed out on a hung Redis
    and then landed, before the outage buffer wrote it again) reaches two workers at once:
    one learns from it, the other acknowledges its entry and counts it a duplicate."""
    tenant = "t" + uuid.uuid4().hex[:8]
    store = PlaybookStore(lredis)
    [seed] = await store.merge(tenant, "code", [
        Operation("ADD", "seed", section="tool_usage", content="Run pytest with -q.")])
    slow = {**reflection([{"id": seed.bullet_id, "tag": "harmful"}]), "delay_s": 0.5}
    upstream.script(models[0], [slow])  # both workers are in the Reflector call at once
    upstream.script(models[1], [curation([{"type": "TAG", "id": seed.bullet_id,
                                           "helpful": 1, "harmful": 0},
                                          {"type": "ADD", "section": "common_mistakes",
                                           "content": "Check imports first."}])])
    event = failed_step_event(tenant, "tr-twice", injected=[seed.bullet_id])
    await publish(lredis, [event, event])
    assert await lredis.xlen(keys.TRACE_STREAM) == 2
    services = make_services(make_settings(upstream, models, tmp_path, learner={"batch": 1}),
                             lredis, tmp_path)
    await asyncio.gather(*(
        run_worker(services, stop=asyncio.Event(), burst=True, consumer=f"w{i}")
        for i in range(2)))
    # An upload cut off by its client (another test's task, cancelled mid-send) is recorded
    # with an empty body and asked no model: left out (it failed the whole suite once).
    asked = [orjson.loads(r["body"]).get("model") for r in upstream.requests()
             if r["path"] == "/v1/chat/completions" and r["body"]]
    assert (asked.count(models[0]), asked.count(models[1])) == (1, 1)
    bullets = {b.content: b for b in await store.bullets(tenant, "code")}
    assert sorted(bullets) == ["Check imports first.", "Run pytest with -q."]
    assert (bullets["Run pytest with -q."].helpful,
            bullets["Run pytest with -q."].harmful) == (1, 1)
    registry = services.metrics.registry
    assert registry.get_sample_value("ctxgate_worker_failures_total",
                                     {"reason": "duplicate_trace"}) == 1
    assert registry.get_sample_value("ctxgate_feedback_events_total",
                                     {"source": "implicit", "outcome": "failure"}) == 1
    assert (await lredis.xpending(keys.TRACE_STREAM, keys.TRACE_GROUP))["pending"] == 0


async def test_an_entry_read_before_its_trace_was_stored_gives_its_claim_back(
    lredis: aioredis.Redis, upstream: Upstream, models: tuple[str, str], tmp_path: Path
) -> None:
    """An entry whose trace is not stored yet (on a Redis Cluster the stream and the trace
    are on different nodes: a writer that announced both at once) is acknowledged
    unlearned, and the entry queued once the trace is stored is learned from, not skipped
    as a duplicate of it: the citation is credited, once."""
    tenant = "t" + uuid.uuid4().hex[:8]
    store = PlaybookStore(lredis)
    seed, event = await cited_clean_step(store, tenant, "tr-early")
    await ensure_group(lredis)
    await lredis.xadd(keys.TRACE_STREAM, {"kind": "trace", "tenant": tenant,
                                          "trace_id": "tr-early"})
    services = make_services(make_settings(upstream, models, tmp_path), lredis, tmp_path)
    await run_worker(services, stop=asyncio.Event(), burst=True, consumer="w1")
    assert (await lredis.xpending(keys.TRACE_STREAM, keys.TRACE_GROUP))["pending"] == 0
    registry = services.metrics.registry
    assert registry.get_sample_value("ctxgate_worker_failures_total",
                                     {"reason": "trace_missing"}) == 1
    await publish(lredis, [event])  # stored, then queued again
    for _ in range(2):
        await run_worker(services, stop=asyncio.Event(), burst=True, consumer="w1")
        bullet = await store.get(tenant, "code", seed)
        assert bullet is not None and bullet.helpful == 1
    assert registry.get_sample_value("ctxgate_worker_failures_total",
                                     {"reason": "duplicate_trace"}) is None
    assert (await lredis.xpending(keys.TRACE_STREAM, keys.TRACE_GROUP))["pending"] == 0


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False
