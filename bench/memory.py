"""Memory of one gateway process under many sessions: RSS after warm-up and as sessions
accumulate (the caches are bounded LRUs, so it should level off).

Run: `.venv/bin/python -m bench.memory` (about a minute). Starts an embedded Redis, the lean
upstream of bench/upstream.py and `ctxgate serve` (engine on), then runs 3 x 1,000 chat
sessions of 5 calls each at 16 concurrent sessions, printing the gateway's RSS.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from pathlib import Path

import httpx

from bench import servers
from gateway.store.embedded import EmbeddedRedis


def rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
    return 0


async def session(client: httpx.AsyncClient, n: int) -> None:
    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn in range(5):
        messages.append({"role": "user",
                         "content": f"session {n} turn {turn}: " + "some words " * 40})
        response = await client.post(
            "/v1/chat/completions", json={"model": "gpt-4o-mini", "messages": messages},
            headers={"authorization": f"Bearer sk-memory-{n % 50}"})
        assert response.status_code == 200, response.text
        messages.append({"role": "assistant", "content": "ok " * 30})


async def sessions(base_url: str, start: int, count: int) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
        gate = asyncio.Semaphore(16)

        async def one(n: int) -> None:
            async with gate:
                await session(client, n)

        await asyncio.gather(*(one(n) for n in range(start, start + count)))


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="ctxgate-memory-"))
    with contextlib.ExitStack() as stack:
        redis = EmbeddedRedis(workdir / "redis").start()
        stack.callback(redis.stop)
        upstream = servers.start_upstream(stack, None, workdir)
        gateway = servers.start_ctxgate(stack, "memory", upstream=upstream,
                                        redis_url=redis.url, transport="aiohttp", cpus=None,
                                        log_dir=workdir)
        deadline = time.monotonic() + 120
        while httpx.get(gateway.base_url + "/readyz").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not warm up")
            time.sleep(0.2)
        print(f"after warm-up: RSS {rss_mb(gateway.pid)} MB")
        for round_ in range(3):
            started = time.monotonic()
            asyncio.run(sessions(gateway.base_url, round_ * 1000, 1000))
            rate = 5000 / (time.monotonic() - started)
            print(f"after {(round_ + 1) * 5000} requests in {(round_ + 1) * 1000} sessions: "
                  f"RSS {rss_mb(gateway.pid)} MB ({rate:.0f} req/s, Python client)")


if __name__ == "__main__":
    main()
