"""Playbook benchmarks: merge throughput, feedback-to-bullet time, injection cost.

    .venv/bin/python -m bench.playbook [--json out.json]

Starts its own embedded Redis and the scripted upstream (tests/upstream_stub.py) as the
learner LLM, so the learner's own model time is zero: what is measured is ctxgate's part.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis

from gateway.embeddings import Embedder
from gateway.learner.traces import TraceEvent, TraceSink
from gateway.learner.worker import run_worker
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.playbook.bullet import Operation
from gateway.playbook.inject import PlaybookInjector
from gateway.playbook.store import PlaybookStore
from gateway.services import Services
from gateway.settings import Settings
from gateway.store import keys
from gateway.store.embedded import EmbeddedRedis

MERGES_PER_WORKER = 3000


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# --- merge throughput ----------------------------------------------------------------------

async def _merge_loop(url: str, tenant: str, worker: int, n: int) -> None:
    redis = aioredis.Redis.from_url(url)
    store = PlaybookStore(redis)
    for i in range(n):  # a typical delta: one ADD and two TAGs, applied in one script call
        await store.merge(tenant, "bench", [
            Operation("ADD", f"w{worker}:{i}:a", section="others", content=f"lesson {worker}/{i}"),
            Operation("TAG", f"w{worker}:{i}:t1", id="misc-00001", helpful=1),
            Operation("TAG", f"w{worker}:{i}:t2", id="misc-00001", harmful=1),
        ])
    await redis.aclose()


def _merge_process(url: str, tenant: str, worker: int, n: int) -> None:
    asyncio.run(_merge_loop(url, tenant, worker, n))


def bench_merge(url: str, workers: int) -> dict[str, Any]:
    tenant = "bench-" + uuid.uuid4().hex[:6]

    async def seed() -> None:
        redis = aioredis.Redis.from_url(url)
        await PlaybookStore(redis).merge(tenant, "bench", [
            Operation("ADD", "seed", section="others", content="seed")])
        await redis.aclose()

    asyncio.run(seed())
    started = time.perf_counter()
    procs = [multiprocessing.Process(target=_merge_process, args=(url, tenant, w,
                                                                  MERGES_PER_WORKER))
             for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - started

    async def check() -> tuple[int, int]:
        redis = aioredis.Redis.from_url(url)
        store = PlaybookStore(redis)
        seed_bullet = await store.get(tenant, "bench", "misc-00001")
        count = len(await store.bullets(tenant, "bench"))
        await redis.aclose()
        assert seed_bullet is not None
        return count, seed_bullet.helpful

    count, helpful = asyncio.run(check())
    ops = 3 * MERGES_PER_WORKER * workers
    assert count == 1 + MERGES_PER_WORKER * workers and helpful == MERGES_PER_WORKER * workers
    return {"workers": workers, "merges": MERGES_PER_WORKER * workers, "ops": ops,
            "seconds": round(elapsed, 3), "ops_per_s": round(ops / elapsed),
            "merges_per_s": round(MERGES_PER_WORKER * workers / elapsed)}


# --- feedback to bullet ---------------------------------------------------------------------

def _failed_event(tenant: str, trace_id: str) -> TraceEvent:
    return TraceEvent(tenant, "bench", "s", trace_id, [
        {"role": "user", "content": "run the tests"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Traceback (most recent call last):"},
    ], {"content": "ok"}, [], time.time())


async def bench_feedback(url: str, upstream: Any, samples: int, tmp: Path) -> dict[str, Any]:
    import httpx

    tag = uuid.uuid4().hex[:6]
    reflector, curator = f"bench-r-{tag}", f"bench-c-{tag}"
    reflection = {"reasoning": "r", "error_identification": "e", "root_cause_analysis": "c",
                  "correct_approach": "a", "key_insight": "k", "bullet_tags": []}
    topics = ["pip", "git", "docker", "pytest", "npm", "cargo", "make", "ssh", "curl", "sql"]
    curations = [{"content": orjson.dumps({"reasoning": "r", "operations": [{
        "type": "ADD", "section": "common_mistakes",
        "content": f"Lesson {i}: check {topics[i % 10]} output {i * 7919 % 1000} first."}]}
    ).decode()} for i in range(samples)]
    httpx.post(f"{upstream.url}/_script", json={"model": reflector, "responses": [
        {"content": orjson.dumps(reflection).decode()}]})
    httpx.post(f"{upstream.url}/_script", json={"model": curator, "responses": curations})
    settings = Settings(config=tmp / "absent.yaml", learner_url=f"{upstream.url}/v1",
                        reflector_model=reflector, curator_model=curator,
                        task_classes={"bench": {"playbook": {"enabled": True}}})
    redis = aioredis.Redis.from_url(url)
    await redis.delete(keys.TRACE_STREAM)
    metrics = Metrics()
    embedder = Embedder(None, redis)
    services = Services(settings, metrics, redis, DropLog(str(tmp / "d.jsonl"), "none", metrics),
                        embedder)
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(services, stop=stop, consumer="bench"))
    sink, store, tenant = TraceSink(redis), PlaybookStore(redis), "fb-" + tag
    await embedder.embed(["warm the model up"])
    latencies = []
    for i in range(samples):
        version = await store.version(tenant, "bench")
        started = time.perf_counter()
        sink.publish(_failed_event(tenant, f"tr-{i}"))
        while await store.version(tenant, "bench") == version:  # merged (added or folded)
            await asyncio.sleep(0.001)
        latencies.append((time.perf_counter() - started) * 1000)
    stop.set()
    await worker
    await redis.aclose()
    embedder.close()
    return {"samples": samples, "median_ms": round(statistics.median(latencies), 1),
            "p95_ms": round(_pct(latencies, 0.95), 1), "max_ms": round(max(latencies), 1)}


# --- injection cost -------------------------------------------------------------------------

async def bench_injection(url: str, bullets: int, calls: int) -> dict[str, Any]:
    redis = aioredis.Redis.from_url(url)
    tenant = "inj-" + uuid.uuid4().hex[:6]
    sections = ["common_mistakes", "tool_usage", "verification", "strategies_and_hard_rules"]
    await PlaybookStore(redis).merge(tenant, "bench", [
        Operation("ADD", f"seed-{i}", section=sections[i % 4],
                  content=f"When step {i} touches module m{i % 37}, run check {i % 11} first.")
        for i in range(bullets)])
    embedder = Embedder(None, redis)
    injector = PlaybookInjector(redis, embedder)
    await injector.block_for_session(tenant, "bench", "warm", "warm up", 800)  # embeds bullets
    new_session, pinned = [], []
    for i in range(calls):
        started = time.perf_counter()
        block = await injector.block_for_session(
            tenant, "bench", f"s{i}", f"fix the failing test number {i}", 800)
        new_session.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        again = await injector.block_for_session(tenant, "bench", f"s{i}", "later", 800)
        pinned.append((time.perf_counter() - started) * 1000)
        assert block is not None and again == block
    await redis.aclose()
    embedder.close()
    return {"bullets": bullets, "block_tokens": block.tokens, "calls": calls,
            "pinned_median_ms": round(statistics.median(pinned), 3),
            "pinned_p95_ms": round(_pct(pinned, 0.95), 3),
            "new_session_median_ms": round(statistics.median(new_session), 2),
            "new_session_p95_ms": round(_pct(new_session, 0.95), 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", type=Path)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-playbook-"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.harness import Upstream, stop

    server = EmbeddedRedis(tmp / "redis").start()
    upstream = Upstream.start(tmp)
    try:
        results: dict[str, Any] = {}
        results["merge"] = [bench_merge(server.url, 1), bench_merge(server.url, 4)]
        print("merge", results["merge"], file=sys.stderr, flush=True)
        results["injection"] = asyncio.run(bench_injection(server.url, 500, 200))
        print("injection", results["injection"], file=sys.stderr, flush=True)
        results["feedback_to_bullet"] = asyncio.run(
            bench_feedback(server.url, upstream, args.samples, tmp))
    finally:
        stop(upstream.process)
        server.stop()
    print(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode())
    if args.json:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
