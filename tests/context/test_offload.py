"""The fitting thread and the time budget (gateway/context/offload.py), on a real engine."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.context.engine import ContextEngine
from gateway.context.offload import (
    CONCURRENT_FITS,
    MAX_WAITING,
    Deadline,
    FitDeadline,
    FittingThread,
    check_deadline,
    fit_deadline,
    not_counted,
)
from gateway.context.replay import build_engine
from gateway.settings import Settings


def within(seconds: float) -> Deadline:
    return Deadline(time.monotonic() + seconds)


async def with_thread(redis_url: str, body: Callable[[FittingThread], Awaitable[None]]) -> None:
    fitting = FittingThread(lambda _client: build_engine(Settings()),
                            lambda: aioredis.Redis.from_url(redis_url))
    fitting.start()
    try:
        await body(fitting)
    finally:
        await fitting.aclose()


def test_a_job_runs_on_the_fitting_thread_with_its_engine(redis_url: str) -> None:
    async def body(fitting: FittingThread) -> None:
        async def job(engine: ContextEngine) -> tuple[int, bool]:
            return threading.get_ident(), engine is fitting.engine

        ident, own_engine = await fitting.run(job, within(5))
        assert ident != threading.get_ident() and own_engine
        assert not gc.isenabled()  # the caller holds what the job returned...
        fitting.let_go([])
        await asyncio.sleep(0.1)
        assert gc.isenabled()  # ...until it lets go of it

    asyncio.run(with_thread(redis_url, body))


def test_a_job_past_its_deadline_gives_its_turn_back(redis_url: str) -> None:
    async def body(fitting: FittingThread) -> None:
        async def slow(_: ContextEngine) -> None:
            await asyncio.sleep(30)

        async def quick(_: ContextEngine) -> str:
            return "done"

        for _ in range(CONCURRENT_FITS + 1):  # each slow job is cancelled at its deadline
            started = time.monotonic()
            with pytest.raises(FitDeadline) as late:
                await fitting.run(slow, within(0.05))
            assert late.value.cause == "deadline" and time.monotonic() - started < 5
        assert await fitting.run(quick, within(5)) == "done"  # turns were given back
        fitting.let_go([])
        await asyncio.sleep(0.1)
        assert gc.isenabled()

    asyncio.run(with_thread(redis_url, body))


def test_a_full_queue_refuses_at_once(redis_url: str) -> None:
    async def body(fitting: FittingThread) -> None:
        async def slow(_: ContextEngine) -> None:
            await asyncio.sleep(0.5)

        busy = [asyncio.ensure_future(fitting.run(slow, within(10)))
                for _ in range(CONCURRENT_FITS + MAX_WAITING)]
        await asyncio.sleep(0.05)
        with pytest.raises(FitDeadline) as full:
            await fitting.run(slow, within(10))
        assert full.value.cause == "queue_full"
        await asyncio.gather(*busy)
        for _ in busy:
            fitting.let_go([])

    asyncio.run(with_thread(redis_url, body))


def test_time_waiting_for_the_embedding_model_is_not_counted() -> None:
    reached: list[str] = []

    async def fit() -> None:
        with not_counted():
            await asyncio.sleep(0.3)  # past the 0.1 s deadline, but not counted
        check_deadline()
        reached.append("after the model")
        await asyncio.sleep(0.3)  # counted: the deadline passes during it
        reached.append("too far")

    async def run() -> Any:
        deadline = within(0.1)
        async with fit_deadline(deadline):
            await fit()

    with pytest.raises(FitDeadline):
        asyncio.run(run())
    assert reached == ["after the model"]
    deadline = within(-1)
    with pytest.raises(FitDeadline):
        asyncio.run(_check_inside(deadline))


async def _check_inside(deadline: Deadline) -> None:
    async with fit_deadline(deadline):
        check_deadline()


def test_waiting_for_the_model_once_the_deadline_has_fired_is_a_deadline() -> None:
    """The deadline's timer fired while the fit awaited something that absorbed the
    cancellation (as a client library may), and the fit then goes to wait for the embedding
    model: the call is past its time budget (FitDeadline), not an engine failure (asyncio
    refuses to reschedule an expiring timeout: RuntimeError, found through the gateway)."""
    reached: list[str] = []

    async def absorbing() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0.1)  # the 10 ms deadline fires meanwhile

    async def fit() -> None:
        await absorbing()
        reached.append("after the absorbed cancellation")
        with not_counted():
            reached.append("waiting for the model")

    async def run() -> None:
        async with fit_deadline(within(0.01)):
            await fit()

    with pytest.raises(FitDeadline):
        asyncio.run(run())
    assert reached == ["after the absorbed cancellation"]
