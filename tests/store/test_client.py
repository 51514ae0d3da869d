"""The Redis client times out after `CTXGATE_REDIS_TIMEOUT_S`; blocking reads block for less."""

from __future__ import annotations

import pytest

from gateway.settings import load_settings
from gateway.store.client import blocking_ms, connect


def test_the_socket_timeouts_follow_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXGATE_REDIS_TIMEOUT_S", "0.75")
    settings = load_settings(redis_url="redis://127.0.0.1:1")
    pool = connect(settings).connection_pool.connection_kwargs
    assert (pool["socket_timeout"], pool["socket_connect_timeout"]) == (0.75, 0.75)


def test_a_blocking_read_blocks_for_at_most_half_the_socket_timeout() -> None:
    assert blocking_ms(load_settings(redis_timeout_s=2.0), 1000) == 1000
    assert blocking_ms(load_settings(redis_timeout_s=1.0), 1000) == 500
    assert blocking_ms(load_settings(redis_timeout_s=0.001), 1000) == 1
