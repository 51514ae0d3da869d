"""`python -m bench.memgrowth`: what grows in the gateway's memory under the soak's traffic.

The whole gateway app runs in this process (`gateway.app.Gateway`, worker off, a real
embedded Redis), driven through `httpx.ASGITransport` by the soak's clients
(`bench/soak.py`: the overhead mix with a per-request nonce, feedback, long sessions of up
to 2,000 messages), with an upstream answered in process (a short text answer, streamed when
asked). After a warm-up, `tracemalloc` is started; at every
checkpoint the script prints RSS, the memory `tracemalloc` sees, every in-process cache's
entries against its bound (and an estimate of its bytes), and at the end the source lines
whose allocations grew most since the warm-up. Faults are not injected: this looks for
growth, the soak for robustness.

    .venv/bin/python -m bench.memgrowth --requests 60000 --checkpoints 6 --out OUT.json
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson

from bench.learner_load import rss_mb
from bench.soak import Traffic
from gateway.app import Gateway
from gateway.context.caches import SizedLRU
from gateway.settings import load_settings
from gateway.store.embedded import EmbeddedRedis

ANSWER = {"role": "assistant", "content": "Done: the change is in place and tests pass."}
USAGE = {"prompt_tokens": 200, "completion_tokens": 12, "total_tokens": 212}


class Upstream(httpx.AsyncBaseTransport):
    """The model, in process (`httpx.MockTransport` would read the body it returns, and
    a read body cannot be relayed as a stream)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        return answer(request)


def answer(request: httpx.Request) -> httpx.Response:
    """A short answer, as one JSON body or as server-sent events (a stream, not loaded
    content: the gateway relays it as an upstream's)."""
    body = orjson.loads(request.content)
    base = {"id": "chatcmpl-mem", "model": body.get("model", "m"), "created": 0}
    if body.get("stream"):
        chunks = [{**base, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": delta, "finish_reason": finish}]}
            for delta, finish in ((ANSWER, None), ({}, "stop"))]
        data = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks)
        return httpx.Response(200, stream=httpx.ByteStream(data + b"data: [DONE]\n\n"),
                              headers={"content-type": "text/event-stream"})
    data = orjson.dumps({**base, "object": "chat.completion", "usage": USAGE,
                         "choices": [{"index": 0, "message": ANSWER, "finish_reason": "stop"}]})
    return httpx.Response(200, stream=httpx.ByteStream(data),
                          headers={"content-type": "application/json"})


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """Bytes of `obj` and what it holds (containers, dataclasses, numpy arrays), each
    object counted once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, np.ndarray):
        return size + (obj.nbytes if obj.base is None else 0)
    if isinstance(obj, dict):
        return size + sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    if isinstance(obj, list | tuple | set | frozenset):
        return size + sum(deep_size(item, seen) for item in obj)
    fields = getattr(obj, "__dict__", None)
    if fields is not None:
        return size + deep_size(fields, seen)
    for slot in getattr(type(obj), "__slots__", ()):
        size += deep_size(getattr(obj, slot, None), seen)
    return size


def estimate(entries: Any, sample: int = 200) -> int:
    """Bytes of a mapping's entries, from a sample of them (its newest) scaled up."""
    n = len(entries)
    if n == 0:
        return 0
    keys = list(entries.keys())[-sample:]
    seen: set[int] = set()
    total = sum(deep_size(k, seen) + deep_size(entries.get(k) if hasattr(entries, "get")
                                                 else entries[k], seen) for k in keys)
    return total * n // len(keys)


def caches(app: Gateway) -> Iterator[tuple[str, Any, int | None]]:
    """Every in-process cache of the app: (name, the mapping, its bound or None)."""
    from gateway.playbook.tokens import count_tokens

    services = app.services
    engines = [("loop", services.engine)]
    thread_engine = app._fitting_thread.engine
    if thread_engine is not None:
        engines.append(("thread", thread_engine))
    for where, engine in engines:
        assert engine is not None
        for name in engine.caches.__dataclass_fields__:
            cache = getattr(engine.caches, name)
            yield f"{where} caches.{name}", cache, int(cache.maxsize)  # SizedLRU: see inventory
        for encoding, cache in engine.counter._caches.items():
            yield f"{where} token counts {encoding}", cache, int(cache.maxsize)
        prefixes = engine.prefixes._entries
        if prefixes is not None:
            yield f"{where} prefixes", prefixes, int(prefixes.maxsize)
        decoded = getattr(engine.sessions, "_decoded", None)
        if decoded is not None:
            yield f"{where} session decisions", decoded._by_session, decoded._size
        yield f"{where} forecast stats", engine.forecasts._local, None
        yield f"{where} forecast unsent", engine.forecasts._unsent, None
        yield f"{where} calibration", engine.calibration._local, None
        yield f"{where} aging classes", engine._aging, None
        yield f"{where} scaled classes", engine._scaled, 256
        if engine.embedder is not None:
            vectors = engine.embedder._cache
            yield f"{where} embeddings", vectors, int(vectors.maxsize)
    drop_log = services.drop_log
    yield "drop log sessions", drop_log._sessions, drop_log._max_sessions
    yield "drop log summarised", drop_log._summarised, drop_log._max_summarised
    info = count_tokens.cache_info()
    yield f"playbook token counts ({info.currsize})", {}, info.maxsize


