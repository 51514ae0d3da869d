"""A CPU budget for the in-process learner: a bounded share of one core, less while the
gateway is busy.

Idle priority alone did not keep the learner child from slowing requests down (bench/
README.md, "Learner load"): with the learner stopped the in-process gateway was as fast as
one without a learner, but what the learner runs in the gaps between requests (about 8 ms
of CPU a job: JSON, prompts, HTTP, Redis) still slowed the requests of any process on its
core, through the caches, the Redis it shares and the time until it is preempted. So the
learner keeps a CPU balance, a token bucket in CPU seconds: it earns `share` of each second
that passes and spends the CPU its process uses. Its worker settles the balance before it
takes entries and rests while the balance is negative.
`share` is `learner.max_cpu_share` while the gateway's own process is quiet, and
`learner.busy_cpu_share` (a small floor, so the queue still drains under steady traffic)
while it uses more than `BUSY_GATEWAY_SHARE` of a core.

`ctxgate worker` (its own process, its own cores) is not throttled.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

BUSY_GATEWAY_SHARE = 0.05  # the gateway's process above this share of a core is serving calls
BUSY_WINDOW_S = 0.25  # the gateway's share is measured over windows at least this long
BURST_S = 0.05  # CPU seconds idle time may save up: no full-core burst after a quiet spell
MAX_PAUSE_S = 2.0  # longest single rest; a longer debt (the model's first load) is forgiven
# A debt this small is carried to the next settle, not rested off: every wake-up from a rest
# costs CPU itself (0.28 ms measured on a 2-core VM), and a rest at a small share earns only
# what it pays back, so resting off each wake-up's cost took another wake-up, forever (at a
# 2% share the learner rested in 5 ms naps and never took an entry again). Carried, not
# forgiven: the balance keeps it, so the share over time is unchanged.
DEBT_SLACK_S = 0.002


@dataclass(frozen=True, slots=True)
class Budget:
    """The learner's CPU shares, of one core."""

    share: float  # while the gateway is quiet
    busy_share: float  # while the gateway serves calls
    burst_s: float = BURST_S
    max_pause_s: float = MAX_PAUSE_S


def settle(balance: float, cpu_s: float, wall_s: float, share: float,
           budget: Budget) -> tuple[float, float]:
    """The balance after `wall_s` seconds at `share` in which the learner used `cpu_s` of
    CPU, and how long it must rest now to pay back what it overspent."""
    balance = min(balance + share * wall_s, budget.burst_s) - cpu_s
    if balance >= 0:
        return balance, 0.0
    pause = min(-balance / share, budget.max_pause_s)
    return max(balance, -share * budget.max_pause_s), pause


def gateway_busy(gateway_cpu_s: float, wall_s: float) -> bool:
    """Whether the gateway, having used `gateway_cpu_s` of CPU in `wall_s`, serves calls."""
    return wall_s > 0 and gateway_cpu_s / wall_s > BUSY_GATEWAY_SHARE


def process_clock(pid: int) -> Callable[[], float] | None:
    """The CPU time (seconds, all threads) of another process, read precisely through its
    CPU-time clock (Linux); None where it cannot be read."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        clock = ctypes.c_int()
        if libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
            return None
        clock_id = clock.value
        time.clock_gettime(clock_id)
    except (OSError, AttributeError):
        return None

    def read() -> float:
        with contextlib.suppress(OSError):  # the gateway is gone: we are about to be too
            return time.clock_gettime(clock_id)
        return 0.0

    return read


class Throttle:
    """Rests the learner so its process stays within its `Budget`; one per process, shared
    by the consumers of every trace shard (the balance is the whole process's)."""

    def __init__(self, budget: Budget, gateway_pid: int | None = None) -> None:
        self.budget = budget
        self._gateway_cpu = process_clock(gateway_pid) if gateway_pid else None
        self._balance = budget.burst_s
        self._cpu = time.process_time()
        self._wall = time.monotonic()
        self._window = (self._wall, self._gateway_now())
        self.busy = False
        self.rested_s = 0.0  # in all: how long the budget kept the learner waiting
        self._lock = asyncio.Lock()

    def _gateway_now(self) -> float:
        return self._gateway_cpu() if self._gateway_cpu is not None else 0.0

    def _update_busy(self, now: float) -> None:
        started, cpu = self._window
        if now - started >= BUSY_WINDOW_S:
            used = self._gateway_now()
            self.busy = gateway_busy(used - cpu, now - started)
            self._window = (now, used)

    def _pause(self) -> float:
        now, cpu = time.monotonic(), time.process_time()
        share = self.budget.busy_share if self.busy else self.budget.share
        self._balance, pause = settle(self._balance, cpu - self._cpu, now - self._wall,
                                      share, self.budget)
        self._cpu, self._wall = cpu, now
        self._update_busy(now)
        # below the floor `settle` keeps (share × the longest rest) a slack would stop every rest
        return pause if -self._balance > min(DEBT_SLACK_S, share * self.budget.max_pause_s / 2) \
            else 0.0

    async def rest(self) -> None:
        """Wait until the learner is within its budget again (at once, if it is), short of a
        debt of `DEBT_SLACK_S`, which the next settle carries."""
        async with self._lock:  # one consumer rests for all: the balance is the process's
            pause = self._pause()
            while pause > 0:
                await asyncio.sleep(pause)
                self.rested_s += pause
                pause = self._pause()


def gateway_pid() -> int | None:
    """The gateway process of this learner child (its parent), if it still runs."""
    parent = os.getppid()
    return parent if parent > 1 else None
