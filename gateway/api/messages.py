"""POST /v1/messages: Anthropic's Messages API through the context engine.

Served at the gateway's root so that `ANTHROPIC_BASE_URL=http://host:port` works, and
forwarded to `CTXGATE_ANTHROPIC_UPSTREAM_URL` + `/v1/messages`. The caller is named by
`x-api-key` (or `Authorization: Bearer`); in `passthrough` mode the key goes upstream
unchanged, in `keys` mode it is a gateway key and the upstream gets
`CTXGATE_UPSTREAM_API_KEY`. `anthropic-version`, `anthropic-beta` and every other header
pass unchanged. `POST /v1/messages/count_tokens` is relayed verbatim to the same upstream.
The gateway's own errors here use Anthropic's envelope.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.trace import Tracer

from gateway.api.fitting import Fitting
from gateway.api.forwarding import upstream_headers
from gateway.api.managed import ManagedRoute
from gateway.api.passthrough import Passthrough
from gateway.api.route import Call
from gateway.auth import ANONYMOUS, Principal, authenticate, tenant_of_token
from gateway.errors import InvalidAPIKey
from gateway.learner.traces import TraceSink
from gateway.services import Services
from gateway.settings import Settings
from gateway.upstream.client import Upstream
from gateway.wire.messages import Messages

ENDPOINT = Messages.name
COUNT_TOKENS = "/v1/messages/count_tokens"
CUT_STREAM_EVENT = (
    b'event: error\ndata: {"type": "error", "error": {"type": "api_error", '
    b'"message": "The upstream API ended the stream early. (upstream_stream_cut)"}}\n\n'
)


def authenticate_anthropic(headers: Mapping[str, str], settings: Settings) -> Principal:
    """The caller by `x-api-key`, else as on the OpenAI routes (bearer token)."""
    key = headers.get("x-api-key")
    if not key:
        return authenticate(headers, settings)
    if settings.auth_mode == "keys":
        tenant = settings.keys.get(key)
        if tenant is None:
            raise InvalidAPIKey("invalid x-api-key: not a key of this gateway.")
        return Principal(tenant, None)
    return Principal(tenant_of_token(key) if key else ANONYMOUS, None)


class AnthropicHeaders:
    """The client's headers for the Anthropic upstream, the credential swapped in `keys`."""

    def __init__(self, settings: Settings, *, identity: bool) -> None:
        self._keys = settings.auth_mode == "keys"
        key = settings.upstream_api_key
        self._key = key.get_secret_value() if key else None
        self._identity = identity

    def __call__(self, call: Call) -> list[tuple[str, str]]:
        out = upstream_headers(call.headers, call.caller, identity=self._identity)
        if self._keys:
            out = [(name, value) for name, value in out if name != "x-api-key"]
            if self._key and "x-api-key" in call.headers:
                out.append(("x-api-key", self._key))
        return out


def build(upstream: Upstream, tracer: Tracer, settings: Settings, *,
          fitting: Fitting | None, traces: TraceSink | None,
          max_body_bytes: int,
          services: Services | None = None) -> ManagedRoute:
    return ManagedRoute(Messages(), upstream, tracer, fitting=fitting, traces=traces,
                        max_body_bytes=max_body_bytes,
                        upstream_headers=AnthropicHeaders(settings, identity=True),
                        cut_event=CUT_STREAM_EVENT, services=services)


def build_count_tokens(upstream: Upstream, tracer: Tracer, settings: Settings, *,
                       max_body_bytes: int) -> Passthrough:
    return Passthrough(upstream, tracer, max_body_bytes=max_body_bytes, strip="/",
                       headers=AnthropicHeaders(settings, identity=False))
