"""POST /v1/responses: the OpenAI Responses API through the context engine.

Forwarded to `CTXGATE_UPSTREAM_URL` + `/responses`. The rest of the Responses API
(`/v1/responses/compact`, `GET`/`DELETE /v1/responses/{id}`, `.../input_items`) is not
routed here: it passes through the verbatim /v1 route unchanged.
"""

from __future__ import annotations

from opentelemetry.trace import Tracer

from gateway.api.fitting import Fitting
from gateway.api.managed import ManagedRoute, openai_headers
from gateway.learner.traces import TraceSink
from gateway.services import Services
from gateway.upstream.client import Upstream
from gateway.wire.responses import Responses

ENDPOINT = Responses.name
CUT_STREAM_EVENT = (
    b'event: error\ndata: {"type": "error", "code": "upstream_stream_cut", '
    b'"message": "The upstream API ended the stream early.", "param": null}\n\n'
)


def build(upstream: Upstream, tracer: Tracer, *, fitting: Fitting | None,
          traces: TraceSink | None, max_body_bytes: int,
          services: Services | None = None) -> ManagedRoute:
    return ManagedRoute(Responses(), upstream, tracer, fitting=fitting, traces=traces,
                        max_body_bytes=max_body_bytes, upstream_headers=openai_headers,
                        cut_event=CUT_STREAM_EVENT, services=services)
