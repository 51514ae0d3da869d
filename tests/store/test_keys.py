"""Trace shards: stable per tenant, all used, and shard 0 keeps the unsharded names."""

from __future__ import annotations

from gateway.store import keys


def test_one_shard_is_the_unsharded_stream() -> None:
    assert keys.trace_shard("acme", 1) == 0
    assert keys.trace_stream(0) == keys.TRACE_STREAM
    assert keys.trace_dead_letter(0) == keys.TRACE_DEAD_LETTER


def test_tenants_spread_over_every_shard_and_stay_put() -> None:
    tenants = [f"tenant-{n}" for n in range(200)]
    shards = [keys.trace_shard(t, 4) for t in tenants]
    assert set(shards) == {0, 1, 2, 3}
    assert shards == [keys.trace_shard(t, 4) for t in tenants]
    assert len({keys.trace_stream(s) for s in range(4)}) == 4
    assert len({keys.trace_dead_letter(s) for s in range(4)} | {keys.trace_stream(0)}) == 5
