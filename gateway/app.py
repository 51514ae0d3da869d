"""The ASGI application: the route table (`gateway/api/routes.py`) and its lifespan.

The hot paths (chat completions, the /v1 proxy, health) are plain ASGI callables with no
framework in between; the admin and feedback routes, where pydantic validation at the
edge pays for itself, are FastAPI routers served as plain ASGI apps. Every API route runs
inside the one route skeleton (`gateway/api/route.py`).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import CollectorRegistry

from gateway.api.asgi import Receive, Scope, Send
from gateway.api.fitting import Fitting
from gateway.api.routes import build_routes
from gateway.context.adjust import ForecastController
from gateway.context.engine import ContextEngine
from gateway.context.evidence import EvidenceStore
from gateway.context.models import ENCODINGS
from gateway.context.offload import FittingThread
from gateway.embeddings import Embedder, load_model
from gateway.learner.process import LearnerProcess
from gateway.learner.traces import TraceSink
from gateway.observability.droplog import DropLog
from gateway.observability.metrics import Metrics
from gateway.observability.tracing import build_tracer
from gateway.playbook.inject import PlaybookInjector
from gateway.services import Services
from gateway.settings import Settings
from gateway.store.client import connect
from gateway.upstream.client import Upstream

if TYPE_CHECKING:
    import redis.asyncio as aioredis

log = logging.getLogger("ctxgate")


class Gateway:
    """The whole gateway as one ASGI app. Build services in the lifespan, route by path."""

    def __init__(self, settings: Settings, *, transport: httpx.AsyncBaseTransport | None = None,
                 registry: CollectorRegistry | None = None) -> None:
        self.settings = settings
        self._transport = transport
        self._registry = registry
        self._stop = asyncio.Event()
        self._background: list[asyncio.Task[None]] = []
        self.learner: LearnerProcess | None = None
        self._model: Any = None

    def load_model(self) -> None:
        """Load the embedding model in the calling thread, before the server listens
        (`ctxgate serve`). Loaded in a thread of a serving process, its import and set-up
        held the GIL for seconds at a time on a loaded machine: requests, `/healthz`
        included, stalled for as long (bench/README.md, "CI reliability: the gateway's
        model load"). A failed load is logged; the model then loads on first use."""
        started, cpu = time.monotonic(), time.process_time()
        log.info("loading the embedding model", extra={"model": self.settings.embed_model})
        try:
            self._model = load_model(self.settings.embed_model)
        except Exception:
            log.exception("embedding model did not load; it loads on first use instead")
            return
        log.info("embedding model loaded", extra={
            "seconds": round(time.monotonic() - started, 2),
            "cpu_seconds": round(time.process_time() - cpu, 2)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._routes(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

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
        redis = connect(settings)
        embedder = Embedder(settings.embed_model, redis, loaded=self._model)
        drop_log = DropLog(settings.drop_log, settings.drop_log_preview, metrics,
                           settings.drop_log_form)
        services = Services(settings, metrics, redis, drop_log, embedder)
        self._engine = services.engine = ContextEngine(
            settings, redis, metrics, drop_log, embedder,
            PlaybookInjector.from_services(services))
        self._traces = services.traces = TraceSink.from_services(services)
        services.evidence = EvidenceStore(redis)
        services.forecasts = ForecastController(
            self._engine.classes, services.evidence, self._engine.class_forecasts,
            enabled=settings.forecast_adjust)
        self._fitting_thread = FittingThread(
            lambda client: _fitting_engine(settings, client, services),
            lambda: connect(settings))
        services.fitting = Fitting(self._engine, metrics, settings.fit_timeout_s,
                                   self._fitting_thread)
        self.services = services
        self._upstream = Upstream(settings.upstream_url, timeout_s=settings.upstream_timeout_s,
                                  transport=self._transport,
                                  transport_kind=settings.upstream_transport)
        self._anthropic = Upstream(settings.anthropic_upstream_url,
                                   timeout_s=settings.upstream_timeout_s,
                                   transport=self._transport,
                                   transport_kind=settings.upstream_transport)
        tracer, self._tracer_provider = build_tracer(settings.otel_endpoint)
        self._routes = build_routes(services, self._upstream, tracer, self._anthropic)
        # Warm before the server listens (uvicorn binds its socket once start-up is done):
        # the fitting thread's encodings too, whose build holds the GIL.
        fitting_warm = self._fitting_thread.start(warm=_warm_encodings)
        await self._warm()
        if fitting_warm is not None:
            await asyncio.wrap_future(fitting_warm)
        if settings.forecast_adjust:  # judged off the request path, every few seconds
            self._background.append(asyncio.create_task(
                services.forecasts.run(self._stop, settings.forecast_judge_every_s),
                name="ctxgate-forecast"))
        if settings.worker == "inprocess":  # its own process: never on the request path
            self.learner = LearnerProcess(settings, metrics)
            self._background.append(asyncio.create_task(self.learner.run(),
                                                        name="ctxgate-learner"))
        log.info("ctxgate ready", extra={"upstream": settings.upstream_url,
                                         "auth_mode": settings.auth_mode,
                                         "worker": settings.worker})

    async def _warm(self) -> None:
        """Load the embedding model (unless `load_model` did), embed the classes' examples
        and build the token encodings before traffic comes: the first request must not pay
        seconds, nor share the process with a load."""
        services = self.services
        examples = [text for cls in self._engine.classes.values()
                    for text in cls.match.examples]
        took: dict[str, float] = {}
        mark = time.monotonic()
        try:
            await services.embedder.embed(examples or ["warm-up"])
            took["examples_s"] = time.monotonic() - mark
            for encoding in ENCODINGS:  # building a BPE table takes ~0.5 s: not on a request
                await asyncio.to_thread(self._engine.counter.encoding, encoding)
            took["encodings_s"] = time.monotonic() - mark - took["examples_s"]
        except Exception:
            log.exception("warm-up failed; models and encodings load on first use instead")
        # The model leaves ~500k long-lived objects; every full collection would walk them
        # (0.3-0.6 s pauses under load, measured). Move them out of the collector's sight.
        collecting = time.monotonic()
        gc.collect()
        gc.freeze()
        took["gc_s"] = time.monotonic() - collecting
        services.warm.set()
        log.info("embedding model warm", extra={"examples": len(examples),
                                                **{k: round(v, 2) for k, v in took.items()},
                                                "frozen_objects": gc.get_freeze_count()})

    async def shutdown(self) -> None:
        """Stop the learner (no new entries; the one in flight finishes or is handed back),
        then flush what requests left behind (traces, forecasts), then close the clients.
        Every step runs even if one before it failed: shutdown itself never fails."""
        self._stop.set()
        if self.learner is not None:
            await _quietly("learner", self.learner.stop())
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        services = self.services
        await _quietly("fitting thread", self._fitting_thread.aclose())
        await _quietly("trace writer", self._traces.aclose())
        await _quietly("forecasts", self._engine.forecasts.flush())
        if services.evidence is not None:
            await _quietly("evidence", services.evidence.flush())
        await _quietly("token calibration", self._engine.calibration.flush())
        await _quietly("upstream client", self._upstream.aclose())
        await _quietly("anthropic client", self._anthropic.aclose())
        await _quietly("redis client", services.redis.aclose())
        services.embedder.close()
        services.drop_log.close()
        self._tracer_provider.shutdown()


def _fitting_engine(settings: Settings, client: aioredis.Redis,
                    services: Services) -> ContextEngine:
    """The fitting thread's engine: the app's model, metrics and drop log; its own Redis
    client (one belongs to the loop it connects on) and memos."""
    embedder = services.embedder.with_client(client)
    return ContextEngine(settings, client, services.metrics, services.drop_log, embedder,
                         PlaybookInjector(client, embedder, services.metrics))


async def _warm_encodings(engine: ContextEngine) -> None:
    """The fitting thread's engine builds its token encodings before a large call needs them."""
    for encoding in ENCODINGS:
        engine.counter.encoding(encoding)


async def _quietly(what: str, step: Awaitable[Any]) -> None:
    try:
        await step
    except (Exception, asyncio.CancelledError):
        log.warning("shutdown: %s did not stop cleanly", what, exc_info=True)
