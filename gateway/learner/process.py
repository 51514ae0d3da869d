"""`worker: inprocess`: the learner as a supervised child process of `ctxgate serve`.

The learner's work (JSON of long traces, the embedding model for its near-duplicate
checks, LLM calls) must never compete with requests for the gateway's event loop, nor take
more than a bounded share of the CPU. So `serve` runs it in a child process of its own
(multiprocessing spawn: a fresh interpreter given the same Settings), at the lowest
priority (Linux's SCHED_IDLE, else nice +19: it gets only the CPU time requests leave),
with one thread for the model, and within a CPU budget (`learner/throttle.py`): at most
`learner.max_cpu_share` of a core, `learner.busy_cpu_share` while the gateway serves calls,
since what it runs even in idle time slowed requests down (bench/README.md, "Learner
load"). Under sustained traffic it falls behind; the trace stream is capped and the traces
expire, so it never grows without bound. The gateway restarts the child when it dies and
stops it first on shutdown (SIGTERM: it takes no new entry and finishes or hands back the
one in flight).

The child's learner metrics are relayed to the gateway over a pipe and counted in the
gateway's own registry, so one scrape of the gateway still shows the whole ACE loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.observability.metrics import Metrics
    from gateway.settings import Settings

log = logging.getLogger(__name__)

NICE = 19
GRACE_S = 5.0  # how long the job in flight may take to finish once asked to stop
RESTART_DELAY_S = (1.0, 30.0)  # first and longest wait before restarting a dead child
# The learner metrics the child records, relayed to the gateway's registry.
RELAYED = frozenset({"feedback_events", "curator_operations", "reflection_duration",
                     "worker_failures", "trace_shard_failures", "dropped_items",
                     "dropped_tokens"})


class LearnerProcess:
    """Starts, supervises and stops the learner's child process."""

    def __init__(self, settings: Settings, metrics: Metrics, *, nice: int = NICE,
                 grace_s: float = GRACE_S) -> None:
        self._settings = settings
        self._metrics = metrics
        self._nice = nice
        self._grace_s = grace_s
        self._stopping = asyncio.Event()
        self._process: BaseProcess | None = None
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def run(self) -> None:
        """Keep one child running until `stop`; a dead child is restarted after a pause
        that doubles while it keeps dying young."""
        delay = RESTART_DELAY_S[0]
        while not self._stopping.is_set():
            started = time.monotonic()
            process, conn = await asyncio.to_thread(self._spawn)
            self._process = process
            await self._watch(process, conn)
            if self._stopping.is_set():
                return
            log.error("learner process exited (code %s); restarting in %.0f s",
                      process.exitcode, delay)
            self.restarts += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)
            young = time.monotonic() - started < 60
            delay = min(delay * 2, RESTART_DELAY_S[1]) if young else RESTART_DELAY_S[0]

    def _spawn(self) -> tuple[BaseProcess, Connection]:
        context = multiprocessing.get_context("spawn")
        ours, theirs = context.Pipe(duplex=False)
        process = context.Process(target=child_main, name="ctxgate-learner", daemon=True,
                                  args=(self._settings, theirs, self._nice, self._grace_s))
        process.start()
        theirs.close()
        log.info("learner process started", extra={"pid": process.pid})
        return process, ours

    async def _watch(self, process: BaseProcess, conn: Connection) -> None:
        """Apply the child's metrics as they come; return when it exits."""
        loop = asyncio.get_running_loop()
        exited = loop.create_future()

        def on_metrics() -> None:
            try:
                while conn.poll():
                    apply_metric(self._metrics, conn.recv())
            except (EOFError, OSError):
                loop.remove_reader(conn.fileno())

        def on_exit() -> None:
            if not exited.done():
                exited.set_result(None)

        loop.add_reader(conn.fileno(), on_metrics)
        loop.add_reader(process.sentinel, on_exit)
        try:
            await exited
        finally:
            loop.remove_reader(process.sentinel)
            with contextlib.suppress(OSError, ValueError):
                on_metrics()  # what it sent just before exiting
                loop.remove_reader(conn.fileno())
            conn.close()
            await asyncio.to_thread(process.join, 1.0)

    async def stop(self) -> None:
        """SIGTERM the child and wait for it (its job in flight finishes or is handed back
        within the grace period); kill it if it does not exit in time."""
        self._stopping.set()
        process = self._process
        if process is None or process.exitcode is not None:
            return
        process.terminate()
        await asyncio.to_thread(process.join, self._grace_s + 5)
        if process.exitcode is None:
            log.error("learner process did not stop; killing it")
            process.kill()
            await asyncio.to_thread(process.join, 5)
        log.info("learner process stopped", extra={"exit_code": process.exitcode})


def apply_metric(metrics: Metrics, message: Any) -> None:
    """Record one relayed `(name, labels, method, value)` in the gateway's metrics."""
    name, labels, method, value = message
    if name not in RELAYED or method not in ("inc", "observe"):
        return
    metric = getattr(metrics, name)
    target = metric.labels(*labels) if labels else metric
    getattr(target, method)(float(value))


class MetricRelay:
    """Stands in for one of the child's metrics: sends what it records to the gateway."""

    def __init__(self, name: str, conn: Connection, labels: tuple[str, ...] = ()) -> None:
        self._name = name
        self._conn = conn
        self._labels = labels

    def labels(self, *values: str) -> MetricRelay:
        return MetricRelay(self._name, self._conn, tuple(values))

    def inc(self, amount: float = 1.0) -> None:
        self._send("inc", amount)

    def observe(self, value: float) -> None:
        self._send("observe", value)

    def _send(self, method: str, value: float) -> None:
        with contextlib.suppress(OSError, ValueError):  # the gateway is gone: nobody to tell
            self._conn.send((self._name, self._labels, method, value))


def lower_priority(nice: int) -> None:
    """Run only on CPU time requests leave: SCHED_IDLE where the OS has it (Linux), which a
    runnable request handler always preempts, else the lowest nice we are given."""
    with contextlib.suppress(OSError, AttributeError):
        os.nice(nice)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def child_main(settings: Settings, conn: Connection, nice: int, grace_s: float) -> None:
    """The child's entry point: lower its priority, then run the worker until SIGTERM."""
    # Before torch is imported (lazily, with the embedder): one thread for the model.
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # Until the worker's own handler is installed, a stop request simply ends the process.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    lower_priority(nice)
    # Signals sent to the gateway's process group (Ctrl-C, a service manager's stop) are the
    # gateway's to act on: it stops us in its own order.
    with contextlib.suppress(OSError):
        os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from gateway.observability.logging import configure_logging
    from gateway.store.embedded import die_with_parent

    die_with_parent()
    configure_logging(settings.log_level)
    asyncio.run(_serve(settings, conn, grace_s))


async def _serve(settings: Settings, conn: Connection, grace_s: float) -> None:
    from gateway.learner.throttle import Budget, Throttle, gateway_pid
    from gateway.learner.worker import run_worker
    from gateway.playbook.config import learner_settings
    from gateway.services import open_services

    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    learner = learner_settings(settings)
    busy_share = min(learner.busy_cpu_share, learner.max_cpu_share)
    throttle = Throttle(Budget(learner.max_cpu_share, busy_share), gateway_pid())
    async with open_services(settings) as services:
        for name in RELAYED:
            setattr(services.metrics, name, MetricRelay(name, conn))
        await run_worker(services, stop=stop, grace_s=grace_s, throttle=throttle)
