"""A learner worker in its own process, for the crash tests.

    python -m tests.learner.worker_proc REDIS_URL LEARNER_URL REFLECTOR CURATOR CONSUMER
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import redis.asyncio as aioredis

from gateway.learner.worker import run_worker
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.services import Services
from gateway.settings import Settings
from tests.playbook.conftest import WordEmbedder


async def main(redis_url: str, learner_url: str, reflector: str, curator: str,
               consumer: str) -> None:
    tmp = Path(tempfile.mkdtemp())
    settings = Settings(config=tmp / "absent.yaml", learner_url=learner_url,
                        reflector_model=reflector, curator_model=curator,
                        task_classes={"code": {"playbook": {"enabled": True}}},
                        learner={"timeout_s": 60, "reclaim_idle_s": 60})
    redis = aioredis.Redis.from_url(redis_url)
    metrics = Metrics()
    services = Services(settings, metrics, redis, DropLog(str(tmp / "d.jsonl"), "none", metrics),
                        WordEmbedder())  # type: ignore[arg-type]
    print("ready", flush=True)
    await run_worker(services, stop=asyncio.Event(), consumer=consumer)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
