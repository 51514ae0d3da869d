"""POST /v1/chat/completions: OpenAI Chat Completions through the context engine.

Chat is the engine's own shape (`gateway/wire/chat.py` is the identity view), so the route
is the shared managed route (`managed.py`) with chat's upstream path and error event: the
client's bytes forwarded when the engine changed nothing, else only `messages` differs;
streams relayed chunk by chunk; a client hang-up cancels the upstream request; an engine
failure forwards the call unmanaged.
"""

from __future__ import annotations

from opentelemetry.trace import Tracer

from gateway.api.fitting import Fitting
from gateway.api.managed import ManagedRoute, openai_headers
from gateway.learner.traces import TraceSink
from gateway.services import Services
from gateway.upstream.client import Upstream
from gateway.wire.chat import ChatCompletions

ENDPOINT = ChatCompletions.name
CUT_STREAM_EVENT = (
    b'data: {"error": {"message": "The upstream API ended the stream early.", '
    b'"type": "server_error", "param": null, "code": "upstream_stream_cut"}}\n\n'
)


def build(upstream: Upstream, tracer: Tracer, *, fitting: Fitting | None,
          traces: TraceSink | None, max_body_bytes: int,
          services: Services | None = None) -> ManagedRoute:
    return ManagedRoute(ChatCompletions(), upstream, tracer, fitting=fitting, traces=traces,
                        max_body_bytes=max_body_bytes, upstream_headers=openai_headers,
                        cut_event=CUT_STREAM_EVENT, services=services)
