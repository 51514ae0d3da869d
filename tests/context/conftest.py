"""Fixtures for the context engine: engines on real Redis, with the session's real embedder
(`embedder`, tests/conftest.py: its model loads before the first test)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.context.engine import ContextEngine
from gateway.embeddings import Embedder
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

CONFIG = Path(__file__).resolve().parents[2] / "config" / "gateway.yaml"
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpora" / "swe-agent"


@pytest.fixture(scope="session")
def settings() -> Settings:
    return Settings(config=CONFIG)


def with_compaction(settings: Settings, **fields: int) -> Settings:
    """The settings with `fields` set in every class's compaction."""
    classes = copy.deepcopy(settings.task_classes)
    for spec in classes.values():
        if isinstance(spec, dict) and isinstance(spec.get("compaction"), dict):
            spec["compaction"].update(fields)
    return settings.model_copy(update={"task_classes": classes})


def without_credit(settings: Settings) -> Settings:
    """The settings with no young session's step credit (`steps.on_credit`) in any class:
    for tests of what a short session sends between the share's steps."""
    return with_compaction(settings, early_calls=0)


def without_repay(settings: Settings) -> Settings:
    """The settings with every rewrite of a step kept (`steps.unrepaid` off): for tests of
    what a step's digests hold, on sessions too short for the early ones to repay."""
    return with_compaction(settings, repay_calls=0)


def without_young(settings: Settings) -> Settings:
    """The settings with a session's large calls never weighed (`steps.young` off, as
    `repay_young_calls: 0`): for tests of when a first task's mask batch comes, which the
    shipped `agent` class holds back while it does not repay."""
    return with_compaction(settings, repay_young_calls=0)


def without_done_results(settings: Settings) -> Settings:
    """The settings with a text-tool queue's done tasks' results left as sent
    (`done_results_turns` off in every class): for tests of how a queue's outputs age by the
    policy's own turns, which that rule overrides on purpose (test_done_results.py)."""
    classes = copy.deepcopy(settings.task_classes)
    for spec in classes.values():
        compress = spec.get("stages", {}).get("compress") if isinstance(spec, dict) else None
        if isinstance(compress, dict) and "done_results_turns" in compress:
            compress["done_results_turns"] = None
    return settings.model_copy(update={"task_classes": classes})


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def drop_log_path(tmp_path: Path) -> Path:
    return tmp_path / "drops.jsonl"


@pytest.fixture
async def engine(
    settings: Settings, redis_client: aioredis.Redis, embedder: Embedder, drop_log_path: Path
) -> AsyncIterator[ContextEngine]:
    metrics = Metrics()
    log = DropLog(str(drop_log_path), "hash", metrics)
    yield ContextEngine(settings, redis_client, metrics, log, embedder)
    log.close()


@pytest.fixture
async def engine_without_young(
    settings: Settings, redis_client: aioredis.Redis, embedder: Embedder, drop_log_path: Path
) -> AsyncIterator[ContextEngine]:
    """`engine` on `without_young` settings: for tests of what an aged output's digest or
    mask keeps on a one-task session of large calls, which the shipped `agent` class
    leaves verbatim while rewriting it does not repay."""
    metrics = Metrics()
    log = DropLog(str(drop_log_path), "hash", metrics)
    yield ContextEngine(without_young(settings), redis_client, metrics, log, embedder)
    log.close()
