"""The gateway's runtime services, built once in the app's lifespan and passed down.

No module-level state: routes, the worker and the CLI receive this object.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.settings import Settings

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from gateway.embeddings import Embedder


@dataclass
class Services:
    settings: Settings
    metrics: Metrics
    redis: aioredis.Redis
    drop_log: DropLog
    embedder: Embedder
    # Filled in by the context engine and the ACE loop when they are built.
    engine: Any = None
    playbooks: Any = None
    traces: Any = None
    extras: dict[str, Any] = field(default_factory=dict)
