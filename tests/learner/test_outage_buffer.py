"""The outage buffer's bounds (pure), and the trace writer's bounded wait at shutdown."""

from __future__ import annotations

import socket
import time

import redis.asyncio as aioredis

from gateway.learner.outage import OutageBuffer, TraceRecord
from gateway.learner.traces import TraceEvent, TraceSink
from gateway.observability.metrics import Metrics


def record(n: int, size: int = 10) -> TraceRecord:
    return TraceRecord("t", f"id{n}", b"x" * size, None, True)


def ids(records: list[TraceRecord]) -> list[str]:
    return [r.trace_id for r in records]


def test_count_bound_sheds_the_oldest() -> None:
    buffer = OutageBuffer(max_traces=3, max_bytes=10**6)
    assert buffer.extend([record(1), record(2)]) == []
    assert ids(buffer.extend([record(3), record(4), record(5)])) == ["id1", "id2"]
    assert ids(buffer.take(10)) == ["id3", "id4", "id5"] and len(buffer) == 0
    assert buffer.bytes == 0


def test_byte_bound_sheds_the_oldest() -> None:
    buffer = OutageBuffer(max_traces=100, max_bytes=3 * record(0).size)
    buffer.extend([record(1), record(2), record(3)])
    assert ids(buffer.extend([record(4)])) == ["id1"]
    assert buffer.bytes == 3 * record(0).size
    # One trace over the whole bound is never kept.
    assert ids(buffer.extend([record(5, size=10_000)])) == ["id2", "id3", "id4", "id5"]


def test_put_back_keeps_the_order_and_the_bound() -> None:
    buffer = OutageBuffer(max_traces=3, max_bytes=10**6)
    buffer.extend([record(1), record(2), record(3)])
    taken = buffer.take(2)
    buffer.extend([record(4)])  # arrived while the write-back was in flight
    assert buffer.put_back(taken) == [record(1)]
    assert ids(buffer.take(10)) == ["id2", "id3", "id4"]


async def test_shutdown_waits_a_bounded_time_then_counts_what_is_left() -> None:
    # Nothing listens on this port: every write is refused, as with Redis stopped. The port
    # stays bound (never listening) for the whole test, so that no server started meanwhile
    # by another test or process can take it (a freed port was once taken by an HTTP
    # server: a protocol error, not an outage).
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        await _shutdown_counts_what_is_left(held.getsockname()[1])


async def _shutdown_counts_what_is_left(port: int) -> None:
    redis = aioredis.Redis(port=port, socket_connect_timeout=0.2)
    metrics = Metrics()
    sink = TraceSink(redis, metrics, outage_traces=10)
    for n in range(3):
        sink.publish(TraceEvent("t", "default", "s", f"tr{n}", [{"role": "user",
                                "content": "hi"}], {"content": "ok"}))
    await sink.flush()
    assert sink.pending == 3
    assert metrics.trace_outage_buffered._value.get() == 3
    started = time.monotonic()
    await sink.aclose(timeout_s=0.5)
    assert time.monotonic() - started < 3
    assert metrics.worker_failures.labels("trace_outage_shed")._value.get() == 3
    assert metrics.trace_outage_buffered._value.get() == 0
    await redis.aclose()
