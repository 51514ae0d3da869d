"""The route table: which app answers which method and path.

Every API route is a pure-ASGI app inside the one route skeleton (`route.Route`): chat
completions, the Responses API, Anthropic's Messages API (and its count_tokens), feedback,
the admin API, the verbatim /v1 passthrough and the 404 for anything else. The probes
(`/healthz`, `/readyz`, `/metrics`) are bare: they take no credential and a scrape is not
a request to count.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from opentelemetry.trace import Tracer

from gateway.api import admin, chat, feedback, messages, passthrough, responses
from gateway.api.asgi import ASGIApp, Receive, Scope, Send
from gateway.api.edge import RouterApp
from gateway.api.health import MetricsEndpoint, Readyz, healthz
from gateway.api.route import Route
from gateway.auth import authenticate
from gateway.errors import MethodNotAllowed, NotFound, anthropic_envelope
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
    wrong_method: ASGIApp  # a path outside /v1/ that answers other methods

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        route = self.exact.get((scope["method"], path))
        if route is None:
            if path.startswith("/admin/"):
                route = self.admin
            elif path == feedback.PATH:
                route = self.feedback
            elif path.startswith("/v1/"):
                route = self.v1
            elif any(known == path for _, known in self.exact):
                route = self.wrong_method  # e.g. POST /healthz: the path exists
            else:
                route = self.unrouted
        await route(scope, receive, send)


async def no_route(scope: Scope, receive: Receive, send: Send) -> None:
    raise NotFound(f"No route for {scope['method']} {scope['path']}.")


def no_such_method(exact: dict[tuple[str, str], ASGIApp]) -> ASGIApp:
    """The 405 of a path in `exact` asked with a method it does not answer."""

    async def wrong_method(scope: Scope, receive: Receive, send: Send) -> None:
        allow = ", ".join(sorted(m for m, path in exact if path == scope["path"]))
        raise MethodNotAllowed(f"{scope['method']} {scope['path']}: method not allowed.",
                               allow=allow)

    return wrong_method


def build_routes(services: Services, upstream: Upstream, tracer: Tracer,
                 anthropic: Upstream | None = None) -> Routes:
    """`anthropic`: the upstream of /v1/messages (CTXGATE_ANTHROPIC_UPSTREAM_URL)."""
    settings = services.settings
    route = functools.partial(Route, settings=settings, metrics=services.metrics,
                              tracer=tracer)
    limit = settings.max_body_bytes
    fitting, traces = services.fitting, services.traces
    chat_app = chat.build(upstream, tracer, fitting=fitting, traces=traces,
                          max_body_bytes=limit, services=services)
    responses_app = responses.build(upstream, tracer, fitting=fitting, traces=traces,
                                    max_body_bytes=limit, services=services)
    anthropic = anthropic or upstream
    messages_app = messages.build(anthropic, tracer, settings, fitting=fitting, traces=traces,
                                  max_body_bytes=limit, services=services)
    anthropic_route = functools.partial(route, authenticate=messages.authenticate_anthropic,
                                        envelope=anthropic_envelope)
    exact: dict[tuple[str, str], ASGIApp] = {
        ("POST", chat.ENDPOINT): route(
            chat_app, endpoint=chat.ENDPOINT, authenticate=authenticate,
            after=chat_app.after_response, log_as="chat completion"),
        ("POST", responses.ENDPOINT): route(
            responses_app, endpoint=responses.ENDPOINT, authenticate=authenticate,
            after=responses_app.after_response, log_as="response"),
        ("POST", messages.ENDPOINT): anthropic_route(
            messages_app, endpoint=messages.ENDPOINT, after=messages_app.after_response,
            log_as="message"),
        ("POST", messages.COUNT_TOKENS): anthropic_route(
            messages.build_count_tokens(anthropic, tracer, settings, max_body_bytes=limit),
            endpoint=messages.COUNT_TOKENS),
        ("GET", "/healthz"): healthz,
        ("GET", "/readyz"): Readyz(services),
        ("GET", "/metrics"): MetricsEndpoint(services),
    }
    return Routes(
        exact=exact,
        # The admin key is the admin router's own dependency, not a tenant credential.
        admin=route(RouterApp(admin.build_router(services)), endpoint="/admin/*"),
        feedback=route(RouterApp(feedback.build_router(services)), endpoint=feedback.PATH,
                       authenticate=authenticate),
        v1=route(passthrough.Passthrough(upstream, tracer, max_body_bytes=limit),
                 endpoint=passthrough.ENDPOINT, authenticate=authenticate),
        unrouted=route(no_route, endpoint="unrouted"),
        wrong_method=route(no_such_method(exact), endpoint="unrouted"),
    )
