"""GET /healthz (liveness), /readyz (Redis answers, settings valid), /metrics (Prometheus)."""

from __future__ import annotations

import asyncio
import logging

import orjson
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.api.asgi import Receive, Scope, Send, send_response
from gateway.observability.gauges import refresh_gauges
from gateway.playbook.config import learner_settings
from gateway.services import Services

log = logging.getLogger("ctxgate.metrics")


async def healthz(scope: Scope, receive: Receive, send: Send) -> None:
    await send_response(send, 200, b'{"status":"ok"}', [])


class Readyz:
    def __init__(self, services: Services) -> None:
        self._services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await asyncio.wait_for(self._services.redis.ping(), timeout=2.0)
        except Exception as exc:
            reason = f"redis unreachable: {type(exc).__name__}"
            body = orjson.dumps({"status": "unavailable", "reason": reason})
            await send_response(send, 503, body, [])
            return
        if not self._services.warm.is_set():
            body = orjson.dumps({"status": "unavailable", "reason": "loading the embedding model"})
            await send_response(send, 503, body, [])
            return
        await send_response(send, 200, b'{"status":"ready"}', [])


class MetricsEndpoint:
    def __init__(self, services: Services) -> None:
        self._services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await asyncio.wait_for(
                refresh_gauges(self._services.redis, self._services.metrics,
                               learner_settings(self._services.settings).trace_shards),
                timeout=2.0)
        except Exception:  # a scrape still answers when Redis does not
            log.warning("could not refresh the Redis-backed gauges", exc_info=True)
        body = self._services.metrics.exposition()
        await send_response(send, 200, body, [], CONTENT_TYPE_LATEST.encode())
