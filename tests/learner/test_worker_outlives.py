"""The long-running worker outlives whatever its Redis client raises around a job.

redis-py 8.1's asyncio cluster client, while a primary is killed and restarted, lets more
than RedisError out of a command: `AttributeError: 'NoneType' object has no attribute
'writelines'` (a connection torn down while another task connects it), or
SlotNotCoveredError (a RedisClusterException). A worker once exited on the first in CI. To
raise them on cue, `Faulty` is the real redis-py client of database 7 whose named commands
raise the next N times what the cluster client raised there; the worker, its consumers,
learner and playbook store are ours, unchanged, and the learner model is the scripted
upstream.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import SlotNotCoveredError

from gateway.learner.worker import run_worker
from gateway.playbook.store import PlaybookStore
from gateway.services import Services
from gateway.store import keys
from tests.harness import Upstream
from tests.learner.conftest import (
    curation,
    failed_step_event,
    make_services,
    make_settings,
    reflection,
)
from tests.learner.test_worker import LESSON, pending, publish

TORN_DOWN = "'NoneType' object has no attribute 'writelines'"


class Faulty(aioredis.Redis):
    """A real client; `faults[COMMAND] = [exc, ...]` raises those, in order, instead of
    sending COMMAND. Every command sent or refused is counted in `calls`."""

    faults: dict[str, list[BaseException]]
    calls: Counter[str]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        name = str(args[0]).upper()
        self.calls[name] += 1
        if self.faults.get(name):
            raise self.faults[name].pop(0)
        return await super().execute_command(*args, **options)


@pytest.fixture
async def faulty(learner_redis_url: str) -> AsyncIterator[Faulty]:
    client = Faulty.from_url(learner_redis_url)
    client.faults, client.calls = {}, Counter()
    await client.delete(keys.TRACE_STREAM, keys.TRACE_DEAD_LETTER)
    yield client
    await client.aclose()


def teach(upstream: Upstream, models: tuple[str, str], delay_s: float = 0.0) -> None:
    upstream.script(models[0], [{**reflection(insight=LESSON), "delay_s": delay_s}])
    upstream.script(models[1], [curation([{"type": "ADD", "section": "common_mistakes",
                                           "content": LESSON}])])


def failures(services: Services, reason: str) -> float:
    return float(services.metrics.worker_failures.labels(reason)._value.get())


async def test_a_store_error_and_an_unexpected_one_are_waited_out_logged_and_counted(
    faulty: Faulty, upstream: Upstream, models: tuple[str, str], tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tenant = "t" + uuid.uuid4().hex[:8]
    teach(upstream, models)
    services = make_services(make_settings(upstream, models, tmp_path), faulty, tmp_path)
    await publish(faulty, failed_step_event(tenant, "tr-1"))
    faulty.faults = {"XAUTOCLAIM": [SlotNotCoveredError("Slot 5798 is not covered")],
                     "XREADGROUP": [AttributeError(TORN_DOWN)]}
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(services, stop=stop, consumer="c1"))
    store = PlaybookStore(faulty)
    for _ in range(200):  # 1 s after each error, then the job: well within 10 s
        await asyncio.sleep(0.05)
        assert not worker.done(), worker.exception()  # it did not end on either error
        if await store.bullets(tenant, "code") and await pending(faulty) == 0:
            break
    stop.set()
    await asyncio.wait_for(worker, 5)
    [bullet] = await store.bullets(tenant, "code")
    assert bullet.sources == ("tr-1",)
    assert failures(services, "store_unavailable") == 1
    assert failures(services, "error") == 1
    [told] = [r for r in caplog.records if r.levelno == logging.ERROR and r.exc_info]
    assert told.name == "gateway.learner.worker" and TORN_DOWN in caplog.text  # not silent


async def test_a_stop_during_the_wait_ends_the_worker_at_once(
    faulty: Faulty, upstream: Upstream, models: tuple[str, str], tmp_path: Path
) -> None:
    services = make_services(make_settings(upstream, models, tmp_path), faulty, tmp_path)
    faulty.faults = {"XAUTOCLAIM": [AttributeError(TORN_DOWN)] * 6}
    stop = asyncio.Event()
    worker = asyncio.create_task(run_worker(services, stop=stop, consumer="c1"))
    while failures(services, "error") < 2:  # 1 s, then a 2 s pause begins
        assert not worker.done(), worker.exception()
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(worker, 0.5)  # not the rest of the pause


async def test_the_heartbeat_keeps_beating_through_an_unexpected_error(
    faulty: Faulty, upstream: Upstream, models: tuple[str, str], tmp_path: Path
) -> None:
    """A heartbeat that ended on its first error would let another consumer reclaim the
    job while it is learned (reclaim_idle_s is 0.3 s, the learner takes 1 s)."""
    tenant = "t" + uuid.uuid4().hex[:8]
    teach(upstream, models, delay_s=1.0)
    services = make_services(make_settings(upstream, models, tmp_path), faulty, tmp_path)
    await publish(faulty, failed_step_event(tenant, "tr-slow"))
    faulty.faults = {"XCLAIM": [AttributeError(TORN_DOWN)]}
    await run_worker(services, stop=asyncio.Event(), burst=True, consumer="c1")
    beats = faulty.calls["XCLAIM"]
    assert beats >= 5  # a beat every 0.1 s after the failed one
    await asyncio.sleep(0.5)
    assert faulty.calls["XCLAIM"] == beats  # and none once the job is done
    [bullet] = await PlaybookStore(faulty).bullets(tenant, "code")
    assert bullet.sources == ("tr-slow",)
    assert await pending(faulty) == 0
