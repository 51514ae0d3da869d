"""Fitting within a time budget, and large calls fitted off the event loop (issue 10).

Every call's fitting has a deadline (`CTXGATE_FIT_TIMEOUT_S` after it arrived). A thread
cannot be killed, so fitting stops itself: the engine calls `check_deadline()` between its
phases and every few hundred messages, and raises `FitDeadline` once it has passed; the
route also stops waiting at the deadline (and cancels the fit at its next await).

A large call (`is_large`: a big body or many messages) is parsed, fitted and rendered on
the fitting thread, which runs its own event loop with its own engine (a redis-py asyncio
client belongs to the loop it connects on), so the gateway's loop keeps serving every other
call. Small calls stay inline: they take about a millisecond, and the hop to the thread
and back would only add to it.
Pure-Python fitting holds the GIL, so a second fitting thread would only take turns with
the first; the loop gets the GIL back at each switch interval, which this module lowers
to 0.2 ms while a large call is alive (the default 5 ms would add up to 5 ms to every wake-up of
the loop). At most `CONCURRENT_FITS` calls fit on the thread at a time, `MAX_WAITING` more
may wait for a turn (their wait counts against their own deadline); a large call that
finds the queue full is treated at once as one whose deadline passed (`queue_full`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import gc
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.context.engine import ContextEngine

log = logging.getLogger("ctxgate.offload")

T = TypeVar("T")
Cause = Literal["deadline", "queue_full"]

LARGE_BODY_BYTES = 1 << 20  # parsing a body this size takes milliseconds by itself
LARGE_MESSAGES = 400  # fitting this many messages in one go takes ~10 ms or more
CONCURRENT_FITS = 2  # on the fitting thread: they interleave at Redis round trips
MAX_WAITING = 16
SWITCH_INTERVAL_S = 0.0002  # while the fitting thread runs (Python's default: 0.005)
SUSPENDED_POLL_S = 0.05
CHECK_EVERY = 256  # messages between deadline checks in a per-message loop

class FitDeadline(Exception):
    """Fitting passed its deadline, or could not start before it (`cause`)."""

    def __init__(self, cause: Cause = "deadline") -> None:
        super().__init__(cause)
        self.cause: Cause = cause


class Deadline:
    """When a call's fitting must be done (time.monotonic()). Time spent waiting for the
    embedding model is not counted (`not_counted`): it runs on its own thread, never on
    the loop, and the stages cap it per call; counting it would send step calls out
    unmanaged whenever the machine is busy. Written by the thread fitting the call, read
    by the route waiting for it."""

    __slots__ = ("at", "suspended", "timeout")

    def __init__(self, at: float) -> None:
        self.at = at
        self.suspended = 0  # > 0 while the call waits for the embedding model
        self.timeout: asyncio.Timeout | None = None  # an inline fit's own, to move

    def left(self) -> float | None:
        """Seconds left (None while suspended)."""
        return None if self.suspended else self.at - time.monotonic()

    def passed(self) -> bool:
        left = self.left()
        return left is not None and left < 0

    def reschedule(self) -> None:
        # A timeout that has fired stays so (asyncio refuses to move an expiring one).
        if self.timeout is not None and not self.timeout.expired():
            left = self.left()
            when = None if left is None else asyncio.get_running_loop().time() + left
            self.timeout.reschedule(when)


_deadline: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "ctxgate_fit_deadline", default=None)


def check_deadline() -> None:
    """Raise FitDeadline if this call's fitting is past its deadline (no-op without one)."""
    deadline = _deadline.get()
    if deadline is not None and deadline.passed():
        raise FitDeadline


@contextlib.contextmanager
def not_counted() -> Iterator[None]:
    """Time in this block does not count against the call's fitting deadline."""
    deadline = _deadline.get()
    if deadline is None:
        yield
        return
    if deadline.passed():  # already late (its timer may have fired): no wait for the model
        raise FitDeadline
    started = time.monotonic()
    deadline.suspended += 1
    deadline.reschedule()
    try:
        yield
    finally:
        deadline.at += time.monotonic() - started
        deadline.suspended -= 1
        deadline.reschedule()


def is_large(raw: bytes) -> bool:
    """Whether a request is fitted off the loop: judged on its bytes before parsing (a
    count of `"role"` keys is a C scan, 1-3 ms for 3 MB)."""
    return len(raw) >= LARGE_BODY_BYTES or raw.count(b'"role"') >= LARGE_MESSAGES


@asynccontextmanager
async def fit_deadline(deadline: Deadline) -> AsyncIterator[None]:
    """Fitting inline on the caller's loop within `deadline`: checks in the engine see it;
    an await still pending when it passes is cancelled."""
    token = _deadline.set(deadline)
    left = deadline.left()
    try:
        async with asyncio.timeout(None if left is None else max(left, 0)) as timeout:
            deadline.timeout = timeout
            yield
    except TimeoutError:
        raise FitDeadline from None
    finally:
        deadline.timeout = None
        _deadline.reset(token)


@dataclasses.dataclass(slots=True)
class _Turn:
    """One job's bookkeeping, on the gateway's loop."""

    ended: bool = False  # its task on the thread has ended
    abandoned: bool = False  # the route stopped waiting for it


EngineBuilder = Callable[["aioredis.Redis"], "ContextEngine"]
Job = Callable[["ContextEngine"], Awaitable[T]]


