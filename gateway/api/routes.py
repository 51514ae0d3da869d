"""The route table: which app answers which method and path.

Every API route is a pure-ASGI app inside the one route skeleton (`route.Route`): chat
completions, feedback, the admin API, the verbatim /v1 passthrough and the 404 for
anything else. The probes (`/healthz`, `/readyz`, `/metrics`) are bare: they take no
credential and a scrape is not a request to count.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from opentelemetry.trace import Tracer

from gateway.api import admin, chat, feedback, passthrough
from gateway.api.asgi import ASGIApp, Receive, Scope, Send
from gateway.api.edge import RouterApp
from gateway.api.health import MetricsEndpoint, Readyz, healthz
from gateway.api.route import Route
from gateway.auth import authenticate
from gateway.errors import NotFound
from gateway.services import Services
from gateway.upstream.client import Upstream


@dataclass(frozen=True, slots=True)
class Routes:
    """Dispatches by (method, path) first, then by path prefix."""

    exact: dict[tuple[str, str], ASGIApp]
    admin: ASGIApp  # /admin/...
    feedback: ASGIApp  # /v1/feedback, any method (its router answers 405)
    v1: ASGIApp  # every other path under /v1/, verbatim
    unrouted: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        route = self.exact.get((scope["method"], path))
        if route is None:
            if path.startswith("/admin/"):
                route = self.admin
            elif path == feedback.PATH:
                route = self.feedback
            else:
                route = self.v1 if path.startswith("/v1/") else self.unrouted
        await route(scope, receive, send)


async def no_route(scope: Scope, receive: Receive, send: Send) -> None:
    raise NotFound(f"No route for {scope['method']} {scope['path']}.")


def build_routes(services: Services, upstream: Upstream, tracer: Tracer) -> Routes:
    route = functools.partial(Route, settings=services.settings, metrics=services.metrics,
                              tracer=tracer)
    limit = services.settings.max_body_bytes
    chat_app = chat.ChatCompletions(upstream, tracer, engine=services.engine,
                                    traces=services.traces, max_body_bytes=limit)
    return Routes(
        exact={
            ("POST", chat.ENDPOINT): route(
                chat_app, endpoint=chat.ENDPOINT, authenticate=authenticate,
                after=chat_app.after_response, log_as="chat completion"),
            ("GET", "/healthz"): healthz,
            ("GET", "/readyz"): Readyz(services),
            ("GET", "/metrics"): MetricsEndpoint(services),
        },
        # The admin key is the admin router's own dependency, not a tenant credential.
        admin=route(RouterApp(admin.build_router(services)), endpoint="/admin/*"),
        feedback=route(RouterApp(feedback.build_router(services)), endpoint=feedback.PATH,
                       authenticate=authenticate),
        v1=route(passthrough.Passthrough(upstream, tracer, max_body_bytes=limit),
                 endpoint=passthrough.ENDPOINT, authenticate=authenticate),
        unrouted=route(no_route, endpoint="unrouted"),
    )