def scale_bounds(app: Gateway, scale: float) -> None:
    """Give the engines' memos `scale` times their entry bounds (token counts, the
    session-keyed LRUs and the size bounds as they are), so that they fill, and RSS should
    level off, within a short run."""
    from dataclasses import fields, replace

    for engine in (app.services.engine, app._fitting_thread.engine):
        assert engine is not None
        small = {}
        for f in fields(engine.caches):
            cache = getattr(engine.caches, f.name)
            entries = max(int((cache.max_entries if isinstance(cache, SizedLRU)
                               else cache.maxsize) * scale), 1)
            small[f.name] = (SizedLRU(entries, int(cache.maxsize), cache._size_of)
                             if isinstance(cache, SizedLRU) else type(cache)(maxsize=entries))
        engine.caches = replace(engine.caches, **small)
        for name, cache in list(engine.counter._caches.items()):
            engine.counter._caches[name] = SizedLRU(int(cache.max_entries * scale),
                                                    int(cache.maxsize))


def inventory(app: Gateway) -> list[dict[str, Any]]:
    """Each cache's entries against its bound, its bytes estimated from a sample, and for
    one bounded by size too (`SizedLRU`) the size it counts and its size bound."""
    rows = []
    for name, cache, bound in caches(app):
        row = {"cache": name, "entries": len(cache), "bound": bound,
               "mb_estimate": round(estimate(cache) / 2**20, 1)}
        if isinstance(cache, SizedLRU):
            row.update(bound=cache.max_entries, sized_mb=round(cache.currsize / 2**20, 1),
                       sized_bound_mb=round(cache.maxsize / 2**20))
        rows.append(row)
    return rows


async def drive(traffic: Traffic, requests: int, clients: int) -> None:
    traffic.limit = traffic.sent + requests
    until = time.monotonic() + 24 * 3600
    await asyncio.gather(*(traffic.client(k, until) for k in range(clients)))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-memgrowth-"))
    store = EmbeddedRedis(tmp / "redis").start()
    settings = load_settings(redis_url=store.url, worker="off", data_dir=tmp / "data",
                             drop_log=str(tmp / "drops.jsonl"), log_level="warning",
                             upstream_url="http://upstream.test/v1")
    app = Gateway(settings, transport=Upstream())
    await app.startup()
    try:
        await app.services.warm.wait()
        if args.bounds_scale != 1.0:
            scale_bounds(app, args.bounds_scale)
        traffic = Traffic("http://gateway.test", args.seed, httpx.ASGITransport(app=app))
        await drive(traffic, args.warm_up, args.clients)
        gc.collect()
        tracemalloc.start(args.frames)
        first = tracemalloc.take_snapshot()
        points = [checkpoint(app, traffic, 0, time.monotonic())]
        step = args.requests // args.checkpoints
        started = time.monotonic()
        for k in range(1, args.checkpoints + 1):
            await drive(traffic, step, args.clients)
            gc.collect()
            points.append(checkpoint(app, traffic, k * step, started))
            print(orjson.dumps(points[-1]).decode(), flush=True)
        top = tracemalloc.take_snapshot().compare_to(first, "lineno")[:args.top]
        tracemalloc.stop()
        return {"requests": args.requests, "warm_up": args.warm_up, "clients": args.clients,
                "outcomes": dict(traffic.outcomes.most_common()), "points": points,
                "grew_most": [{"where": str(stat.traceback[0]), "mb": round(
                    stat.size_diff / 2**20, 2), "blocks": stat.count_diff} for stat in top]}
    finally:
        await app.shutdown()
        store.stop()


def checkpoint(app: Gateway, traffic: Traffic, done: int, started: float) -> dict[str, Any]:
    traced, _ = tracemalloc.get_traced_memory()
    return {"requests": done, "seconds": round(time.monotonic() - started, 1),
            "rss_mb": rss_mb([_self_pid()]), "traced_mb": round(traced / 2**20, 1),
            "answered": traffic.answered, "caches": inventory(app)}


def _self_pid() -> int:
    import os

    return os.getpid()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=60_000, help="after the warm-up")
    parser.add_argument("--warm-up", type=int, default=2_000)
    parser.add_argument("--checkpoints", type=int, default=6)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--frames", type=int, default=1, help="tracemalloc frames kept")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--bounds-scale", type=float, default=1.0,
                        help="the engine memos' entry bounds times this (e.g. 0.02: they "
                             "fill within a short run)")
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    report = asyncio.run(run(args))
    text = orjson.dumps(report, option=orjson.OPT_INDENT_2)
    print(text.decode())
    if args.out:
        args.out.write_bytes(text)


if __name__ == "__main__":
    main()
