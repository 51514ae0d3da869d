"""The Redis client times out after `CTXGATE_REDIS_TIMEOUT_S`; blocking reads block for less."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gateway.settings import load_settings
from gateway.store import STORE_DOWN
from gateway.store.client import blocking_ms, connect
from tests.store.cluster import Node


def test_the_socket_timeouts_follow_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXGATE_REDIS_TIMEOUT_S", "0.75")
    settings = load_settings(redis_url="redis://127.0.0.1:1")
    pool = connect(settings).connection_pool.connection_kwargs
    assert (pool["socket_timeout"], pool["socket_connect_timeout"]) == (0.75, 0.75)


def test_a_blocking_read_blocks_for_at_most_half_the_socket_timeout() -> None:
    assert blocking_ms(load_settings(redis_timeout_s=2.0), 1000) == 1000
    assert blocking_ms(load_settings(redis_timeout_s=1.0), 1000) == 500
    assert blocking_ms(load_settings(redis_timeout_s=0.001), 1000) == 1


async def test_a_restarted_redis_answers_the_first_command_on_a_pooled_connection(
        single_redis: Node, tmp_path: Path) -> None:
    """The pool's connections are closed when the server restarts: the first command on
    each used to fail (an admin route's 503 right after a restart); it is sent again on a
    new connection. A server that stays down still fails fast."""
    redis = connect(load_settings(redis_url=single_redis.url, data_dir=str(tmp_path)))
    try:
        await asyncio.gather(*(redis.blpop(["gw8-none"], 0.2) for _ in range(4)))  # 4 pooled
        single_redis.kill()
        single_redis.start()
        for _ in range(4):
            assert await redis.hgetall("gw8-none") == {}
        single_redis.kill()
        started = time.monotonic()
        with pytest.raises(STORE_DOWN):
            await redis.hgetall("gw8-none")
        assert time.monotonic() - started < 1.0
    finally:
        if single_redis.process is None:
            single_redis.start()
        await redis.aclose()
