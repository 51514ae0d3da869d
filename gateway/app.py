"""The ASGI application: a thin router over pure-ASGI routes, and its lifespan.

The hot paths (chat completions, the /v1 proxy, health) are plain ASGI callables with no
framework in between; the admin and feedback routes, where pydantic validation at the
edge pays for itself, live in a FastAPI app mounted behind the router.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable
from typing import Any

import httpx
import redis.asyncio as aioredis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from prometheus_client import CollectorRegistry

from gateway.api import admin, feedback
from gateway.api.asgi import Receive, Scope, Send, TrackedSend, send_error
from gateway.api.chat import ChatCompletions
from gateway.api.health import MetricsEndpoint, Readyz, healthz
from gateway.api.passthrough import Passthrough
from gateway.context.engine import ContextEngine
from gateway.context.models import ENCODINGS
from gateway.embeddings import Embedder
from gateway.errors import GatewayError, InternalError, InvalidRequest
from gateway.learner.process import LearnerProcess
from gateway.learner.traces import TraceSink
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import build_tracer
from gateway.playbook.inject import PlaybookInjector
from gateway.services import Services
from gateway.settings import Settings
from gateway.store.embedded import resolve_redis_url
from gateway.upstream.client import Upstream

log = logging.getLogger("ctxgate")


class NotFound(GatewayError):
    status, code, type = 404, "not_found", "invalid_request_error"


def _error_response(error: GatewayError) -> Response:
    return Response(error.body(), status_code=error.status, media_type="application/json")


def build_api(services: Services) -> FastAPI:
    """The non-hot routes: feedback and admin, errors in OpenAI's envelope."""
    api = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    api.include_router(feedback.build_router(services))
    api.include_router(admin.build_router(services))

    @api.exception_handler(GatewayError)
    async def gateway_error(_: Request, error: GatewayError) -> Response:
        return _error_response(error)

    @api.exception_handler(RequestValidationError)
    async def invalid(_: Request, error: RequestValidationError) -> Response:
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
        return _error_response(InvalidRequest(f"{where}: {first.get('msg', 'invalid')}",
                                              param=where))

    @api.exception_handler(404)
    async def not_found(request: Request, _: Exception) -> Response:
        return _error_response(NotFound(f"No route for {request.method} {request.url.path}."))

    return api


class Gateway:
    """The whole gateway as one ASGI app. Build services in the lifespan, route by path."""

    def __init__(self, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        self._transport = transport
        self._registry = registry
        self._routes: dict[tuple[str, str], Any] = {}
        self._stop = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
        self.learner: LearnerProcess | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            tracked = TrackedSend(send)
            try:
                await self._route(scope, receive, tracked)
            except Exception:  # the safety net: a bug is an enveloped 500, never a bare one
                log.exception("unhandled error", extra={"path": scope["path"]})
                if not tracked.started:
                    await send_error(send, InternalError("The gateway failed on this request."))
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path, method = scope["path"], scope["method"]
        route = self._routes.get((method, path))
        if route is not None:
            await route(scope, receive, send)
        elif path.startswith("/admin/") or path == "/v1/feedback":
            await self._api(scope, receive, send)
        elif path.startswith("/v1/"):
            await self._passthrough(scope, receive, send)
        else:
            await send_error(send, NotFound(f"No route for {method} {path}."))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.startup()
                except Exception as exc:
                    log.exception("start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def startup(self) -> None:
        settings = self.settings
        metrics = Metrics(self._registry)
        url = resolve_redis_url(settings.redis_url, settings.data_dir)
        redis = aioredis.from_url(url, decode_responses=False)
        embedder = Embedder(settings.embed_model, redis)
        drop_log = DropLog(settings.drop_log, settings.drop_log_preview, metrics)
        services = Services(settings, metrics, redis, drop_log, embedder)
        services.playbooks = PlaybookInjector.from_services(services)
        services.engine = ContextEngine(settings, redis, metrics, drop_log, embedder,
                                        services.playbooks)
        services.traces = TraceSink.from_services(services)
        self.services = services
        self._upstream = Upstream(settings.upstream_url, timeout_s=settings.upstream_timeout_s,
                                  transport=self._transport,
                                  transport_kind=settings.upstream_transport)
        tracer, self._tracer_provider = build_tracer(settings.otel_endpoint)
        chat = ChatCompletions(services, self._upstream, tracer)
        self._routes = {
            ("POST", "/v1/chat/completions"): chat,
            ("GET", "/healthz"): healthz,
            ("GET", "/readyz"): Readyz(services),
            ("GET", "/metrics"): MetricsEndpoint(services),
        }
        self._passthrough = Passthrough(services, self._upstream, tracer)
        self._api = build_api(services)
        self._background.append(asyncio.create_task(self._warm(), name="ctxgate-warm-up"))
        if settings.worker == "inprocess":  # its own process: never on the request path
            self.learner = LearnerProcess(settings, metrics)
            self._background.append(asyncio.create_task(self.learner.run(),
                                                        name="ctxgate-learner"))
        log.info("ctxgate ready", extra={"upstream": settings.upstream_url,
                                         "auth_mode": settings.auth_mode,
                                         "worker": settings.worker})

    async def _warm(self) -> None:
        """Load the embedding model, embed the classes' examples and build the token
        encodings before traffic needs them: the first request must not pay seconds."""
        services = self.services
        examples = [text for cls in services.engine.classes.values()
                    for text in cls.match.examples]
        try:
            await services.embedder.embed(examples or ["warm-up"])
            for encoding in ENCODINGS:  # building a BPE table takes ~0.5 s: not on a request
                await asyncio.to_thread(services.engine.counter.encoding, encoding)
        except Exception:
            log.exception("warm-up failed; models and encodings load on first use instead")
        # The model leaves ~500k long-lived objects; every full collection would walk them
        # (0.3-0.6 s pauses under load, measured). Move them out of the collector's sight.
        gc.collect()
        gc.freeze()
        services.warm.set()
        log.info("embedding model warm", extra={"examples": len(examples),
                                                "frozen_objects": gc.get_freeze_count()})

    async def shutdown(self) -> None:
        """Stop the learner (no new entries; the one in flight finishes or is handed back),
        then flush what requests left behind (traces, forecasts), then close the clients.
        Every step runs even if one before it failed: shutdown itself never fails."""
        self._stop.set()
        if self.learner is not None:
            await _quietly("learner", self.learner.stop())
        for task in self._background:  # the warm-up, if still loading: no use any more
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        services = self.services
        await _quietly("trace writer", services.traces.aclose())
        await _quietly("forecasts", services.engine.forecasts.flush())
        await _quietly("upstream client", self._upstream.aclose())
        await _quietly("redis client", services.redis.aclose())
        services.embedder.close()
        services.drop_log.close()
        self._tracer_provider.shutdown()


async def _quietly(what: str, step: Awaitable[Any]) -> None:
    try:
        await step
    except (Exception, asyncio.CancelledError):
        log.warning("shutdown: %s did not stop cleanly", what, exc_info=True)
