"""The Redis client times out after `CTXGATE_REDIS_TIMEOUT_S`; blocking reads block for less."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.settings import load_settings
from gateway.store import STORE_DOWN
from gateway.store.client import blocking_ms, connect, torn_down
from tests.store.cluster import LocalCluster, Node


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


@pytest.fixture
def tear_down(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """redis-py's own race, on cue: while a key is armed, every send of a command that names
    it finds its connection torn down (its writer gone) by another task, as seen in a
    cluster failover (redis/redis-py#4287)."""
    original = AbstractConnection._send_packed_command
    armed: list[bytes] = []  # append a key to arm, clear to disarm

    async def send(self: AbstractConnection, command: Any) -> None:
        # Only the test's own commands take the cue, never another client's send in between
        # nor a new connection's handshake; and every attempt of them does: a first cue
        # taken once and then retried by the cluster client (a slot refresh, a write timeout
        # under load) let the command through in CI, twice.
        if armed and isinstance(command, list) and armed[0] in b"".join(command):
            self._writer = None
        await original(self, command)

    monkeypatch.setattr(AbstractConnection, "_send_packed_command", send)
    return armed


async def test_a_connection_torn_down_under_a_cluster_command_is_the_store_down(
        redis_cluster: LocalCluster, tear_down: list[bytes]) -> None:
    """The cluster client raised AttributeError there, which every caller took for a bug (a
    worker exited; a route would answer 500): it is a ConnectionError, one of STORE_DOWN,
    and the client answers the next command."""
    redis = connect(load_settings(redis_url=redis_cluster.url, redis_cluster=True))
    try:
        await redis.set("torn-{a}", "1")  # connected before the race
        tear_down.append(b"torn-")
        with pytest.raises(RedisConnectionError) as raised:
            await redis.get("torn-{a}")
        tear_down.clear()
        # Our translation of redis-py's AttributeError; redis-py 8.2 checks the writer itself
        # and raises this ConnectionError (CI installs it: the test failed there, not on 8.1).
        assert isinstance(raised.value.__cause__, AttributeError) or (
            "closed by the server before write" in str(raised.value)), repr(raised.value)
        assert await redis.get("torn-{a}") == b"1"
        tear_down.append(b"torn-")
        with pytest.raises(STORE_DOWN):
            async with redis.pipeline(transaction=False) as pipe:
                pipe.get("torn-{a}")
                pipe.get("torn-{b}")
                await pipe.execute()
        tear_down.clear()
        async with redis.pipeline(transaction=False) as pipe:
            assert await pipe.get("torn-{a}").get("torn-{b}").execute() == [b"1", None]
    finally:
        await redis.aclose()


def test_only_redis_pys_own_attribute_error_is_translated() -> None:
    def ours() -> None:
        raise AttributeError("a bug of ours stays a bug")

    with pytest.raises(AttributeError) as raised:
        ours()
    assert not torn_down(raised.value)
    assert not torn_down(ValueError("not a torn connection"))