class FittingThread:
    """One thread running an event loop and an engine of its own, fitting large calls."""

    def __init__(self, build_engine: EngineBuilder, connect: Callable[[], aioredis.Redis]
                 ) -> None:
        self._loop = asyncio.new_event_loop()
        self._redis = connect()  # connects lazily, on the thread's loop
        self.engine = build_engine(self._redis)
        self._thread = threading.Thread(target=self._run, name="ctxgate-fit", daemon=True)
        self._gate: asyncio.Semaphore | None = None
        self._waiting = 0
        self._held = 0  # large calls whose objects are alive (fitting or in flight)
        self._switch_interval = sys.getswitchinterval()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def start(self, warm: Job[Any] | None = None) -> concurrent.futures.Future[None] | None:
        """Start the thread; `warm(engine)` runs on it first (its future is returned)."""
        self._gate = asyncio.Semaphore(CONCURRENT_FITS)
        self._main_loop = asyncio.get_running_loop()
        self._thread.start()
        if warm is None:
            return None
        return asyncio.run_coroutine_threadsafe(self._quietly(warm), self._loop)

    async def _quietly(self, job: Job[Any]) -> None:
        try:
            await job(self.engine)
        except Exception:
            log.exception("fitting thread warm-up failed; it loads on first use instead")

    async def run(self, job: Job[T], deadline: Deadline) -> T:
        """`job(engine)` on the fitting thread within `deadline`; raises FitDeadline if it
        cannot start or finish in time. The caller owns what it returns and hands it back
        with `let_go` once done with it: a large call's objects are freed on the thread,
        and the collector stays off until then."""
        gate = self._gate
        if gate is None:
            raise RuntimeError("the fitting thread is not started")
        if self._waiting >= MAX_WAITING:
            raise FitDeadline("queue_full")
        self._waiting += 1
        try:
            async with fit_deadline(deadline):
                await gate.acquire()
        finally:
            self._waiting -= 1
        turn = _Turn()
        self._hold()
        done = self._submit(job, deadline, turn)
        try:
            return await _within(asyncio.wrap_future(done), deadline)
        except BaseException:
            if turn.ended:  # else its end lets go of it
                self._unhold()
            turn.abandoned = True
            raise
        finally:
            done.cancel()  # a fit still running past its deadline stops at its next await

    def let_go(self, box: list[Any]) -> None:
        """Free what `box` holds on the fitting thread (it must hold the only references):
        a large call's 10^6 objects take tens of milliseconds to free."""
        self._loop.call_soon_threadsafe(self._drop, box)

    def _drop(self, box: list[Any]) -> None:
        box.clear()
        self._main_loop.call_soon_threadsafe(self._unhold)

    def _submit(self, job: Job[T], deadline: Deadline, turn: _Turn
                ) -> concurrent.futures.Future[T]:
        """Start `job` on the thread; its turn is given back when its task ends, however
        it ends (even cancelled before it started)."""
        outcome: concurrent.futures.Future[T] = concurrent.futures.Future()

        def settle(task: asyncio.Task[T]) -> None:
            self._main_loop.call_soon_threadsafe(self._ended, turn)
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                if task.cancelled():
                    outcome.cancel()
                elif (error := task.exception()) is not None:
                    outcome.set_exception(error)
                else:
                    outcome.set_result(task.result())

        def start() -> None:
            task = self._loop.create_task(self._on_thread(job, deadline))
            task.add_done_callback(settle)
            outcome.add_done_callback(
                lambda f: self._loop.call_soon_threadsafe(task.cancel) if f.cancelled() else None)

        self._loop.call_soon_threadsafe(start)
        return outcome

    async def _on_thread(self, job: Job[T], deadline: Deadline) -> T:
        _deadline.set(deadline)  # this task's own context
        return await job(self.engine)

    def _ended(self, turn: _Turn) -> None:
        turn.ended = True
        assert self._gate is not None
        self._gate.release()
        if turn.abandoned:
            self._unhold()

    def _hold(self) -> None:
        """A large call's objects are alive: a full collection would walk all of them,
        holding the GIL for 0.1-0.6 s (measured), so there is none until they are freed;
        and the loop gets the GIL back after 0.2 ms, not 5."""
        if self._held == 0:
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            gc.disable()
        self._held += 1

    def _unhold(self) -> None:
        self._held -= 1
        if self._held == 0:
            sys.setswitchinterval(self._switch_interval)
            gc.enable()

    async def aclose(self) -> None:
        """Close the thread's Redis client, stop its loop, wait for it (briefly)."""
        if self._thread.is_alive():
            closing = asyncio.run_coroutine_threadsafe(self._redis.aclose(), self._loop)
            try:
                await asyncio.wait_for(asyncio.wrap_future(closing), 5)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                await asyncio.to_thread(self._thread.join, 5)
        if not self._thread.is_alive():
            self._loop.close()


async def _within(result: asyncio.Future[T], deadline: Deadline) -> T:
    """`result` once it is ready, or FitDeadline once `deadline` has passed (the thread
    moves it on while the call waits for the embedding model: look again then)."""
    while not result.done():
        left = deadline.left()
        if left is not None and left <= 0:
            raise FitDeadline
        await asyncio.wait([result], timeout=SUSPENDED_POLL_S if left is None else left)
    return result.result()
