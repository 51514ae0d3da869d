"""`worker: inprocess` runs the learner in a child process of `ctxgate serve`, never on the
gateway's event loop: at the lowest scheduling priority (SCHED_IDLE on Linux), and
restarted by the gateway when it dies, while the gateway keeps answering (issue 10)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import gateway_env
from tests.harness import Gateway, Upstream, stop

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def learner_children(gateway_pid: int) -> list[int]:
    """The gateway's children that run the learner (multiprocessing's spawned interpreter;
    not its resource tracker)."""
    found = []
    for task in Path(f"/proc/{gateway_pid}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except FileNotFoundError:
                continue  # exited meanwhile
            if any(b"spawn_main" in part for part in cmdline):
                found.append(int(pid))
    return found


def wait_learner(gateway: Gateway, other_than: int | None = None) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        children = [p for p in learner_children(gateway.process.pid) if p != other_than]
        if children:
            assert len(children) == 1, children
            return children[0]
        time.sleep(0.1)
    raise AssertionError(f"no learner process: {gateway.log[-2000:]}")


def runs_at_idle_priority(pid: int) -> bool:
    """Whether `pid` runs at SCHED_IDLE (a new child lowers itself as it starts up)."""
    deadline = time.monotonic() + 30
    while os.sched_getscheduler(pid) != os.SCHED_IDLE:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def learning_gateway(tmp_path: Path, upstream: Upstream,
                     redis_url: str) -> Iterator[Gateway]:
    env = {**gateway_env(upstream, redis_url), "CTXGATE_WORKER": "inprocess"}
    server = Gateway.start(tmp_path / "gateway", env, wait_path="/readyz")
    yield server
    stop(server.process)


def test_the_learner_is_an_idle_priority_child_restarted_when_it_dies(
        learning_gateway: Gateway) -> None:
    child = wait_learner(learning_gateway)
    assert child != learning_gateway.process.pid
    assert runs_at_idle_priority(child)
    os.kill(child, signal.SIGKILL)
    answer = httpx.post(f"{learning_gateway.base_url}/chat/completions", timeout=30,
                        headers={"authorization": "Bearer sk-learner-child-0001"},
                        json={"model": "gpt-4o-mini",
                              "messages": [{"role": "user", "content": "still there?"}]})
    assert answer.status_code == 200  # the gateway does not depend on its learner
    replacement = wait_learner(learning_gateway, other_than=child)
    assert runs_at_idle_priority(replacement)
    assert "learner process exited" in learning_gateway.log
