"""The gateway's runtime services, built once in the app's lifespan and passed down.

No module-level state: routes, the worker and the CLI receive this object.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

if TYPE_CHECKING:  # the engine and the sink import this module: types only, no cycle
    import redis.asyncio as aioredis

    from gateway.api.fitting import Fitting
    from gateway.context.adjust import ForecastController
    from gateway.context.engine import ContextEngine
    from gateway.context.evidence import EvidenceStore
    from gateway.embeddings import Embedder
    from gateway.learner.traces import TraceSink


@dataclass
class Services:
    settings: Settings
    metrics: Metrics
    redis: aioredis.Redis
    drop_log: DropLog
    embedder: Embedder
    # Built by the gateway's lifespan; None in commands that run without the HTTP app.
    engine: ContextEngine | None = None
    fitting: Fitting | None = None  # the engine as managed routes use it (time-bounded)
    traces: TraceSink | None = None
    # Live fidelity signals per class (`await evidence.record(signals)`), and the controller
    # that moves each class's forecast caps from them.
    evidence: EvidenceStore | None = None
    forecasts: ForecastController | None = None
    # Set once the embedding model is loaded and the classes' examples embedded.
    warm: asyncio.Event = field(default_factory=asyncio.Event)


@contextlib.asynccontextmanager
async def open_services(settings: Settings) -> AsyncIterator[Services]:
    """Services for a command that runs without the HTTP app (worker, playbook, learn)."""
    from gateway.embeddings import Embedder
    from gateway.store.client import connect

    metrics = Metrics()
    redis = connect(settings)
    embedder = Embedder(settings.embed_model, redis)
    drop_log = DropLog(settings.drop_log, settings.drop_log_preview, metrics,
                       settings.drop_log_form)
    try:
        yield Services(settings, metrics, redis, drop_log, embedder)
    finally:
        await redis.aclose()
        embedder.close()
        drop_log.close()
