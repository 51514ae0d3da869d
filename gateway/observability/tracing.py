"""OpenTelemetry: one tracer provider per app; spans exported only when an endpoint is set.

The provider is not installed globally: the app passes its tracer down. A client's W3C
`traceparent` is honoured, so the gateway's spans join the agent's trace.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Span, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()


def build_tracer(endpoint: str | None) -> tuple[Tracer, TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": "ctxgate"}))
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        url = endpoint.rstrip("/")
        if not url.endswith("/v1/traces"):
            url += "/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    return provider.get_tracer("ctxgate"), provider


def parent_context(headers: Mapping[str, str]) -> Context | None:
    if "traceparent" not in headers:
        return None
    return _PROPAGATOR.extract(carrier=dict(headers))


def trace_id_of(span: Span) -> str:
    return format(span.get_span_context().trace_id, "032x")
